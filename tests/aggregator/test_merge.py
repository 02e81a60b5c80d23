"""preclip, CenteredClip, the outer step and aggregate_round against the plain reference."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hypertrain.aggregator.merge import (
    MergeInputError,
    Params,
    UnsupportedOuterOpt,
    aggregate_round,
    centered_clip,
    norm,
    outer_step,
    preclip,
)
from hypertrain.aggregator.outerstate import OuterState, pack_outer
from hypertrain.protocol.f32 import f32_hex
from hypertrain.protocol.manifest import OuterSpec
from tests.aggregator.reference import (
    bits,
    ref_cclip,
    ref_copy_screen,
    ref_norm,
    ref_outer,
    ref_preclip,
)

F32 = np.float32
SHAPES = {"b": (3,), "a.w": (2, 2), "é": ()}


def outer_spec(**over: object) -> OuterSpec:
    fields: dict[str, object] = {
        "opt": "nesterov",
        "lr": f32_hex(0.4),
        "momentum": f32_hex(0.9),
        "topk_frac": f32_hex(1.0),
        "bits": 8,
        "ef_beta": f32_hex(0.0),
        "preclip_norm": f32_hex(1.0),
        "cclip_tau": f32_hex(1.0),
        "cclip_iters": 1,
        "center": "prev_outer_update",
    }
    fields.update(over)
    return OuterSpec(**fields)  # type: ignore[arg-type]


PARAMS = Params.from_outer(outer_spec())


def rand_state(rng: np.random.Generator, scale: float = 1.0) -> dict[str, np.ndarray]:
    return {n: np.asarray(rng.standard_normal(s) * scale, dtype=F32) for n, s in SHAPES.items()}


def same(x: dict[str, np.ndarray], y: dict[str, np.ndarray]) -> bool:
    return bits(x) == bits(y)


def test_params_from_outer() -> None:
    assert PARAMS.lr == F32(0.4)
    assert PARAMS.momentum == F32(0.9)
    assert PARAMS.cclip_iters == 1
    assert PARAMS.to_tape()["cclip_tau"] == "0000803f"
    with pytest.raises(UnsupportedOuterOpt):
        Params.from_outer(outer_spec(opt="sparseloco"))
    with pytest.raises(NotImplementedError):
        Params.from_outer(outer_spec(opt="sparseloco"))


@pytest.mark.parametrize("scale", [1e-3, 0.3, 1.0, 7.0, 1e6])
def test_preclip_matches_reference(scale: float) -> None:
    delta = rand_state(np.random.default_rng(3), scale)
    got, clipped = preclip(delta, 1.0)
    want, want_clipped = ref_preclip(delta, 1.0)
    assert norm(delta) == ref_norm(delta)
    assert clipped == want_clipped
    assert same(got, want)


def test_preclip_boundary_is_unchanged() -> None:
    delta = {"x": np.array([3.0, 4.0], dtype=F32)}
    got, clipped = preclip(delta, 5.0)
    assert not clipped
    assert got["x"] is delta["x"]
    got, clipped = preclip(delta, float(np.nextafter(F32(5.0), F32(0))))
    assert clipped
    assert got["x"].dtype == F32


@settings(max_examples=40, deadline=None)
@given(
    st.integers(0, 4),
    st.integers(1, 3),
    st.sampled_from([0.05, 1.0, 100.0]),
    st.integers(0, 2**32 - 1),
)
def test_centered_clip_matches_reference(n: int, iters: int, tau: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    deltas = {f"hk{i}": rand_state(rng) for i in range(n)}
    center = rand_state(rng, 0.5)
    got = centered_clip(deltas, center, tau, iters)
    assert same(got.g, ref_cclip(deltas, center, tau, iters))
    assert got.weight_hex == (f32_hex(float(F32(1) / F32(n))) if n else "00000000")
    assert all(len(s) == iters for s in got.scales.values())
    assert len(got.scales) == n


def test_centered_clip_one_small_contributor_is_the_delta() -> None:
    rng = np.random.default_rng(5)
    delta = rand_state(rng, 0.1)
    zeros = {n: np.zeros(s, F32) for n, s in SHAPES.items()}
    got = centered_clip({"hk": delta}, zeros, 1.0, 1)
    assert same(got.g, preclip(delta, 1.0)[0])
    assert got.scales == {"hk": ("0000803f",)}


def test_centered_clip_ignores_input_order_and_clips_outliers() -> None:
    rng = np.random.default_rng(6)
    deltas = {hk: rand_state(rng) for hk in ["z", "a", "é", "B"]}
    center = rand_state(rng, 0.1)
    forward = centered_clip(deltas, center, 0.5, 2)
    backward = centered_clip(dict(reversed(list(deltas.items()))), center, 0.5, 2)
    assert same(forward.g, backward.g)
    assert list(forward.scales) == ["B", "a", "z", "é"]
    assert all(s != "0000803f" for scales in forward.scales.values() for s in scales)


def test_centered_clip_empty_round_is_zero() -> None:
    center = rand_state(np.random.default_rng(7))
    got = centered_clip({}, center, 1.0, 3)
    assert got.weight_hex == "00000000"
    assert all(a.shape == center[n].shape and not a.any() for n, a in got.g.items())


def test_outer_step_known_values() -> None:
    state = OuterState(
        theta={"x": np.array([1.0, -2.0], F32)},
        u={"x": np.array([0.5, 0.0], F32)},
        center={"x": np.zeros(2, F32)},
    )
    g = {"x": np.array([0.25, -1.0], F32)}
    out = outer_step(state, g, PARAMS)
    mu, eta = F32(0.9), F32(0.4)
    u0 = mu * F32(0.5) + F32(0.25)
    assert out.u["x"].tolist() == [float(u0), -1.0]
    assert out.theta["x"][0] == F32(1.0) - eta * (F32(0.25) + mu * u0)
    assert out.theta["x"][1] == F32(-2.0) - eta * (F32(-1.0) + mu * F32(-1.0))
    assert same(out.center, g)
    assert out.center["x"] is not g["x"]


def test_outer_step_matches_reference() -> None:
    rng = np.random.default_rng(8)
    state = OuterState(theta=rand_state(rng), u=rand_state(rng), center=rand_state(rng))
    g = rand_state(rng, 0.01)
    out = outer_step(state, g, PARAMS)
    th, u = ref_outer(state.theta, state.u, g, 0.4, 0.9)
    assert same(out.theta, th)
    assert same(out.u, u)


def test_aggregate_round_matches_reference_end_to_end() -> None:
    rng = np.random.default_rng(9)
    state = OuterState(theta=rand_state(rng), u=rand_state(rng, 0.1), center=rand_state(rng, 0.1))
    deltas = {hk: rand_state(rng, s) for hk, s in [("m3", 0.2), ("m1", 5.0), ("m2", 0.1)]}
    deltas["m4"] = {n: a.copy() for n, a in deltas["m3"].items()}
    deltas["bad"] = {n: np.full(s, np.nan, F32) for n, s in SHAPES.items()}
    res = aggregate_round(state, deltas, PARAMS, excluded=["bad", "nobody"])
    kept = {hk: ref_preclip(deltas[hk], 1.0)[0] for hk in ["m1", "m2", "m3", "m4"]}
    g = ref_cclip(kept, state.center, 1.0, 1)
    th, u = ref_outer(state.theta, state.u, g, 0.4, 0.9)
    assert same(res.g, g)
    assert same(res.state_out.theta, th)
    assert same(res.state_out.u, u)
    assert same(res.state_out.center, g)
    assert res.inputs == tuple((hk, f32_hex(0.25)) for hk in ["m1", "m2", "m3", "m4"])
    assert res.preclipped == ("m1",)
    assert res.excluded == ("bad", "nobody")
    want_flags = ref_copy_screen(kept)
    assert [(f.a, f.b, f.overlap, f.cosine) for f in res.copy_flags] == [
        (a, b, f32_hex(o), f32_hex(c)) for a, b, o, c in want_flags
    ]
    assert ("m3", "m4") in {(f.a, f.b) for f in res.copy_flags}
    assert res.raise_q == ("m3", "m4")


def test_aggregate_round_is_deterministic() -> None:
    rng = np.random.default_rng(10)
    state = OuterState.genesis(rand_state(rng))
    deltas = {f"hk{i}": rand_state(rng, 0.3) for i in range(5)}
    one = aggregate_round(state, deltas, PARAMS)
    two = aggregate_round(state, dict(reversed(list(deltas.items()))), PARAMS)
    assert pack_outer(one.state_out) == pack_outer(two.state_out)
    assert one.inputs == two.inputs
    assert one.copy_flags == two.copy_flags


def test_aggregate_round_empty() -> None:
    state = OuterState.genesis(rand_state(np.random.default_rng(11)))
    res = aggregate_round(state, {}, PARAMS)
    assert res.inputs == ()
    assert not any(a.any() for a in res.g.values())
    assert same(res.state_out.theta, state.theta)


def _broken(kind: str) -> dict[str, object]:
    delta: dict[str, object] = dict(rand_state(np.random.default_rng(12)))
    if kind == "nan":
        delta["b"] = np.array([0.0, np.nan, 1.0], F32)
    elif kind == "inf":
        delta["a.w"] = np.array([[0.0, 1.0], [np.inf, 1.0]], F32)
    elif kind == "shape":
        delta["b"] = np.zeros(4, F32)
    elif kind == "missing":
        del delta["é"]
    elif kind == "extra":
        delta["zz"] = np.zeros(1, F32)
    elif kind == "dtype":
        delta["b"] = np.zeros(3, np.float64)
    return delta


@pytest.mark.parametrize(
    ("kind", "tensor"),
    [
        ("nan", "b"),
        ("inf", "a.w"),
        ("shape", "b"),
        ("missing", "é"),
        ("extra", "zz"),
        ("dtype", "b"),
    ],
)
def test_aggregate_round_rejects_bad_deltas(kind: str, tensor: str) -> None:
    rng = np.random.default_rng(13)
    state = OuterState.genesis(rand_state(rng))
    deltas = {"good": rand_state(rng), "mallory": _broken(kind)}
    with pytest.raises(MergeInputError, match=f"miner 'mallory'.*{tensor!r}"):
        aggregate_round(state, deltas, PARAMS)  # type: ignore[arg-type]
    aggregate_round(state, deltas, PARAMS, excluded={"mallory"})  # type: ignore[arg-type]


def test_norm_of_nothing() -> None:
    assert norm({}) == 0.0
    assert math.isfinite(norm({"x": np.full(4, 3e38, F32)}))
