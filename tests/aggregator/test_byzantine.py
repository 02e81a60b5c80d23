"""Robustness: one Byzantine miner of five cannot drag the merged update away from the honest one.

Honest miners send small, similar deltas; the attacker sends one of them scaled by 100 or by -100.
CenteredClip (around the previous update, here zero) clips the attacker's contribution to tau, so
the merge stays within tau of the honest mean; the plain mean is dragged far away.
"""

from __future__ import annotations

import numpy as np
import pytest

from hypertrain.aggregator.merge import centered_clip, norm

F32 = np.float32
TAU = 1.0
SHAPES = {"emb.weight": (16, 8), "head.weight": (8, 16), "norm.weight": (8,)}


def _honest(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A small delta near a shared direction (norm about 0.3, below tau)."""
    return {
        name: (0.01 + 0.002 * rng.standard_normal(shape)).astype(F32)
        for name, shape in SHAPES.items()
    }


def _mean(deltas: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return {
        name: np.asarray(np.mean([d[name] for d in deltas], axis=0, dtype=np.float64), dtype=F32)
        for name in SHAPES
    }


def _distance(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
    return norm({name: (a[name] - b[name]).astype(F32) for name in a})


@pytest.mark.parametrize("scale", [100.0, -100.0], ids=["scaled", "sign-flipped"])
def test_one_attacker_of_five_stays_within_tau_of_the_honest_mean(scale: float) -> None:
    rng = np.random.default_rng(7)
    honest = {f"honest-{i}": _honest(rng) for i in range(4)}
    attacker = {name: (F32(scale) * t).astype(F32) for name, t in honest["honest-0"].items()}
    deltas = {**honest, "mallory": attacker}
    honest_mean = _mean(list(honest.values()))
    plain_mean = _mean(list(deltas.values()))
    zero = {name: np.zeros(shape, F32) for name, shape in SHAPES.items()}

    merged = centered_clip(deltas, zero, TAU, 1).g

    assert max(norm(d) for d in honest.values()) < TAU  # the honest ones are not clipped
    assert _distance(merged, honest_mean) <= TAU
    assert _distance(plain_mean, honest_mean) > 2 * TAU


def test_arrival_order_does_not_change_the_bytes() -> None:
    rng = np.random.default_rng(8)
    deltas = {f"m{i}": _honest(rng) for i in range(5)}
    zero = {name: np.zeros(shape, F32) for name, shape in SHAPES.items()}
    forward = centered_clip(deltas, zero, TAU, 2).g
    backward = centered_clip(dict(reversed(list(deltas.items()))), zero, TAU, 2).g
    for name in SHAPES:
        assert forward[name].tobytes() == backward[name].tobytes()
