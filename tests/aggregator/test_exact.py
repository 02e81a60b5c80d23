"""Exact sums equal math.fsum over the exact float64 products, bit for bit."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from hypertrain.aggregator.exact import ExactSum, fsum_dot, fsum_squares, split_f32
from hypertrain.aggregator.merge import norm

F32 = np.float32
finite_f32 = st.floats(width=32, allow_nan=False, allow_infinity=False)
arrays = hnp.arrays(np.float32, st.integers(0, 64), elements=finite_f32)


def fsum_ref(a: np.ndarray, b: np.ndarray) -> float:
    return math.fsum(float(x) * float(y) for x, y in zip(a.flat, b.flat, strict=True))


@settings(max_examples=300)
@given(arrays)
def test_squares_equal_fsum(a: np.ndarray) -> None:
    assert fsum_squares(a) == fsum_ref(a, a)


@settings(max_examples=300)
@given(
    st.integers(0, 64).flatmap(
        lambda n: st.tuples(*[hnp.arrays(np.float32, n, elements=finite_f32)] * 2)
    )
)
def test_dot_equals_fsum(ab: tuple[np.ndarray, np.ndarray]) -> None:
    a, b = ab
    assert fsum_dot(a, b) == fsum_ref(a, b)


def test_split_is_exact_for_extremes() -> None:
    x = np.array(
        [0.0, -0.0, 1e-45, -1e-45, 1.17549435e-38, 3.4028235e38, -3.4028235e38, 1.0, -0.1],
        dtype=F32,
    )
    m, e = split_f32(x)
    for xi, mi, ei in zip(x.tolist(), m.tolist(), e.tolist(), strict=True):
        assert abs(mi) < 2**24
        assert math.ldexp(mi, ei - 24) == xi


def test_cancellation_and_large_range() -> None:
    a = np.array([3.4e38, 1e-40, -3.4e38, 1.0], dtype=F32)
    assert fsum_dot(a, np.ones_like(a)) == fsum_ref(a, np.ones_like(a))
    assert fsum_squares(np.array([1e-45] * 3, dtype=F32)) == fsum_ref(
        *[np.array([1e-45] * 3, F32)] * 2
    )
    assert fsum_squares(np.zeros(5, F32)) == 0.0
    assert math.copysign(1.0, fsum_dot(np.array([-1.0, 1.0], F32), np.ones(2, F32))) == 1.0


def test_accumulator_spans_calls_and_chunks_rounding_once() -> None:
    rng = np.random.default_rng(1)
    parts = [
        (rng.standard_normal(50) * 10.0 ** rng.integers(-20, 20)).astype(F32) for _ in range(6)
    ]
    acc = ExactSum()
    for p in parts:
        acc.add(p, p)
    flat = np.concatenate(parts)
    assert acc.value() == fsum_ref(flat, flat)
    assert norm({f"t{i}": p for i, p in enumerate(parts)}) == math.sqrt(fsum_ref(flat, flat))


def test_two_d_tensors() -> None:
    a = np.arange(12, dtype=F32).reshape(3, 4) / F32(7)
    assert fsum_squares(a) == fsum_ref(a, a)
