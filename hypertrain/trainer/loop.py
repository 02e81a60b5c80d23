"""The inner loop of one round: H AdamW steps with a leaf every J steps (spec 5.3-5.5).

:func:`train_round` is what a miner runs (and an auditor in full mode); :mod:`replay` runs the
same :class:`Stepper` over a segment. Step ``t`` (``1..H``) of round ``w``:

- takes the sample ids ``samples[(t-1)*mb*ga : t*mb*ga]`` (``step_ids``) and their token rows
  (``[mb*ga, seq_len+1]``, ids ``< vocab``), split into ``ga`` micro-batches of ``mb`` rows;
- per micro-batch ``j`` computes ``ce_j = loss(theta, rows_j)`` and the gradients of
  ``ce_j / ga``; gradients are summed over micro-batches in order (float32);
- applies :func:`~hypertrain.trainer.optim.adamw_step` with ``lr = inner_lr(inner, w, t)``;
- records ``loss_t = mean_j f64(ce_j)``.

After steps ``J, 2J, ..., H`` (and before step 1, at ``t = 0``) it builds the leaf
(:mod:`hypertrain.trainer.leaves`). ``delta = theta_start - theta_end`` per tensor (float32).
Every entry point first calls :func:`hypertrain.trainer.determinism.check_live`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np
import torch

from hypertrain.protocol.manifest import RunManifest
from hypertrain.rounds.assignment import step_ids, window_ids
from hypertrain.trainer import model as model_fn
from hypertrain.trainer.determinism import check_live
from hypertrain.trainer.fault import UPDATE_OP, Fault, check_fault, nudge_in_place, nudged
from hypertrain.trainer.leaves import (
    Leaf,
    build_leaf,
    leaves_root,
    metrics_root,
    stage_states,
    theta_distance,
)
from hypertrain.trainer.optim import AdamWHyper, OptState, adamw_step, opt_state
from hypertrain.trainer.params import F32Array, param_shapes
from hypertrain.trainer.schedule import inner_lr

__all__ = [
    "Moments",
    "Observe",
    "RoundResult",
    "SampleSource",
    "StateAt",
    "Stepper",
    "round_result",
    "round_start",
    "train_round",
]

SampleSource = np.ndarray[Any, Any] | Callable[[Sequence[int]], np.ndarray[Any, Any]]
"""Token rows in assignment order (``[B, seq_len+1]``, row ``i`` = sample ``samples[i]``), or a
loader mapping a list of sample ids to their rows."""


Observe = Callable[[int, int, str, torch.Tensor], None]
"""``observe(micro, layer, op, out)``: sees op ``op`` of ``layer`` in micro-batch ``micro``
(:func:`hypertrain.trainer.model.forward`'s names), the tensor the forward goes on with."""


@attrs.frozen
class Moments:
    """An optimizer state as float32 numpy arrays (what ``carry`` hands to the next round)."""

    m: dict[str, F32Array]
    v: dict[str, F32Array]
    step: int


@attrs.frozen
class StateAt:
    """The full training state at inner step ``t`` (segment audits serve these)."""

    t: int
    theta: dict[str, F32Array]
    opt: Moments


@attrs.frozen
class RoundResult:
    """Everything a miner commits from one round (spec 5.5)."""

    leaves: tuple[Leaf, ...]
    leaves_root: str
    metrics_root: str
    theta_end: dict[str, F32Array]
    opt_state_out: Moments
    delta: dict[str, F32Array]
    losses: tuple[float, ...]
    tokens: int
    leaf_states: tuple[StateAt, ...]


def _np(tensors: dict[str, torch.Tensor]) -> dict[str, F32Array]:
    return {n: t.detach().numpy().copy() for n, t in tensors.items()}


class Stepper:
    """Runs inner steps of round ``w`` from a given state and builds the leaves it passes."""

    def __init__(
        self,
        manifest: RunManifest,
        run_id: str,
        w: int,
        sample_ids: Sequence[int],
        samples: SampleSource,
        start: StateAt,
        fault: Fault | None = None,
    ) -> None:
        check_live(manifest.reference_spec.env)
        self.manifest, self.run_id, self.w = manifest, run_id, w
        inner, model = manifest.inner, manifest.model
        if fault is not None:
            check_fault(fault, model.n_layers, inner.H)
        self.fault = fault
        self.hyper = AdamWHyper.from_inner(inner)
        self.per_step = inner.micro_batch * inner.grad_accum
        if len(sample_ids) != self.per_step * inner.H:
            raise ValueError(
                f"{len(sample_ids)} sample ids, a round needs {self.per_step * inner.H}"
            )
        self.sample_ids, self.samples = [int(i) for i in sample_ids], samples
        shapes = param_shapes(model)
        if set(start.theta) != set(shapes) or any(
            tuple(start.theta[n].shape) != s for n, s in shapes.items()
        ):
            raise ValueError("theta does not match the manifest's parameter shapes")
        self.t = start.t
        self.theta = {
            n: torch.from_numpy(np.array(start.theta[n], dtype=np.float32)).requires_grad_(True)
            for n in shapes
        }
        # ``start`` is taken as it is: the state policy applies once, at the round start
        # (:func:`round_start`); a state inside the round keeps its moments under ``reset`` too.
        self.opt: OptState = opt_state(self.theta, start.opt.m, start.opt.v, start.opt.step)
        self.prev_leaf_theta = _np(self.theta)
        self.losses: list[float] = []

    def state(self) -> StateAt:
        """A copy of the current state."""
        m, v = _np(self.opt.m), _np(self.opt.v)
        return StateAt(t=self.t, theta=_np(self.theta), opt=Moments(m=m, v=v, step=self.opt.step))

    def micro_batches(self, t: int) -> list[torch.Tensor]:
        """The token rows of step ``t`` as its ``grad_accum`` micro-batches (int64 ``[mb,
        seq_len+1]`` each, in order)."""
        rows, mb = self._rows(t), self.manifest.inner.micro_batch
        return [rows[j * mb : (j + 1) * mb] for j in range(self.manifest.inner.grad_accum)]

    def _rows(self, t: int) -> torch.Tensor:
        ids = step_ids(self.sample_ids, t, self.per_step)
        if callable(self.samples):
            rows = np.asarray(self.samples(ids))
        else:
            rows = np.asarray(self.samples[(t - 1) * self.per_step : t * self.per_step])
        model = self.manifest.model
        if rows.shape != (self.per_step, model.seq_len + 1) or rows.dtype.kind not in "ui":
            raise ValueError(f"step {t}: token rows {rows.dtype} {rows.shape} do not fit")
        if rows.size and (int(rows.min()) < 0 or int(rows.max()) >= model.vocab):
            raise ValueError(f"step {t}: a token id is outside [0, {model.vocab})")
        return torch.from_numpy(rows.astype(np.int64))

    def step(self, observe: Observe | None = None) -> None:
        """One inner step (module docstring), with the fault applied when it is this step's;
        ``observe`` sees every op output of the forward (after the fault)."""
        inner = self.manifest.inner
        t = self.t + 1
        names = list(self.theta)
        params = [self.theta[n] for n in names]
        total: list[torch.Tensor] | None = None
        ce_sum = 0.0
        for j, mb in enumerate(self.micro_batches(t)):
            ce = model_fn.forward(self.theta, mb, self.manifest.model, self._tap(t, j, observe))
            grads = torch.autograd.grad(ce / inner.grad_accum, params)
            total = (
                list(grads) if total is None else [a + b for a, b in zip(total, grads, strict=True)]
            )
            ce_sum += float(ce.detach())
        assert total is not None  # grad_accum >= 1
        lr = inner_lr(inner, self.w, t)
        adamw_step(self.theta, dict(zip(names, total, strict=True)), self.opt, lr, self.hyper)
        if self.fault is not None and self.fault.hits(t, self.manifest.model.n_layers, UPDATE_OP):
            nudge_in_place(self.theta[min(self.theta)], self.fault.index, self.fault.ulps)
        self.losses.append(ce_sum / inner.grad_accum)
        self.t = t

    def _tap(self, t: int, micro: int, observe: Observe | None) -> model_fn.Tap | None:
        """The forward's tap for micro-batch ``micro`` of step ``t``; None (the plain training
        forward) when there is nothing to perturb or observe."""
        fault = self.fault if micro == 0 and self.fault is not None and self.fault.t == t else None
        if fault is None and observe is None:
            return None

        def tap(layer: int, op: str, out: torch.Tensor) -> torch.Tensor:
            if fault is not None and fault.hits(t, layer, op):
                out = nudged(out, fault.index, fault.ulps)
            if observe is not None:
                observe(micro, layer, op, out)
            return out

        return tap

    def leaf(self) -> Leaf:
        """The leaf at the current step; resets the reference theta of the next leaf's norm."""
        inner, t = self.manifest.inner, self.t
        theta = _np(self.theta)
        at_start = t == 0
        if not at_start and self.t - len(self.losses) >= t:
            raise ValueError(f"no step was run towards leaf t={t}: its loss is unknown")
        stages = stage_states(
            theta,
            _np(self.opt.m),
            _np(self.opt.v),
            self.manifest.model.n_layers,
            self.manifest.reference_spec.layout.pp,
        )
        leaf = build_leaf(
            run_id=self.run_id,
            w=self.w,
            t=t,
            stages=stages,
            window_ids=window_ids(self.sample_ids, t, inner.J, self.per_step),
            loss=0.0 if at_start else self.losses[-1],
            norm=0.0 if at_start else theta_distance(theta, self.prev_leaf_theta),
        )
        self.prev_leaf_theta = theta
        return leaf


def train_round(
    manifest: RunManifest,
    run_id: str,
    w: int,
    theta_start: dict[str, F32Array],
    sample_ids: Sequence[int],
    samples: SampleSource,
    opt_state_in: Moments | None = None,
    *,
    keep_leaf_states: bool = False,
    fault: Fault | None = None,
) -> RoundResult:
    """Train round ``w`` from ``theta_start`` (module docstring).

    ``opt_state_in`` is the miner's own previous round-end state under ``carry`` (None: reset
    state, as in round 0); it is ignored under ``reset``. ``keep_leaf_states`` keeps the state at
    every leaf (what a miner serves to segment audits). ``fault`` (tests only,
    :mod:`hypertrain.trainer.fault`) miscomputes one op.
    """
    start = round_start(manifest, theta_start, opt_state_in)
    stepper = Stepper(manifest, run_id, w, sample_ids, samples, start, fault)
    leaves = [stepper.leaf()]
    states = [stepper.state()] if keep_leaf_states else []
    for t in range(1, manifest.inner.H + 1):
        stepper.step()
        if t % manifest.inner.J == 0:
            leaves.append(stepper.leaf())
            if keep_leaf_states:
                states.append(stepper.state())
    return round_result(manifest, theta_start, stepper, leaves, states)


def round_start(
    manifest: RunManifest, theta_start: dict[str, F32Array], opt_state_in: Moments | None
) -> StateAt:
    """The state at t = 0: ``theta_start`` with the carried optimizer state, or a reset one
    (zeros, step 0) under ``reset`` or when nothing is carried (round 0)."""
    carried = opt_state_in
    if carried is None or manifest.inner.state_policy == "reset":
        zeros = {n: np.zeros_like(p) for n, p in theta_start.items()}
        carried = Moments(m=zeros, v=dict(zeros), step=0)
    return StateAt(t=0, theta=theta_start, opt=carried)


def round_result(
    manifest: RunManifest,
    theta_start: Mapping[str, F32Array],
    stepper: Stepper,
    leaves: Sequence[Leaf],
    leaf_states: Sequence[StateAt] = (),
) -> RoundResult:
    """A finished round: the roots of its leaves, its end state and ``delta = start - end``."""
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
        tokens=len(stepper.sample_ids) * manifest.model.seq_len,
        leaf_states=tuple(leaf_states),
    )
