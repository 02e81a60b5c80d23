"""The compute book's hot path is bounded by the work at hand, not by the book's history
(issue 17 goal 1).

Every statement a register → lease → result cycle runs (two keyless mints from a network, with
its rate limit and probation reads; leases under the pairing rules from two networks, one by a
key young enough for the age rule; the two result posts that settle and pay a job; the
reaper's ``next_deadline_ms``, ``expire_due`` and ``fallback_due``) is captured with
SQLite's trace callback and its ``EXPLAIN QUERY PLAN`` is checked: no full table scan, an
ordered index walk only under a ``LIMIT``, and no search of a whole state (``(state=?)``: every
answered, leased or queued copy ever stored) unless it walks the queue in order under a
``LIMIT``. Then the work itself, counted in SQLite virtual-machine instructions (a progress
handler: deterministic, unlike a clock), of the same cycle over ten times the history.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from pathlib import Path

from hypertrain.compute import DEFAULT_SETTINGS
from hypertrain.compute.timers import next_deadline_ms
from hypertrain.store import Database, open_database
from nurseries import FixedClock
from tests.compute.support import LEASE_SPAN, T0, Book, good

QUEUED_WAIT_MS = 10**9
STATE_SEARCH = re.compile(r"USING (?:COVERING )?INDEX \w+_by_state \(state=\?\)$")
FULL_SCAN = re.compile(r"^SCAN \w+$")
INDEX_WALK = re.compile(r"^SCAN \w+ USING (?:COVERING )?INDEX")
BOUNDED_OTHERWISE = {
    "FROM compute_jobs WHERE state = 'fallback' ORDER BY created_ms": (
        "the steps handed to the coordinator's own scorers: the work at hand"
    ),
}
"""Statements allowed a whole-state search, each with why it is bounded anyway."""
STEP = 10
"""VM instructions between two calls of the progress handler."""
OLD = 2 * 3_600_000
"""A key minted this long before is established (the pairing age is the default hour)."""
NET_A, NET_B = "198.51.100.0/24", "2001:db8:1::/48"


async def _history(book: Book, jobs: int, now: int) -> int:
    """``jobs`` jobs settled and paid by two nodes, and as many queued (waiting for nodes
    through the cycles); the time after."""
    a, _ = await book.node(now - OLD, handle=f"a{now}", network=NET_A)
    b, _ = await book.node(now - OLD, handle=f"b{now}", network=NET_B)
    for i in range(jobs):
        await book.enqueue(now, subject={"run_id": "r1", "w": i, "hotkey": f"h{now}"})
        ga = await book.lease(a, now + 1, network=NET_A)
        gb = await book.lease(b, now + 2, network=NET_B)
        assert ga is not None
        assert gb is not None
        await book.post(a, ga.copy_id, good(ga), now + 3)
        await book.post(b, gb.copy_id, good(gb), now + 4)
        now += 5
    for i in range(jobs):  # still waiting for nodes when the cycle runs
        subject = {"run_id": "r2", "w": i, "hotkey": f"h{now}"}
        await book.enqueue(now, subject=subject, wait_ms=QUEUED_WAIT_MS)
    return now


async def _cycle(book: Book, now: int) -> None:
    """One register → lease → result cycle of two new nodes on a new job (the second one
    young), and the reaper's calls."""
    job = await book.enqueue(now, subject={"run_id": "r3", "w": now, "hotkey": "hot"})
    a, _ = await book.node(now - OLD, handle=f"x{now}", network=NET_A)
    b, _ = await book.node(now, handle=f"y{now}", network=NET_B)
    ga = await book.lease(a, now + 1, network=NET_A)
    gb = await book.lease(b, now + 2, network=NET_B)
    assert ga is not None
    assert gb is not None
    await book.post(a, ga.copy_id, good(ga), now + 3)
    status, reply = await book.post(b, gb.copy_id, good(gb), now + 4)
    assert (status, reply["job_state"]) == (200, "settled"), (job, reply)
    await book.db.write(next_deadline_ms)
    await book.expire(now + 5)
    await book.fallback(now + 5)


async def _traced(db: Database, on: Callable[[sqlite3.Connection], None]) -> None:
    await db.write(on)
    await db.read(on)


def _offences(conn: sqlite3.Connection, statement: str) -> list[str]:
    plan = [str(row[3]) for row in conn.execute(f"EXPLAIN QUERY PLAN {statement}")]
    limited = " LIMIT " in statement
    ordered_walk = limited and not any("TEMP B-TREE" in line for line in plan)
    bounded = any(text in statement for text in BOUNDED_OTHERWISE)
    offences = []
    for line in plan:
        if FULL_SCAN.match(line):
            offences.append(f"full scan: {line}")
        elif INDEX_WALK.match(line) and not limited:
            offences.append(f"index walk without a LIMIT: {line}")
        elif STATE_SEARCH.search(line) and not (ordered_walk or bounded):
            offences.append(f"a whole state searched: {line}")
    return offences


async def test_every_statement_of_the_hot_path_is_bounded_by_the_work_at_hand(
    db: Database,
) -> None:
    book = Book(db, settings=DEFAULT_SETTINGS)
    now = await _history(book, 20, T0)
    statements: list[str] = []
    await _traced(book.db, lambda c: c.set_trace_callback(statements.append))
    await _cycle(book, now + LEASE_SPAN)
    await _traced(book.db, lambda c: c.set_trace_callback(None))
    dml = [s for s in dict.fromkeys(statements) if s.lstrip().startswith(("SELECT", "UPDATE"))]
    assert len(dml) > 15, dml  # the whole cycle was traced
    for part in ("mint_network = ", "disabled_until_ms > ", "n.account = ", "n.created_ms > "):
        assert any(part in s for s in dml), part  # the pairing and minting reads were traced

    def check(conn: sqlite3.Connection) -> dict[str, list[str]]:
        found = {s: _offences(conn, s) for s in dml}
        return {" ".join(s.split())[:200]: o for s, o in found.items() if o}

    assert await book.db.read(check) == {}


async def _work(tmp_path: Path, jobs: int) -> int:
    """SQLite VM instructions (in units of :data:`STEP`) of one :func:`_cycle` after a history
    of ``jobs`` settled and ``jobs`` queued jobs, in a database of its own."""
    ticks = [0]

    def tick() -> int:
        ticks[0] += 1
        return 0

    async with open_database(tmp_path / f"{jobs}.db", wall_clock=FixedClock(0.0)) as db:
        book = Book(db, settings=DEFAULT_SETTINGS)
        now = await _history(book, jobs, T0)
        await _traced(db, lambda c: c.set_progress_handler(tick, STEP))
        await _cycle(book, now + LEASE_SPAN)
        await _traced(db, lambda c: c.set_progress_handler(None, STEP))
    return ticks[0]


async def test_a_cycle_costs_the_same_over_ten_times_the_history(tmp_path: Path) -> None:
    small, large = await _work(tmp_path, 20), await _work(tmp_path, 200)
    assert small > 0
    assert large <= small * 1.2, (small, large)
