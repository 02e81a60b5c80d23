"""Honeypot modes (spec/protocol.md section 6.5): operator-run miners that cheat on purpose.

- ``honest``: train as everyone does;
- ``fabricate``: train from ``theta * 1.01`` but publish the honest leaf 0 (the start state the
  auditor recomputes), so every later leaf is wrong;
- ``last_step``: after step H (before its leaf) add ``1e-3`` to the first element of the first
  tensor in sorted name order, so only the last leaf and the final state are wrong;
- ``noise``: after step ``H // 2`` (before any leaf at that step) add ``1e-6`` to every weight.

The perturbations are float32 additions done in place on the trainer's tensors (torch is
imported lazily, after :func:`hypertrain.trainer.determinism.configure`).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, Final

import numpy as np

from hypertrain.trainer.params import F32Array

__all__ = [
    "FABRICATE_SCALE",
    "LAST_STEP_BUMP",
    "NOISE_BUMP",
    "HoneypotMode",
    "fabricated_start",
    "perturb_after_step",
]

FABRICATE_SCALE: Final = np.float32(1.01)
LAST_STEP_BUMP: Final = np.float32(1e-3)
NOISE_BUMP: Final = np.float32(1e-6)


class HoneypotMode(enum.StrEnum):
    """How this miner trains (``honest`` unless it is an operator honeypot)."""

    HONEST = "honest"
    FABRICATE = "fabricate"
    LAST_STEP = "last_step"
    NOISE = "noise"


def fabricated_start(theta: Mapping[str, F32Array]) -> dict[str, F32Array]:
    """``theta * 1.01`` per tensor, in float32."""
    return {n: (np.asarray(a, dtype=np.float32) * FABRICATE_SCALE) for n, a in theta.items()}


def _first_name(names: Any) -> str:
    return str(min(names, key=lambda n: str(n).encode("utf-8")))


def perturb_after_step(mode: HoneypotMode, t: int, H: int, theta: Mapping[str, Any]) -> bool:  # noqa: N803
    """Apply ``mode``'s perturbation after inner step ``t`` to the torch tensors ``theta``.

    Returns whether anything changed.
    """
    import torch

    if mode is HoneypotMode.LAST_STEP and t == H:
        with torch.no_grad():
            theta[_first_name(theta)].view(-1)[0] += torch.tensor(LAST_STEP_BUMP)
        return True
    if mode is HoneypotMode.NOISE and t == max(1, H // 2):
        with torch.no_grad():
            for tensor in theta.values():
                tensor.add_(torch.tensor(NOISE_BUMP))
        return True
    return False
