"""Soft scores (DESIGN.md section 9): properties over random f32 losses, and exact examples."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hypertrain.protocol.errors import Malformed
from hypertrain.protocol.f32 import f32_from_hex, f32_hex
from hypertrain.rounds.softscore import FULL_SCORE_PPM, soft_scores

NAN = "0000c07f"  # the canonical quiet NaN the delta-loss scorer writes
NOT_FINITE = (NAN, "0100807f", "ffffffff", "0000807f", "000080ff")  # NaNs, +inf, -inf

finite = st.floats(width=32, allow_nan=False, allow_infinity=False).map(f32_hex)
objective = st.one_of(st.none(), st.sampled_from(NOT_FINITE), finite)
hotkeys = st.text(alphabet="abcdefgh", min_size=1, max_size=4)
rounds = st.dictionaries(hotkeys, objective, max_size=12)
scored_rounds = st.dictionaries(hotkeys, finite, min_size=1, max_size=12)


def _loss(objective: str | None) -> Fraction | None:
    if objective is None or not math.isfinite(value := f32_from_hex(objective)):
        return None
    return Fraction(value)


def _scored(objectives: dict[str, str]) -> dict[str, Fraction]:
    losses = {h: _loss(o) for h, o in objectives.items()}
    return {h: loss for h, loss in losses.items() if loss is not None}


@given(rounds)
def test_every_miner_is_answered_within_0_to_a_million(objectives: dict[str, str | None]) -> None:
    scores = soft_scores(objectives)
    assert list(scores) == list(objectives)
    assert all(type(s) is int and 0 <= s <= FULL_SCORE_PPM for s in scores.values())


@given(rounds)
def test_unscored_and_non_finite_get_0(objectives: dict[str, str | None]) -> None:
    scores = soft_scores(objectives)
    for hotkey, obj in objectives.items():
        if _loss(obj) is None:
            assert scores[hotkey] == 0


@given(rounds, st.dictionaries(hotkeys, st.one_of(st.none(), st.sampled_from(NOT_FINITE))))
def test_unscored_miners_change_nobody_elses_score(
    objectives: dict[str, str | None], unscored: dict[str, str | None]
) -> None:
    alone = soft_scores(objectives)
    together = soft_scores({**unscored, **objectives})
    assert {h: together[h] for h in objectives} == alone


@given(scored_rounds)
def test_the_best_gets_a_million_and_the_worst_0(objectives: dict[str, str]) -> None:
    scores = soft_scores(objectives)
    losses = _scored(objectives)
    best, worst = min(losses.values()), max(losses.values())
    for hotkey, loss in losses.items():
        if loss == best:
            assert scores[hotkey] == FULL_SCORE_PPM
        elif loss == worst:
            assert scores[hotkey] == 0


@given(scored_rounds)
def test_a_lower_loss_never_scores_less(objectives: dict[str, str]) -> None:
    scores = soft_scores(objectives)
    losses = _scored(objectives)
    for i, li in losses.items():
        for j, lj in losses.items():
            if li < lj:
                assert scores[i] >= scores[j]
            elif li == lj:
                assert scores[i] == scores[j]


@given(
    st.lists(st.tuples(hotkeys, objective), max_size=12, unique_by=lambda t: t[0]).flatmap(
        lambda items: st.tuples(st.just(items), st.permutations(items))
    )
)
def test_the_order_of_the_miners_does_not_matter(
    orders: tuple[list[tuple[str, str | None]], list[tuple[str, str | None]]],
) -> None:
    first, second = orders
    assert soft_scores(dict(first)) == soft_scores(dict(second))


@given(
    st.lists(objective, max_size=12).flatmap(
        lambda values: st.tuples(st.just(values), st.permutations(range(len(values))))
    )
)
def test_a_score_follows_the_loss_not_the_hotkey(
    drawn: tuple[list[str | None], list[int]],
) -> None:
    """Handing the same losses to the miners in another order hands out the same scores."""
    values, perm = drawn
    before = soft_scores({f"m{i}": v for i, v in enumerate(values)})
    after = soft_scores({f"m{perm[i]}": v for i, v in enumerate(values)})
    assert all(after[f"m{perm[i]}"] == before[f"m{i}"] for i in range(len(values)))


@given(scored_rounds)
def test_each_score_is_the_floor_of_the_exact_ratio(objectives: dict[str, str]) -> None:
    """``s <= 10^6 (W - L) / (W - B) < s + 1``, checked by cross-multiplying the fractions."""
    scores = soft_scores(objectives)
    losses = _scored(objectives)
    best, worst = min(losses.values()), max(losses.values())
    for hotkey, loss in losses.items():
        if best == worst:
            assert scores[hotkey] == FULL_SCORE_PPM
            continue
        scaled = FULL_SCORE_PPM * (worst - loss)
        assert scores[hotkey] * (worst - best) <= scaled < (scores[hotkey] + 1) * (worst - best)


@given(finite, st.lists(hotkeys, min_size=1, max_size=8, unique=True))
def test_all_equal_losses_all_get_a_million(loss: str, miners: list[str]) -> None:
    assert soft_scores(dict.fromkeys(miners, loss)) == dict.fromkeys(miners, FULL_SCORE_PPM)


def test_hand_computed_examples() -> None:
    def hexes(*xs: float) -> dict[str, str | None]:
        return {f"m{i}": f32_hex(x) for i, x in enumerate(xs)}

    assert list(soft_scores(hexes(2.0, 2.25, 3.0)).values()) == [FULL_SCORE_PPM, 750_000, 0]
    # 10^6 * (4 - 2) / (4 - 1) = 666666.66...
    assert list(soft_scores(hexes(1.0, 2.0, 4.0)).values()) == [FULL_SCORE_PPM, 666_666, 0]
    # f32(2.1) = 2.099999904632568359375: 10^6 * 0.900000095367431640625 = 900000.095...
    assert soft_scores(hexes(3.0, 2.1, 2.0))["m1"] == 900_000
    # the order of the mapping is the answer's; the worst can come first
    assert soft_scores({"z": f32_hex(5.0), "a": f32_hex(1.0)}) == {"z": 0, "a": FULL_SCORE_PPM}


def test_exact_where_a_float_ratio_would_floor_one_lower() -> None:
    """L_best = 1, L_worst = 1 + 15625 u, L = L_worst - 249 u (u = 2^-23, float32 steps near
    1): the exact ratio is 249/15625, so 10^6 times it is exactly 15936; the float64 ratio
    rounds below 249/15625 and ``floor(1e6 * ratio)`` gives 15935."""
    best, mid, worst = "0000803f", "103c803f", "093d803f"
    b, m, w = (f32_from_hex(x) for x in (best, mid, worst))
    assert (w - b, w - m) == (15625 * 2.0**-23, 249 * 2.0**-23)
    assert math.floor(1e6 * ((w - m) / (w - b))) == 15_935  # what float arithmetic says
    scores = soft_scores({"best": best, "mid": mid, "worst": worst})
    assert scores == {"best": FULL_SCORE_PPM, "mid": 15_936, "worst": 0}


def test_without_a_settled_score_or_with_a_broken_one() -> None:
    assert soft_scores({}) == {}
    assert soft_scores({"a": None, "b": NAN}) == {"a": 0, "b": 0}
    # one scored miner is "all equal": the full score; the others still 0
    assert soft_scores({"a": None, "b": f32_hex(3.5), "c": NAN}) == {
        "a": 0,
        "b": FULL_SCORE_PPM,
        "c": 0,
    }
    # an infinite loss is unscored, not the worst: it does not squash the others together
    scores = soft_scores({"inf": "0000807f", "a": f32_hex(2.0), "b": f32_hex(3.0)})
    assert scores == {"inf": 0, "a": FULL_SCORE_PPM, "b": 0}
    # -0 and +0 are the same loss
    assert soft_scores({"a": "00000080", "b": "00000000"}) == {"a": 10**6, "b": 10**6}


@pytest.mark.parametrize("bad", ["3F800000", "3f80000", "", "nan"])
def test_a_malformed_objective_is_refused(bad: str) -> None:
    with pytest.raises(Malformed):
        soft_scores({"a": f32_hex(1.0), "b": bad})
