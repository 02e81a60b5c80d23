"""One round of inner training for the miner: ``train_round`` step by step, with progress.

This mirrors :func:`hypertrain.trainer.loop.train_round` exactly (same :class:`Stepper`, same
leaves, same delta), but yields to Trio between steps (so signals are heard during a long round),
reports each step through a callback, and applies the honeypot perturbations of
:mod:`hypertrain.miner.honeypot`. A test pins that the honest mode equals ``train_round`` bit
for bit, leaf states included. Imports torch: import this module only after ``configure``.

``keep_leaf_states`` keeps the state at every leaf, as ``train_round`` does (what the miner
serves to segment audits). Each is taken from the stepper that built its leaf, right after the
leaf, so it is the state that leaf's preimage hashes: a honeypot keeps the states it really
had (``fabricate``: the honest state at leaf 0, then its fabricated trajectory; ``last_step``
and ``noise``: the perturbed weights from the step they were perturbed).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import trio

from hypertrain.miner.honeypot import HoneypotMode, fabricated_start, perturb_after_step
from hypertrain.protocol.manifest import RunManifest
from hypertrain.trainer.fault import Fault
from hypertrain.trainer.loop import (
    Moments,
    RoundResult,
    SampleSource,
    StateAt,
    Stepper,
    round_result,
    round_start,
)
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
    keep_leaf_states: bool = False,
    fault: Fault | None = None,
) -> RoundResult:
    """Train round ``w`` (see :func:`hypertrain.trainer.loop.train_round`) in ``mode``;
    ``fault`` (tests only, :mod:`hypertrain.trainer.fault`) miscomputes one op."""
    inner = manifest.inner
    honest = round_start(manifest, theta_start, opt_state_in)
    stepper = Stepper(manifest, run_id, w, sample_ids, samples, honest, fault)
    leaves = [stepper.leaf()]
    states = [stepper.state()] if keep_leaf_states else []
    if mode is HoneypotMode.FABRICATE:
        fake = StateAt(t=0, theta=fabricated_start(theta_start), opt=honest.opt)
        stepper = Stepper(manifest, run_id, w, sample_ids, samples, fake, fault)
    for t in range(1, inner.H + 1):
        stepper.step()
        perturb_after_step(mode, t, inner.H, stepper.theta)
        if t % inner.J == 0:
            leaves.append(stepper.leaf())
            if keep_leaf_states:
                states.append(stepper.state())
        if on_step is not None:
            on_step(t, inner.H, stepper.losses[-1])
        await trio.lowlevel.checkpoint()
    return round_result(manifest, theta_start, stepper, leaves, states)
