"""Periodic loops on absolute time: exact tick times, no drift, late bodies skip ticks."""

from __future__ import annotations

import math

import pytest
import trio
import trio.testing

from nurseries._periodic import Tick, _next_index, periodic


async def collect(
    period: float,
    count: int,
    *,
    body: dict[int, float] | None = None,
    start: float | None = None,
) -> list[tuple[int, float, int, float]]:
    """Run ``count`` ticks; the body of tick ``k`` sleeps ``body.get(k, 0)``.

    Returns (index, scheduled - t0, missed, observed - t0) per tick, t0 being the time of the
    call.
    """
    t0 = trio.current_time()
    seen: list[tuple[int, float, int, float]] = []
    async for tick in periodic(period, start=start):
        seen.append((tick.index, tick.scheduled - t0, tick.missed, trio.current_time() - t0))
        if len(seen) == count:
            break
        await trio.sleep((body or {}).get(tick.index, 0.0))
    return seen


async def test_ticks_land_on_exact_multiples_of_the_period(
    autojump_clock: trio.testing.MockClock,
) -> None:
    assert await collect(2.5, 5) == [
        (0, 0.0, 0, 0.0),
        (1, 2.5, 0, 2.5),
        (2, 5.0, 0, 5.0),
        (3, 7.5, 0, 7.5),
        (4, 10.0, 0, 10.0),
    ]


async def test_body_time_does_not_make_the_schedule_drift(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ticks = await collect(3.0, 4, body={0: 1.0, 1: 1.0, 2: 1.0})
    assert [observed for *_, observed in ticks] == [0.0, 3.0, 6.0, 9.0]


async def test_a_late_body_skips_missed_ticks_instead_of_bunching(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Tick 1 (at 2) runs until 7: the ticks at 4 and 6 are skipped; the next is at 8.
    assert await collect(2.0, 4, body={1: 5.0}) == [
        (0, 0.0, 0, 0.0),
        (1, 2.0, 0, 2.0),
        (4, 8.0, 2, 8.0),
        (5, 10.0, 0, 10.0),
    ]


async def test_a_body_ending_exactly_on_a_tick_keeps_that_tick(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Tick 0 ends exactly at 2: tick 1 is on time. Tick 1 ends at 6: tick 2 (at 4) is missed,
    # tick 3 (at 6) is due right now.
    assert await collect(2.0, 3, body={0: 2.0, 1: 4.0}) == [
        (0, 0.0, 0, 0.0),
        (1, 2.0, 0, 2.0),
        (3, 6.0, 1, 6.0),
    ]


async def test_start_in_the_future_waits_for_it(autojump_clock: trio.testing.MockClock) -> None:
    t0 = trio.current_time()
    ticks = await collect(1.0, 2, start=t0 + 5.0)
    assert ticks == [(0, 5.0, 0, 5.0), (1, 6.0, 0, 6.0)]


async def test_start_in_the_past_counts_passed_ticks_as_missed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    await trio.sleep(10.0)  # so that the past start is a plain positive time
    t0 = trio.current_time()
    ticks = await collect(1.0, 2, start=t0 - 3.5)
    assert ticks == [(4, 0.5, 4, 0.5), (5, 1.5, 0, 1.5)]


async def test_periods_that_are_not_binary_fractions_neither_skip_nor_repeat(
    autojump_clock: trio.testing.MockClock,
) -> None:
    t0 = trio.current_time()
    ticks: list[Tick] = []
    async for tick in periodic(0.1):
        ticks.append(tick)
        assert trio.current_time() >= tick.scheduled
        if len(ticks) == 50:
            break
    assert [t.index for t in ticks] == list(range(50))
    assert [t.missed for t in ticks] == [0] * 50
    assert [t.scheduled for t in ticks] == [t0 + k * 0.1 for k in range(50)]


async def test_each_wait_is_a_checkpoint(autojump_clock: trio.testing.MockClock) -> None:
    with trio.CancelScope() as scope:
        scope.cancel()
        async for _tick in periodic(1.0):
            pytest.fail("a cancelled loop must not run its body")
    assert scope.cancelled_caught


@pytest.mark.parametrize("period", [0.0, -1.0, math.nan, math.inf])
def test_bad_periods_are_rejected(period: float) -> None:
    with pytest.raises(ValueError, match="period"):
        periodic(period)


@pytest.mark.parametrize("start", [math.nan, math.inf])
def test_non_finite_start_is_rejected(start: float) -> None:
    with pytest.raises(ValueError, match="start"):
        periodic(1.0, start=start)


async def test_the_default_start_is_the_first_iteration(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ticks = periodic(4.0)
    assert ticks.period == 4.0
    await trio.sleep(1.5)
    t0 = trio.current_time()
    first = await ticks.__anext__()
    second = await ticks.__anext__()
    assert (first.scheduled - t0, second.scheduled - t0) == (0.0, 4.0)
    assert trio.current_time() - t0 == 4.0


def test_the_next_tick_survives_float_rounding_both_ways() -> None:
    # 0.9 / 0.3 rounds to 3.0 although 3 * 0.3 < 0.9 (tick 3 has passed: next is 4), and
    # 0.30000000000000004 / 0.1 rounds above 3 although 3 * 0.1 is not before it (next is 3).
    assert _next_index(0.0, 0.3, -1, 0.9) == 4
    assert _next_index(0.0, 0.1, -1, 0.1 + 0.2) == 3
    for t0 in (0.0, 0.1, 1.7):
        for period in (0.1, 0.3, 0.7):
            for n in range(200):
                now = t0 + n * period * 1.01
                for after in (-1, n // 2):
                    expected = after + 1
                    while t0 + expected * period < now:
                        expected += 1
                    assert _next_index(t0, period, after, now) == expected, (t0, period, now)
