"""The compute network's live part inside the daemon: book settings, wake-ups and events.

The book (:mod:`hypertrain.compute`) is the state; this hub only connects its transactions to
the tasks that wait on them:

- lease long polls wait on :data:`WORK` and are woken by :meth:`ComputeHub.work_changed`
  whenever a copy may have become leasable (a step enqueued, a copy expired or released, a
  third copy queued);
- the lease reaper waits on :data:`TIMERS` for the earliest deadline and is woken by
  :meth:`ComputeHub.timers_changed` when a new one may be earlier (a lease granted, a step
  enqueued);
- the fallback pool waits on :data:`FALLBACK` (:meth:`ComputeHub.fallback_changed`).

:meth:`ComputeHub.close` (daemon shutdown) makes every waiter return ``Stopping``.
:func:`publish_compute` sends the book's events on ``/v1/events`` as kind ``compute`` with
``{"kind": <book event kind>, ...payload}``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import attrs

from hypertrain.compute.model import ComputeSettings, Event
from hypertrain.coordinator.events import EventHub
from hypertrain.coordinator.settings import CoordinatorSettings
from nurseries import KeyedWaiter

__all__ = ["FALLBACK", "TIMERS", "WORK", "ComputeHub", "publish_compute"]

WORK: Final = "work"
TIMERS: Final = "timers"
FALLBACK: Final = "fallback"
SSE_KIND: Final = "compute"


@attrs.define(eq=False)
class ComputeHub:
    """See the module doc."""

    settings: ComputeSettings
    waiter: KeyedWaiter[str, None] = attrs.field(factory=KeyedWaiter)

    @classmethod
    def from_settings(cls, settings: CoordinatorSettings) -> ComputeHub:
        return cls(
            ComputeSettings(credit=settings.compute_credit, wait_ms=settings.compute_wait_ms)
        )

    def work_changed(self) -> None:
        self.waiter.notify(WORK)

    def timers_changed(self) -> None:
        self.waiter.notify(TIMERS)

    def fallback_changed(self) -> None:
        self.waiter.notify(FALLBACK)

    def close(self) -> None:
        self.waiter.close()


def publish_compute(hub: EventHub, events: Iterable[Event]) -> None:
    """Publish the book's events (module doc)."""
    for kind, payload in events:
        hub.publish(SSE_KIND, {"kind": kind, **payload})
