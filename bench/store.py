"""Throughput of the DB runner (inline and thread mode) next to plain sqlite3, in one run.

Workload per contender, each on a fresh database file with the runner's pragmas (WAL,
synchronous=NORMAL, foreign_keys=ON, wal_autocheckpoint=0): N single-row INSERT transactions
(BEGIN IMMEDIATE / INSERT / COMMIT), then N point reads by primary key (BEGIN / SELECT / COMMIT,
the runner's read snapshot), issued one after another from one task.

    .venv/bin/python bench/store.py [--n 20000]
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import time
from pathlib import Path

import trio

from hypertrain.store import open_database
from hypertrain.store.db import Mode

SCHEMA = "CREATE TABLE IF NOT EXISTS bench (id INTEGER PRIMARY KEY, v TEXT NOT NULL)"
INSERT = "INSERT INTO bench (id, v) VALUES (?, ?)"
SELECT = "SELECT v FROM bench WHERE id = ?"
VALUE = "x" * 64


def insert(conn: sqlite3.Connection, i: int) -> None:
    conn.execute(INSERT, (i, VALUE))


def select(conn: sqlite3.Connection, i: int) -> str:
    row = conn.execute(SELECT, (i,)).fetchone()
    return str(row[0])


def create(conn: sqlite3.Connection) -> None:
    conn.execute(SCHEMA)


def rate(n: int, seconds: float) -> float:
    return n / seconds if seconds > 0 else float("inf")


def bench_plain(path: Path, n: int) -> tuple[float, float]:
    """Plain sqlite3 on the calling thread: the same pragmas and statements, no runner."""
    conn = sqlite3.connect(path, isolation_level=None)
    for pragma in (
        "journal_mode = WAL",
        "synchronous = NORMAL",
        "foreign_keys = ON",
        "wal_autocheckpoint = 0",
        "busy_timeout = 5000",
    ):
        conn.execute(f"PRAGMA {pragma}")
    conn.execute(SCHEMA)
    start = time.perf_counter()
    for i in range(n):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(INSERT, (i, VALUE))
        conn.execute("COMMIT")
    writes = rate(n, time.perf_counter() - start)
    start = time.perf_counter()
    for i in range(n):
        conn.execute("BEGIN")
        conn.execute(SELECT, (i,)).fetchone()
        conn.execute("COMMIT")
    reads = rate(n, time.perf_counter() - start)
    conn.close()
    return writes, reads


async def bench_runner(path: Path, n: int, mode: Mode) -> tuple[float, float]:
    """The same workload through ``Database.write`` / ``Database.read``."""
    async with open_database(path, mode=mode) as db:
        await db.write(create)
        start = time.perf_counter()
        for i in range(n):
            await db.write(insert, i)
        writes = rate(n, time.perf_counter() - start)
        start = time.perf_counter()
        for i in range(n):
            await db.read(select, i)
        reads = rate(n, time.perf_counter() - start)
    return writes, reads


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000, help="transactions of each kind")
    args = parser.parse_args(argv)
    n: int = args.n
    results: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-store-") as tmp:
        root = Path(tmp)
        results["plain sqlite3"] = bench_plain(root / "plain.db", n)
        modes: tuple[Mode, ...] = ("inline", "thread")
        for mode in modes:
            results[f"runner {mode}"] = trio.run(bench_runner, root / f"{mode}.db", n, mode)
    print(f"{n} single-row write transactions, then {n} point reads, one task, sequential")
    print(f"{'contender':<16}{'writes/s':>12}{'reads/s':>12}{'µs/write':>11}{'µs/read':>10}")
    for name, (writes, reads) in results.items():
        print(f"{name:<16}{writes:>12,.0f}{reads:>12,.0f}{1e6 / writes:>11.1f}{1e6 / reads:>10.1f}")
    plain_w, plain_r = results["plain sqlite3"]
    for mode in ("inline", "thread"):
        writes, reads = results[f"runner {mode}"]
        print(
            f"ratio runner {mode} / plain: writes {writes / plain_w:.2f}x, "
            f"reads {reads / plain_r:.2f}x"
        )


if __name__ == "__main__":
    main()
