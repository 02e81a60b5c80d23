"""The keyed waiter: exact wake times, per-key wake-ups, cleanup, close, and scale."""

from __future__ import annotations

import attrs
import pytest
import trio
import trio.testing

from nurseries._waiter import (
    KeyedWaiter,
    KeyedWaiterStatistics,
    Notified,
    Stopping,
    TimedOut,
    WaitResult,
)

Outcomes = dict[str, tuple[WaitResult[int], float]]


async def wait_and_record(
    waiter: KeyedWaiter[str, int], key: str, deadline: float, label: str, out: Outcomes
) -> None:
    result = await waiter.wait(key, deadline=deadline)
    out[label] = (result, trio.current_time())


def idle(closed: bool = False) -> KeyedWaiterStatistics:
    return KeyedWaiterStatistics(keys=0, waiters=0, closed=closed)


async def test_notify_wakes_exactly_the_waiters_of_that_key(
    autojump_clock: trio.testing.MockClock,
) -> None:
    waiter: KeyedWaiter[str, int] = KeyedWaiter()
    out: Outcomes = {}
    t0 = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait_and_record, waiter, "a", t0 + 10.0, "a1", out)
        nursery.start_soon(wait_and_record, waiter, "a", t0 + 10.0, "a2", out)
        nursery.start_soon(wait_and_record, waiter, "b", t0 + 10.0, "b", out)
        await trio.sleep(3.0)
        assert waiter.statistics() == KeyedWaiterStatistics(keys=2, waiters=3, closed=False)
        assert waiter.notify("a", 7) == 2
        assert waiter.statistics() == KeyedWaiterStatistics(keys=1, waiters=1, closed=False)
    assert out == {
        "a1": (Notified(7), t0 + 3.0),
        "a2": (Notified(7), t0 + 3.0),
        "b": (TimedOut(), t0 + 10.0),
    }
    assert waiter.statistics() == idle()


async def test_a_wait_times_out_exactly_at_its_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    waiter: KeyedWaiter[str, int] = KeyedWaiter()
    t0 = trio.current_time()
    assert await waiter.wait("k", deadline=t0 + 25.0) == TimedOut()
    assert trio.current_time() - t0 == 25.0
    assert waiter.statistics() == idle()


async def test_a_deadline_in_the_past_times_out_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    waiter: KeyedWaiter[str, int] = KeyedWaiter()
    await trio.sleep(5.0)
    t0 = trio.current_time()
    assert await waiter.wait("k", deadline=t0 - 1.0) == TimedOut()
    assert trio.current_time() == t0
    assert waiter.statistics() == idle()


async def test_notify_does_not_latch_for_later_waiters(
    autojump_clock: trio.testing.MockClock,
) -> None:
    waiter: KeyedWaiter[str, int] = KeyedWaiter()
    out: Outcomes = {}
    t0 = trio.current_time()
    assert waiter.notify("k", 1) == 0
    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait_and_record, waiter, "k", t0 + 10.0, "first", out)
        await trio.sleep(1.0)
        assert waiter.notify("k", 2) == 1
        # Starts waiting after that notify: waits for the next one.
        nursery.start_soon(wait_and_record, waiter, "k", t0 + 10.0, "second", out)
        await trio.sleep(1.0)
        assert waiter.notify("k", 3) == 1
    assert out == {"first": (Notified(2), t0 + 1.0), "second": (Notified(3), t0 + 2.0)}


async def test_cancelled_waiters_leave_no_trace(autojump_clock: trio.testing.MockClock) -> None:
    waiter: KeyedWaiter[str, int] = KeyedWaiter()
    returned: list[str] = []

    async def wait_forever_ish(key: str) -> None:
        await waiter.wait(key, deadline=trio.current_time() + 1000.0)
        returned.append(key)  # must not run: cancellation propagates

    t0 = trio.current_time()
    with trio.move_on_after(2.0) as scope:
        async with trio.open_nursery() as nursery:
            for i in range(10):
                nursery.start_soon(wait_forever_ish, f"key-{i % 4}")
            await trio.sleep(1.0)
            assert waiter.statistics() == KeyedWaiterStatistics(keys=4, waiters=10, closed=False)
    assert scope.cancelled_caught
    assert trio.current_time() - t0 == 2.0
    assert returned == []
    assert waiter.statistics() == idle()
    assert waiter.notify("key-0", 1) == 0


async def test_close_wakes_everyone_and_later_waits_return_stopping_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    waiter: KeyedWaiter[str, int] = KeyedWaiter()
    out: Outcomes = {}
    t0 = trio.current_time()
    async with trio.open_nursery() as nursery:
        for label in ("a", "b", "c"):
            nursery.start_soon(wait_and_record, waiter, label, t0 + 30.0, label, out)
        await trio.sleep(4.0)
        assert waiter.close() == 3
        assert waiter.statistics() == KeyedWaiterStatistics(keys=0, waiters=0, closed=True)
    assert out == {label: (Stopping(), t0 + 4.0) for label in ("a", "b", "c")}
    assert waiter.closed
    t1 = trio.current_time()
    assert await waiter.wait("a", deadline=t1 + 30.0) == Stopping()
    assert trio.current_time() == t1
    assert waiter.notify("a", 1) == 0
    assert waiter.close() == 0
    assert waiter.statistics() == idle(closed=True)


async def notify_at(
    waiter: KeyedWaiter[str, int], deadline: float, value: int, woke: list[int]
) -> None:
    await trio.sleep_until(deadline)
    woke.append(waiter.notify("k", value))


async def test_a_notify_that_counted_a_waiter_is_never_lost_to_a_tied_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Deadline and notify land in the same instant; Trio may run either task first (it does
    # both, over these rounds). Whichever wins, notify's count and the outcome must agree.
    for round_ in range(40):
        waiter: KeyedWaiter[str, int] = KeyedWaiter()
        out: Outcomes = {}
        woke: list[int] = []
        deadline = trio.current_time() + 5.0
        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait_and_record, waiter, "k", deadline, "w", out)
            nursery.start_soon(notify_at, waiter, deadline, round_, woke)
        result, at = out["w"]
        assert at == deadline
        if woke == [1]:
            assert result == Notified(round_)
        else:
            assert (woke, result) == ([0], TimedOut())
        assert waiter.statistics() == idle()


async def test_a_thousand_waiters(autojump_clock: trio.testing.MockClock) -> None:
    waiter: KeyedWaiter[int, str] = KeyedWaiter()
    results: dict[int, tuple[WaitResult[str], float]] = {}
    t0 = trio.current_time()

    async def one(i: int) -> None:
        # 100 keys with 10 waiters each; odd waiters give up at 5, even ones at 10.
        deadline = t0 + (5.0 if i % 2 else 10.0)
        results[i] = (await waiter.wait(i % 100, deadline=deadline), trio.current_time() - t0)

    async with trio.open_nursery() as nursery:
        for i in range(1000):
            nursery.start_soon(one, i)
        await trio.sleep(1.0)
        assert waiter.statistics() == KeyedWaiterStatistics(keys=100, waiters=1000, closed=False)
        assert waiter.notify(0, "zero") == 10
        await trio.sleep(6.0)  # t = 7: odd waiters (all those of odd keys) timed out at 5
        assert waiter.statistics() == KeyedWaiterStatistics(keys=49, waiters=490, closed=False)
        assert waiter.close() == 490
    assert len(results) == 1000
    for i, (result, at) in results.items():
        if i % 100 == 0:
            assert (result, at) == (Notified("zero"), 1.0)
        elif i % 2:
            assert (result, at) == (TimedOut(), 5.0)
        else:
            assert (result, at) == (Stopping(), 7.0)
    assert waiter.statistics() == idle(closed=True)


async def test_notify_without_a_value_for_value_less_waiters(
    autojump_clock: trio.testing.MockClock,
) -> None:
    waiter: KeyedWaiter[str, None] = KeyedWaiter()
    results: list[WaitResult[None]] = []

    async def wait() -> None:
        results.append(await waiter.wait("round", deadline=trio.current_time() + 10.0))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait)
        await trio.sleep(1.0)
        assert waiter.notify("round") == 1
    assert results == [Notified(None)]


def test_statistics_are_frozen() -> None:
    stats = KeyedWaiter[str, int]().statistics()
    assert stats == idle()
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        stats.keys = 3  # type: ignore[misc]


async def test_a_limited_notify_wakes_the_longest_waiting_first(
    autojump_clock: trio.testing.MockClock,
) -> None:
    waiter: KeyedWaiter[str, int] = KeyedWaiter()
    out: Outcomes = {}
    t0 = trio.current_time()
    async with trio.open_nursery() as nursery:
        for i in range(5):
            nursery.start_soon(wait_and_record, waiter, "k", t0 + 100.0, f"w{i}", out)
            await trio.sleep(1.0)  # w0 waits longest
        assert waiter.waiting("k") == 5
        assert waiter.notify("k", 7, limit=2) == 2
        await trio.sleep(1.0)
        assert sorted(out) == ["w0", "w1"]
        assert waiter.waiting("k") == 3
        assert waiter.notify("k", 8, limit=0) == 0
        assert waiter.notify("k", 9, limit=10) == 3  # a limit above the waiters wakes them all
    assert out == {
        "w0": (Notified(7), t0 + 5.0),
        "w1": (Notified(7), t0 + 5.0),
        "w2": (Notified(9), t0 + 6.0),
        "w3": (Notified(9), t0 + 6.0),
        "w4": (Notified(9), t0 + 6.0),
    }
    assert waiter.statistics() == idle()
    assert waiter.waiting("k") == 0


@pytest.mark.parametrize(
    "cancel_first", [False, True], ids=["notified-then-cancelled", "cancelled-then-notified"]
)
async def test_a_waiter_notified_and_cancelled_before_it_runs_returns_the_notification(
    cancel_first: bool, autojump_clock: trio.testing.MockClock
) -> None:
    """Notified and cancelled in the same step, in either order (the task has not run yet):
    notify counts it, so the wait returns `Notified` rather than lose it inside the waiter;
    the next checkpoint raises."""
    waiter: KeyedWaiter[str, int] = KeyedWaiter()
    got: list[WaitResult[int]] = []
    doomed = trio.CancelScope()

    async def first() -> None:
        with doomed:
            got.append(await waiter.wait("k", deadline=trio.current_time() + 100.0))
            await trio.lowlevel.checkpoint()
            got.append(TimedOut())  # must not run: the checkpoint raised

    async with trio.open_nursery() as nursery:
        nursery.start_soon(first)
        await trio.sleep(1.0)
        if cancel_first:
            doomed.cancel()
        assert waiter.notify("k", 5, limit=1) == 1
        if not cancel_first:
            doomed.cancel()
    assert got == [Notified(5)]
    assert doomed.cancelled_caught
    assert waiter.statistics() == idle()


async def test_parked_waiters_are_listed_with_their_tags_and_woken_one_by_one(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A notifier that decides who gets what: each waiter says what it waits for (its tag);
    `notify_parked` hands one waiter its own value and leaves the others waiting."""
    waiter: KeyedWaiter[str, int] = KeyedWaiter()
    out: dict[str, tuple[WaitResult[int], float]] = {}
    t0 = trio.current_time()

    async def tagged(tag: str) -> None:
        out[tag] = (await waiter.wait("k", deadline=t0 + 100.0, tag=tag), trio.current_time())

    async with trio.open_nursery() as nursery:
        for tag in ("a", "b", "c"):
            nursery.start_soon(tagged, tag)
            await trio.sleep(1.0)  # a waits longest
        parked = waiter.parked("k")
        assert [p.tag for p in parked] == ["a", "b", "c"]
        assert waiter.notify_parked("k", parked[2], 30)
        assert waiter.notify_parked("k", parked[0], 10)
        assert not waiter.notify_parked("k", parked[0], 11)  # woken already
        assert waiter.waiting("k") == 1
        assert [p.tag for p in waiter.parked("k")] == ["b"]
        assert waiter.parked("other") == []
    assert out == {
        "a": (Notified(10), t0 + 3.0),
        "b": (TimedOut(), t0 + 100.0),
        "c": (Notified(30), t0 + 3.0),
    }
    assert waiter.statistics() == idle()
    assert not waiter.notify_parked("k", parked[1], 20)  # timed out: gone
