"""The one retry primitive: exact delays in virtual time, the deadline, causes, final errors."""

from __future__ import annotations

import itertools
import random
from collections.abc import Awaitable, Callable

import pytest
import trio
import trio.testing

from nurseries import Backoff, GaveUp, next_delay, parse_retry_after, retry

BACKOFF = Backoff(initial=1.0, factor=2.0, maximum=8.0)


class Transient(Exception):
    """A failure worth another try (the test's stand-in for a network error or a 5xx)."""

    def __init__(self, n: int, after: float = 0.0) -> None:
        super().__init__(f"try {n} failed")
        self.after = after


class Refused(Exception):
    """A final failure (the stand-in for a 4xx)."""


def transient(error: Exception) -> float | None:
    return error.after if isinstance(error, Transient) else None


def failing(times: int, *, after: float = 0.0) -> tuple[Callable[[], Awaitable[str]], list[float]]:
    """A call that fails ``times`` times and then answers ``"ok"``; and the times it was tried."""
    tried: list[float] = []

    async def call() -> str:
        tried.append(trio.current_time())
        if len(tried) <= times:
            raise Transient(len(tried), after)
        return "ok"

    return call, tried


# -- the pure schedule -------------------------------------------------------------------------


def test_the_ceiling_doubles_from_initial_up_to_maximum() -> None:
    assert [BACKOFF.ceiling(n) for n in range(1, 7)] == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert Backoff(initial=1.0, maximum=5.0).ceiling(10_000) == 5.0  # no overflow


def test_full_jitter_scales_the_whole_ceiling() -> None:
    delays = [next_delay(BACKOFF, n, 0.5, now=0.0, deadline=100.0) for n in (1, 2, 3, 4, 5)]
    assert delays == [0.5, 1.0, 2.0, 4.0, 4.0]
    assert next_delay(BACKOFF, 3, 0.0, now=0.0, deadline=100.0) == 0.0


def test_the_last_try_starts_at_the_deadline_and_none_after_it() -> None:
    assert next_delay(BACKOFF, 4, 0.9, now=95.0, deadline=100.0) == 5.0  # 7.2 shortened
    assert next_delay(BACKOFF, 4, 0.9, now=100.0, deadline=100.0) is None
    assert next_delay(BACKOFF, 1, 0.0, now=101.0, deadline=100.0) is None


def test_retry_after_is_a_floor_and_gives_up_when_it_outlasts_the_deadline() -> None:
    assert next_delay(BACKOFF, 1, 0.5, now=0.0, deadline=100.0, not_before=5.0) == 5.0
    assert next_delay(BACKOFF, 5, 0.9, now=0.0, deadline=100.0, not_before=5.0) == 7.2
    assert next_delay(BACKOFF, 1, 0.5, now=97.0, deadline=100.0, not_before=5.0) is None


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("5", 5.0), (" 12 ", 12.0), ("0", 0.0), (None, None), ("-1", None), ("1.5", None),
     ("Wed, 21 Oct 2015 07:28:00 GMT", None), ("9" * 40, None), ("٣", None)],
)  # fmt: skip
def test_retry_after_is_read_in_seconds_only(value: str | None, seconds: float | None) -> None:
    assert parse_retry_after(value) == seconds


def test_a_backoff_that_shrinks_or_is_not_finite_is_refused() -> None:
    with pytest.raises(ValueError, match="factor"):
        Backoff(factor=0.5)
    with pytest.raises(ValueError, match="maximum"):
        Backoff(initial=4.0, maximum=1.0)
    with pytest.raises(ValueError, match="initial"):
        Backoff(initial=float("nan"))


# -- the Trio loop, in virtual time ------------------------------------------------------------


async def test_delays_are_exact_with_a_seeded_random_source(
    autojump_clock: trio.testing.MockClock,
) -> None:
    call, tried = failing(4)
    seeded = random.Random(18)
    rng = random.Random(18)
    draws = [rng.random() for _ in range(4)]
    expected = [draws[i] * BACKOFF.ceiling(i + 1) for i in range(4)]
    t0 = trio.current_time()
    waits: list[float] = []
    got = await retry(
        call, deadline=t0 + 100.0, transient=transient, backoff=BACKOFF, draw=seeded.random,
        on_retry=lambda _e, delay: waits.append(delay),
    )  # fmt: skip
    assert got == "ok"
    assert waits == expected
    gaps = [b - a for a, b in itertools.pairwise(tried)]
    assert gaps == pytest.approx(expected, abs=1e-9)


async def test_the_deadline_is_respected_and_the_last_error_is_the_cause(
    autojump_clock: trio.testing.MockClock,
) -> None:
    call, tried = failing(1000)
    t0 = trio.current_time()
    with pytest.raises(GaveUp) as caught:
        await retry(
            call, deadline=t0 + 20.0, transient=transient, backoff=BACKOFF, draw=lambda: 1.0
        )
    # 1, 2, 4, 8, then 5 (shortened to the deadline): the last try starts at t0 + 20 exactly.
    assert [t - t0 for t in tried] == [0.0, 1.0, 3.0, 7.0, 15.0, 20.0]
    assert trio.current_time() - t0 == 20.0
    assert caught.value.tries == 6
    assert isinstance(caught.value.__cause__, Transient)
    assert str(caught.value.__cause__) == "try 6 failed"


async def test_a_retry_after_longer_than_the_time_left_gives_up_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    call, tried = failing(1000, after=30.0)
    t0 = trio.current_time()
    with pytest.raises(GaveUp):
        await retry(
            call, deadline=t0 + 20.0, transient=transient, backoff=BACKOFF, draw=lambda: 0.0
        )
    assert len(tried) == 1
    assert trio.current_time() == t0


async def test_retry_after_sets_the_least_wait(autojump_clock: trio.testing.MockClock) -> None:
    call, tried = failing(2, after=3.0)
    t0 = trio.current_time()
    await retry(call, deadline=t0 + 60.0, transient=transient, backoff=BACKOFF, draw=lambda: 0.0)
    assert [t - t0 for t in tried] == [0.0, 3.0, 6.0]


async def test_a_final_failure_is_not_retried_and_propagates_as_itself(
    autojump_clock: trio.testing.MockClock,
) -> None:
    tried: list[float] = []

    async def refused() -> None:
        tried.append(trio.current_time())
        raise Refused("HTTP 404")

    with pytest.raises(Refused, match="HTTP 404"):
        await retry(refused, deadline=trio.current_time() + 60.0, transient=transient)
    assert len(tried) == 1


async def test_cancellation_passes_through_the_wait(autojump_clock: trio.testing.MockClock) -> None:
    call, tried = failing(1000)
    t0 = trio.current_time()
    with trio.move_on_after(10.0) as scope:
        await retry(call, deadline=t0 + 1000.0, transient=transient, draw=lambda: 1.0)
    assert scope.cancelled_caught
    assert trio.current_time() - t0 == 10.0
    assert tried
