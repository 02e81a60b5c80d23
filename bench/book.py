"""The compute book alone (no HTTP): lease -> result cycles per second against its history.

Issue 17 goal 1: the book's hot path is bounded by the work at hand, so a cycle costs the same
with 1,000 steps queued and 1,000 settled as with 100,000 of each. For each ``--sizes`` N, a
fresh database (the daemon's: ``open_database``, WAL, one write transaction per call as each
HTTP request makes) gets a history of N steps each leased, answered and paid by two nodes (2N
settled copies), then N more steps queued (two copies each, waiting for nodes), all through the
book's own functions, then one WAL checkpoint (the daemon's checkpointer runs every few
seconds; without it the reads of the cycles go through a WAL of the whole fill). Then two
nodes run cycles for ``--seconds``: node a leases the head copy and posts its result, node b
leases the other copy of the same step and posts the same result (the step settles by
agreement, both paid), and a new step is queued, so the queue keeps its depth. One cycle = one
lease + its result (two transactions; and half an enqueue). Printed: cycles/s per size, and
each size's rate over the first size's (the goal: within 20%, i.e. a ratio of at least 0.8).

    .venv/bin/python bench/book.py [--sizes 1000,100000] [--seconds 5]

Filling 100,000 takes about a minute here.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

# Run as a script (sys.path[0] is bench/): the repository root too.
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

from hypertrain.compute import (
    LeaseGrant,
    Node,
    enqueue_step,
    lease,
    register_node,
    submit_result,
)
from hypertrain.scoring.registry import get_challenge
from hypertrain.store import Database, open_database
from nurseries import FixedClock

T0 = 1_704_067_200_000
CHUNK = 1000
"""History rows written per transaction while filling."""
WAIT_MS = 10**10
"""The steps' window for nodes: they stay queued through the run."""
FP = "ab" * 32


def _inputs() -> list[dict[str, Any]]:
    names = get_challenge("delta-loss").inputs
    return [{"name": n, "sha256": f"{i:064x}", "size": 10 + i} for i, n in enumerate(names)]


INPUTS = _inputs()


def _enqueue(conn: sqlite3.Connection, tag: str, i: int, now: int) -> None:
    subject = {"run_id": tag, "w": i, "hotkey": "h"}
    enqueue_step(
        conn,
        challenge_id="delta-loss",
        subject=subject,
        step="public",
        inputs=INPUTS,
        now_ms=now,
        wait_ms=WAIT_MS,
    )


def _lease(conn: sqlite3.Connection, node: Node, now: int) -> LeaseGrant:
    grant, _ = lease(conn, node, capabilities=["delta-loss"], hardware="cpu-generic", now_ms=now)
    assert grant is not None, "the book ran dry"
    return grant


def _post(conn: sqlite3.Connection, node: Node, grant: LeaseGrant, now: int) -> None:
    body = {
        "lease": grant.token,
        "ok": True,
        "result": {"loss": "3f800000", "fingerprint": FP, "wallMs": 7},
    }
    status, _, _ = submit_result(conn, node, grant.copy_id, body, now)
    assert status == 200, status


def _settle_one(conn: sqlite3.Connection, a: Node, b: Node, now: int) -> None:
    ga = _lease(conn, a, now)
    gb = _lease(conn, b, now)
    _post(conn, a, ga, now)
    _post(conn, b, gb, now)


def history_nodes(conn: sqlite3.Connection, now: int) -> tuple[Node, Node]:
    """Two new nodes (fresh handles) to settle a history with."""
    pair = [
        register_node(
            conn,
            key=None,
            handle=None,
            capabilities=["delta-loss"],
            hardware="cpu-generic",
            now_ms=now,
        )[0]
        for _ in range(2)
    ]
    return pair[0], pair[1]


async def settle_history(db: Database, a: Node, b: Node, tag: str, size: int, now: int) -> None:
    """``size`` steps (subjects ``tag`` 0..size-1) queued, leased, answered alike by ``a`` and
    ``b`` and paid (2 x ``size`` settled copies), :data:`CHUNK` a transaction. Nothing else may
    be queued meanwhile: each step must be the head of the queue when it is leased."""
    for start in range(0, size, CHUNK):

        def history(conn: sqlite3.Connection, start: int = start) -> None:
            for i in range(start, min(start + CHUNK, size)):
                _enqueue(conn, tag, i, now)
                _settle_one(conn, a, b, now)

        await db.write(history)


async def _fill(db: Database, size: int) -> tuple[Node, Node]:
    a, b = await db.write(history_nodes, T0)
    await settle_history(db, a, b, "settled", size, T0)
    for start in range(0, size, CHUNK):

        def queue(conn: sqlite3.Connection, start: int = start) -> None:
            for i in range(start, min(start + CHUNK, size)):
                _enqueue(conn, "queued", i, T0 + 1)

        await db.write(queue)
    return a, b


async def _cycles(db: Database, a: Node, b: Node, seconds: float) -> float:
    cycles, now = 0, T0 + 2
    start = time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        for node in (a, b):
            grant = await db.write(_lease, node, now)
            await db.write(_post, node, grant, now)
            cycles += 1
        await db.write(_enqueue, "more", now, now)  # one step in for the one settled
        now += 1
    return cycles / elapsed


async def _measure(size: int, seconds: float) -> tuple[float, float]:
    with tempfile.TemporaryDirectory(prefix="ht-book-") as tmp:
        async with open_database(Path(tmp) / "state.db", wall_clock=FixedClock(0.0)) as db:
            started = time.perf_counter()
            a, b = await _fill(db, size)
            await db.checkpoint()  # as the daemon's checkpointer does, every few seconds
            filled = time.perf_counter() - started
            return await _cycles(db, a, b, seconds), filled


def _sizes(text: str) -> list[int]:
    sizes = [int(part) for part in text.split(",")]
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError("a comma-separated list of positive counts")
    return sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=_sizes, default=[1000, 100_000])
    parser.add_argument("--seconds", type=float, default=5.0, help="measured time per size")
    args = parser.parse_args()
    print(f"{'queued / settled steps':>24}{'fill s':>9}{'cycles/s':>11}{'vs first':>10}")
    first = None
    for size in args.sizes:
        rate, filled = trio.run(_measure, size, args.seconds)
        first = first or rate
        print(f"{size:>24,}{filled:>9.1f}{rate:>11.0f}{rate / first:>10.2f}")
    print("goal: every ratio >= 0.80 (within 20% of the first size)")


if __name__ == "__main__":
    main()
