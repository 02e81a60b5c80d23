"""Test-only fault injection: one op output of one inner step, one ulp up (issue 14).

A :class:`Fault` names an op as the bisection names it (step ``t``, ``layer``, ``op`` of
:func:`hypertrain.rounds.bisection.layer_ops`) and a flat element ``index``. Training with it
(``Stepper(..., fault=...)``) replaces that element by ``nextafter(x, +inf)`` in float32, or,
with ``ulps = k > 1``, by ``x + k * spacing(x)`` rounded to float32 (a change big enough that
later rounding cannot swallow it: a one-ulp change often vanishes in the next add):

- a forward op (``embed`` .. ``loss``): in micro-batch 0's output, through :func:`nudged`, an
  autograd op whose gradient passes straight through, so the change reaches the rest of the
  forward, the backward and the update exactly as a real miscomputation of that op would;
- ``update`` (the tail's last op): in theta's first tensor in sorted name order, after the
  optimizer step (:func:`nudge_in_place`).

Nothing else changes, bit for bit. It is how the dispute tests make one party wrong at a known
op; no CLI or config file reaches it. :class:`Fault` and :func:`check_fault` import no torch
(a miner reads a test fault from its environment before ``configure``); the nudges import it
when first called.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

from hypertrain.rounds.bisection import layer_ops

if TYPE_CHECKING:
    import torch

__all__ = ["UPDATE_OP", "Fault", "check_fault", "nudge_in_place", "nudged"]

UPDATE_OP = "update"


@attrs.frozen
class Fault:
    """Perturb op ``op`` of layer ``layer`` (``n_layers`` is the tail) in inner step ``t``
    (``1 .. H``) at flat element ``index`` of micro-batch 0's output (``update``: of theta's
    first tensor in sorted name order)."""

    t: int
    layer: int
    op: str
    index: int = 0
    ulps: int = 1

    def hits(self, t: int, layer: int, op: str) -> bool:
        """Whether this fault perturbs ``op`` of ``layer`` in step ``t``."""
        return (self.t, self.layer, self.op) == (t, layer, op)


def check_fault(fault: Fault, n_layers: int, H: int) -> None:  # noqa: N803
    """ValueError unless ``fault`` names a step, layer and op of this model and round."""
    if not 1 <= fault.t <= H:
        raise ValueError(f"fault step {fault.t} is outside 1..{H}")
    if fault.op not in layer_ops(n_layers, fault.layer):
        raise ValueError(f"layer {fault.layer} has no op {fault.op!r}")
    if fault.index < 0:
        raise ValueError(f"fault index {fault.index} is negative")
    if not 1 <= fault.ulps <= 2**22:
        raise ValueError(f"fault ulps {fault.ulps} is outside 1..2^22")


def _up(value: torch.Tensor, ulps: int = 1) -> torch.Tensor:
    """``nextafter(value, +inf)`` of a float32 element (``ulps > 1``: ``value + ulps *
    spacing(value)`` rounded to float32), as a tensor like ``value``."""
    import torch

    x = np.float32(value.item())
    if ulps == 1:
        return torch.tensor(np.nextafter(x, np.float32(np.inf)), dtype=torch.float32)
    moved = np.float32(float(x) + ulps * float(np.spacing(x)))
    return torch.tensor(moved, dtype=torch.float32)


def _checked_index(x: torch.Tensor, index: int) -> int:
    import torch

    if x.dtype != torch.float32:
        raise ValueError(f"a fault perturbs float32 outputs, not {x.dtype}")
    if not 0 <= index < x.numel():
        raise ValueError(f"fault index {index} is outside the output's {x.numel()} elements")
    return index


@functools.cache
def _nudge_fn() -> Any:
    """The autograd op of :func:`nudged`, built on first use (torch is imported then)."""
    import torch

    class Nudge(torch.autograd.Function):
        """Forward: a copy with one element moved up; backward: the gradient unchanged."""

        @staticmethod
        def forward(ctx: Any, x: torch.Tensor, index: int, ulps: int) -> torch.Tensor:
            out = x.clone()
            flat = out.view(-1)
            flat[index] = _up(flat[index], ulps)
            return out

        @staticmethod
        def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor, None, None]:
            (grad,) = grads
            return grad, None, None

    return Nudge


def nudged(x: torch.Tensor, index: int, ulps: int = 1) -> torch.Tensor:
    """``x`` with flat element ``index`` moved ``ulps`` ulps up (module docstring); the
    gradient flows to ``x`` unchanged."""
    at = _checked_index(x, index)
    out: torch.Tensor = _nudge_fn().apply(x.contiguous(), at, ulps)
    return out


def nudge_in_place(x: torch.Tensor, index: int, ulps: int = 1) -> None:
    """Flat element ``index`` of the leaf tensor ``x`` ``ulps`` ulps up, outside autograd."""
    import torch

    _checked_index(x, index)
    with torch.no_grad():
        flat = x.view(-1)
        flat[index] = _up(flat[index], ulps)
