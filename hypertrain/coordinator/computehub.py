"""The compute network's live part inside the daemon: book settings, events and wake-ups.

The book (:mod:`hypertrain.compute`) is the state; this hub only connects its transactions to
the tasks that wait on them. :meth:`ComputeHub.publish` is the one place that does it: every
caller of a book transaction hands it the events the transaction returned, and it

1. sends each on ``/v1/events`` as kind ``compute`` with ``{"kind": <book event kind>,
   ...payload}``, in order;
2. wakes exactly the waiters those events concern (:func:`waiters_of`, from the event kinds):

   - lease long polls wait on :data:`WORK`: woken when a copy may have become leasable: a
     step enqueued or a busy copy given back (``queued``), a third copy (``split``), a
     replacement for an expired copy (``expired`` with ``replaced``);
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

__all__ = ["FALLBACK", "SSE_KIND", "TIMERS", "WORK", "ComputeHub", "waiters_of"]

WORK: Final = "work"
TIMERS: Final = "timers"
FALLBACK: Final = "fallback"
SSE_KIND: Final = "compute"

_NEW_COPY: Final = frozenset({WORK, TIMERS})
_NOBODY: Final[frozenset[str]] = frozenset()


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
    waiter: KeyedWaiter[str, None] = attrs.field(factory=KeyedWaiter)

    @classmethod
    def from_settings(cls, settings: CoordinatorSettings, events: EventHub) -> ComputeHub:
        return cls(
            ComputeSettings(credit=settings.compute_credit, wait_ms=settings.compute_wait_ms),
            events,
        )

    def publish(self, events: Iterable[Event]) -> None:
        """Publish the book's events and wake the waiters they concern (module doc)."""
        wake: set[str] = set()
        for kind, payload in events:
            self.events.publish(SSE_KIND, {"kind": kind, **payload})
            wake |= waiters_of(kind, payload)
        for key in sorted(wake):
            self.waiter.notify(key)

    def close(self) -> None:
        self.waiter.close()
