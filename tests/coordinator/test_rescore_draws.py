"""The beacon's draw of sampled trusted re-scores over a real database
(hypertrain/coordinator/flows/rescores.py): the draw round is fixed after the settlement and
past every round published or stored, the round's randomness decides once, a restarted daemon
(a reopened database) keeps every pending draw, and a re-score of a round already final is
recorded, not rewritten."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path
from typing import Any

import attrs
import pytest

from hypertrain.compute import (
    Answer,
    ComputeSettings,
    Event,
    is_drawn,
    pending_rescores,
    rescore_state,
)
from hypertrain.coordinator.flows.rescores import draw_rescores, record_rescore
from hypertrain.store import Database, open_database
from nurseries import FixedClock
from tests.compute.support import ANY_AGE, FP, LOSS, T0, Book, good

ALL = attrs.evolve(ANY_AGE, audit_permille=1000)
"""Every agreement drawn; keys of any age paired (the book's test default)."""
RUN = "ab" * 32


def _randomness(round_: int) -> str:
    return hashlib.sha256(b"round %d" % round_).hexdigest()


def _store_round(conn: sqlite3.Connection, round_: int) -> None:
    conn.execute(
        "INSERT INTO beacon (round, signature, randomness, received_at) VALUES (?, ?, ?, 0)",
        (round_, "00" * 48, _randomness(round_)),
    )


def _row(conn: sqlite3.Connection, job: str) -> tuple[Any, ...]:
    row: tuple[Any, ...] = conn.execute(
        "SELECT state, draw_round, beacon_round, permille FROM compute_rescores WHERE job_id = ?",
        (job,),
    ).fetchone()
    return row


async def _agreed(book: Book, w: int = 0, loss: str = LOSS) -> str:
    a, _ = await book.node(handle=f"a{w}")
    b, _ = await book.node(handle=f"b{w}")
    job = await book.enqueue(subject={"run_id": RUN, "w": w, "hotkey": "h"})
    ga, gb = await book.lease(a, T0 + 1), await book.lease(b, T0 + 2)
    assert ga is not None
    assert gb is not None
    await book.post(a, ga.copy_id, good(ga, loss), T0 + 3)
    await book.post(b, gb.copy_id, good(gb, loss), T0 + 4)
    return job


async def _draw(db: Database, due: int, settings: ComputeSettings = ALL) -> list[Event]:
    return await db.write(lambda c: draw_rescores(c, due, T0 + 100, settings=settings))


def _open(path: Path) -> Any:
    return open_database(path, wall_clock=FixedClock(0.0))


async def test_the_draw_round_comes_after_the_settlement_and_its_randomness_decides(
    tmp_path: Path,
) -> None:
    async with _open(tmp_path / "s.db") as db:
        book = Book(db, ALL)
        await db.write(lambda c: [_store_round(c, r) for r in range(1, 6)])
        job = await _agreed(book)
        # D = 5, the wall clock made round 5 due: the draw round is 6, which does not exist.
        assert await _draw(db, due=5) == []
        assert await db.read(_row, job) == ("waiting", 6, None, None)
        assert (
            await db.read(lambda c: c.execute("SELECT 1 FROM beacon WHERE round = 6").fetchall())
            == []
        )
        await db.write(_store_round, 6)
        events = await _draw(db, due=6)
        assert events == [
            ("audit", {"job": job, "challenge": "delta-loss", "change": "drawn", "round": 6})
        ]
        assert await db.read(_row, job) == ("drawn", 6, 6, 1000)
        assert await _draw(db, due=7) == []  # drawn once


async def test_a_lagging_store_draws_past_the_round_the_wall_clock_made_due(
    tmp_path: Path,
) -> None:
    """The daemon has stored only round 5 but drand has published round 9: a node could know
    round 9's randomness, so the draw round is 10; had the daemon missed round 10, the first
    stored round after it decides."""
    async with _open(tmp_path / "s.db") as db:
        book = Book(db, attrs.evolve(ANY_AGE, audit_permille=500))
        await db.write(lambda c: [_store_round(c, r) for r in range(1, 6)])
        job = await _agreed(book)
        await _draw(db, due=9, settings=book.settings)
        assert await db.read(_row, job) == ("waiting", 10, None, None)
        await db.write(lambda c: [_store_round(c, r) for r in (11, 12)])
        await _draw(db, due=12, settings=book.settings)
        state, _, used, _ = await db.read(_row, job)
        assert used == 11
        assert state == ("drawn" if is_drawn(_randomness(11), job, 500) else "skipped")


async def test_a_pending_draw_survives_a_restart_and_is_drawn_once(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with _open(path) as db:
        await db.write(lambda c: [_store_round(c, r) for r in range(1, 4)])
        job = await _agreed(Book(db, ALL))
    async with _open(path) as db:  # restarted before any observer ran: the entry is kept
        assert await db.read(_row, job) == ("waiting", None, None, None)
        await _draw(db, due=3)
    async with _open(path) as db:  # restarted before the draw round: it is kept as fixed
        assert await db.read(_row, job) == ("waiting", 4, None, None)
        await db.write(_store_round, 4)
        assert len(await _draw(db, due=4)) == 1
    async with _open(path) as db:  # restarted before the re-score: still owed, not redrawn
        assert [j.job_id for j in await db.read(pending_rescores)] == [job]
        assert await _draw(db, due=4) == []
        assert await db.read(_row, job) == ("drawn", 4, 4, 1000)


async def test_a_rescore_of_a_round_already_final_is_recorded_not_rewritten(
    tmp_path: Path,
) -> None:
    async with _open(tmp_path / "s.db") as db:
        book = Book(db, ALL)
        await db.write(lambda c: [_store_round(c, r) for r in range(1, 3)])
        final = await _agreed(book, w=0, loss="40490fdb")
        open_round = await _agreed(book, w=1, loss="40490fdb")
        await _draw(db, due=2)
        await db.write(lambda c: _store_round(c, 3))
        assert len(await _draw(db, due=3)) == 2

        def finalise(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO runs (run_id, manifest_envelope, status, created_round,"
                " created_at) VALUES (?, '{}', 'running', 1, 0)",
                (RUN,),
            )
            conn.execute(
                "INSERT INTO finalizations (run_id, w, envelope, entries, final_round, at,"
                " ledger_round, vesting_round, released_round) VALUES (?, 0, '{}', '[]', 3,"
                " 0, 0, 0, 0)",
                (RUN,),
            )

        await db.write(finalise)
        trusted = Answer.success(LOSS, FP, wall_ms=5)

        def rescore(conn: sqlite3.Connection, job: str) -> list[Event]:
            return record_rescore(conn, job, trusted, T0 + 200, settings=ALL)

        final_events = await db.write(rescore, final)
        open_events = await db.write(rescore, open_round)
        consumed = await db.read(
            lambda c: c.execute(
                "SELECT job_id, consumed FROM compute_rescores ORDER BY job_id"
            ).fetchall()
        )
    assert final_events[0][1]["consumed"] == (
        f"round 0 of run {RUN} was already final (D=3): its Finalize and ledger entries stand"
    )
    assert open_events[0][1]["consumed"] is None
    assert dict(consumed) == {final: final_events[0][1]["consumed"], open_round: None}
    assert await _states(tmp_path / "s.db", final, open_round) == ["replaced", "replaced"]


async def _states(path: Path, *jobs: str) -> list[str | None]:
    async with _open(path) as db:
        return [await db.read(rescore_state, job) for job in jobs]


@pytest.mark.parametrize("bad", [-1, 1001])
def test_the_settings_rate_is_bounded(bad: int) -> None:
    with pytest.raises(ValueError, match=r"0\.\.1000"):
        attrs.evolve(ALL, audit_permille=bad)
