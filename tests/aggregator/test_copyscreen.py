"""The copy screen flags copies, not independent noise, exactly as the plain definition."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from hypertrain.aggregator import copyscreen
from hypertrain.aggregator.copyscreen import copy_screen, top_k, top_k_size
from hypertrain.protocol.f32 import f32_hex
from tests.aggregator.reference import ref_copy_screen, ref_topk

F32 = np.float32


def noise(seed: int, n: int = 300) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"b": rng.standard_normal(n).astype(F32), "a": rng.standard_normal((2, 7)).astype(F32)}


def as_tuples(deltas: dict[str, dict[str, np.ndarray]]) -> list[tuple[str, str, str, str]]:
    flags, _ = copy_screen(deltas)
    return [(f.a, f.b, f.overlap, f.cosine) for f in flags]


def test_exact_copy_flagged_noise_not() -> None:
    deltas = {"m2": noise(1), "m1": noise(2), "m3": noise(1), "m0": noise(3)}
    flags, raise_q = copy_screen(deltas)
    assert [(f.a, f.b) for f in flags] == [("m2", "m3")]
    assert flags[0].overlap == f32_hex(1.0)  # an exact copy shares all k top indices
    assert flags[0].cosine == f32_hex(1.0)
    assert raise_q == ("m2", "m3")
    assert as_tuples(deltas) == [
        (a, b, f32_hex(o), f32_hex(c)) for a, b, o, c in ref_copy_screen(deltas)
    ]


def test_scaled_and_noisy_copies_match_reference() -> None:
    base = noise(4)
    rng = np.random.default_rng(5)
    deltas = {
        "a": base,
        "b": {n: (x * F32(0.5)).astype(F32) for n, x in base.items()},
        "c": {
            n: (x + rng.standard_normal(x.shape).astype(F32) * F32(0.4)) for n, x in base.items()
        },
        "d": noise(6),
        "e": {n: np.zeros_like(x) for n, x in base.items()},
    }
    assert as_tuples(deltas) == [
        (a, b, f32_hex(o), f32_hex(c)) for a, b, o, c in ref_copy_screen(deltas)
    ]
    assert ("a", "b") in {(a, b) for a, b, _, _ in as_tuples(deltas)}


@pytest.mark.parametrize("size", [0, 1, 99, 100, 101, 700, 12345])
def test_top_k_size_is_the_float_formula(size: int) -> None:
    import math

    assert top_k_size(size) == max(1, math.ceil(0.01 * size))


def test_top_k_ties_go_to_lower_index() -> None:
    flat = np.array([1, -3, 3, 2, -3, 0, 3], dtype=F32)
    for k in range(1, 8):
        assert set(top_k(flat, k).tolist()) == ref_topk(flat.tolist(), k)


def test_fewer_than_two_contributions() -> None:
    assert copy_screen({}) == ((), ())
    assert copy_screen({"x": noise(1)}) == ((), ())


def _partitioned(flat: np.ndarray, k: int) -> np.ndarray:
    """The whole-row top-k the screen used before its sampled cut."""
    mag = np.abs(flat)
    kth = np.partition(mag, mag.size - k)[mag.size - k]
    above = np.flatnonzero(mag > kth)
    ties = np.flatnonzero(mag == kth)[: k - above.size]
    return np.sort(np.concatenate([above, ties])).astype(np.int64)


@settings(max_examples=200)
@given(
    st.integers(2, 3000).flatmap(
        lambda n: hnp.arrays(
            np.float32,
            n,
            elements=st.one_of(
                st.sampled_from([0.0, -0.0, 1.0, -1.0, 2.0, 1e-45]),
                st.floats(-4, 4, width=32),
            ),
        )
    ),
    st.floats(0.0, 1.0),
    st.sampled_from([1, 4, 64, 1 << 16]),
)
def test_top_k_from_a_sampled_cut_is_the_whole_row_top_k(
    flat: np.ndarray, share: float, sample: int
) -> None:
    k = min(flat.size - 1, max(1, int(share * flat.size)))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(copyscreen, "SAMPLE", sample)
        got = top_k(flat, k, np.empty(flat.size + 3, dtype=F32))
    assert got.dtype == np.int64
    assert np.array_equal(got, _partitioned(flat, k))


def test_top_k_falls_back_to_the_whole_row_when_the_sample_misleads() -> None:
    """Only the sampled elements are non-zero: fewer than k reach the sample's cut."""
    n, k = 1 << 16, 2000
    flat = np.zeros(n, dtype=F32)
    flat[:: n // 64] = np.arange(1, 65, dtype=F32)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(copyscreen, "SAMPLE", 64)
        got = top_k(flat, k)
    assert np.array_equal(got, _partitioned(flat, k))
    assert np.count_nonzero(flat[got]) == 64
