"""The daemon's aggregator service: merge each round at ``d_upload``, open the next (issue 7).

For every running run, the newest open round ``w`` is *due* when round ``w + 1`` is not open,
round ``w`` was not merged yet, and ``w == 0`` or round ``w - 1`` was merged by this daemon
(a round opened by an external aggregator through ``POST .../aggregate`` leaves the chain to
that aggregator). Once D >= d_upload(w) the service runs the step of
:mod:`hypertrain.coordinator.flows.aggregation`: read, compute, store the objects, one write. Round
``w + 1`` opens unless the run config's ``total_rounds`` says round ``w`` is the last one (it is
still merged, so the final theta is stored).

Everything is re-derived from the database on every pass, so a restarted daemon resumes where
it stopped: a step whose objects were stored but whose write did not happen is recomputed to the
same bytes and written once. Each pass publishes ``round_state`` ``{run_id, w, state:
"aggregated", D, tape_key, theta_hash, opened}``. Between passes it waits for the earliest due
``d_upload`` (else the next beacon round), woken by ingested rounds and bounded by the wall-clock
deadline of that round plus :data:`WAIT_MARGIN`, and by :data:`IDLE_WAIT`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final

import attrs
import trio

from hypertrain.aggregator.step import compute_step
from hypertrain.coordinator.context import Coordinator
from hypertrain.coordinator.flows.aggregation import (
    Due,
    Step,
    commit_step,
    due_rounds,
    step_inputs,
)
from hypertrain.store import ObjectStore
from hypertrain.store.keys import ObjectInfo
from nurseries import RunSync, run_inline

__all__ = ["IDLE_WAIT", "WAIT_MARGIN", "AggregatorService"]

log = logging.getLogger(__name__)

WAIT_MARGIN: Final = 5.0
"""Seconds past a round's wall-clock due time the service waits for it to be ingested."""
IDLE_WAIT: Final = 30.0
"""The longest wait between two passes (a run unpaused meanwhile is seen within it)."""


@attrs.define(eq=False)
class AggregatorService:
    """The service (module doc); ``after_store`` is called between the objects and the write
    (tests inject a crash there)."""

    ctx: Coordinator
    after_store: Callable[[Step], None] | None = None
    run_sync: RunSync = run_inline
    """Where the merge's CPU work runs (the daemon: a worker thread with the real clock)."""

    async def run(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Merge due rounds forever (module doc); reports the round D it starts at."""
        task_status.started(self.ctx.beacon.latest)
        while True:
            due = await self.ctx.db.read(due_rounds)
            latest = self.ctx.beacon.latest
            for item in due:
                if latest >= item.d_upload:
                    await self.step(item)
            waiting = [item.d_upload for item in due if item.d_upload > latest]
            target = min(waiting, default=latest + 1)
            deadline = min(
                self.ctx.beacon.deadline_of(target) + WAIT_MARGIN, trio.current_time() + IDLE_WAIT
            )
            with trio.move_on_at(deadline):
                await self.ctx.beacon.wait_round(target)

    async def step(self, due: Due) -> None:
        """Merge round ``due.w`` and open the next one (exactly once)."""
        ctx = self.ctx
        inputs = await ctx.db.read(step_inputs, due.run_id, due.w)
        coord = ctx.coord_keypair()
        step = await compute_step(ctx.objects.get, inputs.merge_inputs(), coord, self.run_sync)
        stored = await store_objects(ctx.objects, step)
        if self.after_store is not None:
            self.after_store(step)
        now = int(ctx.wall.now())
        opened = await ctx.db.write(commit_step, step, stored, coord, due.open_next, now)
        log.info(
            "run %s round %d aggregated: tape %s, theta %s, opened %s",
            due.run_id,
            due.w,
            step.tape_key,
            step.theta_hash,
            None if opened is None else opened.w,
        )
        ctx.events.publish(
            "round_state",
            {
                "run_id": due.run_id,
                "w": due.w,
                "state": "aggregated",
                "D": ctx.beacon.latest,
                "tape_key": step.tape_key,
                "theta_hash": step.theta_hash,
                "opened": None if opened is None else opened.w,
            },
        )


async def store_objects(objects: ObjectStore, step: Step) -> tuple[ObjectInfo, ...]:
    """Store the step's objects (idempotent: content addressed)."""
    return tuple([await objects.put_bytes(blob) for blob in step.objects])
