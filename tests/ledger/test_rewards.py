"""The finalize math of spec 8 on its own: contributions and slices."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hypertrain.ledger.rewards import contribution, slices


def test_three_equal_miners_share_the_budget_and_one_unit_is_left() -> None:
    shares = slices(10**6, {h: contribution(100, 0) for h in "abc"})
    assert shares == {"a": 333_333, "b": 333_333, "c": 333_333}
    assert 10**6 - sum(shares.values()) == 1


def test_soft_score_weighs_from_0_8_to_1_0() -> None:
    assert contribution(10, 0) == 10 * 800_000
    assert contribution(10, 10**6) == 10 * 1_000_000
    assert contribution(10, 500_000) == 10 * 900_000
    assert contribution(10, -7) == contribution(10, 0)
    assert contribution(10, 5 * 10**6) == contribution(10, 10**6)
    assert contribution(10, 4) == 10 * 800_000  # 4 // 5 == 0: floored
    shares = slices(10**6, {"low": contribution(1, 0), "high": contribution(1, 10**6)})
    assert shares == {"low": 444_444, "high": 555_555}  # 0.8 : 1.0


def test_no_contribution_gives_nothing() -> None:
    assert slices(10**6, {}) == {}
    assert slices(10**6, {"a": 0, "b": 0}) == {"a": 0, "b": 0}


@given(
    st.integers(1, 5 * 10**6),
    st.dictionaries(st.text("abcdef", min_size=1, max_size=3), st.integers(0, 10**9), max_size=8),
)
def test_slices_never_exceed_the_budget_and_are_floors(
    budget: int, weights: dict[str, int]
) -> None:
    shares = slices(budget, weights)
    assert set(shares) == set(weights)
    assert sum(shares.values()) <= budget
    total = sum(weights.values())
    for hotkey, share in shares.items():
        assert share == (budget * weights[hotkey] // total if total else 0)
    if total:
        assert budget - sum(shares.values()) < max(1, len(weights))
