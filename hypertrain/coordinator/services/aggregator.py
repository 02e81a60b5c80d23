"""The daemon's aggregator service: merge each round at ``d_upload``, open the next (issue 7).

For every running run, the newest open round ``w`` is *due* when round ``w + 1`` is not open,
round ``w`` was not merged yet, and ``w == 0`` or round ``w - 1`` was merged by this daemon
(a round opened by an external aggregator through ``POST .../aggregate`` leaves the chain to
that aggregator). Once D >= d_upload(w) the service runs the step of
:mod:`hypertrain.coordinator.flows.aggregation`: read, compute, store the objects, one write. Round
``w + 1`` opens unless the run config's ``total_rounds`` says round ``w`` is the last one (it is
still merged, so the final theta is stored).

Merging round ``w + 1`` rolls round ``w`` back first when a miner it merged was found faulted
meanwhile (:mod:`hypertrain.coordinator.flows.rollback` states the rule): round ``w + 2`` then
opens from the corrected theta.

After the merges of a pass it finalises every round that can be final
(:class:`~hypertrain.coordinator.services.finality.Finality`: in order, at ``d_final`` once the
round's audits and disputes allow it).

Everything is re-derived from the database on every pass, so a restarted daemon resumes where
it stopped: a step whose objects were stored but whose write did not happen is recomputed to the
same bytes and written once. Each pass publishes ``round_state`` ``{run_id, w, state:
"aggregated", D, tape_key, theta_hash, opened}``. Between passes it waits for the next beacon
round, bounded by the wall-clock deadline of that round plus :data:`WAIT_MARGIN` and by
:data:`IDLE_WAIT`.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import sqlite3
from collections.abc import Callable
from typing import Final

import attrs
import trio

from hypertrain.aggregator.rollback import RollbackInputs, compute_rollback, seal_rollback
from hypertrain.aggregator.step import compute_step
from hypertrain.aggregator.tape import parse_signed_tape
from hypertrain.coordinator.context import Coordinator
from hypertrain.coordinator.flows.aggregation import (
    Due,
    Step,
    commit_step,
    due_rounds,
    get_aggregation,
    step_inputs,
)
from hypertrain.coordinator.flows.rollback import rollback_causes, rollback_rewrite
from hypertrain.coordinator.services.finality import Finality
from hypertrain.protocol.errors import Conflict
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.manifest import RunManifest
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
    finality: Finality = attrs.field()

    @finality.default
    def _finality(self) -> Finality:
        return Finality(self.ctx)

    async def run(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Merge due rounds forever (module doc); reports the round D it starts at."""
        task_status.started(self.ctx.beacon.latest)
        while True:
            due = await self.ctx.db.read(due_rounds)
            latest = self.ctx.beacon.latest
            for item in due:
                if latest >= item.d_upload:
                    try:
                        await self.step(item)
                    except Conflict as e:  # the round changed under the merge: next pass
                        log.info("run %s round %d: %s", item.run_id, item.w, e.detail)
            await self.finality.finalize_due()
            target = latest + 1  # finality may become possible at any round (a late verdict)
            deadline = min(
                self.ctx.beacon.deadline_of(target) + WAIT_MARGIN, trio.current_time() + IDLE_WAIT
            )
            with trio.move_on_at(deadline):
                await self.ctx.beacon.wait_round(target)

    async def _rollback(
        self, manifest: RunManifest, step: Step, coord: Keypair
    ) -> tuple[Callable[[sqlite3.Connection], Step] | None, tuple[ObjectInfo, ...]]:
        """When a miner merged into round ``step.w - 1`` is faulted: recompute that round and
        ``step.w`` without it (:mod:`hypertrain.coordinator.flows.rollback`, the rule); the
        step's ``rewrite`` and the stored objects, or ``(None, ())``."""
        ctx, w = self.ctx, step.w - 1
        causes = await ctx.db.read(rollback_causes, step.run_id, w)
        if not causes:
            return None, ()
        previous = await ctx.db.read(get_aggregation, step.run_id, w)
        assert previous is not None, "a cause is a merged miner"
        tape_w = parse_signed_tape(await ctx.objects.get(previous.tape_key))
        tape_w1 = parse_signed_tape(step.objects[-1])
        faulted = tuple(hotkey for hotkey, _ in causes)
        request = RollbackInputs(manifest, tape_w, tape_w1, faulted, tuple(c for _, c in causes))
        fetch = functools.partial(_fetch_with, ctx.objects, step)
        rollback = await compute_rollback(fetch, request, coord, self.run_sync)
        stored = tuple([await ctx.objects.put_bytes(blob) for blob in rollback.objects])
        envelope = seal_rollback(coord, step.run_id, rollback.body)
        log.info(
            "run %s: rolling back rounds %d and %d without %s (theta %s -> %s)",
            step.run_id,
            w,
            step.w,
            ", ".join(faulted),
            rollback.body.old_theta_hash_w2,
            rollback.body.new_theta_hash_w2,
        )
        old_tapes = (previous.tape_key, step.tape_key)
        now = ctx.beacon.latest
        return rollback_rewrite(rollback, envelope, old_tapes, causes, now), stored

    async def step(self, due: Due) -> None:
        """Merge round ``due.w`` and open the next one (exactly once); its ``aggregated``
        event says how long that took (``merge_seconds``, Trio clock)."""
        ctx = self.ctx
        started = trio.current_time()
        inputs = await ctx.db.read(step_inputs, due.run_id, due.w)
        coord = ctx.coord_keypair()
        merge = inputs.merge_inputs()
        step = await compute_step(ctx.objects.get, merge, coord, self.run_sync)
        stored = await store_objects(ctx.objects, step)
        rewrite = None
        if due.w > 0:
            rewrite, more = await self._rollback(merge.manifest, step, coord)
            stored += more
        if self.after_store is not None:
            self.after_store(step)
        now = int(ctx.wall.now())
        opened = await ctx.db.write(commit_step, step, stored, coord, due.open_next, now, rewrite)
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
                "merge_seconds": round(trio.current_time() - started, 6),
            },
        )


async def _fetch_with(objects: ObjectStore, step: Step, key: str) -> bytes:
    for blob in step.objects:
        if hashlib.sha256(blob).hexdigest() == key:
            return blob
    return await objects.get(key)


async def store_objects(objects: ObjectStore, step: Step) -> tuple[ObjectInfo, ...]:
    """Store the step's objects (idempotent: content addressed)."""
    return tuple([await objects.put_bytes(blob) for blob in step.objects])
