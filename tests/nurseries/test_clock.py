"""Wall clocks: the system clock, Trio-driven virtual wall time, and a hand-moved clock."""

from __future__ import annotations

import math
import time

import pytest
import trio
import trio.testing

from nurseries._clock import FixedClock, SystemClock, VirtualClock, WallClock

EPOCH = 1_700_000_000.0


def test_every_clock_satisfies_the_protocol() -> None:
    for clock in (SystemClock(), VirtualClock(EPOCH), FixedClock(5.0)):
        assert isinstance(clock, WallClock)


def test_system_clock_reads_the_host_clock() -> None:
    before = time.time()
    now = SystemClock().now()
    after = time.time()
    assert before <= now <= after


async def test_virtual_clock_follows_trio_time_exactly(
    autojump_clock: trio.testing.MockClock,
) -> None:
    clock = VirtualClock(EPOCH)
    start = clock.now()
    assert start == EPOCH + trio.current_time()
    await trio.sleep(86_400.0)
    assert clock.now() - start == 86_400.0
    await trio.sleep(0.5)
    assert clock.now() - start == 86_400.5


async def test_virtual_clock_does_not_move_without_trio_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    clock = VirtualClock(EPOCH)
    first = clock.now()
    await trio.lowlevel.checkpoint()
    assert clock.now() == first


def test_virtual_clock_outside_a_trio_run_raises() -> None:
    with pytest.raises(RuntimeError):
        VirtualClock(EPOCH).now()


@pytest.mark.parametrize("epoch", [math.inf, -math.inf, math.nan])
def test_virtual_clock_rejects_non_finite_epochs(epoch: float) -> None:
    with pytest.raises(ValueError, match="epoch must be finite"):
        VirtualClock(epoch)


def test_fixed_clock_moves_only_when_told() -> None:
    clock = FixedClock(100.0)
    assert clock.now() == 100.0
    assert clock.now() == 100.0
    clock.advance(2.5)
    assert clock.now() == 102.5
    clock.set(50.0)
    assert clock.now() == 50.0
    with pytest.raises(ValueError, match="negative"):
        clock.advance(-1.0)
    assert clock.now() == 50.0
