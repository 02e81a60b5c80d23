"""Migration 0010 on a database written by 0001-0009: delta_hash filled, unscored uploads queued."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from typing import Any

from hypertrain.compute import canonical_subject
from hypertrain.coordinator.tables.miners import miner_details
from hypertrain.protocol.envelope import NEVER, seal
from hypertrain.protocol.keys import Keypair
from hypertrain.store import open_database
from hypertrain.store.migrations import default_migrations, load_migrations
from nurseries import FixedClock

RUN = "ab" * 32
SCORED, UNSCORED, COMMITTED = (Keypair.from_seed(bytes([0x60 + i]) * 32) for i in range(3))
D = 77


def delta_manifest(key: Keypair, delta_hash: str) -> str:
    """A DeltaManifest envelope as ``post_delta`` stores it (canonical JSON text)."""
    body = {
        "w": 0,
        "hotkey": key.ss58,
        "delta_hash": delta_hash,
        "uri": f"objects/{delta_hash}",
        "size": 10,
        "format": "ht-dense-int8-v1",
        "chunks": [{"off": 0, "len": 10, "sha256": delta_hash}],
    }
    return seal(key, "DeltaManifest", RUN, body, NEVER).encode().decode()


def old_schema(tmp_path: Path) -> Path:
    """A folder with the shipped migrations up to 0009 only."""
    folder = tmp_path / "up-to-9"
    folder.mkdir()
    for migration in load_migrations(default_migrations())[:9]:
        shutil.copy(Path(str(default_migrations() / f"{migration.label}.sql")), folder)
    return folder


def fill_version_9(conn: sqlite3.Connection) -> None:
    """One running run with round 0: an uploaded miner already scored (a delta-loss job), one
    uploaded and not scored, one only committed."""
    conn.execute(
        "INSERT INTO beacon (round, signature, randomness, received_at) VALUES (?, ?, ?, 0)",
        (D, "0" * 96, "0" * 64),
    )
    conn.execute(
        "INSERT INTO runs (run_id, manifest_envelope, status, created_round, created_at)"
        " VALUES (?, '{}', 'running', 1, 0)",
        (RUN,),
    )
    conn.execute(
        "INSERT INTO rounds (run_id, w, round_open, d_open, d_assign, d_commit, d_audit,"
        " d_upload, d_final, base, reasons, opened_round) VALUES (?, 0, '{}', 1, 2, 3, 4, 5, 6,"
        " 0, '{}', 1)",
        (RUN,),
    )
    rows: list[tuple[Any, ...]] = [
        (SCORED.ss58, 0, "UPLOADED", delta_manifest(SCORED, "11" * 32)),
        (UNSCORED.ss58, 1, "UPLOADED", delta_manifest(UNSCORED, "22" * 32)),
        (COMMITTED.ss58, 2, "COMMITTED", None),
    ]
    for hotkey, slot, status, manifest in rows:
        conn.execute(
            "INSERT INTO miners (run_id, w, hotkey, slot, status, delta_manifest)"
            " VALUES (?, 0, ?, ?, ?, ?)",
            (RUN, hotkey, slot, status, manifest),
        )
    conn.execute(
        "INSERT INTO compute_jobs (job_id, challenge, version, subject, step, inputs, created_ms,"
        " wait_ms, wait_deadline_ms) VALUES ('j1', 'delta-loss', 1, ?, 'public', '[]', 0, 0, 0)",
        (canonical_subject({"run_id": RUN, "w": 0, "hotkey": SCORED.ss58}),),
    )


async def test_0010_fills_delta_hash_and_queues_the_unscored_uploads(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    async with open_database(path, migrations=old_schema(tmp_path), wall_clock=FixedClock(1.0)):
        pass
    with sqlite3.connect(path) as conn:
        fill_version_9(conn)
    conn.close()
    async with open_database(path, wall_clock=FixedClock(2.0)) as db:
        assert db.statistics().schema_version >= 10  # 0010 ran (and any later migration)
        details = await db.read(miner_details, RUN, 0)
        outbox = await db.read(
            lambda c: c.execute("SELECT * FROM scoring_outbox ORDER BY hotkey").fetchall()
        )
    assert {hotkey: row.delta_hash for hotkey, row in details.items()} == {
        SCORED.ss58: "11" * 32,
        UNSCORED.ss58: "22" * 32,
        COMMITTED.ss58: None,
    }
    assert outbox == [(RUN, 0, UNSCORED.ss58, "22" * 32, D)]
