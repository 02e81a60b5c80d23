"""The checkpoint flow on a real database (coordinator/flows/checkpoints.py): what is owed and
when, a rollback's rewrite, finality, a missing tape, the write's refusals and the public
reads."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from hypertrain.coordinator.flows.checkpoints import (
    checkpoint_file_key,
    checkpoint_listing,
    checkpoint_object,
    checkpoints_due,
    record_checkpoint,
)
from hypertrain.coordinator.tables.checkpoints import CheckpointRow
from hypertrain.coordinator.tables.finality import FinalRow, insert_final
from hypertrain.coordinator.tables.runs import insert_run, set_config
from hypertrain.protocol.errors import Conflict, NotFound
from hypertrain.rounds.deadlines import RunConfig
from hypertrain.store import Database, open_database
from hypertrain.store.keys import ObjectInfo
from nurseries import FixedClock
from tests.coordinator.lifecycle_support import sealed

RUN = "ab" * 32
EVERY = 2


def _key(tag: str, w: int) -> str:
    return hashlib.sha256(f"{tag}|{w}".encode()).hexdigest()


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    async with open_database(tmp_path / "state.db", wall_clock=FixedClock(0.0)) as database:
        await database.write(_run, 5)
        yield database


def _run(conn: sqlite3.Connection, total: int | None) -> None:
    insert_run(conn, RUN, json.dumps(sealed()), 1, 0)
    set_config(conn, RUN, RunConfig(train_rounds=5, final_after_upload=2, total_rounds=total))


def _merged(conn: sqlite3.Connection, *rounds: int) -> None:
    _merged_as(conn, "a", *rounds)


def _merged_as(conn: sqlite3.Connection, tag: str, *rounds: int) -> None:
    for w in rounds:
        conn.execute(
            "INSERT OR REPLACE INTO aggregations VALUES (?, ?, ?, ?, ?, 'th', 1.0, 0, 9, '[]')",
            (RUN, w, _key(tag + "1", w), _key(tag + "2", w), _key(tag + "3", w)),
        )


def _final(conn: sqlite3.Connection, *rounds: int) -> None:
    for w in rounds:
        insert_final(conn, FinalRow(RUN, w, "{}", (), 10, 100, 0, 11, 12, ledger_synced=True))


def _row(w: int, status: str, tapes: tuple[str, ...]) -> CheckpointRow:
    return CheckpointRow(
        RUN,
        w,
        status,
        "f" * 64,
        _key("m", w),
        _key("l", w),
        _key("s", w),
        tapes,
        40,  # type: ignore[arg-type]
    )


def _stored(row: CheckpointRow) -> list[ObjectInfo]:
    return [ObjectInfo(key, 10) for key in row.files().values()]


async def _record(db: Database, row: CheckpointRow, objects: tuple[str, ...] = ()) -> bool:
    done: bool = await db.write(record_checkpoint, row, _stored(row), objects, 0)
    return done


async def test_owed_when_merged_rebuilt_after_a_rollback_final_once_final(db: Database) -> None:
    await db.write(_merged, 0)
    assert await db.read(checkpoints_due, EVERY) == []  # round 1 is the first checkpoint
    await db.write(_merged, 1)
    (due,) = await db.read(checkpoints_due, EVERY)
    assert (due.w, due.status, due.missing) == (1, "provisional", None)
    assert due.tapes == (_key("a1", 0), _key("a1", 1))
    assert due.out_state == _key("a2", 1)
    assert await _record(db, _row(1, "provisional", due.tapes), (_key("d", 0),))
    assert await db.read(checkpoints_due, EVERY) == []
    # a rollback rewrites rounds 0 and 1: the checkpoint is owed again, and a build from the
    # old tapes is refused
    await db.write(_merged_as, "b", 0, 1)
    (due,) = await db.read(checkpoints_due, EVERY)
    assert due.tapes == (_key("b1", 0), _key("b1", 1))
    with pytest.raises(Conflict, match="rewritten"):
        await _record(db, _row(1, "provisional", (_key("a1", 0), _key("a1", 1))))
    assert await _record(db, _row(1, "provisional", due.tapes))
    # final once round 1 is; then never owed again, whatever happens
    await db.write(_final, 0)
    assert await db.read(checkpoints_due, EVERY) == []
    await db.write(_final, 1)
    (due,) = await db.read(checkpoints_due, EVERY)
    assert (due.w, due.status) == (1, "final")
    assert await _record(db, _row(1, "final", due.tapes))
    assert not await _record(db, _row(1, "provisional", due.tapes))  # a final row stays
    await db.write(_merged, 2, 3, 4)
    assert [(d.w, d.status) for d in await db.read(checkpoints_due, EVERY)] == [
        (3, "provisional"),
        (4, "provisional"),  # the run's last round (total_rounds 5)
    ]
    (row,) = await db.read(checkpoint_listing, RUN)
    assert row.listing() == {
        "w": 1,
        "rounds": [0, 1],
        "status": "final",
        "theta_hash": "f" * 64,
        "files": {
            "MANIFEST.json": _key("m", 1),
            "lineage.json": _key("l", 1),
            "model.safetensors": _key("s", 1),
        },
        "written_round": 40,
    }


async def test_a_round_without_an_applied_tape_gets_no_checkpoint(db: Database) -> None:
    await db.write(_merged, 1)  # round 0 was merged elsewhere, its tape never recorded
    (due,) = await db.read(checkpoints_due, EVERY)
    assert (due.w, due.missing, due.tapes) == (1, 0, ())


async def test_the_public_reads(db: Database) -> None:
    await db.write(_merged, 0, 1, 2, 3)
    await _record(db, _row(1, "provisional", (_key("a1", 0), _key("a1", 1))), (_key("d", 1),))
    tapes = tuple(_key("a1", w) for w in range(4))
    await _record(db, _row(3, "provisional", tapes), (_key("d", 1), _key("d", 3)))
    assert await db.read(checkpoint_file_key, RUN, 3, "lineage.json") == _key("l", 3)
    with pytest.raises(NotFound, match="no file"):
        await db.read(checkpoint_file_key, RUN, 3, "README")
    with pytest.raises(NotFound, match="no checkpoint at round 2"):
        await db.read(checkpoint_file_key, RUN, 2, "lineage.json")
    with pytest.raises(NotFound, match="unknown run"):
        await db.read(checkpoint_listing, "cd" * 32)
    # an object is served by the checkpoint that first named it and every later one
    assert await db.read(checkpoint_object, RUN, 1, _key("d", 1)) == _key("d", 1)
    assert await db.read(checkpoint_object, RUN, 3, _key("d", 1)) == _key("d", 1)
    assert await db.read(checkpoint_object, RUN, 3, _key("d", 3)) == _key("d", 3)
    with pytest.raises(NotFound, match="not part of checkpoint 1"):
        await db.read(checkpoint_object, RUN, 1, _key("d", 3))
