"""Child process of ``test_crash.py``: gets itself killed in the middle of a put and a write.

Run as ``python crash_child.py STATE_DIR``. It commits one row, starts a large streaming put,
and once the put has written a few MiB it starts a DB write that inserts many rows (spilling
uncommitted pages into the WAL), touches ``STATE_DIR/mid-write`` and then blocks inside the
open transaction. The parent SIGKILLs it at that point.
"""

from __future__ import annotations

import sqlite3
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import trio

from hypertrain.store import ObjectStore, open_database, set_meta

CHUNK = 64 * 1024
CHUNKS_BEFORE_WRITE = 64
ROWS_IN_FLIGHT = 2000


async def main(state: Path) -> None:
    objects = ObjectStore.open(state / "objects")
    async with open_database(state / "state.db") as db:
        await db.write(set_meta, "before", "committed")
        put_midway = trio.Event()

        async def payload() -> AsyncIterator[bytes]:
            for i in range(10_000):
                yield bytes([i % 251]) * CHUNK
                if i == CHUNKS_BEFORE_WRITE:
                    put_midway.set()

        def write_then_hang(conn: sqlite3.Connection) -> None:
            conn.execute("PRAGMA cache_size = 16")  # spill uncommitted pages into the WAL
            for i in range(ROWS_IN_FLIGHT):
                set_meta(conn, f"row-{i:05d}", "x" * 1000)
            (state / "mid-write").write_text("now", encoding="utf-8")
            time.sleep(600)  # inside the transaction, with the put half done: kill me here

        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                lambda: objects.put_stream(payload(), expected_sha256=None, size_cap=10**10)
            )
            await put_midway.wait()
            await db.write(write_then_hang)


if __name__ == "__main__":
    trio.run(main, Path(sys.argv[1]))
