"""One round of inner training for the miner: ``train_round`` step by step, with progress.

This mirrors :func:`hypertrain.trainer.loop.train_round` exactly (same :class:`Stepper`, same
leaves, same delta), but yields to Trio between steps (so signals are heard during a long round),
reports each step through a callback, and applies the honeypot perturbations of
:mod:`hypertrain.miner.honeypot`. A test pins that the honest mode equals ``train_round`` bit
for bit. Imports torch: import this module only after ``configure``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import trio

from hypertrain.miner.honeypot import HoneypotMode, fabricated_start, perturb_after_step
from hypertrain.protocol.manifest import RunManifest
from hypertrain.trainer.leaves import leaves_root, metrics_root
from hypertrain.trainer.loop import Moments, RoundResult, SampleSource, StateAt, Stepper
from hypertrain.trainer.params import F32Array

__all__ = ["StepCallback", "train_round_async"]

StepCallback = Callable[[int, int, float], None]
"""``(t, H, loss)`` after each inner step."""


async def train_round_async(
    manifest: RunManifest,
    run_id: str,
    w: int,
    theta_start: dict[str, F32Array],
    sample_ids: Sequence[int],
    samples: SampleSource,
    opt_state_in: Moments | None = None,
    *,
    mode: HoneypotMode = HoneypotMode.HONEST,
    on_step: StepCallback | None = None,
) -> RoundResult:
    """Train round ``w`` (see :func:`hypertrain.trainer.loop.train_round`) in ``mode``."""
    inner = manifest.inner
    zeros = {n: np.zeros_like(p) for n, p in theta_start.items()}
    carried = opt_state_in
    if carried is None or inner.state_policy == "reset":
        carried = Moments(m=zeros, v=dict(zeros), step=0)
    honest = StateAt(t=0, theta=theta_start, opt=carried)
    stepper = Stepper(manifest, run_id, w, sample_ids, samples, honest)
    leaves = [stepper.leaf()]
    if mode is HoneypotMode.FABRICATE:
        fake = StateAt(t=0, theta=fabricated_start(theta_start), opt=carried)
        stepper = Stepper(manifest, run_id, w, sample_ids, samples, fake)
    for t in range(1, inner.H + 1):
        stepper.step()
        perturb_after_step(mode, t, inner.H, stepper.theta)
        if t % inner.J == 0:
            leaves.append(stepper.leaf())
        if on_step is not None:
            on_step(t, inner.H, stepper.losses[-1])
        await trio.lowlevel.checkpoint()
    end = stepper.state()
    delta = {n: (np.asarray(theta_start[n], dtype=np.float32) - end.theta[n]) for n in end.theta}
    return RoundResult(
        leaves=tuple(leaves),
        leaves_root=leaves_root(leaves),
        metrics_root=metrics_root(leaves),
        theta_end=end.theta,
        opt_state_out=end.opt,
        delta=delta,
        losses=tuple(stepper.losses),
        tokens=len(sample_ids) * manifest.model.seq_len,
        leaf_states=(),
    )
