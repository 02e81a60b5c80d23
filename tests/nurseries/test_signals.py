"""Graceful shutdown: hook first, cancel at request + grace, second signal cuts the grace short.

Real signals are sent to this process with ``os.kill``; that is safe only while a supervisor
listens for them (otherwise SIGTERM's default action ends the test run), so every test that
sends one does it from inside an ``open_supervisor`` block that listens for that signal.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
from collections.abc import AsyncIterator, Callable, Iterable

import pytest
import trio
import trio.testing

from nurseries._signals import (
    DEFAULT_SHUTDOWN_SIGNALS,
    Supervisor,
    open_supervisor,
    run_until_shutdown,
)

LOGGER = "nurseries._signals"
# Virtual seconds after which a wait that shutdown should have ended fails the test instead of
# hanging it.
HANG = 10_000.0


class Events:
    """A timeline of what happened, as (what, seconds since t0)."""

    def __init__(self) -> None:
        self.t0 = trio.current_time()
        self.log: list[tuple[str, float]] = []

    def add(self, what: str) -> None:
        self.log.append((what, trio.current_time() - self.t0))


@contextlib.asynccontextmanager
async def bounded_supervisor(
    *,
    grace: float,
    signals: Iterable[int] = DEFAULT_SHUTDOWN_SIGNALS,
    on_shutdown: Callable[[], object] | None = None,
) -> AsyncIterator[Supervisor]:
    """`open_supervisor` under a deadline, so that a supervisor that never ends fails the test."""
    with trio.fail_after(HANG):
        async with open_supervisor(grace=grace, signals=signals, on_shutdown=on_shutdown) as sup:
            yield sup


async def forever(events: Events, name: str) -> None:
    """A service that ends only by cancellation and records when that happened."""
    try:
        with trio.fail_after(HANG):
            await trio.sleep_forever()
    finally:
        events.add(f"{name} cancelled")


async def send_signal_at(seconds: float, signum: signal.Signals, events: Events) -> None:
    await trio.sleep_until(events.t0 + seconds)
    events.add(f"{signum.name} sent")
    os.kill(os.getpid(), signum)


async def test_work_is_cancelled_exactly_grace_after_a_signal(
    autojump_clock: trio.testing.MockClock,
) -> None:
    events = Events()
    async with bounded_supervisor(grace=4.0, on_shutdown=lambda: events.add("hook")) as sup:
        sup.nursery.start_soon(forever, events, "service")
        sup.nursery.start_soon(send_signal_at, 3.0, signal.SIGTERM, events)
    events.add("supervisor exited")
    assert events.log == [
        ("SIGTERM sent", 3.0),
        ("hook", 3.0),
        ("service cancelled", 7.0),
        ("supervisor exited", 7.0),
    ]
    assert sup.shutdown_signal is signal.SIGTERM
    assert sup.work_cancelled


async def test_sigint_is_handled_too(autojump_clock: trio.testing.MockClock) -> None:
    events = Events()
    async with bounded_supervisor(grace=0.5) as sup:
        sup.nursery.start_soon(forever, events, "service")
        sup.nursery.start_soon(send_signal_at, 1.0, signal.SIGINT, events)
    assert events.log == [("SIGINT sent", 1.0), ("service cancelled", 1.5)]
    assert sup.shutdown_signal is signal.SIGINT


async def test_sighup_is_handled_as_sigterm(autojump_clock: trio.testing.MockClock) -> None:
    # The terminal or the parent went away: a program must stop its work (and so its children,
    # whose runner kills them when cancelled) rather than die of SIGHUP's default action.
    assert signal.SIGHUP in DEFAULT_SHUTDOWN_SIGNALS
    events = Events()
    async with bounded_supervisor(grace=2.0, on_shutdown=lambda: events.add("hook")) as sup:
        sup.nursery.start_soon(forever, events, "service")
        sup.nursery.start_soon(send_signal_at, 1.0, signal.SIGHUP, events)
    assert events.log == [("SIGHUP sent", 1.0), ("hook", 1.0), ("service cancelled", 3.0)]
    assert sup.shutdown_signal is signal.SIGHUP


async def test_work_that_finishes_within_grace_exits_cleanly(
    autojump_clock: trio.testing.MockClock,
) -> None:
    events = Events()
    stopping = trio.Event()

    async def polite() -> None:
        with trio.fail_after(HANG):
            await stopping.wait()
        events.add("service saw stopping")
        await trio.sleep(1.0)  # drain in-flight work
        events.add("service returned")

    async with bounded_supervisor(grace=10.0, on_shutdown=stopping.set) as sup:
        sup.nursery.start_soon(polite)
        sup.nursery.start_soon(send_signal_at, 2.0, signal.SIGTERM, events)
    events.add("supervisor exited")
    assert events.log == [
        ("SIGTERM sent", 2.0),
        ("service saw stopping", 2.0),
        ("service returned", 3.0),
        ("supervisor exited", 3.0),
    ]
    assert not sup.work_cancelled


async def test_the_hook_runs_before_any_work_is_cancelled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    events = Events()
    stopping = trio.Event()
    seen_in_finally: list[bool] = []

    async def service() -> None:
        try:
            with trio.fail_after(HANG):
                await trio.sleep_forever()
        finally:
            seen_in_finally.append(stopping.is_set())
            events.add("service cancelled")

    async with bounded_supervisor(grace=0.0, on_shutdown=stopping.set) as sup:
        sup.nursery.start_soon(service)
        sup.nursery.start_soon(send_signal_at, 5.0, signal.SIGTERM, events)
    assert seen_in_finally == [True]
    assert events.log == [("SIGTERM sent", 5.0), ("service cancelled", 5.0)]


async def test_a_second_signal_cuts_the_grace_short(
    autojump_clock: trio.testing.MockClock,
) -> None:
    events = Events()
    hook_calls: list[float] = []
    async with bounded_supervisor(
        grace=10.0, on_shutdown=lambda: hook_calls.append(trio.current_time() - events.t0)
    ) as sup:
        sup.nursery.start_soon(forever, events, "service")
        sup.nursery.start_soon(send_signal_at, 1.0, signal.SIGINT, events)
        sup.nursery.start_soon(send_signal_at, 3.0, signal.SIGTERM, events)
    assert events.log == [("SIGINT sent", 1.0), ("SIGTERM sent", 3.0), ("service cancelled", 3.0)]
    assert hook_calls == [1.0]
    assert sup.shutdown_signal is signal.SIGINT
    assert sup.work_cancelled


async def test_the_same_signal_twice_also_cuts_the_grace_short(
    autojump_clock: trio.testing.MockClock,
) -> None:
    events = Events()
    async with bounded_supervisor(grace=10.0) as sup:
        sup.nursery.start_soon(forever, events, "service")
        sup.nursery.start_soon(send_signal_at, 1.0, signal.SIGTERM, events)
        sup.nursery.start_soon(send_signal_at, 2.0, signal.SIGTERM, events)
    assert events.log[-1] == ("service cancelled", 2.0)


async def test_programmatic_shutdown_follows_the_same_path(
    autojump_clock: trio.testing.MockClock,
) -> None:
    events = Events()
    hook_calls: list[float] = []

    async def request_at(seconds: float, sup: Supervisor, *, immediate: bool = False) -> None:
        await trio.sleep_until(events.t0 + seconds)
        sup.request_shutdown(immediate=immediate)

    async with bounded_supervisor(
        grace=5.0,
        signals=(),
        on_shutdown=lambda: hook_calls.append(trio.current_time() - events.t0),
    ) as sup:
        sup.nursery.start_soon(forever, events, "service")
        sup.nursery.start_soon(request_at, 2.0, sup)
        sup.nursery.start_soon(request_at, 4.0, sup)  # a repeated graceful request changes nothing
        requested = [sup.shutdown_requested]
        await sup.wait_shutdown_requested()
        events.add("requested")
        requested.append(sup.shutdown_requested)
    assert requested == [False, True]
    assert hook_calls == [2.0]
    assert events.log == [("requested", 2.0), ("service cancelled", 7.0)]
    assert sup.shutdown_signal is None


async def test_immediate_programmatic_shutdown_cancels_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    events = Events()
    hook_calls: list[float] = []
    async with bounded_supervisor(
        grace=5.0, signals=(), on_shutdown=lambda: hook_calls.append(1.0)
    ) as sup:
        sup.nursery.start_soon(forever, events, "service")
        await trio.sleep(2.0)
        sup.request_shutdown(immediate=True)
    assert hook_calls == [1.0]
    assert events.log == [("service cancelled", 2.0)]


async def test_the_block_ends_when_the_work_ends_without_any_shutdown(
    autojump_clock: trio.testing.MockClock,
) -> None:
    events = Events()

    async def short_job() -> None:
        await trio.sleep(3.0)
        events.add("job done")

    async with bounded_supervisor(grace=5.0) as sup:
        sup.nursery.start_soon(short_job)
    events.add("supervisor exited")
    # The signal watcher does not hold the block open.
    assert events.log == [("job done", 3.0), ("supervisor exited", 3.0)]
    assert not sup.shutdown_requested
    assert not sup.work_cancelled


async def test_failures_leave_as_a_plain_nursery_group(
    autojump_clock: trio.testing.MockClock,
) -> None:
    events = Events()

    async def broken() -> None:
        await trio.sleep(1.0)
        raise ValueError("broken service")

    # Exactly one level of group: the watcher's nursery adds no wrapping.
    with pytest.RaisesGroup(pytest.RaisesExc(ValueError, match="broken service")):
        async with bounded_supervisor(grace=5.0) as sup:
            sup.nursery.start_soon(forever, events, "sibling")
            sup.nursery.start_soon(broken)
    assert events.log == [("sibling cancelled", 1.0)]


async def test_an_exception_in_the_body_is_grouped_like_a_nursery_body(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with pytest.RaisesGroup(KeyError):
        async with bounded_supervisor(grace=5.0):
            raise KeyError("body")


async def test_a_broken_hook_does_not_stop_the_shutdown(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    events = Events()

    def hook() -> None:
        raise RuntimeError("hook is broken")

    async with bounded_supervisor(grace=2.0, on_shutdown=hook) as sup:
        sup.nursery.start_soon(forever, events, "service")
        sup.nursery.start_soon(send_signal_at, 1.0, signal.SIGTERM, events)
    assert events.log == [("SIGTERM sent", 1.0), ("service cancelled", 3.0)]
    failures = [r for r in caplog.records if r.name == LOGGER and r.levelno == logging.ERROR]
    assert len(failures) == 1
    assert failures[0].exc_info is not None
    assert str(failures[0].exc_info[1]) == "hook is broken"


async def test_outer_cancellation_passes_through(autojump_clock: trio.testing.MockClock) -> None:
    events = Events()
    with trio.move_on_after(2.0) as outer:
        async with bounded_supervisor(grace=5.0) as sup:
            sup.nursery.start_soon(forever, events, "service")
    assert outer.cancelled_caught
    assert events.log == [("service cancelled", 2.0)]
    assert not sup.shutdown_requested


async def test_signal_handlers_are_restored_afterwards(
    autojump_clock: trio.testing.MockClock,
) -> None:
    before = {s: signal.getsignal(s) for s in DEFAULT_SHUTDOWN_SIGNALS}
    async with bounded_supervisor(grace=1.0):
        assert {s: signal.getsignal(s) for s in DEFAULT_SHUTDOWN_SIGNALS} != before
    assert {s: signal.getsignal(s) for s in DEFAULT_SHUTDOWN_SIGNALS} == before


async def test_shutdown_logs_the_signal_and_the_expired_grace(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    events = Events()
    async with bounded_supervisor(grace=1.5) as sup:
        sup.nursery.start_soon(forever, events, "service")
        sup.nursery.start_soon(send_signal_at, 1.0, signal.SIGTERM, events)
    messages = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert messages == [
        "SIGTERM received: shutting down within 1.5 s",
        "shutdown cancelled the remaining work (grace 1.5 s)",
    ]


async def test_run_until_shutdown_returns_the_signal(
    autojump_clock: trio.testing.MockClock,
) -> None:
    events = Events()

    async def main(sup: Supervisor) -> None:
        sup.nursery.start_soon(forever, events, "service")
        sup.nursery.start_soon(send_signal_at, 2.0, signal.SIGTERM, events)

    with trio.fail_after(HANG):
        assert await run_until_shutdown(main, grace=3.0) is signal.SIGTERM
    assert events.log == [("SIGTERM sent", 2.0), ("service cancelled", 5.0)]


async def test_the_nursery_is_only_available_inside_the_block(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with bounded_supervisor(grace=1.0, signals=()) as sup:
        assert isinstance(sup.nursery, trio.Nursery)
        assert sup.grace == 1.0
    with pytest.raises(RuntimeError, match="only inside"):
        _ = sup.nursery


@pytest.mark.parametrize("grace", [-1.0, math.nan, math.inf])
async def test_bad_grace_is_rejected(grace: float) -> None:
    with pytest.raises(ValueError, match="grace"):
        async with open_supervisor(grace=grace):
            pass
