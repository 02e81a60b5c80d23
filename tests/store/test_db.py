"""The DB runner: pragmas, one transaction per write, serialization, cancellation, modes."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest
import trio
import trio.testing

from hypertrain.store import Database, StoreError, get_meta, open_database, set_meta
from hypertrain.store.db import Mode

MODES: list[Mode] = ["inline", "thread"]


def pragma(conn: sqlite3.Connection, name: str) -> object:
    return conn.execute(f"PRAGMA {name}").fetchone()[0]


def counter(conn: sqlite3.Connection) -> int:
    value = get_meta(conn, "counter")
    return 0 if value is None else int(value)


def increment(conn: sqlite3.Connection) -> int:
    """Read-modify-write that is only correct when writes serialize."""
    value = counter(conn)
    time.sleep(0)  # let another worker thread run here if the runner allowed it
    set_meta(conn, "counter", str(value + 1))
    return value + 1


def count_meta(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT COUNT(*) FROM meta").fetchone()[0])


@pytest.mark.parametrize("mode", MODES)
async def test_pragmas_are_set_on_every_connection(tmp_path: Path, mode: Mode) -> None:
    async with open_database(tmp_path / "s.db", mode=mode, busy_timeout=2.5) as db:
        for reading in (db.read, db.write):
            got = await reading(
                lambda conn: {
                    name: pragma(conn, name)
                    for name in (
                        "journal_mode",
                        "foreign_keys",
                        "synchronous",
                        "wal_autocheckpoint",
                        "busy_timeout",
                    )
                }
            )
            assert got == {
                "journal_mode": "wal",
                "foreign_keys": 1,
                "synchronous": 1,  # NORMAL
                "wal_autocheckpoint": 0,
                "busy_timeout": 2500,
            }


async def test_read_returns_what_fn_returns(db: Database) -> None:
    await db.write(set_meta, "a", "1")
    await db.write(set_meta, "b", "2")
    assert await db.read(get_meta, "a") == "1"
    rows = await db.read(lambda conn: conn.execute("SELECT * FROM meta ORDER BY key").fetchall())
    assert rows == [("a", "1"), ("b", "2")]


@pytest.mark.parametrize("mode", MODES)
async def test_a_write_is_one_transaction(tmp_path: Path, mode: Mode) -> None:
    class Boom(Exception):
        pass

    boom = Boom("after two inserts")

    def half_done(conn: sqlite3.Connection) -> None:
        set_meta(conn, "x", "1")
        set_meta(conn, "y", "2")
        raise boom

    async with open_database(tmp_path / "s.db", mode=mode) as db:
        await db.write(set_meta, "kept", "yes")
        with pytest.raises(Boom) as caught:
            await db.write(half_done)
        assert caught.value is boom
        assert await db.read(count_meta) == 1
        assert await db.write(increment) == 1
        stats = db.statistics()
        assert (stats.mode, stats.writes, stats.rollbacks) == (mode, 2, 1)


async def test_foreign_keys_are_enforced_and_roll_back(db: Database) -> None:
    def schema(conn: sqlite3.Connection) -> None:
        conn.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
        conn.execute("CREATE TABLE child (p INTEGER NOT NULL REFERENCES parent(id))")

    def orphan(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO parent VALUES (1)")
        conn.execute("INSERT INTO child VALUES (2)")

    await db.write(schema)
    with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
        await db.write(orphan)
    assert await db.read(lambda c: c.execute("SELECT COUNT(*) FROM parent").fetchone()) == (0,)


@pytest.mark.parametrize("mode", MODES)
async def test_concurrent_read_modify_writes_serialize(tmp_path: Path, mode: Mode) -> None:
    tasks, each = 50, 10

    async def worker() -> None:
        for _ in range(each):
            await db.write(increment)

    async with open_database(tmp_path / "s.db", mode=mode) as db:
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                for _ in range(tasks):
                    nursery.start_soon(worker)
        assert await db.read(counter) == tasks * each
        assert db.statistics().writes == tasks * each


async def test_async_fns_are_refused_without_running(db: Database) -> None:
    async def sneaky(conn: sqlite3.Connection) -> None:
        set_meta(conn, "x", "1")

    with pytest.raises(TypeError, match="plain functions"):
        _ = await db.write(sneaky)
    with pytest.raises(TypeError, match="plain functions"):
        _ = await db.read(sneaky)
    assert await db.read(count_meta) == 0


@pytest.mark.parametrize("mode", MODES)
async def test_a_read_that_changes_rows_is_refused_and_undone(tmp_path: Path, mode: Mode) -> None:
    async with open_database(tmp_path / "s.db", mode=mode) as db:
        with pytest.raises((RuntimeError, sqlite3.OperationalError)):
            await db.read(set_meta, "x", "1")
        assert await db.read(count_meta) == 0


async def test_a_write_fn_may_not_end_the_transaction(db: Database) -> None:
    def commits(conn: sqlite3.Connection) -> None:
        conn.execute("COMMIT")

    with pytest.raises(RuntimeError, match="ended the transaction"):
        await db.write(commits)
    await db.write(set_meta, "still", "works")


async def test_cancelled_inline_calls_do_nothing(db: Database) -> None:
    with trio.CancelScope() as scope:
        scope.cancel()
        await db.write(set_meta, "x", "1")
    assert scope.cancelled_caught
    with trio.CancelScope() as scope:
        scope.cancel()
        await db.read(count_meta)
    assert scope.cancelled_caught
    assert await db.read(count_meta) == 0
    assert (db.statistics().reads, db.statistics().writes) == (1, 0)


async def test_a_cancelled_thread_write_is_not_torn(tmp_path: Path) -> None:
    def slow(conn: sqlite3.Connection) -> str:
        set_meta(conn, "first", "1")
        time.sleep(0.3)
        set_meta(conn, "second", "2")
        return "committed"

    async with open_database(tmp_path / "s.db", mode="thread") as db:
        with trio.fail_after(10):
            started = trio.current_time()
            outcome = None
            with trio.move_on_after(0.05) as scope:
                outcome = await db.write(slow)
            # Cancelled mid-write: the write still finished and its true outcome came back.
            assert scope.cancel_called
            assert outcome == "committed"
            assert trio.current_time() - started >= 0.3
            assert await db.read(count_meta) == 2
            await db.write(set_meta, "after", "3")  # the lock was released


async def test_inline_mode_keeps_virtual_time_exact(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_database(tmp_path / "s.db") as db:
        start = trio.current_time()
        for _ in range(20):
            await db.write(increment)
            await db.read(counter)
        assert trio.current_time() == start
        await trio.sleep(5)
        assert trio.current_time() == start + 5


async def test_a_closed_database_refuses_calls(tmp_path: Path) -> None:
    async with open_database(tmp_path / "s.db") as db:
        pass
    with pytest.raises(StoreError, match="closed"):
        await db.read(count_meta)
    with pytest.raises(StoreError, match="closed"):
        await db.write(set_meta, "x", "1")


async def test_bad_settings_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="mode"):
        async with open_database(tmp_path / "s.db", mode="fast"):  # type: ignore[arg-type]
            pass
    with pytest.raises(ValueError, match="checkpoint_interval"):
        async with open_database(tmp_path / "s.db", checkpoint_interval=0):
            pass


def fail_after_write(conn: sqlite3.Connection) -> None:
    set_meta(conn, "counter", "99")
    raise ValueError("rolled back")


@pytest.mark.parametrize("mode", MODES)
async def test_the_stamp_changes_with_every_commit_and_only_then(
    tmp_path: Path, mode: Mode
) -> None:
    async with open_database(tmp_path / "s.db", mode=mode) as db:
        first = await db.stamp()
        await db.read(counter)
        assert await db.stamp() == first
        with pytest.raises(ValueError, match="rolled back"):
            await db.write(fail_after_write)
        assert await db.stamp() == first
        await db.write(increment)
        second = await db.stamp()
        assert second != first
        with sqlite3.connect(db.path) as other:  # another process on the same file
            other.execute("INSERT INTO meta (key, value) VALUES ('other', '1')")
        other.close()
        third = await db.stamp()
        assert third not in (first, second)
        assert await db.stamp() == third
