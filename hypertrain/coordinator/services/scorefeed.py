"""Feeding uploaded deltas to the compute network: every DeltaManifest becomes scoring steps.

The transaction that records a DeltaManifest also puts the upload in the scoring outbox
(:func:`~hypertrain.coordinator.flows.miner.post_delta`, ``scoring_outbox``). This service drains
the outbox: for each row of a running run it enqueues challenge ``delta-loss`` (DESIGN.md
section 6) twice, as one job each (two copies):

- step ``public``: the trace is the first ``trace_samples`` samples of the train split (read from
  the registered dataset's first shard in the object store);
- step ``hidden``: the round's hidden window (:mod:`~hypertrain.coordinator.flows.
  hiddenwindows`: ``trace_samples`` samples of the holdout, read from the operator's private
  ``holdout_dir``, verified against the run's registered dataset and its commitment, moving to
  fresh samples every ``hidden_rotate_rounds`` rounds), cut into ``hidden_slices`` slices,
  each its own job (:mod:`hypertrain.compute.slices`). The window and its slices are *private*
  objects (file mode 0600 in the object store), a slice served only to a node that holds a
  lease on its job and no other slice of the window. Without ``holdout_dir`` only the public
  step is enqueued.

The job inputs are ``model.json`` (the manifest's ``model`` section, canonical JSON),
``state.bin`` (round ``w``'s published theta-only start state; for round 0 the genesis state,
stored here when not published), ``delta.bin`` (the miner's delta payload) and ``trace.u16``.
The per-run objects are built once and remembered in ``scoring_inputs`` (object-store I/O, each
in its own short transaction); then one write enqueues the steps and deletes the outbox row
(:func:`~hypertrain.coordinator.flows.scoring.enqueue_scoring`), so a restarted daemon resumes
from the outbox and feeds each upload once, however old its round. A row stays in the outbox,
for a later pass, while its round's start state is not published (``w > 0``), while its run has
no registered dataset, and while its run is not running.

:class:`ScoreFeed` is the daemon service: it walks the outbox in key order, ``batch`` rows a pass
(:data:`~hypertrain.coordinator.flows.scoring.BATCH`). After a full page the next pass continues
at once after its last row; after a shorter one the walk starts over at the next beacon round
(waiting at most :data:`IDLE_WAIT`), so rows that must wait never hold back the ones behind them.
Problems with a run (no dataset, a holdout that does not verify, a delta that cannot be read) are
logged once per run and never stop the daemon.
"""

from __future__ import annotations

import json
import logging
from functools import partial
from pathlib import Path
from typing import Any, Final, Literal

import attrs
import numpy as np
import trio

from hypertrain.compute.slices import Window, get_window
from hypertrain.compute.wire import InputFile
from hypertrain.coordinator.context import Coordinator
from hypertrain.coordinator.flows.heldout import read_holdout
from hypertrain.coordinator.flows.hiddenwindows import epoch_for, open_window
from hypertrain.coordinator.flows.scoring import BATCH, enqueue_scoring, run_scoring_facts
from hypertrain.coordinator.tables.miners import get_round_state
from hypertrain.coordinator.tables.scoring import (
    Upload,
    UploadKey,
    get_input,
    put_input,
    queued_uploads,
)
from hypertrain.datasets.errors import DatasetError
from hypertrain.datasets.manifest import DatasetManifest
from hypertrain.protocol.converter import structure, unstructure
from hypertrain.protocol.errors import HypertrainError
from hypertrain.protocol.jcs import canonical_json
from hypertrain.protocol.manifest import ModelSpec
from hypertrain.scoring.registry import DELTA_LOSS
from hypertrain.scoring.slices import slice_bounds
from hypertrain.store.catalog import record_object
from hypertrain.trainer.codec import encode_dense_int8
from hypertrain.trainer.params import init_params
from hypertrain.trainer.state import pack_state
from nurseries import RunSync, run_inline

__all__ = [
    "IDLE_WAIT",
    "ScoreFeed",
]

log = logging.getLogger(__name__)

IDLE_WAIT: Final = 30.0

SharedKind = Literal["model", "public"]
"""The per-run inputs the feed builds (``scoring_inputs``; a daemon before hidden windows also
stored a ``hidden`` one there, which nothing reads any more)."""


def _rows_bytes(rows: Any) -> bytes:
    return np.ascontiguousarray(rows, dtype="<u2").tobytes()


@attrs.define(eq=False)
class ScoreFeed:
    """The daemon service (module doc)."""

    ctx: Coordinator
    holdout_dir: Path | None
    run_sync: RunSync = run_inline
    batch: int = BATCH
    """Outbox rows a pass takes."""
    _warned: set[tuple[str, str]] = attrs.field(factory=set, init=False)
    _genesis: dict[str, tuple[str, int]] = attrs.field(factory=dict, init=False)
    """Each run's genesis state object, made once (it is the model's full initialisation)."""

    def _warn_once(self, run_id: str, what: str, message: str) -> None:
        if (run_id, what) not in self._warned:
            self._warned.add((run_id, what))
            log.warning("run %s: %s", run_id, message)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        after: UploadKey | None = None
        while True:
            uploads = await self.ctx.db.read(queued_uploads, after, self.batch)
            for upload in uploads:
                try:
                    await self.feed(upload)
                except (HypertrainError, DatasetError, OSError) as e:
                    self._warn_once(upload.run_id, "feed", f"cannot feed scoring jobs: {e}")
            after = uploads[-1].key if len(uploads) == self.batch else None
            target = self.ctx.beacon.latest + 1
            with trio.move_on_after(IDLE_WAIT if after is None else 0):
                await self.ctx.beacon.wait_round(target)

    async def _store(self, run_id: str, kind: SharedKind, data: bytes) -> tuple[str, int]:
        info = await self.ctx.objects.put_bytes(data)
        await self.ctx.db.write(put_input, run_id, kind, info, int(self.ctx.wall.now()))
        return info.sha256, info.size

    async def shared(self, run_id: str, kind: SharedKind) -> tuple[str, int] | None:
        """The run's ``kind`` object, built on first use (module doc); None when it cannot be.
        (The hidden trace is a window's: :meth:`hidden_window`.)"""
        found = await self.ctx.db.read(get_input, run_id, kind)
        if found is not None:
            return found
        manifest, dataset_sha = await self.ctx.db.read(run_scoring_facts, run_id)
        if kind == "model":
            return await self._store(run_id, kind, canonical_json(unstructure(manifest.model)))
        if dataset_sha is None:
            self._warn_once(run_id, "dataset", "no dataset registered: deltas are not scored")
            return None
        seq_len, n = manifest.model.seq_len, self.ctx.settings.trace_samples
        dataset = structure(DatasetManifest, json.loads(await self.ctx.objects.get(dataset_sha)))
        shard = await self.ctx.objects.get(dataset.shard_sha256s[0])
        row_bytes = 2 * (seq_len + 1)
        return await self._store(run_id, kind, shard[: n * row_bytes])

    async def hidden_window(self, run_id: str, w: int) -> Window | None:
        """The hidden window round ``w``'s hidden steps are scored on, built and recorded on
        first use (rotating to it when it is new: :mod:`~hypertrain.coordinator.flows.
        hiddenwindows`); None without a holdout."""
        if self.holdout_dir is None:
            return None
        settings = self.ctx.settings
        rotate = settings.hidden_rotate_rounds
        epoch = await self.ctx.db.read(epoch_for, run_id, w, rotate)
        found = await self.ctx.db.read(get_window, run_id, epoch)
        if found is not None:
            return found
        manifest, dataset_sha = await self.ctx.db.read(run_scoring_facts, run_id)
        if dataset_sha is None:
            return None
        n = settings.trace_samples
        first = epoch * n
        try:
            rows = await self.run_sync(
                read_holdout, self.holdout_dir, dataset_sha, manifest.model.seq_len, n, first
            )
        except DatasetError as e:
            self._warn_once(run_id, "holdout", f"no hidden scoring step: {e}")
            return None
        objects = [await self.ctx.objects.put_bytes(_rows_bytes(rows), private=True)]
        for start, end in slice_bounds(len(rows), min(settings.hidden_slices, len(rows))):
            part = _rows_bytes(rows[start:end])
            objects.append(await self.ctx.objects.put_bytes(part, private=True))
        window = Window(
            window=objects[0].sha256,
            run_id=run_id,
            epoch=epoch,
            first_sample=first,
            rows=len(rows),
            slices=tuple(InputFile(DELTA_LOSS.inputs[-1], o.sha256, o.size) for o in objects[1:]),
        )
        theta = await self._theta_inputs(run_id, epoch * rotate) if epoch else None
        hub = self.ctx.compute
        stored, _ = await hub.write(
            partial(
                open_window,
                rotate_rounds=rotate,
                theta_inputs=theta,
                now_ms=int(self.ctx.wall.now() * 1000),
                settings=hub.settings,
            ),
            window,
            objects,
        )
        return stored

    async def _theta_inputs(self, run_id: str, w: int) -> list[dict[str, Any]] | None:
        """The inputs (its trace a placeholder) of the step that scores round ``w``'s start
        state on a new window: the ``delta-loss`` of a zero delta; None while unpublished."""
        model = await self.shared(run_id, "model")
        state = await self.start_state(run_id, w)
        if model is None or state is None:
            return None
        manifest, _ = await self.ctx.db.read(run_scoring_facts, run_id)
        blob = await self.run_sync(_zero_delta, manifest.model)
        info = await self.ctx.objects.put_bytes(blob)
        await self.ctx.db.write(record_object, info, int(self.ctx.wall.now()))
        zero = (info.sha256, info.size)
        return _inputs((model, state, zero, zero))

    async def start_state(self, run_id: str, w: int) -> tuple[str, int] | None:
        """Round ``w``'s published start state (round 0: the genesis, stored on first use);
        None while a later round's is not published."""
        state = await self.ctx.db.read(get_round_state, run_id, w)
        if state is not None:
            sha = state.theta_start_sha256
            return sha, self.ctx.objects.size_of(sha)
        if w > 0:
            return None
        genesis = self._genesis.get(run_id)
        if genesis is not None and self.ctx.objects.exists(genesis[0]):
            return genesis
        manifest, _ = await self.ctx.db.read(run_scoring_facts, run_id)
        blob = await self.run_sync(lambda: pack_state(init_params(manifest.model)))
        info = await self.ctx.objects.put_bytes(blob)
        await self.ctx.db.write(record_object, info, int(self.ctx.wall.now()))
        self._genesis[run_id] = info.sha256, info.size
        return info.sha256, info.size

    async def feed(self, upload: Upload) -> int:
        """Enqueue the scoring steps of one outbox row and drop the row; how many steps were
        enqueued (0: the row stays, module doc)."""
        model = await self.shared(upload.run_id, "model")
        public = await self.shared(upload.run_id, "public")
        state = await self.start_state(upload.run_id, upload.w)
        if model is None or state is None or public is None:
            return 0
        delta = (upload.delta_hash, self.ctx.objects.size_of(upload.delta_hash))
        traces = {"public": public}
        hidden = await self.hidden_window(upload.run_id, upload.w)
        if hidden is not None:
            traces["hidden"] = (hidden.window, sum(f.size for f in hidden.slices))
        steps = {step: _inputs((model, state, delta, trace)) for step, trace in traces.items()}
        now_ms = int(self.ctx.wall.now() * 1000)
        hub = self.ctx.compute
        await hub.write(
            partial(enqueue_scoring, now_ms=now_ms, settings=hub.settings, hidden=hidden),
            upload,
            steps,
        )
        return len(steps)


def _inputs(files: tuple[tuple[str, int], ...]) -> list[dict[str, Any]]:
    """A ``delta-loss`` job's inputs from the ``(sha256, size)`` of its files, in order."""
    return [
        {"name": name, "sha256": sha, "size": size}
        for name, (sha, size) in zip(DELTA_LOSS.inputs, files, strict=True)
    ]


def _zero_delta(model: ModelSpec) -> bytes:
    """A delta payload of zeros for ``model``: scoring it scores the start state itself."""
    return encode_dense_int8({k: np.zeros_like(v) for k, v in init_params(model).items()})
