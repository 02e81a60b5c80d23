"""The passive WAL checkpointer: runs on its own connection in real time, reports its results.

These tests use the real clock on purpose: the checkpointer uses worker threads, which break
the autojump clock (DESIGN.md section 8), and it refuses to start under one.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import trio
import trio.testing

from hypertrain.store import open_database, set_meta
from nurseries import FixedClock


def fill(conn: sqlite3.Connection, n: int) -> None:
    for i in range(n):
        set_meta(conn, f"k{i}", "v" * 100)


async def test_the_checkpointer_runs_periodically_and_reports(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with open_database(path, checkpoint_interval=0.05, wall_clock=FixedClock(42.0)) as db:
        for _ in range(20):
            await db.write(fill, 50)
        wal_bytes = path.with_name("s.db-wal").stat().st_size
        assert wal_bytes > 0
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                assert await nursery.start(db.run_checkpointer) == 0.05
                # Polling is the point: statistics() is what status pages read.
                while db.statistics().checkpoints < 3:  # noqa: ASYNC110
                    await trio.sleep(0.01)
                nursery.cancel_scope.cancel()
        last = db.statistics().last_checkpoint
        assert last is not None
        assert not last.busy
        assert last.wal_frames > 0
        assert last.checkpointed_frames == last.wal_frames
        assert last.at == 42.0
        # Everything is in the main file now: a fresh connection that ignores the WAL sees it.
        with sqlite3.connect(f"file:{path}?immutable=1", uri=True) as conn:
            assert conn.execute("SELECT COUNT(*) FROM meta").fetchone() == (50,)


async def test_a_one_off_checkpoint_reports_the_wal(tmp_path: Path) -> None:
    async with open_database(tmp_path / "s.db") as db:
        await db.write(fill, 10)
        with trio.fail_after(10):
            result = await db.checkpoint()
        assert result.checkpointed_frames == result.wal_frames > 0
        assert db.statistics().checkpoints == 1


async def test_without_an_interval_the_checkpointer_only_waits(tmp_path: Path) -> None:
    async with open_database(tmp_path / "s.db", checkpoint_interval=None) as db:
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                assert await nursery.start(db.run_checkpointer) is None
                await trio.sleep(0.05)
                nursery.cancel_scope.cancel()
        assert db.statistics().checkpoints == 0


async def test_the_checkpointer_refuses_an_autojump_clock(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_database(tmp_path / "s.db") as db:
        with pytest.raises(RuntimeError, match="autojump"):
            await db.run_checkpointer()
