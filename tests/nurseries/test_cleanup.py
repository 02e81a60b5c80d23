"""Shielded, bounded cleanup: runs under cancellation, ends at its own deadline."""

from __future__ import annotations

import logging
import math

import pytest
import trio
import trio.testing

from nurseries._cleanup import cleanup_scope

LOGGER = "nurseries._cleanup"


async def test_cleanup_runs_to_completion_inside_a_cancelled_scope(
    autojump_clock: trio.testing.MockClock,
) -> None:
    finished: list[float] = []
    t0 = trio.current_time()
    with trio.CancelScope() as outer:
        outer.cancel()
        try:
            await trio.sleep(1.0)
        finally:
            with cleanup_scope(5.0) as scope:
                await trio.sleep(3.0)
                finished.append(trio.current_time() - t0)
    assert outer.cancelled_caught
    assert finished == [3.0]
    assert not scope.cancelled_caught


async def test_an_outer_deadline_passing_does_not_cut_the_cleanup(
    autojump_clock: trio.testing.MockClock,
) -> None:
    t0 = trio.current_time()
    with trio.move_on_after(1.0) as outer:
        try:
            await trio.sleep_forever()
        finally:
            with cleanup_scope(5.0):
                await trio.sleep(3.0)
    assert outer.cancelled_caught
    assert trio.current_time() - t0 == 4.0


async def test_cleanup_is_bounded_by_its_own_deadline(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    reached_end: list[bool] = []
    t0 = trio.current_time()
    with trio.CancelScope() as outer:
        outer.cancel()
        try:
            await trio.sleep(1.0)
        finally:
            with cleanup_scope(2.0, what="lease release") as scope:
                await trio.sleep(10.0)
                reached_end.append(True)
            after = trio.current_time() - t0
    assert after == 2.0
    assert scope.cancelled_caught
    assert reached_end == []
    messages = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert messages == ["lease release did not finish within 2.000 s and was abandoned"]


async def test_the_bound_starts_when_the_block_is_entered(
    autojump_clock: trio.testing.MockClock,
) -> None:
    scope_cm = cleanup_scope(2.0)
    await trio.sleep(5.0)
    t0 = trio.current_time()
    with scope_cm:
        await trio.sleep(10.0)
    assert trio.current_time() - t0 == 2.0


async def test_a_quick_cleanup_logs_nothing(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    with cleanup_scope(2.0) as scope:
        await trio.sleep(1.0)
    assert not scope.cancelled_caught
    assert [r for r in caplog.records if r.name == LOGGER] == []


async def test_exceptions_from_the_block_propagate(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with pytest.raises(KeyError, match="gone"), cleanup_scope(1.0):
        raise KeyError("gone")


@pytest.mark.parametrize("seconds", [-1.0, math.nan, math.inf])
def test_unbounded_or_negative_bounds_are_rejected(seconds: float) -> None:
    with pytest.raises(ValueError, match="finite"), cleanup_scope(seconds):
        pass
