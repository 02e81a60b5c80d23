"""BeaconClock: the schedule on the injected clock, D moved only by observe, exact deadlines."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from hypertrain.beacon.chain import QUICKNET, ChainInfo
from hypertrain.beacon.clock import BeaconClock, BeaconClockStatistics
from nurseries import FixedClock, VirtualClock

GENESIS = 1_700_000_000.0
CHAIN = ChainInfo(
    public_key="ab" * 96, period_ms=3000, genesis_ms=int(GENESIS * 1000), hash="cd" * 32
)


def test_schedule_follows_the_chain_and_the_wall_clock() -> None:
    wall = FixedClock(GENESIS - 1)
    clock = BeaconClock(CHAIN, wall)
    assert clock.now_round() == 0
    wall.set(GENESIS)
    assert clock.now_round() == 1
    wall.set(GENESIS + 2.999)
    assert clock.now_round() == 1
    wall.set(GENESIS + 3)
    assert clock.now_round() == 2
    assert clock.round_at(GENESIS + 30) == 11
    assert clock.time_of(11) == GENESIS + 30
    assert clock.latest == 0
    assert BeaconClock(QUICKNET, FixedClock(1692803367 + 3 * 999_999)).now_round() == 1_000_000


def test_observe_only_raises_latest() -> None:
    clock = BeaconClock(CHAIN, FixedClock(GENESIS), latest=5)
    clock.observe(4)
    assert clock.latest == 5
    clock.observe(9)
    clock.observe(7)
    assert clock.latest == 9
    assert clock.statistics() == BeaconClockStatistics(
        latest=9, now_round=1, lag=-8, observed=1, waiters=0
    )
    with pytest.raises(ValueError, match="latest"):
        BeaconClock(CHAIN, FixedClock(GENESIS), latest=-1)


async def test_deadline_of_is_exact_in_virtual_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    await trio.sleep(7.0)  # the trio clock and the wall clock need not start together
    clock = BeaconClock(CHAIN, VirtualClock(epoch=GENESIS + 100))
    assert clock.now_round() == 36  # wall = genesis + 107
    deadline = clock.deadline_of(40)  # due at genesis + 117, 10 s from now
    assert deadline == trio.current_time() + 10.0
    await trio.sleep_until(deadline)
    assert clock.now_round() == 40
    await trio.sleep_until(deadline - 0.001 + 3.0)
    assert clock.now_round() == 40
    assert clock.deadline_of(1) < trio.current_time()  # long due: in the past


async def test_wait_round_wakes_exactly_at_observe_and_not_before(
    autojump_clock: trio.testing.MockClock,
) -> None:
    clock = BeaconClock(CHAIN, VirtualClock(epoch=GENESIS))
    woken: dict[int, float] = {}

    async def waiter(n: int) -> None:
        await clock.wait_round(n)
        woken[n] = trio.current_time()

    async with trio.open_nursery() as nursery:
        for n in (3, 5, 5, 8):
            nursery.start_soon(waiter, n)
        await trio.sleep(1.0)
        assert clock.statistics().waiters == 4
        await trio.sleep(10.0)  # wall time passes round 3 and 5: nobody wakes
        assert woken == {}
        clock.observe(4)
        await trio.sleep(2.0)
        assert woken == {3: 11.0}
        clock.observe(6)
        await trio.sleep(5.0)
        assert woken == {3: 11.0, 5: 13.0}
        clock.observe(8)
    assert woken == {3: 11.0, 5: 13.0, 8: 18.0}
    assert clock.statistics().waiters == 0


async def test_wait_round_already_reached_returns_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    clock = BeaconClock(CHAIN, VirtualClock(epoch=GENESIS), latest=10)
    await clock.wait_round(10)
    assert trio.current_time() == 0.0


async def test_a_bounded_wait_gives_up_at_the_rounds_deadline_and_forgets_itself(
    autojump_clock: trio.testing.MockClock,
) -> None:
    clock = BeaconClock(CHAIN, VirtualClock(epoch=GENESIS))
    with trio.move_on_at(clock.deadline_of(4)) as scope:
        await clock.wait_round(4)
    assert scope.cancelled_caught
    assert trio.current_time() == 9.0
    assert clock.statistics().waiters == 0
    clock.observe(4)  # no stale waiter to wake
    assert clock.latest == 4


async def test_wait_next_round_is_bounded_by_the_margin_and_by_idle(
    autojump_clock: trio.testing.MockClock,
) -> None:
    clock = BeaconClock(CHAIN, VirtualClock(epoch=GENESIS), latest=3)
    start = trio.current_time()
    await clock.wait_next_round(margin=5.0, idle=30.0)  # round 4 is due at +9 s; never comes
    assert trio.current_time() - start == 14.0
    start = trio.current_time()
    await clock.wait_next_round(margin=5.0, idle=30.0)  # its margin passed: at once
    assert trio.current_time() == start
    await clock.wait_next_round(margin=100.0, idle=2.0)  # idle bounds a long margin
    assert trio.current_time() - start == 2.0
    assert clock.statistics().waiters == 0

    async def observe_later() -> None:
        await trio.sleep(1.0)
        clock.observe(4)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(observe_later)
        start = trio.current_time()
        await clock.wait_next_round(margin=5.0, idle=30.0)
    assert trio.current_time() - start == 1.0
