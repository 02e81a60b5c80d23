"""A writer process killed mid-put leaves no partial object and a consistent database."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import trio

from hypertrain.store import ObjectStore, get_meta, open_database

CHILD = Path(__file__).with_name("crash_child.py")
CHILD_TIMEOUT = 60.0


def count_in_flight_rows(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT COUNT(*) FROM meta WHERE key LIKE 'row-%'").fetchone()[0])


async def test_a_writer_killed_mid_put_leaves_no_partial_object(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    log = tmp_path / "child.log"
    with log.open("wb") as out, trio.fail_after(CHILD_TIMEOUT):
        child = await trio.lowlevel.open_process(
            [sys.executable, str(CHILD), str(state)], stdout=out, stderr=subprocess.STDOUT
        )
        try:
            while not (state / "mid-write").exists():
                assert child.poll() is None, log.read_text()
                await trio.sleep(0.01)
            # Really mid-put and mid-write: a partial temp file and uncommitted WAL frames.
            (partial,) = (state / "objects" / "tmp").iterdir()
            assert partial.stat().st_size > 1024 * 1024
            assert (state / "state.db-wal").stat().st_size > 1024 * 1024
        finally:
            child.send_signal(signal.SIGKILL)
            await child.wait()
    assert child.returncode == -signal.SIGKILL

    objects = ObjectStore.open(state / "objects")
    assert objects.statistics().temp_files_cleaned == 1
    assert [p for p in (state / "objects").rglob("*") if p.is_file()] == []
    assert [p.name for p in (state / "objects").iterdir()] == ["tmp"]

    async with open_database(state / "state.db") as db:
        assert await db.read(lambda c: c.execute("PRAGMA integrity_check").fetchall()) == [("ok",)]
        assert await db.read(get_meta, "before") == "committed"
        assert await db.read(count_in_flight_rows) == 0
