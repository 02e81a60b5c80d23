"""The copy screen's fast pass keeps its promises: exact overlap counts whichever way a run of
shared indices is counted, and cosine estimates within ``margin`` of the recorded cosines, for
rows at any scale (huge, subnormal, zero) and over many blocks."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from hypertrain.aggregator import screenpass
from hypertrain.aggregator.exact import fsum_dot, fsum_squares
from hypertrain.aggregator.screenpass import cosine_bounds, overlap_counts

F32 = np.float32
ELEMENTS = [
    st.floats(width=32, allow_nan=False, allow_infinity=False),
    st.floats(-(2.0**-126), 2.0**-126, width=32, allow_nan=False),  # subnormal
    st.floats(-1, 1, width=32),
]


def _recorded(a: np.ndarray, b: np.ndarray) -> float:
    """The cosine the screen records (its module doc)."""
    na, nb = math.sqrt(fsum_squares(a)), math.sqrt(fsum_squares(b))
    return 0.0 if na == 0.0 or nb == 0.0 else fsum_dot(a, b) / (na * nb)


@st.composite
def _stack(draw: Any) -> np.ndarray:
    n = draw(st.integers(1, 90))
    base = draw(hnp.arrays(np.float32, n, elements=draw(st.sampled_from(ELEMENTS))))
    rows = []
    for _ in range(draw(st.integers(2, 6))):
        how = draw(st.sampled_from(["copy", "scaled", "noisy", "zero", "free"]))
        with np.errstate(all="ignore"):
            if how == "copy":
                rows.append(base.copy())
            elif how == "scaled":
                rows.append(base * F32(draw(st.sampled_from([2.0**-100, 2.0**-60, 2.0**60]))))
            elif how == "noisy":
                noise = draw(hnp.arrays(np.float32, n, elements=st.floats(-1, 1, width=32)))
                rows.append(base + noise * F32(draw(st.sampled_from([1e-3, 1.0, 2.0**-140]))))
            elif how == "zero":
                rows.append(np.zeros(n, dtype=F32))
            else:
                rows.append(
                    draw(hnp.arrays(np.float32, n, elements=draw(st.sampled_from(ELEMENTS))))
                )
    return np.stack([r if np.isfinite(r).all() else base for r in rows]).astype(F32)


@settings(max_examples=300)
@given(
    _stack(),
    st.lists(st.integers(0, 90), max_size=4),
    st.sampled_from([1, 7, 64, 1 << 12]),
    st.sampled_from([1, 3]),
    st.sampled_from([screenpass.STAGES, (1.0,), (0.3, 0.6, 1.0)]),
    st.sampled_from([0.95, 0.5, -0.5]),
)
def test_cosine_bounds_keep_their_promise(
    stack: np.ndarray,
    cuts: list[int],
    block: int,
    gather: int,
    stages: tuple[float, ...],
    limit: float,
) -> None:
    rows = [np.split(row, sorted(c for c in cuts if c <= row.size)) for row in stack]
    peaks = [float(np.abs(row).max()) for row in stack]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(screenpass, "BLOCK", block)
        mp.setattr(screenpass, "GATHER", gather * block)
        mp.setattr(screenpass, "STAGES", stages)
        q, margin = cosine_bounds(rows, peaks, limit)
    assert margin < 0.01
    for a in range(len(stack)):
        for b in range(a + 1, len(stack)):
            recorded = _recorded(stack[a], stack[b])
            assert recorded <= q[a, b] + margin
            if q[a, b] > limit - margin or stages == (1.0,):
                assert abs(q[a, b] - recorded) <= margin


@settings(max_examples=150)
@given(
    _stack(),
    st.sampled_from([1, 7, 64, 1 << 12]),
    st.sampled_from([1, 3]),
    st.sampled_from([0.95, 0.5]),
)
def test_row_squares_stand_for_the_first_pass(
    stack: np.ndarray, block: int, gather: int, limit: float
) -> None:
    """Squares from rows laid out whole keep the promise, and no chunk is gathered for them."""
    rows = [np.split(row, [row.size // 3]) for row in stack]
    peaks = [float(np.abs(row).max()) for row in stack]
    gathered: list[int] = []
    real = screenpass._Gather.chunk

    def chunk(self: Any, c: int, which: np.ndarray) -> np.ndarray:
        gathered.append(c)
        return real(self, c, which)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(screenpass, "BLOCK", block)
        mp.setattr(screenpass, "GATHER", gather * block)
        mp.setattr(screenpass, "STAGES", (1.0,))
        scratch = np.empty(stack.shape[1], dtype=F32)
        squares = np.stack(
            [screenpass.row_squares(row, p, scratch) for row, p in zip(stack, peaks, strict=True)],
            axis=1,
        )
        q, margin = cosine_bounds(rows, peaks, limit, squares=squares)
        mp.setattr(screenpass._Gather, "chunk", chunk)
        cosine_bounds(rows, peaks, limit, squares=squares)
    assert len(gathered) == len(set(gathered))  # each chunk at most once: the product alone
    for a in range(len(stack)):
        for b in range(a + 1, len(stack)):
            recorded = _recorded(stack[a], stack[b])
            assert recorded <= q[a, b] + margin
            assert abs(q[a, b] - recorded) <= margin


def test_independent_rows_drop_out_after_the_first_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(screenpass, "BLOCK", 64)
    monkeypatch.setattr(screenpass, "GATHER", 128)
    rng = np.random.default_rng(7)
    stack = rng.standard_normal((12, 128 * 64)).astype(F32)
    stack[11] = stack[4] + F32(0.01) * stack[11]  # a near-copy of row 4
    gathered: list[int] = []
    real = screenpass._Gather.chunk

    def chunk(self: Any, c: int, which: np.ndarray) -> np.ndarray:
        gathered.append(which.size)
        return real(self, c, which)

    monkeypatch.setattr(screenpass._Gather, "chunk", chunk)
    q, margin = cosine_bounds([[row] for row in stack], [1.0] * 12, 0.95)
    assert gathered[:64] == [12] * 64  # the sums of squares
    assert gathered[64:68] == [12] * 4  # the first sixteenth of the columns, every row
    assert gathered[68:] == [2] * 60  # then only the open pair: rows 4 and 11
    assert q[4, 11] > 0.95 - margin
    assert (np.delete(np.triu(q, 1), [4 * 12 + 11]) <= 0.95 - margin).all()


def _brute(tops: list[np.ndarray], m: int) -> np.ndarray:
    counts = np.zeros((m, m), dtype=np.int64)
    for a in range(m):
        for b in range(a + 1, m):
            counts[a, b] = len(set(tops[a].tolist()) & set(tops[b].tolist()))
    return counts


@settings(max_examples=200)
@given(
    st.integers(1, 40).flatmap(
        lambda m: st.lists(
            st.lists(st.integers(0, 60), max_size=20, unique=True), min_size=m, max_size=m
        )
    ),
    st.sampled_from([1, 4, 1 << 12]),
    st.sampled_from([1, 16, 1 << 20]),
)
def test_overlap_counts_are_exact_by_pairs_and_by_columns(
    sets: list[list[int]], block: int, dense: int
) -> None:
    tops = [np.array(sorted(s), dtype=np.int64) for s in sets]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(screenpass, "BLOCK", block)
        mp.setattr(screenpass, "DENSE", dense)  # 1: all pair by pair; 2**20: all as columns
        got = overlap_counts(tops, len(tops))
    assert (got == _brute(tops, len(tops))).all()


@settings(max_examples=200)
@given(
    st.integers(1, 30).flatmap(
        lambda m: st.lists(
            st.lists(st.integers(0, 200), max_size=30, unique=True), min_size=m, max_size=m
        )
    ),
    st.sampled_from([1, 3, 7, 64]),
    st.sampled_from([1, 1 << 20]),
)
def test_overlap_counts_are_exact_over_pieces_of_the_index_range(
    sets: list[list[int]], keys: int, dense: int
) -> None:
    tops = [np.array(sorted(s), dtype=np.int64) for s in sets]
    pieces: list[int] = []
    real = screenpass._piece

    def piece(part: list[np.ndarray], m: int) -> np.ndarray:
        pieces.append(sum(t.size for t in part))
        return real(part, m)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(screenpass, "KEYS", keys)
        mp.setattr(screenpass, "DENSE", dense)
        mp.setattr(screenpass, "_piece", piece)
        got = overlap_counts(tops, len(tops))
    assert (got == _brute(tops, len(tops))).all()
    assert sum(pieces) == sum(t.size for t in tops)  # every key counted in exactly one piece
    total = sum(t.size for t in tops)
    if total > keys and max(int(t[-1]) for t in tops if t.size) >= 1:
        assert len(pieces) > 1


def test_long_runs_are_counted_as_product_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    shared = np.arange(0, 3000, 3, dtype=np.int64)
    tops = [np.sort(np.concatenate([shared, 5000 + 2 * np.arange(i, i + 50)])) for i in range(64)]
    seen: list[int] = []
    real = screenpass._pairwise

    def pairwise(index: np.ndarray, row: np.ndarray, m: int) -> np.ndarray:
        seen.append(index.size)
        return real(index, row, m)

    monkeypatch.setattr(screenpass, "_pairwise", pairwise)
    got = overlap_counts(tops, 64)
    assert (got == _brute(tops, 64)).all()
    assert got[0, 1] == 1000 + 49
    assert got[0, 63] == 1000
    assert seen[0] < 64 * 50  # the 1,000 indices all 64 rows share never went pair by pair


def test_the_blas_is_inspected_once() -> None:
    assert screenpass._blas() is screenpass._blas()
