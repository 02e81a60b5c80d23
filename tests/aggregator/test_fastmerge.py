"""The fast merge (bounded norms, chunked loops, candidate copy screen) equals the exact one.

The references are the code of before issue 17, kept in tests/aggregator/old_merge.py and
old_copyscreen.py; every comparison is bit for bit, on inputs chosen at the edges: norms exactly
at and around the thresholds, subnormals, huge values, cancelling dots, copies near the cosine
limit.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from hypertrain.aggregator import copyscreen, merge
from hypertrain.aggregator.bounded import SquareSum, decide, scale_for
from hypertrain.aggregator.copyscreen import copy_screen
from hypertrain.aggregator.exact import fsum_squares
from hypertrain.aggregator.merge import Params, centered_clip, outer_step, preclip
from hypertrain.aggregator.outerstate import OuterState
from tests.aggregator import old_copyscreen, old_merge
from tests.aggregator.reference import bits

F32 = np.float32
ANY_F32 = st.floats(width=32, allow_nan=False, allow_infinity=False)
MODEST_F32 = st.floats(-(2.0**60), 2.0**60, width=32, allow_nan=False)  # differences stay finite
SUBNORMAL = st.floats(-(2.0**-126), 2.0**-126, width=32, allow_nan=False)


def _vec(elements: st.SearchStrategy[float], n: int) -> st.SearchStrategy[np.ndarray]:
    return hnp.arrays(np.float32, n, elements=elements)


def _split(flat: np.ndarray) -> dict[str, np.ndarray]:
    """Three tensors (one 0-d) in a non-sorted insertion order."""
    n = flat.size
    a, b = n // 3, 2 * n // 3
    return {"z": flat[:a].copy(), "é": flat[b:].reshape(-1, 1).copy(), "a": flat[a:b].copy()}


def _thresholds(r: float, picked: int) -> float:
    """A float32 threshold at, or a few float32 ulps around, the norm ``r``."""
    x = F32(min(r, 3.0e38))
    for _ in range(abs(picked)):
        x = np.nextafter(x, F32(np.inf) if picked > 0 else F32(0))
    return float(x)


# --- the bounded decision ------------------------------------------------------------------------


@settings(max_examples=400)
@given(
    st.sampled_from([ANY_F32, MODEST_F32, SUBNORMAL]).flatmap(
        lambda el: st.integers(0, 200).flatmap(lambda n: _vec(el, n))
    ),
    st.integers(-3, 3),
    st.floats(0.0, 4.0),
)
def test_decide_never_contradicts_the_exact_norm(
    flat: np.ndarray, picked: int, factor: float
) -> None:
    r = math.sqrt(fsum_squares(flat))
    sq = SquareSum()
    sq.add(flat, np.empty(max(flat.size, 1)))
    lo, hi = sq.bounds()
    assert lo <= fsum_squares(flat) <= hi
    for x in (_thresholds(r, picked), float(F32(min(r * factor, 3.0e38)))):
        got = decide(lo, hi, x)
        assert got is None or got == scale_for(r, x)


@pytest.mark.parametrize("target", [0.75, 0.3, 0.999999, 1e-30])
def test_decide_refuses_an_interval_over_a_float32_boundary(target: float) -> None:
    # r such that 1/r is the midpoint of two float32 values: the two sides round apart
    mid = (float(F32(target)) + float(np.nextafter(F32(target), F32(2)))) / 2
    s = (1.0 / mid) ** 2
    lo, hi = s * (1 - 2**-40), s * (1 + 2**-40)
    assert scale_for(math.sqrt(lo), 1.0) != scale_for(math.sqrt(hi), 1.0)
    assert decide(lo, hi, 1.0) is None
    assert decide(s, s, 1.0) == scale_for(math.sqrt(s), 1.0)


def test_decide_at_the_comparison() -> None:
    assert decide(4.0, 4.0, 2.0) == (True, F32(1))
    assert decide(4.0, math.nextafter(4.0, 5.0), 2.0) == (True, F32(1))  # sqrt rounds to 2
    assert decide(4.0, 4.00001, 2.0) is None
    assert decide(0.0, 0.0, 0.0) == (True, F32(1))
    assert decide(1.0, 1.0, 0.0) == (False, F32(0))
    assert decide(1.0, math.inf, 0.5) is None or decide(1.0, math.inf, 0.5) == (False, F32(0))


# --- preclip, CenteredClip, outer step against the old code --------------------------------------


@settings(max_examples=200)
@given(
    st.sampled_from([ANY_F32, SUBNORMAL]).flatmap(
        lambda el: st.integers(1, 120).flatmap(lambda n: _vec(el, n))
    ),
    st.integers(-2, 2),
)
def test_preclip_equals_the_old_preclip(flat: np.ndarray, picked: int) -> None:
    delta = _split(flat)
    x = _thresholds(old_merge.norm(delta), picked)
    new, new_clipped = preclip(delta, x)
    old, old_clipped = old_merge.preclip(delta, x)
    assert new_clipped == old_clipped
    assert bits(new) == bits(old)


@st.composite
def _cclip_case(draw: Any) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, np.ndarray], float]:
    n = draw(st.integers(1, 90))
    el = draw(st.sampled_from([MODEST_F32, SUBNORMAL]))
    center = draw(_vec(el, n))
    ids = draw(st.lists(st.sampled_from(["m0", "m1", "é", "B", "z"]), min_size=1, unique=True))
    deltas: dict[str, dict[str, np.ndarray]] = {}
    for hk in ids:
        how = draw(st.sampled_from(["free", "center", "copy"]))
        if how == "center":  # a zero difference
            flat = center.copy()
        elif how == "copy" and deltas:
            flat = np.concatenate([np.ravel(a) for a in deltas[next(iter(deltas))].values()])
            flat = flat[np.argsort(np.argsort(np.arange(flat.size)))]
        else:
            flat = draw(_vec(el, n))
        deltas[hk] = _split(flat)
    first = next(iter(deltas))
    diff = {k: np.subtract(deltas[first][k], a, dtype=F32) for k, a in _split(center).items()}
    tau = _thresholds(old_merge.norm(diff), draw(st.integers(-2, 2)))
    return deltas, _split(center), tau


@settings(max_examples=200)
@given(_cclip_case(), st.integers(1, 3))
def test_centered_clip_equals_the_old_one(
    case: tuple[dict[str, dict[str, np.ndarray]], dict[str, np.ndarray], float], iters: int
) -> None:
    deltas, center, tau = case
    new = centered_clip(deltas, center, tau, iters)
    old = old_merge.centered_clip(deltas, center, tau, iters)
    assert bits(new.g) == bits(old.g)
    assert (new.scales, new.weight_hex) == (old.scales, old.weight_hex)


def _big(seed: int, n: int, scale: float) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "w": (rng.standard_normal((n // 200, 200)) * scale).astype(F32),
        "b": (rng.standard_normal(n % 200 + 7) * scale).astype(F32),
    }


def test_many_chunks_equal_the_old_code_without_exact_sums(monkeypatch: pytest.MonkeyPatch) -> None:
    # 90,000 elements: three chunks and a dozen dot pieces per norm
    deltas = {f"m{i}": _big(i, 90_000, 0.008 + 0.001 * i) for i in range(5)}  # norms 2.4-3.6
    deltas["m5"] = deltas["m0"]
    center = _big(99, 90_000, 0.005)
    old_pre = {hk: old_merge.preclip(d, 2.85) for hk, d in deltas.items()}
    old_cc = old_merge.centered_clip({hk: p for hk, (p, _) in old_pre.items()}, center, 2.9, 2)
    state = OuterState(_big(7, 90_000, 1.0), _big(8, 90_000, 0.1), center)
    params = Params("nesterov", F32(0.4), F32(0.9), F32(2.85), F32(2.9), 2)
    old_out = old_merge.outer_step(state, old_cc.g, params)

    def refuse(*_: object) -> float:
        raise AssertionError("the bounded sums should decide these norms")

    monkeypatch.setattr(merge, "norm", refuse)
    monkeypatch.setattr(merge, "_diff_norm", refuse)
    pre = {hk: preclip(d, 2.85) for hk, d in deltas.items()}
    assert {hk: c for hk, (_, c) in pre.items()} == {hk: c for hk, (_, c) in old_pre.items()}
    assert sum(c for _, c in pre.values()) == 3  # some clipped, some not
    cc = centered_clip({hk: p for hk, (p, _) in pre.items()}, center, 2.9, 2)
    assert bits(cc.g) == bits(old_cc.g)
    assert cc.scales == old_cc.scales
    assert any(s != "0000803f" for s in cc.scales["m4"])
    out = outer_step(state, cc.g, params)
    for part in ("theta", "u", "center"):
        assert bits(getattr(out, part)) == bits(getattr(old_out, part))


def test_column_order_and_transposed_inputs_merge_as_c_order_ones() -> None:
    """Any memory layout of the inputs gives the same values (a review found the chunked
    writes going into copies of non-C-order outputs: the center came back unchanged and the
    outer step returned uninitialised memory)."""
    rng = np.random.default_rng(5)
    c = {"w": rng.standard_normal((30, 7)).astype(F32), "b": rng.standard_normal(7).astype(F32)}
    deltas = {
        f"m{i}": {n: (a + rng.standard_normal(a.shape)).astype(F32) for n, a in c.items()}
        for i in range(3)
    }
    state = OuterState(
        {n: a * F32(2) for n, a in c.items()}, {n: a * F32(0.5) for n, a in c.items()}, c
    )
    params = Params("nesterov", F32(0.4), F32(0.9), F32(1e9), F32(1.5), 2)

    def fortran(tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {n: np.asfortranarray(a) for n, a in tensors.items()}

    want = centered_clip(deltas, c, 1.5, 2)
    got = centered_clip({hk: fortran(d) for hk, d in deltas.items()}, fortran(c), 1.5, 2)
    assert bits(got.g) == bits(want.g)
    assert bits(want.g) != bits(c)  # the clip moved the center
    want_out = outer_step(state, want.g, params)
    odd = OuterState(fortran(state.theta), {n: a.T.T for n, a in state.u.items()}, fortran(c))
    got_out = outer_step(odd, fortran(want.g), params)
    for part in ("theta", "u", "center"):
        assert bits(getattr(got_out, part)) == bits(getattr(want_out, part))


# --- the copy screen against the old all-pairs screen --------------------------------------------


Screen = tuple[list[tuple[str, str, str, str]], tuple[str, ...]]


def _screen(deltas: dict[str, dict[str, np.ndarray]]) -> Screen:
    flags, raise_q = copy_screen(deltas)
    return [(f.a, f.b, f.overlap, f.cosine) for f in flags], raise_q


def _old_screen(deltas: dict[str, dict[str, np.ndarray]]) -> Screen:
    flags, raise_q = old_copyscreen.copy_screen(deltas)
    return [(f.a, f.b, f.overlap, f.cosine) for f in flags], raise_q


@st.composite
def _screen_case(draw: Any) -> dict[str, dict[str, np.ndarray]]:
    n = draw(st.integers(1, 260))
    el = draw(st.sampled_from([ANY_F32, MODEST_F32, SUBNORMAL]))
    base = draw(_vec(el, n))
    noise = draw(_vec(st.floats(-1, 1, width=32), n))
    rows: list[np.ndarray] = []
    for _ in range(draw(st.integers(2, 6))):
        how = draw(st.sampled_from(["copy", "scaled", "neg", "near", "zero", "free", "cancel"]))
        if how == "copy":
            rows.append(base.copy())
        elif how == "scaled":
            factor = F32(draw(st.sampled_from([0.5, 3.0, 2.0**-60, 2.0**60])))
            with np.errstate(all="ignore"):
                rows.append((base * factor).astype(F32))
        elif how == "neg":
            rows.append(-base)
        elif how == "near":  # cosine with base close to 0.95
            nb, nn = np.linalg.norm(base.astype(np.float64)), np.linalg.norm(noise.astype(float))
            t = 0.32868 * nb / nn if nn > 0 else 0.0
            t *= 1 + draw(st.floats(-1e-4, 1e-4))
            with np.errstate(all="ignore"):
                rows.append((base + F32(t) * noise).astype(F32))
        elif how == "zero":
            rows.append(np.zeros(n, dtype=F32))
        elif how == "cancel":
            flipped = base.copy()
            flipped[::2] = -flipped[::2]
            rows.append(flipped)
        else:
            rows.append(draw(_vec(el, n)))
    rows = [r if np.isfinite(r).all() else base.copy() for r in rows]
    names = draw(st.permutations([f"m{i}" for i in range(len(rows))]))
    return {hk: _split(row) for hk, row in zip(names, rows, strict=True)}


@settings(max_examples=300)
@given(_screen_case())
def test_copy_screen_equals_the_all_pairs_screen(deltas: dict[str, dict[str, np.ndarray]]) -> None:
    assert _screen(deltas) == _old_screen(deltas)


def test_copy_screen_computes_exact_values_for_candidates_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    deltas = {f"m{i:02d}": _big(i, 20_000, 0.01) for i in range(12)}
    deltas["m12"] = deltas["m03"]
    near = {n: (a + _big(50, 20_000, 0.001)[n]).astype(F32) for n, a in deltas["m05"].items()}
    deltas["m13"] = near
    calls: list[int] = []
    real = copyscreen.fsum_dot

    def counted(a: np.ndarray, b: np.ndarray) -> float:
        calls.append(1)
        return real(a, b)

    monkeypatch.setattr(copyscreen, "fsum_dot", counted)
    got = _screen(deltas)
    assert got == _old_screen(deltas)
    assert [(a, b) for a, b, _, _ in got[0]] == [("m03", "m12"), ("m05", "m13")]
    assert len(calls) == 2  # 91 pairs, two candidates


def test_scale_for_is_float64_whatever_the_type_of_the_threshold() -> None:
    """The manifest's thresholds are float32 values; passed as numpy float32 they would make
    NumPy 2 compare and divide in float32 (NEP 50), which is not the protocol."""
    r = 1.00000001  # above 1 in float64, 1 in float32
    assert scale_for(r, F32(1)) == scale_for(r, 1.0) == (False, F32(1.0 / r))
    rng = np.random.default_rng(7)
    for r, x in zip(rng.uniform(1.0, 3.0, 200), rng.uniform(0.1, 1.0, 200), strict=True):
        x32 = F32(x)
        assert scale_for(float(r), x32) == scale_for(float(r), float(x32))
        assert scale_for(float(r), x32)[1] == F32(float(x32) / float(r))
