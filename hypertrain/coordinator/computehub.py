"""The compute network's live part inside the daemon: book settings, events and wake-ups.

The book (:mod:`hypertrain.compute`) is the state; this hub only connects its transactions to
the tasks that wait on them. :meth:`ComputeHub.publish` is the one place that does it: every
caller of a book transaction hands it the events the transaction returned, and it

1. sends each on ``/v1/events`` as kind ``compute`` with ``{"kind": <book event kind>,
   ...payload}``, in order;
2. wakes exactly the waiters those events concern (:func:`waiters_of`, from the event kinds):

   - lease long polls wait on :data:`WORK`: woken when a copy may have become leasable: a
     step enqueued or a busy copy given back (``queued``), a third copy (``split``), a
     replacement for an expired copy (``expired`` with ``replaced``). Not all of them: one
     poll per new copy (:func:`new_copies`), the longest waiting first, so a new step wakes
     two polls, not every node's. Each wake carries how many polls were waiting then: a poll
     woken for a copy its node may not take (it holds the step's other copy, say) hands the
     wake on to the next (:meth:`ComputeHub.hand_on`), at most that many times, so a copy
     nobody waiting can take costs what waking them all did, and no more;
   - the lease reaper waits on :data:`TIMERS` for the earliest deadline: woken when a new one
     may be earlier: a lease granted (``lease``) and every newly queued copy above (its step's
     wait window);
   - the fallback pool waits on :data:`FALLBACK`: woken when a step went to the trusted
     evaluator (``fallback``).

   The other kinds (``register``, ``result``, ``accepted``, ``strike``, ``settled``, ``trace``)
   wake nobody: they make no copy leasable, set no earlier deadline and send nothing to the
   fallback.

:meth:`ComputeHub.close` (daemon shutdown) makes every waiter return ``Stopping``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

import attrs

from hypertrain.compute.model import ComputeSettings, Event, EventKind
from hypertrain.coordinator.events import EventHub
from hypertrain.coordinator.settings import CoordinatorSettings
from nurseries import KeyedWaiter

__all__ = ["FALLBACK", "SSE_KIND", "TIMERS", "WORK", "ComputeHub", "new_copies", "waiters_of"]

WORK: Final = "work"
TIMERS: Final = "timers"
FALLBACK: Final = "fallback"
SSE_KIND: Final = "compute"

_NEW_COPY: Final = frozenset({WORK, TIMERS})
_NOBODY: Final[frozenset[str]] = frozenset()


def new_copies(kind: EventKind, payload: Mapping[str, Any]) -> int:
    """How many copies one book event made leasable (module doc): a ``queued`` event says
    (``copies``), a third copy or a replaced expired copy is one."""
    if kind == "queued":
        return int(payload["copies"])
    if kind == "split" or (kind == "expired" and payload["replaced"]):
        return 1
    return 0


def waiters_of(kind: EventKind, payload: Mapping[str, Any]) -> frozenset[str]:
    """The waiter keys one book event concerns (module doc)."""
    if kind in ("queued", "split") or (kind == "expired" and payload["replaced"]):
        return _NEW_COPY
    if kind == "lease":
        return frozenset({TIMERS})
    if kind == "fallback":
        return frozenset({FALLBACK})
    return _NOBODY


@attrs.define(eq=False)
class ComputeHub:
    """See the module doc."""

    settings: ComputeSettings
    events: EventHub
    waiter: KeyedWaiter[str, int] = attrs.field(factory=KeyedWaiter)
    """Keyed by :data:`WORK`, :data:`TIMERS`, :data:`FALLBACK`; a :data:`WORK` wake's value is
    the hops it has left (module doc), the others' 0."""

    @classmethod
    def from_settings(cls, settings: CoordinatorSettings, events: EventHub) -> ComputeHub:
        return cls(
            ComputeSettings(credit=settings.compute_credit, wait_ms=settings.compute_wait_ms),
            events,
        )

    def publish(self, events: Iterable[Event]) -> None:
        """Publish the book's events and wake the waiters they concern (module doc)."""
        wake: set[str] = set()
        copies = 0
        for kind, payload in events:
            self.events.publish(SSE_KIND, {"kind": kind, **payload})
            wake |= waiters_of(kind, payload)
            copies += new_copies(kind, payload)
        for key in sorted(wake):
            if key == WORK:
                self.waiter.notify(WORK, self.waiter.waiting(WORK), limit=copies)
            else:
                self.waiter.notify(key, 0)

    def hand_on(self, hops: int) -> None:
        """A lease poll woken with ``hops`` could not take the new copy: wake the next poll
        with one hop fewer (none when ``hops`` is spent)."""
        if hops > 1:
            self.waiter.notify(WORK, hops - 1, limit=1)

    def close(self) -> None:
        self.waiter.close()
