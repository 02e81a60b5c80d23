"""Agreement, decisions, judging and the UTC day (scenarios 25-27)."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from hypertrain.compute import (
    Answer,
    agree,
    decide,
    judge,
    next_day_start_ms,
    utc_day,
    within_tolerance,
)
from hypertrain.scoring.registry import DELTA_LOSS, STEP_THROUGHPUT, Challenge

FP = "ab" * 8
TIMING10 = Challenge(
    id="t10",
    kind="timing",
    objective="tokens_per_s",
    tools=(),
    hardware_class="cpu-generic",
    tolerance_pct=10.0,
    kill_after_ms=1000,
    memory_bytes=1,
    step_budget_ms=500,
    inputs=(),
)


def ok(value: str | float, fp: str = FP) -> Answer:
    return Answer.success(value, fp)


def fail(cls: str) -> Answer:
    return Answer.failed(cls)  # type: ignore[arg-type]


def test_tolerance_edges_exactly() -> None:
    assert within_tolerance(100.0, 110.0, 10.0)
    assert within_tolerance(110.0, 100.0, 10.0)
    assert not within_tolerance(100.0, math.nextafter(110.0, math.inf), 10.0)
    assert within_tolerance(0.0, 0.0, 10.0)
    assert within_tolerance(0.0, -0.0, 10.0)
    assert not within_tolerance(0.0, 1e-9, 10.0)
    assert not within_tolerance(-1.0, -1.05, 10.0)
    for bad in (math.nan, math.inf, -math.inf):
        assert not within_tolerance(bad, bad, 10.0)
        assert not within_tolerance(1.0, bad, 10.0)


@given(st.floats(allow_nan=False, allow_infinity=False), st.floats(min_value=0, max_value=100))
def test_a_value_always_agrees_with_itself_and_the_band_is_symmetric(x: float, pct: float) -> None:
    assert within_tolerance(x, x, pct)
    y = x * 1.05
    assert within_tolerance(x, y, pct) == within_tolerance(y, x, pct)


def test_timing_agreement_needs_equal_fingerprints() -> None:
    assert agree(TIMING10, ok(100.0), ok(110.0))
    assert not agree(TIMING10, ok(100.0), ok(110.0, "cd" * 8))
    assert not agree(TIMING10, ok(100.0), ok(110.5))


def test_deterministic_agreement_is_exact() -> None:
    assert agree(DELTA_LOSS, ok("3f800000"), ok("3f800000"))
    assert not agree(DELTA_LOSS, ok("3f800000"), ok("3f800001"))
    assert not agree(DELTA_LOSS, ok("3f800000"), ok("3f800000", "cd" * 8))


def test_failures_agree_by_class_unless_inconclusive() -> None:
    assert agree(DELTA_LOSS, fail("crash"), Answer.failed("crash", error="other text"))
    assert agree(DELTA_LOSS, fail("bad-input"), fail("bad-input"))
    assert not agree(DELTA_LOSS, fail("crash"), fail("bad-input"))
    assert not agree(DELTA_LOSS, fail("oom"), fail("oom"))
    assert not agree(DELTA_LOSS, fail("timeout"), fail("timeout"))
    assert not agree(DELTA_LOSS, fail("crash"), ok("3f800000"))
    assert not agree(DELTA_LOSS, Answer.busy_answer(), Answer.busy_answer())


def test_decisions() -> None:
    a, b, c = ok("00000001"), ok("00000002"), ok("00000003")
    assert decide(DELTA_LOSS, [a]).kind == "wait"
    assert decide(DELTA_LOSS, [a, a]).how == "agreement"
    assert decide(DELTA_LOSS, [a, b]).kind == "third-copy"
    first = decide(DELTA_LOSS, [a, b, a])
    assert (first.kind, first.how, first.winners, first.losers) == (
        "settle",
        "third-copy",
        (0, 2),
        (1,),
    )
    assert decide(DELTA_LOSS, [a, b, b]).losers == (0,)
    assert decide(DELTA_LOSS, [a, b, c]).reason == "all differ"
    assert decide(DELTA_LOSS, [a, fail("timeout")]).kind == "fallback"
    assert decide(DELTA_LOSS, [fail("oom")]).reason == "inconclusive"


def test_non_transitive_band_goes_to_the_fallback() -> None:
    low, mid, high = ok(100.0), ok(109.0), ok(118.0)
    assert not agree(TIMING10, low, high)
    decision = decide(TIMING10, [low, high, mid])
    assert (decision.kind, decision.reason) == ("fallback", "third agrees with both")
    assert decide(TIMING10, [low, high, ok(119.0)]).how == "third-copy"


def test_judging_against_the_trusted_answer() -> None:
    trusted = ok("3f800000")
    assert judge(DELTA_LOSS, trusted, ok("3f800000")) == "paid"
    assert judge(DELTA_LOSS, trusted, ok("3f800001")) == "struck"
    assert judge(DELTA_LOSS, trusted, fail("crash")) == "struck"
    assert judge(DELTA_LOSS, trusted, fail("timeout")) == "none"
    assert judge(DELTA_LOSS, fail("oom"), fail("oom")) == "paid"
    assert judge(DELTA_LOSS, fail("timeout"), ok("3f800000")) == "none"
    assert judge(DELTA_LOSS, trusted, Answer.busy_answer()) == "none"
    assert judge(STEP_THROUGHPUT, ok(100.0), ok(124.0)) == "paid"


def test_utc_days() -> None:
    last = 1_704_153_599_999  # 2024-01-01T23:59:59.999Z
    assert utc_day(last) == "2024-01-01"
    assert utc_day(last + 1) == "2024-01-02"
    assert next_day_start_ms(last) == last + 1
    assert next_day_start_ms(last + 1) == last + 1 + 86_400_000
    assert utc_day(0) == "1970-01-01"
    assert utc_day(-1) == "1969-12-31"
