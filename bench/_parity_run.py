"""The arms of bench/parity.py: one data-parallel run or one DiLoCo run, in process.

Both train with :class:`hypertrain.trainer.loop.Stepper` (the miner's inner step: the functional
decoder, the fixed-order AdamW, the manifest's WSD schedule), on the samples the protocol's
assignment (:func:`hypertrain.rounds.assignment.assign`, keyed by the run id, the round and a
stand-in beacon signature) gives 4 miners. A DiLoCo round is what the network runs: every miner
trains ``H`` steps from theta with its own carried AdamW state, takes ``delta = start - end``
(float32, as :func:`~hypertrain.trainer.loop.round_result`), compresses it with error feedback
(:func:`~hypertrain.trainer.codec.compress`, the manifest's ``ef_beta``) and the aggregator
merges the decoded payloads (:func:`~hypertrain.aggregator.merge.aggregate_round`: preclip, copy
screen, CenteredClip, Nesterov, spec 7's float32 order). The data-parallel baseline is one AdamW
over the union of the 4 miners' batches of each step (the same rows, ``4 * micro_batch`` a step,
the same schedule), so both see the same tokens in the same number of global steps.

Leaves (the per-``J`` state hashes) are not built: they commit to the training, they do not
change it. The held-out loss is the daemon's
(:func:`hypertrain.coordinator.flows.heldout.heldout_loss`) on the first holdout rows.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Collection, Sequence
from typing import Any, Literal

import attrs
import numpy as np

from hypertrain.aggregator.merge import Params, aggregate_round
from hypertrain.aggregator.outerstate import OuterState
from hypertrain.coordinator.flows.heldout import heldout_loss
from hypertrain.datasets.reader import Dataset
from hypertrain.demo.tuning import tuned
from hypertrain.protocol.f32 import f32_from_hex
from hypertrain.protocol.manifest import RunManifest
from hypertrain.rounds.assignment import assign, next_base
from hypertrain.rounds.audit import Q_ONE
from hypertrain.trainer.codec import compress, decode_payload
from hypertrain.trainer.loop import Moments, Stepper, round_start
from hypertrain.trainer.params import F32Array, init_params

MINERS = ("m0", "m1", "m2", "m3")
EVAL_BATCH = 16
F32_MAX = np.float32(np.finfo(np.float32).max)
OLD_CLIP = np.float32(1.0)
"""``preclip_norm`` and ``cclip_tau`` of the test-mode manifest before issue 22."""

Clip = Literal["off", "old", "manifest", "demo"]
Tensors = dict[str, F32Array]


@attrs.frozen
class Arm:
    """One configuration: ``dp`` (data-parallel) or ``diloco`` with its outer settings.

    ``clip``: ``off`` (preclip and CenteredClip at the float32 maximum, one iteration: the plain
    mean), ``old`` (1.0 and 1.0, the test-mode manifest's), ``manifest`` (the run manifest's
    own values) or ``demo`` (the demo's, :mod:`hypertrain.demo.tuning`). ``codec`` False merges
    the float32 deltas as they are.
    """

    kind: Literal["dp", "diloco"]
    H: int
    outer_lr: float = 0.0
    clip: Clip = "off"
    codec: bool = True
    model: str = "test-mode"
    momentum: float | None = None  # None: the manifest's (0.9)

    @property
    def label(self) -> str:
        size = "" if self.model == "test-mode" else f" [{self.model}]"
        if self.kind == "dp":
            return f"data-parallel{size}"
        codec = "int8" if self.codec else "f32"
        mu = "" if self.momentum is None else f" mu={self.momentum:g}"
        return f"DiLoCo H={self.H} lr={self.outer_lr:g}{mu} clip={self.clip} {codec}{size}"


@attrs.frozen
class Run:
    """One arm and seed: held-out loss at each checkpoint ``(tokens, loss)`` and the merge's
    figures (DiLoCo only): deltas merged, preclipped, scaled by CenteredClip in its last
    iteration, and the largest honest ``|delta|`` and ``|delta - center|`` seen."""

    arm: Arm
    seed: int
    points: tuple[tuple[int, float], ...]
    wall_s: float
    merged: int = 0
    preclipped: int = 0
    cclipped: int = 0
    max_norm: float = 0.0
    max_diff: float = 0.0

    @property
    def final(self) -> float:
        return self.points[-1][1]

    @property
    def tokens(self) -> int:
        return self.points[-1][0]


@attrs.frozen
class Setup:
    """The dataset (train split), the first holdout rows and the run manifest of test mode."""

    manifest: RunManifest
    train: Dataset
    holdout: np.ndarray[Any, Any]
    models: dict[str, Any]  # name -> ModelSpec


def run_id(seed: int) -> str:
    return hashlib.sha256(f"hypertrain-parity|{seed}".encode()).hexdigest()


def _beacon_sig(rid: str, w: int) -> bytes:
    """A stand-in for ``drand_sig[d_assign]`` (48 bytes): only the assignment key reads it."""
    return hashlib.sha384(f"{rid}|{w}".encode()).digest()


def arm_manifest(setup: Setup, arm: Arm, seed: int) -> RunManifest:
    """The run manifest with the arm's model (its ``init_seed`` the seed), ``H`` and outer lr."""
    m = setup.manifest
    model = attrs.evolve(setup.models[arm.model], init_seed=seed)
    inner = attrs.evolve(m.inner, H=arm.H)
    return attrs.evolve(m, model=model, inner=inner)


def arm_params(manifest: RunManifest, arm: Arm) -> Params:
    """The merge's outer params of ``arm`` (:class:`Arm`)."""
    params = attrs.evolve(Params.from_outer(manifest.outer), lr=np.float32(arm.outer_lr))
    if arm.momentum is not None:
        params = attrs.evolve(params, momentum=np.float32(arm.momentum))
    if arm.clip == "off":
        return attrs.evolve(params, preclip_norm=F32_MAX, cclip_tau=F32_MAX, cclip_iters=1)
    if arm.clip == "old":
        return attrs.evolve(params, preclip_norm=OLD_CLIP, cclip_tau=OLD_CLIP)
    if arm.clip == "demo":
        demo = Params.from_outer(tuned(manifest).outer)
        return attrs.evolve(params, preclip_norm=demo.preclip_norm, cclip_tau=demo.cclip_tau)
    return params


def _assignments(manifest: RunManifest, rid: str, w: int, base: int) -> list[tuple[int, ...]]:
    roster = [(hk, slot) for slot, hk in enumerate(MINERS)]
    return [a.samples for a in assign(manifest, rid, w, _beacon_sig(rid, w), roster, base=base)]


def _loss(setup: Setup, manifest: RunManifest, theta: Tensors) -> float:
    return heldout_loss(manifest.model, theta, setup.holdout, EVAL_BATCH)


def run_dp(setup: Setup, arm: Arm, seed: int, steps: int, checkpoints: Collection[int]) -> Run:
    """One AdamW over the union of the 4 miners' batches of every step (module doc)."""
    started = time.perf_counter()
    manifest = arm_manifest(setup, arm, seed)
    inner = manifest.inner
    mb, per_step = inner.micro_batch, inner.micro_batch * len(MINERS)
    dp = attrs.evolve(manifest, inner=attrs.evolve(inner, micro_batch=per_step))
    rid, theta = run_id(seed), init_params(manifest.model)
    opt: Moments | None = None
    base = next_base(0, 0, len(MINERS), manifest)
    points = [(0, _loss(setup, manifest, theta))]
    tokens_per_step = per_step * manifest.model.seq_len
    for w in range(steps // arm.H):
        slots = _assignments(manifest, rid, w, base)
        ids = [i for t in range(arm.H) for s in slots for i in s[t * mb : (t + 1) * mb]]
        stepper = Stepper(dp, rid, w, ids, setup.train.samples, round_start(dp, theta, opt))
        for t in range(1, arm.H + 1):
            stepper.step()
            s = w * arm.H + t
            if s in checkpoints:
                points.append((s * tokens_per_step, _loss(setup, manifest, stepper.state().theta)))
        end = stepper.state()
        theta, opt = end.theta, end.opt
        base = next_base(base, len(MINERS), len(MINERS), manifest)
    return Run(arm, seed, tuple(points), time.perf_counter() - started)


def _flat(tensors: Tensors) -> np.ndarray[Any, Any]:
    return np.concatenate([np.ravel(tensors[n]).astype(np.float64) for n in sorted(tensors)])


def _miner_delta(
    setup: Setup,
    manifest: RunManifest,
    rid: str,
    w: int,
    samples: Sequence[int],
    theta: Tensors,
    opt: Moments | None,
) -> tuple[Tensors, Moments]:
    stepper = Stepper(
        manifest, rid, w, samples, setup.train.samples, round_start(manifest, theta, opt)
    )
    for _ in range(manifest.inner.H):
        stepper.step()
    end = stepper.state()
    return {n: np.asarray(theta[n], dtype=np.float32) - end.theta[n] for n in end.theta}, end.opt


def run_diloco(setup: Setup, arm: Arm, seed: int, steps: int, checkpoints: Collection[int]) -> Run:
    """4 miners, ``steps / H`` rounds of the protocol's merge (module doc)."""
    started = time.perf_counter()
    manifest = arm_manifest(setup, arm, seed)
    params = arm_params(manifest, arm)
    beta = float(f32_from_hex(manifest.outer.ef_beta))
    rid = run_id(seed)
    state = OuterState.genesis(init_params(manifest.model))
    opt: dict[str, Moments | None] = dict.fromkeys(MINERS)
    ef: dict[str, Tensors | None] = dict.fromkeys(MINERS)
    base = next_base(0, 0, len(MINERS), manifest)
    points = [(0, _loss(setup, manifest, state.theta))]
    per_round = arm.H * manifest.inner.micro_batch * len(MINERS) * manifest.model.seq_len
    merged = preclipped = cclipped = 0
    max_norm = max_diff = 0.0
    for w in range(steps // arm.H):
        deltas: dict[str, Tensors] = {}
        for hk, samples in zip(MINERS, _assignments(manifest, rid, w, base), strict=True):
            delta, opt[hk] = _miner_delta(setup, manifest, rid, w, samples, state.theta, opt[hk])
            if arm.codec:
                packed = compress(delta, ef[hk], beta)
                ef[hk], delta = packed.ef_out, decode_payload(packed.payload)
            deltas[hk] = delta
        center = _flat(state.center)
        for d in deltas.values():
            vec = _flat(d)
            max_norm = max(max_norm, float(np.linalg.norm(vec)))
            max_diff = max(max_diff, float(np.linalg.norm(vec - center)))
        result = aggregate_round(state, deltas, params)
        state = result.state_out
        merged += len(result.inputs)
        preclipped += len(result.preclipped)
        cclipped += sum(1 for s in result.scales.values() if s and s[-1] != Q_ONE)
        base = next_base(base, len(MINERS), len(MINERS), manifest)
        if (w + 1) * arm.H in checkpoints:
            points.append(((w + 1) * per_round, _loss(setup, manifest, state.theta)))
    wall = time.perf_counter() - started
    return Run(arm, seed, tuple(points), wall, merged, preclipped, cclipped, max_norm, max_diff)


def run_arm(setup: Setup, arm: Arm, seed: int, steps: int, checkpoints: Collection[int]) -> Run:
    if arm.kind == "dp":
        return run_dp(setup, arm, seed, steps, checkpoints)
    return run_diloco(setup, arm, seed, steps, checkpoints)
