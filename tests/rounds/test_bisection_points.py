"""Properties of a bisection's points (spec 6.4): ``points`` and ``canonical``."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hypertrain.rounds.bisection import (
    Point,
    RefereeCase,
    Stage,
    advance,
    canonical,
    layer_ops,
    points,
)

intervals = st.tuples(st.integers(0, 10_000), st.integers(1, 5_000), st.integers(1, 64)).map(
    lambda x: (x[0], x[0] + x[1], min(x[2], x[1]))
)


@given(intervals)
def test_points_span_the_interval_in_n_steps(interval: tuple[int, int, int]) -> None:
    a, b, n = interval
    got = points(a, b, n)
    assert len(got) == n + 1
    assert (got[0], got[-1]) == (a, b)
    gaps = [q - p for p, q in itertools.pairwise(got)]
    assert all(gap >= 1 for gap in gaps)  # strictly increasing
    assert max(gaps) - min(gaps) <= 1  # as even as integers allow


@given(st.integers(0, 100), st.integers(-3, 3), st.integers(-2, 70))
def test_points_refuse_what_is_not_an_interval(a: int, width: int, n: int) -> None:
    if width >= 1 and 1 <= n <= width:
        assert len(points(a, a + width, n)) == n + 1
    else:
        with pytest.raises(ValueError, match="bad interval"):
            points(a, a + width, n)


@given(st.integers(1, 8), st.integers(1, 1_000))
def test_canonical_names_each_quantity_once(n_layers: int, t: int) -> None:
    """Layer point ``n_layers + 1`` is step point ``t``; op point 0 of layer ``l`` is layer
    point ``l`` and its last op point layer point ``l + 1``; every other point is its own."""
    assert canonical(n_layers, "layer", n_layers + 1, t, None) == Point("step", t)
    assert canonical(n_layers, "step", t, 0, None) == Point("step", t)
    seen: set[Point] = set()
    for layer in range(n_layers + 1):
        n_ops = len(layer_ops(n_layers, layer))
        start = canonical(n_layers, "op", 0, t, layer)
        end = canonical(n_layers, "op", n_ops, t, layer)
        assert start == canonical(n_layers, "layer", layer, t, None)
        assert end == canonical(n_layers, "layer", layer + 1, t, None)
        inner = [canonical(n_layers, "op", k, t, layer) for k in range(1, n_ops)]
        assert inner == [Point("op", t, layer, k) for k in range(1, n_ops)]
        seen.update([start, *inner, end])
    n_points = sum(len(layer_ops(n_layers, lyr)) for lyr in range(n_layers + 1)) + 1
    assert len(seen) == n_points  # the op points of all layers, shared ends counted once
    with pytest.raises(ValueError, match="outside"):
        canonical(n_layers, "layer", n_layers + 2, t, None)
    with pytest.raises(ValueError, match="outside"):
        canonical(n_layers, "op", -1, t, 0)


@given(st.integers(1, 4), st.integers(1, 50), st.integers(2, 5))
def test_an_update_case_names_update(n_layers: int, t: int, arity: int) -> None:
    """The tail's last op point is the step point; the case still names the op."""
    n_ops = len(layer_ops(n_layers, n_layers))
    stage = Stage("op", n_ops - 1, n_ops, 1, t=t, layer=n_layers)
    case = advance(
        n_layers, stage, ["a", "m"], ["a", "x"], arity, first_bad_leaf=1, agreed_step=None
    )
    assert isinstance(case, RefereeCase)
    assert (case.kind, case.point) == ("op", Point("step", t))
    assert case.op_spec == f"step={t};layer={n_layers};op=update"
    assert case.agreed == Point("op", t, n_layers, n_ops - 1)
