"""The hand-written AdamW inner optimizer, fixed sorted-name order (spec 5.3).

Per inner step, given the summed gradients ``g`` of every parameter::

    norm  = sqrt(sum over sorted names of sum(f64(g)^2))          float64
    clip  = min(1, grad_clip / (norm + 1e-6))                       float64
    step += 1;  bc1 = 1 - beta1^step;  bc2 = 1 - beta2^step         float64
    for each tensor in sorted name order (float32 tensor ops, in this order):
        g  = g * f32(clip)
        m  = m * f32(beta1) + g * f32(1 - beta1)
        v  = v * f32(beta2) + (g * g) * f32(1 - beta2)
        p  = p * f32(1 - lr*wd)          (only when p.ndim >= 2; else p is left as is)
        p  = p - (m / (sqrt(v * f32(1 / bc2)) + f32(eps))) * f32(lr / bc1)

Every scalar is computed in float64 from the manifest's float32 values and rounded once to
float32 (``f32(x)``); each tensor line is a sequence of separate float32 torch ops, applied in
the order written. ``v / bc2`` is taken as ``v * f32(1/bc2)`` (*ours*). Only the ``adamw``
optimizer with the ``reset`` and ``carry`` state policies is implemented; ``muon`` and
``derived`` are refused (UnsupportedPolicy). Carry requires ``rewarmup_steps == 0``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import attrs
import numpy as np
import torch

from hypertrain.protocol.f32 import f32_from_hex
from hypertrain.protocol.manifest import InnerSpec
from hypertrain.trainer.errors import UnsupportedPolicy
from hypertrain.trainer.params import F32Array

__all__ = [
    "AdamWHyper",
    "OptState",
    "adamw_step",
    "check_policy",
    "f32",
    "global_grad_norm",
    "opt_state",
    "start_state",
]


def f32(x: float) -> float:
    """``x`` rounded to the nearest float32 (as a Python float)."""
    return float(np.float32(x))


@attrs.frozen
class AdamWHyper:
    """The inner AdamW hyperparameters as float64 values of the manifest's float32 hex."""

    beta1: float
    beta2: float
    eps: float
    wd: float
    grad_clip: float

    @classmethod
    def from_inner(cls, inner: InnerSpec) -> AdamWHyper:
        """Decode ``inner.betas``, ``eps``, ``wd``, ``grad_clip``; refuse unsupported policies."""
        check_policy(inner)
        b1, b2 = (f32_from_hex(b) for b in inner.betas)
        return cls(
            beta1=b1,
            beta2=b2,
            eps=f32_from_hex(inner.eps),
            wd=f32_from_hex(inner.wd),
            grad_clip=f32_from_hex(inner.grad_clip),
        )


@attrs.define
class OptState:
    """AdamW moments (float32 torch tensors, same names and shapes as theta) and the step."""

    m: dict[str, torch.Tensor]
    v: dict[str, torch.Tensor]
    step: int


def check_policy(inner: InnerSpec) -> None:
    """Refuse (UnsupportedPolicy) what :func:`adamw_step` does not implement."""
    if inner.opt != "adamw":
        raise UnsupportedPolicy(f"inner.opt {inner.opt!r}: only adamw is implemented")
    if inner.state_policy not in ("reset", "carry"):
        raise UnsupportedPolicy(f"state_policy {inner.state_policy!r} is not implemented yet")
    if inner.state_policy == "carry" and inner.rewarmup_steps:
        raise UnsupportedPolicy("state_policy carry requires rewarmup_steps == 0 (spec 5.3)")


def start_state(
    inner: InnerSpec,
    theta: Mapping[str, torch.Tensor],
    carried: tuple[Mapping[str, F32Array], Mapping[str, F32Array], int] | None,
) -> OptState:
    """The optimizer state at round start: zeros and step 0 for ``reset`` or when nothing is
    carried (round 0, missing state); the miner's own ``(m, v, step)`` for ``carry``."""
    check_policy(inner)
    if inner.state_policy == "reset" or carried is None:
        zeros = {n: torch.zeros_like(p) for n, p in theta.items()}
        return OptState(m=zeros, v={n: z.clone() for n, z in zeros.items()}, step=0)
    return opt_state(theta, *carried)


def opt_state(
    theta: Mapping[str, torch.Tensor],
    m: Mapping[str, F32Array],
    v: Mapping[str, F32Array],
    step: int,
) -> OptState:
    """``(m, v, step)`` as the optimizer state of ``theta``, as given (a state inside a round,
    where the policy no longer applies); ValueError when names or shapes differ from theta's."""
    for name, p in theta.items():
        for what, moments in (("m", m), ("v", v)):
            if name not in moments or tuple(moments[name].shape) != tuple(p.shape):
                raise ValueError(f"carried {what} has no tensor {name!r} of shape {p.shape}")
    if set(m) != set(theta) or set(v) != set(theta) or step < 0:
        raise ValueError("carried optimizer state does not match theta")
    return OptState(
        m={n: torch.from_numpy(np.array(m[n], dtype=np.float32)) for n in theta},
        v={n: torch.from_numpy(np.array(v[n], dtype=np.float32)) for n in theta},
        step=step,
    )


def global_grad_norm(grads: Mapping[str, torch.Tensor]) -> float:
    """``sqrt(sum over sorted names of sum(f64(g)^2))`` as a Python float."""
    total = 0.0
    for name in sorted(grads):
        total += float(grads[name].double().pow(2).sum())
    return math.sqrt(total)


def adamw_step(
    params: Mapping[str, torch.Tensor],
    grads: Mapping[str, torch.Tensor],
    state: OptState,
    lr: float,
    hyper: AdamWHyper,
) -> float:
    """One AdamW step (module docstring), in place on ``params`` and ``state``; returns the
    float64 global gradient norm before clipping."""
    norm = global_grad_norm(grads)
    clip = f32(min(1.0, hyper.grad_clip / (norm + 1e-6)))
    state.step += 1
    bc1 = 1.0 - hyper.beta1**state.step
    bc2 = 1.0 - hyper.beta2**state.step
    b1, one_b1 = f32(hyper.beta1), f32(1.0 - hyper.beta1)
    b2, one_b2 = f32(hyper.beta2), f32(1.0 - hyper.beta2)
    inv_bc2, step_size, eps = f32(1.0 / bc2), f32(lr / bc1), f32(hyper.eps)
    decay = f32(1.0 - lr * hyper.wd)
    with torch.no_grad():
        for name in sorted(params):
            p, m, v = params[name], state.m[name], state.v[name]
            g = grads[name] * clip
            m.mul_(b1).add_(g * one_b1)
            v.mul_(b2).add_((g * g) * one_b2)
            if p.dim() >= 2:
                p.mul_(decay)
            p.sub_((m / ((v * inv_bc2).sqrt_() + eps)) * step_size)
    return norm
