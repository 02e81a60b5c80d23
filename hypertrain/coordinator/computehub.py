"""The compute network's live part inside the daemon: book settings, events and wake-ups.

The book (:mod:`hypertrain.compute`) is the state; this hub only connects its transactions to
the tasks that wait on them. :meth:`ComputeHub.publish` is the one place that does it: every
caller of a book transaction hands it the events the transaction returned, and it

1. sends each on ``/v1/events`` as kind ``compute`` with ``{"kind": <book event kind>,
   ...payload}``, in order;
2. wakes exactly the waiters those events concern (:func:`waiters_of`, from the event kinds):

   - lease long polls wait on :data:`WORK` (each tagged with its :class:`~hypertrain.compute.
     LeaseAsk`): a copy may have become leasable when a step was enqueued or a busy copy given
     back (``queued``), with a third copy (``split``), a replacement for an expired copy
     (``expired`` with ``replaced``), a grant whose client never got it, queued again
     (``returned`` with ``requeued``): :func:`new_copies` counts them. :meth:`ComputeHub.write`
     runs a book transaction and, IN THAT SAME TRANSACTION, hands its new copies to the held
     polls, the longest waiting first (:func:`~hypertrain.compute.hand_out`: each gets what
     its own lease would get); each granted poll is woken with its grant and only answers it.
     A transaction run without the hub (``db.write`` then :meth:`~ComputeHub.publish`) wakes
     one poll per new copy, the longest waiting first, to run its own lease transaction: each
     such wake carries how many polls were waiting then, and a poll woken for a copy its node
     may not take hands it on to the next (:meth:`ComputeHub.hand_on`), at most that many
     times. Either way a new step wakes two polls, not every node's;
   - the lease reaper waits on :data:`TIMERS` for the earliest deadline: woken when a new one
     may be earlier: a lease granted (``lease``) and every newly queued copy above (its step's
     wait window). :meth:`ComputeHub.write` wakes it only when the book's next deadline,
     read in the transaction, is earlier than the wake-up the reaper planned
     (:attr:`ComputeHub.timers_plan_ms`): a lease whose deadline lies beyond it costs no
     reaper pass. Only the parts of that deadline the transaction's events may have moved
     earlier are read (:func:`deadlines_of`): a lease, its leases' part
     (:func:`~hypertrain.compute.lease_due_ms`); a newly leasable copy, the waiting windows'
     part (:func:`~hypertrain.compute.wait_due_ms`). The other part can only have moved later
     (a lease takes a copy out of the queue, ending no window sooner), so it is no earlier than
     the plan, or the reaper was woken already by whatever made it earlier;
   - the fallback pool waits on :data:`FALLBACK`: woken when a step went to the trusted
     evaluator (``fallback``), or the beacon drew a settled step for a trusted re-score
     (``audit`` with ``change`` ``drawn``).

   The other kinds (``register``, ``result``, ``accepted``, ``strike``, ``settled``, ``trace``,
   a ``returned`` not queued again, and ``audit`` of a re-score's outcome) wake nobody: they
   make no copy leasable, set no earlier deadline and send nothing to the fallback.

:meth:`ComputeHub.close` (daemon shutdown) makes every waiter return ``Stopping``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, TypeVar, TypeVarTuple

import attrs

from hypertrain.compute import LeaseAsk, LeaseGrant, hand_out, lease_due_ms, wait_due_ms
from hypertrain.compute.model import ComputeSettings, Event, EventKind
from hypertrain.coordinator.events import EventHub
from hypertrain.coordinator.settings import CoordinatorSettings
from hypertrain.store import Database
from nurseries import KeyedWaiter, Parked, SystemClock, WaitResult, WallClock

__all__ = [
    "FALLBACK",
    "SSE_KIND",
    "TIMERS",
    "WORK",
    "ComputeHub",
    "Wake",
    "deadlines_of",
    "new_copies",
    "waiters_of",
]

WORK: Final = "work"
TIMERS: Final = "timers"
FALLBACK: Final = "fallback"
SSE_KIND: Final = "compute"

Wake = int | LeaseGrant
"""A :data:`WORK` wake's value: the copy granted to the poll, or (woken by a transaction run
without the hub) the hops it has left to run its own lease (module doc)."""

Booked = TypeVar("Booked", bound="list[Event] | tuple[Any, ...]")
"""What a book transaction returns: its events, or a tuple whose last item is its events."""
Ts = TypeVarTuple("Ts")
_Handed = tuple[list[tuple[int, LeaseGrant]], list[Event]]

_NEW_COPY: Final = frozenset({WORK, TIMERS})
_NOBODY: Final[frozenset[str]] = frozenset()
_DUE: Final[dict[str, Callable[[sqlite3.Connection], int | None]]] = {
    "leases": lease_due_ms,
    "windows": wait_due_ms,
}
"""The parts of the book's next deadline, by name (:func:`deadlines_of`)."""


def new_copies(kind: EventKind, payload: Mapping[str, Any]) -> int:
    """How many copies one book event made leasable (module doc): a ``queued`` event says
    (``copies``), a third copy, a replaced expired copy or a returned one queued again is one."""
    if kind == "queued":
        return int(payload["copies"])
    if kind == "split" or (kind == "expired" and payload["replaced"]):
        return 1
    if kind == "returned" and payload["requeued"]:
        return 1
    return 0


def deadlines_of(kind: EventKind, payload: Mapping[str, Any]) -> frozenset[str]:
    """The parts of the book's next deadline one event may have moved earlier (module doc):
    ``"leases"`` for a lease, ``"windows"`` for a newly leasable copy; none for the others
    (exactly the events that concern :data:`TIMERS`)."""
    if kind == "lease":
        return frozenset({"leases"})
    if new_copies(kind, payload):
        return frozenset({"windows"})
    return _NOBODY


def waiters_of(kind: EventKind, payload: Mapping[str, Any]) -> frozenset[str]:
    """The waiter keys one book event concerns (module doc)."""
    if kind in ("queued", "split") or (kind == "expired" and payload["replaced"]):
        return _NEW_COPY
    if kind == "returned" and payload["requeued"]:
        return _NEW_COPY
    if kind == "lease":
        return frozenset({TIMERS})
    if kind == "fallback" or (kind == "audit" and payload["change"] == "drawn"):
        return frozenset({FALLBACK})
    return _NOBODY


@attrs.define(eq=False)
class ComputeHub:
    """See the module doc."""

    settings: ComputeSettings
    events: EventHub
    db: Database | None = attrs.field(default=None, kw_only=True)
    """The book's database (:meth:`write`; a hub without one only publishes)."""
    wall: WallClock = attrs.field(factory=SystemClock, kw_only=True)
    timers_plan_ms: int | None = attrs.field(default=None, kw_only=True)
    """The wall ms the reaper sleeps toward (set just before it parks); None: not known."""
    waiter: KeyedWaiter[str, Wake] = attrs.field(factory=KeyedWaiter)
    """Keyed by :data:`WORK`, :data:`TIMERS`, :data:`FALLBACK`; a :data:`WORK` wake's value is
    a :data:`Wake` (module doc), the others' 0."""

    @classmethod
    def from_settings(
        cls, settings: CoordinatorSettings, events: EventHub, db: Database, wall: WallClock
    ) -> ComputeHub:
        return cls(
            ComputeSettings(
                credit=settings.compute_credit,
                wait_ms=settings.compute_wait_ms,
                audit_permille=settings.compute_audit_permille,
                pair_min_age_ms=settings.compute_pair_min_age_s * 1000,
                mint_per_minute=settings.compute_mint_per_minute,
                probation_answers=settings.compute_probation_answers,
            ),
            events,
            db=db,
            wall=wall,
        )

    async def write(self, fn: Callable[[sqlite3.Connection, *Ts], Booked], *args: *Ts) -> Booked:
        """Run the book transaction ``fn(conn, *args)``, hand the copies it made leasable to
        the held lease polls in the same transaction, publish its events and the grants', and
        wake each granted poll with its grant (module doc). Returns what ``fn`` returned."""
        held: list[Parked[Wake]] = []

        def booked(conn: sqlite3.Connection, *args: *Ts) -> tuple[Booked, _Handed, bool]:
            result = fn(conn, *args)
            events = _events_of(result)
            copies = sum(new_copies(kind, payload) for kind, payload in events)
            if copies:
                held.extend(p for p in self.waiter.parked(WORK) if isinstance(p.tag, LeaseAsk))
            handed: _Handed = ([], [])
            if held:
                asks = [p.tag for p in held if isinstance(p.tag, LeaseAsk)]
                now_ms = int(self.wall.now() * 1000)
                handed = hand_out(conn, asks, copies, now_ms=now_ms, settings=self.settings)
            moved = frozenset().union(*(deadlines_of(k, p) for k, p in [*events, *handed[1]]))
            return result, handed, bool(moved) and self._earlier_than_planned(conn, moved)

        if self.db is None:
            raise RuntimeError("ComputeHub.write needs the book's database (from_settings)")
        result, (grants, granted), timers = await self.db.write(booked, *args)
        # No checkpoint since the transaction: every poll in ``held`` is still parked.
        self._publish([*_events_of(result), *granted], work=False, timers=timers)
        for index, grant in grants:
            self.waiter.notify_parked(WORK, held[index], grant)
        return result

    def _earlier_than_planned(self, conn: sqlite3.Connection, moved: frozenset[str]) -> bool:
        """Whether a part of the book's next deadline in ``moved`` is now earlier than the
        reaper's plan (read only when there is a plan; module doc)."""
        plan = self.timers_plan_ms
        if plan is None:
            return True
        dues = (_DUE[part](conn) for part in sorted(moved))
        return any(due is not None and due < plan for due in dues)

    def publish(self, events: Iterable[Event]) -> None:
        """Publish the book's events and wake the waiters they concern (module doc)."""
        self._publish(events, work=True, timers=True)

    def _publish(self, events: Iterable[Event], *, work: bool, timers: bool) -> None:
        wake: set[str] = set()
        copies = 0
        for kind, payload in events:
            self.events.publish(SSE_KIND, {"kind": kind, **payload})
            wake |= waiters_of(kind, payload)
            copies += new_copies(kind, payload)
        for key in sorted(wake):
            if key == WORK:
                if work:
                    self.waiter.notify(WORK, self.waiter.waiting(WORK), limit=copies)
            elif key == TIMERS:
                if timers:
                    self.waiter.notify(TIMERS, 0)
            else:
                self.waiter.notify(key, 0)

    def hand_on(self, hops: int) -> None:
        """A lease poll woken with ``hops`` could not take the new copy: wake the next poll
        with one hop fewer (none when ``hops`` is spent)."""
        if hops > 1:
            self.waiter.notify(WORK, hops - 1, limit=1)

    async def hold(self, ask: LeaseAsk, deadline: float) -> WaitResult[Wake]:
        """Park a lease poll that got nothing until a copy is handed to it (or it is woken to
        lease; module doc), its Trio ``deadline``, or :meth:`close`."""
        return await self.waiter.wait(WORK, deadline=deadline, tag=ask)

    def close(self) -> None:
        self.waiter.close()


def _events_of(result: list[Event] | tuple[Any, ...]) -> list[Event]:
    """The events of a book transaction's result (:data:`Booked`)."""
    events: list[Event] = result[-1] if isinstance(result, tuple) else result
    return events
