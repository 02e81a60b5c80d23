"""Migration 0017 on a database written by 0001-0016: the rounds of audited runs not drawn yet
enter ``undrawn_rounds`` (and the triggers keep it from then on), and each audit job gets its
round's honeypot commitment."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

from hypertrain.store import open_database
from hypertrain.store.migrations import default_migrations, load_migrations
from nurseries import FixedClock

AUDITED, UNAUDITED = "ab" * 32, "cd" * 32
HONEYPOT = "ee" * 32
HOTKEY = "5GrwvaEF5zXb26Fz9rcQpDWS57CtERHpNehXCPcNoHGKutQY"


def _schema_up_to(tmp_path: Path, last: int) -> Path:
    folder = tmp_path / f"up-to-{last}"
    folder.mkdir()
    for migration in load_migrations(default_migrations())[:last]:
        shutil.copy(Path(str(default_migrations() / f"{migration.label}.sql")), folder)
    return folder


def _round(conn: sqlite3.Connection, run_id: str, w: int) -> None:
    round_open = json.dumps({"body": {"w": w, "honeypot_commit": HONEYPOT}})
    conn.execute(
        "INSERT INTO rounds (run_id, w, round_open, d_open, d_assign, d_commit, d_audit,"
        " d_upload, d_final, base, reasons, opened_round) VALUES (?, ?, ?, 1, 2, 3, ?, 5, 6,"
        " 0, '{}', 1)",
        (run_id, w, round_open, 10 + w),
    )


def fill_version_16(conn: sqlite3.Connection) -> None:
    """Two runs of three rounds, one with an auditor: its round 0 drawn, with one job; the
    other's manifest is not JSON (as in tests that write runs directly)."""
    for run_id, manifest in (
        (AUDITED, json.dumps({"body": {"auditors": [HOTKEY]}})),
        (UNAUDITED, "x"),
    ):
        conn.execute(
            "INSERT INTO runs (run_id, manifest_envelope, status, created_round, created_at)"
            " VALUES (?, ?, 'running', 1, 0)",
            (run_id, manifest),
        )
        for w in range(3):
            _round(conn, run_id, w)
    conn.execute(
        "INSERT INTO miners (run_id, w, hotkey, slot, status) VALUES (?, 0, ?, 0, 'COMMITTED')",
        (AUDITED, HOTKEY),
    )
    conn.execute("INSERT INTO audit_draws VALUES (?, 0, ?, 12)", (AUDITED, json.dumps([HOTKEY])))
    conn.execute(
        "INSERT INTO audit_jobs (job_id, run_id, w, target, challenge, challenge_hash, mode,"
        " serve_deadline, created_round) VALUES ('a_1', ?, 0, ?, '{}', ?, 'full', 20, 12)",
        (AUDITED, HOTKEY, "0" * 64),
    )


def _undrawn(conn: sqlite3.Connection) -> list[tuple[str, int, int]]:
    return conn.execute("SELECT run_id, w, d_audit FROM undrawn_rounds ORDER BY w").fetchall()


async def test_0017_lists_the_undrawn_rounds_and_keeps_them(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    old = _schema_up_to(tmp_path, 16)
    async with open_database(path, migrations=old, wall_clock=FixedClock(1.0)):
        pass
    with sqlite3.connect(path) as conn:
        fill_version_16(conn)
    conn.close()
    async with open_database(path, wall_clock=FixedClock(2.0)) as db:
        assert db.statistics().schema_version >= 17
        assert await db.read(_undrawn) == [(AUDITED, 1, 11), (AUDITED, 2, 12)]
        honeypots = await db.read(
            lambda c: c.execute("SELECT job_id, honeypot_commit FROM audit_jobs").fetchall()
        )
        assert honeypots == [("a_1", HONEYPOT)]

        def open_and_draw(conn: sqlite3.Connection) -> None:
            for run_id in (AUDITED, UNAUDITED):
                _round(conn, run_id, 3)  # only the audited run's round waits for a draw
            conn.execute("INSERT INTO audit_draws VALUES (?, 1, '[]', 13)", (AUDITED,))

        await db.write(open_and_draw)
        assert await db.read(_undrawn) == [(AUDITED, 2, 12), (AUDITED, 3, 13)]
