"""The lease reaper: expires leases at their deadlines and hands ended windows to the fallback.

Audit leases (:mod:`hypertrain.coordinator.flows.worker`) expire too: a job whose lease ran
past ``lease_expires_round`` (a drand round) is requeued, and its ``audit`` event
``{change: "expired"}`` published; the next such expiry is read from the database at every pass
and its wall-clock time bounds the sleep.

A daemon service. Each pass, in one write each: :func:`~hypertrain.compute.expire_due` (a copy
leased past ``deadline`` is expired, without a strike, and replaced) and
:func:`~hypertrain.compute.fallback_due` (a step whose wait window ended with a copy still
unleased goes to the fallback pool). Then it sleeps until the book's next deadline
(:func:`~hypertrain.compute.next_deadline_ms`, read from the database, so a restarted daemon
rebuilds every timer from the stored deadlines rather than resetting them), woken early on
:data:`~hypertrain.coordinator.computehub.TIMERS` when a published event may have set an
earlier one (:meth:`~hypertrain.coordinator.computehub.ComputeHub.publish`: a lease, a newly
queued copy; :meth:`~hypertrain.coordinator.computehub.ComputeHub.write` only when the book's
next deadline is now earlier than the wake-up the reaper planned, ``timers_plan_ms``, so a
lease 90 s out does not cost a pass), and at most :data:`IDLE_WAIT` seconds. Its
transactions run through :meth:`~hypertrain.coordinator.computehub.ComputeHub.write`: a
replaced copy is handed to a held lease poll in the same transaction, a step sent to the
fallback wakes the pool.
Deadlines are wall-clock milliseconds; the sleep is converted to the Trio clock at each pass.
"""

from __future__ import annotations

import logging
import math
from functools import partial
from typing import Final

import attrs
import trio

from hypertrain.compute import expire_due, fallback_due, next_deadline_ms
from hypertrain.coordinator.computehub import TIMERS
from hypertrain.coordinator.context import Coordinator
from hypertrain.coordinator.flows.worker import expire_leases
from hypertrain.coordinator.tables.audits import next_lease_expiry
from nurseries import Stopping

__all__ = ["AUDIT_RECHECK", "IDLE_WAIT", "LeaseReaper"]

log = logging.getLogger(__name__)

IDLE_WAIT: Final = 60.0
"""The longest sleep between two passes (seconds)."""
AUDIT_RECHECK: Final = 1.0
"""The shortest sleep before an audit lease expiry is looked at again (seconds)."""


@attrs.define(eq=False)
class LeaseReaper:
    """The service (module doc)."""

    ctx: Coordinator

    def _now_ms(self) -> int:
        return int(self.ctx.wall.now() * 1000)

    async def reap(self) -> None:
        """One pass: expire what is due, send ended windows to the fallback."""
        hub = self.ctx.compute
        now = self._now_ms()
        await hub.write(partial(expire_due, settings=hub.settings), now)
        await hub.write(fallback_due, now)
        for event in await self.ctx.db.write(expire_leases):
            log.info("audit job %s: lease expired, requeued", event["job_id"])
            self.ctx.events.publish("audit", event)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        hub = self.ctx.compute
        task_status.started()
        while True:
            await self.reap()
            audit_due = await self.ctx.db.read(next_lease_expiry)
            # The book's deadlines last: from this snapshot to parking there is no checkpoint,
            # so a deadline committed after it finds the plan set and wakes us if earlier.
            due = await self.ctx.db.read(next_deadline_ms)
            wait = IDLE_WAIT if due is None else (due - self._now_ms()) / 1000
            deadline = trio.current_time() + min(max(wait, 0.0), IDLE_WAIT)
            if audit_due is not None:
                expiry = self.ctx.beacon.deadline_of(audit_due + 1)
                # A round due by the wall clock but not ingested yet: look again a little later.
                deadline = min(deadline, max(expiry, trio.current_time() + AUDIT_RECHECK))
            hub.timers_plan_ms = self._now_ms() + math.ceil((deadline - trio.current_time()) * 1000)
            if isinstance(await hub.waiter.wait(TIMERS, deadline=deadline), Stopping):
                await trio.sleep_forever()  # the daemon is stopping: cancelled right after
