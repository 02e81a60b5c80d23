"""The daemon's held-out loss service: evaluate every theta of a run on the private holdout.

Each pass reads :func:`~hypertrain.coordinator.flows.heldout.pending` and, for every theta owed a
loss: opens the run's holdout once (:func:`~hypertrain.coordinator.flows.heldout.read_holdout` on
``settings.holdout_dir``, first ``settings.heldout_samples`` samples, cached per run), loads
``theta(w)`` (genesis: ``init_params``; else the stored theta-only state blob, whose
``TH(theta)`` must be the aggregation's ``theta_hash``), computes the loss, writes the
``heldout_losses`` row (write-once) and publishes ``heldout`` ``{run_id, w, loss,
theta_hash}``. Opening the holdout and computing a loss go through ``run_sync``
(``trio.to_thread.run_sync`` in production: never on the Trio thread; virtual-time tests
pass a synchronous one, since a task waiting for a worker thread looks idle to the autojump
clock, which then leaps).

A run whose holdout cannot be opened (wrong directory, tampered or missing files, no salt,
``seq_len`` mismatch) gets one warning naming the problem and keeps null losses until the
daemon restarts; a theta that cannot be loaded is warned about once and skipped. Nothing here
stops the daemon. Between passes the service waits for the next beacon round, bounded by its
wall-clock deadline plus :data:`WAIT_MARGIN` and by :data:`IDLE_WAIT`. Everything is re-derived
from the database each pass, so a restarted daemon computes exactly the missing rows.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Final

import attrs
import trio

from hypertrain.coordinator.context import Coordinator
from hypertrain.coordinator.flows.heldout import (
    HoldoutRows,
    LossRow,
    Pending,
    heldout_loss,
    pending,
    read_holdout,
    record_loss,
)
from hypertrain.coordinator.flows.lifecycle import parse_manifest
from hypertrain.coordinator.tables.runs import get_run
from hypertrain.datasets.errors import DatasetError
from hypertrain.protocol.errors import ContractMismatch, HypertrainError
from hypertrain.protocol.manifest import ModelSpec
from hypertrain.trainer.params import init_params
from hypertrain.trainer.state import TrainState, unpack_state
from nurseries import RunSync

__all__ = ["EVAL_BATCH", "IDLE_WAIT", "WAIT_MARGIN", "HeldoutService"]

log = logging.getLogger(__name__)

EVAL_BATCH: Final = 16
"""Holdout samples per forward pass."""
WAIT_MARGIN: Final = 5.0
"""Seconds past the next beacon round's wall-clock time the service waits for it."""
IDLE_WAIT: Final = 30.0
"""The longest wait between two passes."""


@attrs.frozen
class _Holdout:
    model: ModelSpec
    rows: HoldoutRows


@attrs.define(eq=False)
class HeldoutService:
    """The service (module doc); ``holdout_dir`` is the operator's private dataset directory."""

    ctx: Coordinator
    holdout_dir: Path
    samples: int
    run_sync: RunSync = trio.to_thread.run_sync
    _holdouts: dict[str, _Holdout] = attrs.field(factory=dict, init=False)
    _refused: set[str] = attrs.field(factory=set, init=False)
    _skipped: set[tuple[str, int]] = attrs.field(factory=set, init=False)

    async def run(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Compute owed losses forever (module doc); reports the round D it starts at."""
        task_status.started(self.ctx.beacon.latest)
        while True:
            for item in await self.ctx.db.read(pending):
                if item.run_id not in self._refused and (item.run_id, item.w) not in self._skipped:
                    await self.evaluate(item)
            await self.ctx.beacon.wait_next_round(margin=WAIT_MARGIN, idle=IDLE_WAIT)

    async def evaluate(self, item: Pending) -> float | None:
        """Compute and store the loss of ``item``; None when its holdout or theta is unusable."""
        holdout = await self._holdout(item)
        if holdout is None:
            return None
        try:
            blob = (
                None if item.theta_sha256 is None else await self.ctx.objects.get(item.theta_sha256)
            )
            result: tuple[str, float] = await self.run_sync(
                _evaluate, holdout, blob, item.theta_hash
            )
        except HypertrainError as e:
            self._skipped.add((item.run_id, item.w))
            log.warning("run %s theta(%d): skipped, cannot load it: %s", item.run_id, item.w, e)
            return None
        theta_hash, value = result
        row = LossRow(theta_hash, value, len(holdout.rows), self.ctx.beacon.latest)
        if not await self.ctx.db.write(record_loss, item.run_id, item.w, row):
            return value
        log.info(
            "run %s theta(%d) %s: held-out loss %.6f over %d samples",
            item.run_id,
            item.w,
            theta_hash,
            value,
            row.n_samples,
        )
        self.ctx.events.publish(
            "heldout", {"run_id": item.run_id, "w": item.w, "loss": value, "theta_hash": theta_hash}
        )
        return value

    async def _holdout(self, item: Pending) -> _Holdout | None:
        cached = self._holdouts.get(item.run_id)
        if cached is not None:
            return cached
        run = await self.ctx.db.read(get_run, item.run_id)
        model = parse_manifest(run.manifest_envelope).model
        try:
            rows = await self.run_sync(
                read_holdout, self.holdout_dir, item.manifest_sha256, model.seq_len, self.samples
            )
        except DatasetError as e:
            self._refused.add(item.run_id)
            log.warning(
                "run %s: no held-out losses, the holdout of %s is refused: %s",
                item.run_id,
                self.holdout_dir,
                e,
            )
            return None
        holdout = self._holdouts[item.run_id] = _Holdout(model, rows)
        return holdout


def _evaluate(holdout: _Holdout, blob: bytes | None, expected: str | None) -> tuple[str, float]:
    """``(TH(theta), loss)`` of the genesis (``blob`` None) or a stored theta-only state."""
    state = TrainState(theta=init_params(holdout.model)) if blob is None else unpack_state(blob)
    theta_hash = state.theta_hash()
    if expected is not None and theta_hash != expected:
        raise ContractMismatch(f"the stored theta has TH {theta_hash}, not {expected}")
    return theta_hash, heldout_loss(holdout.model, state.theta, holdout.rows, EVAL_BATCH)
