"""The daemon's aggregator service: merge each round at ``d_upload``, open the next (issue 7).

For every running run, the newest open round ``w`` is *due* when round ``w + 1`` is not open,
round ``w`` was not merged yet, and ``w == 0`` or round ``w - 1`` was merged by this daemon
(a round opened by an external aggregator through ``POST .../aggregate`` leaves the chain to
that aggregator). Once D >= d_upload(w) the service runs the step of
:mod:`hypertrain.coordinator.aggregation`: read, compute, store the objects, one write. Round
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
import sqlite3
from collections.abc import Callable
from typing import Final

import attrs
import trio

from hypertrain.coordinator.aggregation import (
    Step,
    commit_step,
    compute_step,
    get_aggregation,
    step_inputs,
    store_objects,
)
from hypertrain.coordinator.context import Coordinator
from hypertrain.coordinator.roundstore import get_round_row
from hypertrain.coordinator.runs import get_run, list_runs, next_round_w
from nurseries import RunSync, run_inline

__all__ = ["IDLE_WAIT", "WAIT_MARGIN", "AggregatorService", "Due", "due_rounds"]

log = logging.getLogger(__name__)

WAIT_MARGIN: Final = 5.0
"""Seconds past a round's wall-clock due time the service waits for it to be ingested."""
IDLE_WAIT: Final = 30.0
"""The longest wait between two passes (a run unpaused meanwhile is seen within it)."""


@attrs.frozen
class Due:
    """A round the service will merge once D >= ``d_upload``."""

    run_id: str
    w: int
    d_upload: int
    open_next: bool


def due_rounds(conn: sqlite3.Connection) -> list[Due]:
    """Every running run's newest round that the service merges (module doc)."""
    due = []
    for run_id, status in list_runs(conn):
        w = next_round_w(conn, run_id) - 1
        if status != "running" or w < 0 or get_aggregation(conn, run_id, w) is not None:
            continue
        if w > 0 and get_aggregation(conn, run_id, w - 1) is None:
            continue
        row = get_round_row(conn, run_id, w)
        assert row is not None
        config = get_run(conn, run_id).config
        total = None if config is None else config.total_rounds
        due.append(Due(run_id, w, row.deadlines.d_upload, total is None or w + 1 < total))
    return due


@attrs.define(eq=False)
class AggregatorService:
    """The service (module doc); ``after_store`` is called between the objects and the write
    (tests inject a crash there)."""

    ctx: Coordinator
    after_store: Callable[[Step], None] | None = None
    run_sync: RunSync = run_inline
    """Where the merge's CPU work runs (the daemon: a worker thread with the real clock)."""

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Merge due rounds forever (module doc)."""
        task_status.started()
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
