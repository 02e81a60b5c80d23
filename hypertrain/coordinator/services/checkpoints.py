"""The daemon's checkpoint service: publish checkpoints of every run (issue 16; spec 7).

Each pass reads :func:`~hypertrain.coordinator.flows.checkpoints.checkpoints_due` and, for each
checkpoint owed (oldest first): loads the applied tapes of rounds ``0..w`` and the OuterState
after round ``w`` from the object store, builds the three files with
:func:`~hypertrain.aggregator.checkpoint.build_checkpoint` (in ``run_sync``: a worker thread
in production, since serialising and hashing a large theta takes CPU), stores them, then records
the row in one write and publishes ``checkpoint`` ``{run_id, w, status, theta_hash, files}``.
The files carry the operator's terms (:class:`CheckpointTerms`: the model's license and the
dataset's name, license and attribution) and the run manifest's dataset Merkle root.

A checkpoint whose rounds lack an applied tape is logged once and skipped; one whose round was
rewritten during the build (:class:`Conflict`) is rebuilt on the next pass. Everything is
re-derived from the database each pass, so a restarted daemon writes exactly what is missing
(the files are byte-deterministic, so a rebuild after a crash stores the same objects). Between
passes the service waits for the next beacon round, bounded by its wall-clock deadline plus
:data:`WAIT_MARGIN` and by :data:`IDLE_WAIT`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Final

import attrs
import trio

from hypertrain.aggregator.checkpoint import (
    LINEAGE_FILE,
    MANIFEST_FILE,
    MODEL_FILE,
    CheckpointInfo,
    DatasetInfo,
    build_checkpoint,
    object_keys,
)
from hypertrain.aggregator.checkpoint_dir import checkpoint_dir, write_checkpoint_dir
from hypertrain.aggregator.outerstate import unpack_outer
from hypertrain.aggregator.tape import SignedTape, parse_signed_tape
from hypertrain.coordinator.context import Coordinator
from hypertrain.coordinator.flows.checkpoints import Due, checkpoints_due, record_checkpoint
from hypertrain.coordinator.tables.checkpoints import CheckpointRow
from hypertrain.protocol.errors import Conflict
from hypertrain.protocol.keys import Keypair
from nurseries import RunSync, run_inline

__all__ = ["IDLE_WAIT", "WAIT_MARGIN", "CheckpointService", "CheckpointTerms"]

log = logging.getLogger(__name__)

WAIT_MARGIN: Final = 5.0
"""Seconds past the next beacon round's wall-clock time the service waits for it."""
IDLE_WAIT: Final = 30.0
"""The longest wait between two passes."""


@attrs.frozen
class CheckpointTerms:
    """What the operator publishes checkpoints under (``HYPERTRAIN_CHECKPOINT_LICENSE``,
    ``HYPERTRAIN_DATASET_NAME``, ``_LICENSE`` and ``_ATTRIBUTION``)."""

    license: str
    dataset_name: str
    dataset_license: str
    dataset_attribution: str

    def info(self, merkle_root: str) -> CheckpointInfo:
        """The manifest fields for a run whose dataset has ``merkle_root``."""
        return CheckpointInfo(
            license=self.license,
            dataset=DatasetInfo(
                name=self.dataset_name,
                license=self.dataset_license,
                attribution=self.dataset_attribution,
                merkle_root=merkle_root,
            ),
        )


def _build(
    coord: Keypair, due: Due, tapes: Sequence[SignedTape], state: bytes, terms: CheckpointTerms
) -> dict[str, bytes]:
    return build_checkpoint(
        coord,
        status=due.status,
        tapes=tapes,
        theta=unpack_outer(state).theta,
        model=due.manifest.model,
        info=terms.info(due.manifest.dataset.merkle_root),
    )


@attrs.define(eq=False)
class CheckpointService:
    """The service (module doc); ``every`` is ``HYPERTRAIN_CHECKPOINT_EVERY``."""

    ctx: Coordinator
    every: int
    terms: CheckpointTerms
    run_sync: RunSync = run_inline
    _skipped: set[tuple[str, int]] = attrs.field(factory=set, init=False)

    async def run(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Publish owed checkpoints forever (module doc); reports the round D it starts at."""
        task_status.started(self.ctx.beacon.latest)
        while True:
            await self.write_due()
            await self.ctx.beacon.wait_next_round(margin=WAIT_MARGIN, idle=IDLE_WAIT)

    async def write_due(self) -> list[CheckpointRow]:
        """Build and record every checkpoint owed now; the rows written."""
        written = []
        for due in await self.ctx.db.read(checkpoints_due, self.every):
            if due.missing is not None:
                if (due.run_id, due.w) not in self._skipped:
                    self._skipped.add((due.run_id, due.w))
                    log.warning(
                        "run %s: no checkpoint at round %d, round %d has no applied tape",
                        due.run_id,
                        due.w,
                        due.missing,
                    )
                continue
            try:
                row = await self.write(due)
            except Conflict as e:
                log.info("%s: next pass", e.detail)
                continue
            if row is not None:
                written.append(row)
        return written

    async def write(self, due: Due) -> CheckpointRow | None:
        """Build, store and record one checkpoint; None when a final one was already there."""
        ctx = self.ctx
        tapes = [parse_signed_tape(await ctx.objects.get(key)) for key in due.tapes]
        state = await ctx.objects.get(due.out_state)
        files: dict[str, bytes] = await self.run_sync(
            _build, ctx.coord_keypair(), due, tapes, state, self.terms
        )
        stored = [await ctx.objects.put_bytes(files[name]) for name in sorted(files)]
        keys = {name: info.sha256 for name, info in zip(sorted(files), stored, strict=True)}
        await self.run_sync(
            write_checkpoint_dir,
            checkpoint_dir(ctx.settings.state_dir, due.run_id, due.w),
            {name: ctx.objects.path_of(key) for name, key in keys.items()},
        )
        row = CheckpointRow(
            run_id=due.run_id,
            w=due.w,
            status=due.status,
            theta_hash=tapes[-1].body.theta_hash,
            manifest_key=keys[MANIFEST_FILE],
            lineage_key=keys[LINEAGE_FILE],
            model_key=keys[MODEL_FILE],
            tapes=due.tapes,
            written_round=ctx.beacon.latest,
        )
        now = int(ctx.wall.now())
        if not await ctx.db.write(record_checkpoint, row, stored, object_keys(tapes), now):
            return None
        log.info(
            "run %s: %s checkpoint of rounds 0..%d, theta %s",
            due.run_id,
            due.status,
            due.w,
            row.theta_hash,
        )
        ctx.events.publish("checkpoint", {"run_id": due.run_id, **row.listing()})
        return row
