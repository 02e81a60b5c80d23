"""The preclip applied where the merge reads a chunk (``prescale``) has the bits of the
materialised preclip, and ``aggregate_round`` keeps no scaled copy of the deltas.

Every comparison is bit for bit against :func:`preclip`'s output passed to the same functions,
on scales at the edges: exactly 1 for a clipped delta, 0, and scales that take elements below
float32's normal range (where distinct values round to one and top-k ties change).
"""

from __future__ import annotations

import math
import tracemalloc
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from hypertrain.aggregator import merge
from hypertrain.aggregator.bounded import prescaled
from hypertrain.aggregator.copyscreen import copy_screen
from hypertrain.aggregator.merge import (
    Params,
    aggregate_round,
    centered_clip,
    norm,
    preclip,
    preclip_scale,
)
from hypertrain.aggregator.outerstate import OuterState
from hypertrain.aggregator.screenpass import cosine_bounds
from tests.aggregator.reference import bits

F32 = np.float32
ELEMENTS = [
    st.floats(-(2.0**60), 2.0**60, width=32, allow_nan=False),
    st.floats(-(2.0**-126), 2.0**-126, width=32, allow_nan=False),  # subnormal
    st.floats(-1, 1, width=32),
]


def _split(flat: np.ndarray) -> dict[str, np.ndarray]:
    a, b = flat.size // 3, 2 * flat.size // 3
    return {"z": flat[:a].copy(), "é": flat[b:].reshape(-1, 1).copy(), "a": flat[a:b].copy()}


def _threshold(draw: Any, r: float) -> float:
    """A float32 preclip threshold: around the norm (scales near and at 1), tiny (scaled
    elements underflow), zero (scale 0: signed zeros), or above the norm (no clip)."""
    how = draw(st.sampled_from(["near", "tiny", "zero", "above"]))
    if how == "tiny":
        return float(F32(r * 2.0**-140)) if r > 0 else 0.0
    if how == "zero":
        return 0.0
    x = F32(min(r, 3.0e38))
    for _ in range(draw(st.integers(-2, 2 if how == "near" else 4))):
        x = np.nextafter(x, F32(np.inf))
    return float(x)


Case = tuple[dict[str, dict[str, np.ndarray]], dict[str, F32], dict[str, dict[str, np.ndarray]]]


@st.composite
def _case(draw: Any) -> Case:
    """``(deltas, scales, preclipped)``: each delta with its own threshold."""
    n = draw(st.integers(3, 120))
    base = draw(hnp.arrays(np.float32, n, elements=draw(st.sampled_from(ELEMENTS))))
    deltas: dict[str, dict[str, np.ndarray]] = {}
    for i in range(draw(st.integers(2, 5))):
        how = draw(st.sampled_from(["copy", "near", "free"]))
        if how == "copy":
            flat = base.copy()
        elif how == "near":
            flat = base + F32(1e-3) * draw(hnp.arrays(np.float32, n, elements=ELEMENTS[2]))
        else:
            flat = draw(hnp.arrays(np.float32, n, elements=draw(st.sampled_from(ELEMENTS))))
        deltas[f"m{i}"] = _split(flat if np.isfinite(flat).all() else base.copy())
    scales: dict[str, F32] = {}
    pre: dict[str, dict[str, np.ndarray]] = {}
    for hk, delta in deltas.items():
        x = _threshold(draw, norm(delta))
        scales[hk] = preclip_scale(delta, x)[1]
        pre[hk] = preclip(delta, x)[0]
    return deltas, scales, pre


@settings(max_examples=200)
@given(_case(), st.integers(1, 2), st.integers(-2, 2))
def test_centered_clip_with_prescale_equals_it_over_preclipped_deltas(
    case: Case, iters: int, ulps: int
) -> None:
    deltas, scales, pre = case
    center = {n: np.zeros_like(a) for n, a in next(iter(deltas.values())).items()}
    tau = F32(min(norm(pre["m0"]), 3.0e38))  # at the first diff's norm: undecided bounds too
    for _ in range(abs(ulps)):
        tau = np.nextafter(tau, F32(np.inf) if ulps > 0 else F32(0))
    got = centered_clip(deltas, center, float(tau), iters, prescale=scales)
    want = centered_clip(pre, center, float(tau), iters)
    assert bits(got.g) == bits(want.g)
    assert (got.scales, got.weight_hex) == (want.scales, want.weight_hex)


@settings(max_examples=200)
@given(_case())
def test_copy_screen_with_prescale_equals_it_over_preclipped_deltas(case: Case) -> None:
    deltas, scales, pre = case
    assert copy_screen(deltas, prescale=scales) == copy_screen(pre)


@settings(max_examples=100)
@given(_case())
def test_cosine_bounds_with_prescale_equal_them_over_preclipped_rows(case: Case) -> None:
    deltas, scales, pre = case
    ids = sorted(deltas)
    rows = [[np.ravel(a) for _, a in sorted(deltas[hk].items())] for hk in ids]
    pre_rows = [[np.ravel(a) for _, a in sorted(pre[hk].items())] for hk in ids]
    peaks = [max(float(np.abs(p).max()) for p in row) for row in pre_rows]
    got, got_margin = cosine_bounds(rows, peaks, 0.95, [scales[hk] for hk in ids])
    want, want_margin = cosine_bounds(pre_rows, peaks, 0.95)
    assert got.tobytes() == want.tobytes()
    assert got_margin == want_margin


def test_an_undecided_bound_takes_the_exact_norm_of_the_scaled_delta(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The preclipped ``m0`` is ``[1.5, 0, 0]``, scaled from ``[3, 0, 0]``; with ``tau``
    at its norm, the bounded sum cannot decide ``r <= tau`` and the exact norm decides."""
    deltas = {
        "m0": {"w": np.array([3.0, 0.0, 0.0], dtype=F32)},
        "m1": {"w": np.array([0.25, -1.0, 0.5], dtype=F32)},
    }
    scales = {hk: preclip_scale(d, 1.5)[1] for hk, d in deltas.items()}
    assert scales == {"m0": F32(0.5), "m1": F32(1)}
    pre = {hk: preclip(d, 1.5)[0] for hk, d in deltas.items()}
    center = {"w": np.zeros(3, dtype=F32)}
    calls: list[F32] = []
    real = merge._diff_norm

    def counted(delta: Any, scale: F32, v: Any, names: list[str]) -> float:
        calls.append(scale)
        return real(delta, scale, v, names)

    monkeypatch.setattr(merge, "_diff_norm", counted)
    got = centered_clip(deltas, center, 1.5, 1, prescale=scales)
    assert calls == [F32(0.5)]
    want = centered_clip(pre, center, 1.5, 1)
    assert bits(got.g) == bits(want.g)
    assert got.scales == want.scales


def test_a_clipped_delta_with_scale_one_is_read_unscaled() -> None:
    """``r`` just above the threshold: clipped, and ``f32(x / r)`` rounds to 1; the preclip
    multiplied by 1 (the same bits), the prescaled read skips the multiplication."""
    delta = {"w": np.array([1.0, 2.0**-15], dtype=F32)}  # r = sqrt(1 + 2**-30) > 1
    assert norm(delta) > 1.0
    assert preclip_scale(delta, 1.0) == (True, F32(1))
    chunk = delta["w"]
    assert prescaled(chunk, F32(1), np.empty_like(chunk)) is chunk
    out = np.empty_like(chunk)
    assert prescaled(chunk, F32(0.5), out) is out
    assert bits({"w": out}) == bits({"w": chunk * F32(0.5)})
    state = OuterState.genesis({"w": np.zeros(2, dtype=F32)})
    params = Params("nesterov", F32(0.4), F32(0.9), F32(1.0), F32(0.5), 1)
    deltas = {"a": delta, "b": {"w": np.array([0.5, -0.25], dtype=F32)}}
    result = aggregate_round(state, deltas, params)
    assert result.preclipped == ("a",)
    want = centered_clip({"a": preclip(delta, 1.0)[0], "b": deltas["b"]}, state.center, 0.5, 1)
    assert bits(result.g) == bits(want.g)


def test_aggregate_round_keeps_no_scaled_copy_of_the_deltas() -> None:
    """Every delta clipped: the round's peak allocation stays below the deltas' own size (the
    materialised preclip alone allocated all of it again)."""
    rng = np.random.default_rng(3)
    m, n = 16, 200_000
    theta = {"w": rng.standard_normal(n).astype(F32)}
    deltas = {f"m{i:02d}": {"w": rng.standard_normal(n).astype(F32)} for i in range(m)}
    params = Params("nesterov", F32(0.4), F32(0.9), F32(1.0), F32(1.0), 1)
    state = OuterState.genesis(theta)
    tracemalloc.start()
    try:
        result = aggregate_round(state, deltas, params)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(result.preclipped) == m
    assert math.isfinite(float(result.g["w"][0]))
    assert peak < m * n * 4
