"""ComputeHub.write wakes the lease reaper only when the book's next deadline is now earlier
than the reaper's plan, and reads only the parts of that deadline the transaction's events may
have moved earlier (issue 17 goal 3): a lease reads its leases' part, never the waiting windows.

A real migrated database and the book's own transactions; virtual time, so a reaper that is not
woken simply times out at its deadline.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from hypertrain.compute import DEFAULT_SETTINGS, Event, LeaseGrant, enqueue_step, lease
from hypertrain.coordinator.computehub import TIMERS, ComputeHub, deadlines_of, waiters_of
from hypertrain.coordinator.events import EventHub
from hypertrain.store import Database, open_database
from nurseries import FixedClock, Notified
from tests.compute.support import LEASE_SPAN, T0, Book, inputs
from tests.coordinator.test_computehub import WAKES

WINDOW_QUERY = "SELECT wait_deadline_ms FROM compute_jobs"
"""The waiting windows' part of the next deadline (``wait_due_ms``)."""
LEASE_QUERY = "SELECT deadline_ms + 1 FROM compute_copies"
"""The leases' part of the next deadline (``lease_due_ms``)."""


@pytest.mark.parametrize(("event", "wakes"), WAKES, ids=[k for (k, _), _ in WAKES])
def test_an_event_moves_a_deadline_part_exactly_when_it_concerns_the_reaper(
    event: Event, wakes: set[str]
) -> None:
    assert bool(deadlines_of(*event)) == (TIMERS in waiters_of(*event)) == (TIMERS in wakes)


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    async with open_database(tmp_path / "state.db", wall_clock=FixedClock(0.0)) as database:
        yield database


async def _traced(
    hub: ComputeHub, db: Database, fn: Callable[[sqlite3.Connection], list[Event] | tuple[Any, ...]]
) -> tuple[bool, list[str]]:
    """Run ``fn`` through ``hub.write`` with the reaper parked: (was it woken, statements)."""
    statements: list[str] = []
    woken: list[bool] = []

    async def reaper() -> None:
        waited = await hub.waiter.wait(TIMERS, deadline=trio.current_time() + 1)
        woken.append(isinstance(waited, Notified))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reaper)
        await trio.testing.wait_all_tasks_blocked()
        await db.write(lambda c: c.set_trace_callback(statements.append))
        try:
            await hub.write(fn)
        finally:
            await db.write(lambda c: c.set_trace_callback(None))
    return woken[0], statements


def _enqueue(conn: sqlite3.Connection, *, w: int, wait_ms: int) -> tuple[str, list[Event]]:
    return enqueue_step(
        conn,
        challenge_id="delta-loss",
        subject={"run_id": "r1", "w": w, "hotkey": "h1"},
        step="public",
        inputs=inputs(),
        now_ms=T0,
        wait_ms=wait_ms,
    )


async def _lease(
    hub: ComputeHub, db: Database, book: Book, plan_ms: int
) -> tuple[bool, list[str], LeaseGrant]:
    """A node leases at ``T0 + 1`` (its deadline ``T0 + 1 + LEASE_SPAN``) with the reaper's
    plan at ``plan_ms`` and a step whose window ends long after either."""
    node, _ = await book.node(T0)
    await db.write(partial(_enqueue, w=0, wait_ms=10 * LEASE_SPAN))
    hub.timers_plan_ms = plan_ms
    grants: list[LeaseGrant] = []

    def leased(conn: sqlite3.Connection) -> list[Event]:
        grant, events = lease(conn, node, capabilities=["delta-loss"], hardware=None, now_ms=T0 + 1)
        assert grant is not None
        grants.append(grant)
        return events

    woken, statements = await _traced(hub, db, leased)
    return woken, statements, grants[0]


def _hub(db: Database) -> ComputeHub:
    return ComputeHub(DEFAULT_SETTINGS, EventHub(), db=db)


async def test_a_lease_due_before_the_plan_wakes_the_reaper(
    db: Database, autojump_clock: trio.testing.MockClock
) -> None:
    hub = _hub(db)
    woken, statements, grant = await _lease(hub, db, Book(db), plan_ms=T0 + 2 * LEASE_SPAN)
    assert grant.deadline_ms == T0 + 1 + LEASE_SPAN
    assert woken
    assert any(s.startswith(LEASE_QUERY) for s in statements)


async def test_a_lease_due_after_the_plan_wakes_nobody_and_reads_no_window(
    db: Database, autojump_clock: trio.testing.MockClock
) -> None:
    hub = _hub(db)
    woken, statements, _ = await _lease(hub, db, Book(db), plan_ms=T0 + LEASE_SPAN)
    assert not woken
    assert any(s.startswith(LEASE_QUERY) for s in statements)
    assert not any(s.startswith(WINDOW_QUERY) for s in statements)


async def test_a_window_ending_before_the_plan_wakes_the_reaper(
    db: Database, autojump_clock: trio.testing.MockClock
) -> None:
    hub = _hub(db)
    hub.timers_plan_ms = T0 + 30_000
    later, _ = await _traced(hub, db, partial(_enqueue, w=0, wait_ms=40_000))
    sooner, statements = await _traced(hub, db, partial(_enqueue, w=1, wait_ms=20_000))
    assert (later, sooner) == (False, True)
    assert any(s.startswith(WINDOW_QUERY) for s in statements)
