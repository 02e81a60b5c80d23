"""Supervise-with-restart: exact restart times, give-up, started forwarding, cancellation, logs."""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Iterable
from functools import partial
from typing import Any, TypeVar

import attrs
import pytest
import trio
import trio.testing

from nurseries._supervise import (
    RestartMode,
    RestartPolicy,
    ServiceGaveUp,
    ServiceReturned,
    ServiceStatistics,
    SupervisedService,
    supervise,
)

LOGGER = "nurseries._supervise"
# Virtual seconds after which a test that should have finished fails instead of hanging
# (a supervisor that never gives up would otherwise restart forever in virtual time).
HANG = 10_000.0
T = TypeVar("T")


async def bounded(awaitable: Awaitable[T]) -> T:
    with trio.fail_after(HANG):
        return await awaitable


def draws(values: Iterable[float]) -> Callable[[], float]:
    """A jitter source that returns ``values`` in order and fails loudly when they run out."""
    return iter(values).__next__


class Boom(Exception):
    """The failure the fake services raise."""

    def __init__(self, attempt: int) -> None:
        super().__init__(f"boom {attempt}")
        self.attempt = attempt


class FlakyService:
    """Fails ``fail_times`` times (after ``run_for`` seconds each), then serves forever.

    Records the Trio time of every attempt. Calls ``started`` before failing when
    ``start_every_attempt`` is set (as a real service that fails later would), otherwise only
    on the attempt that finally serves.
    """

    def __init__(
        self, fail_times: int, *, run_for: float = 0.0, start_every_attempt: bool = False
    ) -> None:
        self.fail_times = fail_times
        self.run_for = run_for
        self.start_every_attempt = start_every_attempt
        self.attempts: list[float] = []
        self.failures: list[Boom] = []

    async def run(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        attempt = len(self.attempts)
        self.attempts.append(trio.current_time())
        if attempt >= self.fail_times:
            task_status.started(f"serving on attempt {attempt}")
            await trio.sleep_forever()
        if self.start_every_attempt:
            task_status.started(f"serving on attempt {attempt}")
        await trio.sleep(self.run_for)
        failure = Boom(attempt)
        self.failures.append(failure)
        raise failure


def relative(times: list[float], t0: float) -> list[float]:
    return [t - t0 for t in times]


# --- the policy (pure) ---------------------------------------------------------------------


def test_backoff_grows_by_factor_up_to_the_cap() -> None:
    policy = RestartPolicy(initial_backoff=0.5, factor=3.0, max_backoff=10.0, jitter=0.0)
    assert [policy.backoff(n, 0.0) for n in range(1, 6)] == [0.5, 1.5, 4.5, 10.0, 10.0]


def test_jitter_only_shortens_the_delay_by_at_most_its_fraction() -> None:
    policy = RestartPolicy(initial_backoff=4.0, factor=2.0, max_backoff=8.0, jitter=0.25)
    assert policy.backoff(1, 0.0) == 4.0
    assert policy.backoff(1, 0.5) == 3.5
    assert policy.backoff(1, 1.0) == 3.0
    assert policy.backoff(5, 0.0) == 8.0  # the cap is never exceeded
    with pytest.raises(ValueError, match="jitter draw"):
        policy.backoff(1, 1.5)


def test_backoff_survives_huge_failure_counts() -> None:
    policy = RestartPolicy(initial_backoff=1.0, factor=10.0, max_backoff=30.0, jitter=0.0)
    assert policy.backoff(100_000, 0.0) == 30.0


@pytest.mark.parametrize(
    ("kwargs", "complaint"),
    [
        ({"initial_backoff": -1.0}, "initial_backoff must be finite and >= 0"),
        ({"initial_backoff": float("nan")}, "initial_backoff must be finite and >= 0"),
        ({"factor": 0.5}, "factor must be >= 1"),
        ({"max_backoff": 0.5, "initial_backoff": 1.0}, "below initial_backoff"),
        ({"jitter": 1.5}, "'jitter' must be <= 1.0"),
        ({"jitter": -0.1}, "jitter must be finite and >= 0"),
        ({"max_restarts": -1}, "'max_restarts' must be >= 0"),
        ({"reset_after": -1.0}, "reset_after must be finite and >= 0"),
        ({"reset_after": float("inf")}, "reset_after must be finite and >= 0"),
    ],
)
def test_policy_rejects_nonsense(kwargs: dict[str, Any], complaint: str) -> None:
    with pytest.raises(ValueError, match=re.escape(complaint)):
        RestartPolicy(**kwargs)


def test_policy_is_frozen() -> None:
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        RestartPolicy().jitter = 0.5  # type: ignore[misc]


# --- restarts in virtual time --------------------------------------------------------------


async def test_restart_times_are_exact_with_a_deterministic_jitter(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    service = FlakyService(fail_times=5)
    policy = RestartPolicy(
        initial_backoff=1.0, factor=2.0, max_backoff=5.0, jitter=0.5, reset_after=None
    )
    t0 = trio.current_time()
    jitter = draws([0.0, 0.5, 1.0, 0.0, 0.5])
    value = await bounded(
        nursery.start(partial(supervise, policy=policy, jitter_source=jitter), "flaky", service.run)
    )
    # Delays: 1*(1-0) = 1, 2*(1-0.25) = 1.5, 4*(1-0.5) = 2, min(5, 8) = 5, 5*(1-0.25) = 3.75.
    assert relative(service.attempts, t0) == [0.0, 1.0, 2.5, 4.5, 9.5, 13.25]
    # start() returned only when the service first served, with its value.
    assert value == "serving on attempt 5"
    assert trio.current_time() - t0 == 13.25


async def test_started_is_forwarded_once_and_may_be_called_again_after_a_restart(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    service = FlakyService(fail_times=2, run_for=10.0, start_every_attempt=True)
    policy = RestartPolicy(initial_backoff=1.0, factor=2.0, jitter=0.0, reset_after=None)
    supervisor = SupervisedService("restarting", service.run, policy=policy)
    t0 = trio.current_time()
    value = await bounded(nursery.start(supervisor.run))
    assert value == "serving on attempt 0"
    assert trio.current_time() - t0 == 0.0
    await trio.sleep(100.0)
    # Attempts 1 and 2 called started() again on their own task status: no RuntimeError.
    assert relative(service.attempts, t0) == [0.0, 11.0, 23.0]
    assert supervisor.statistics() == ServiceStatistics(
        name="restarting",
        running=True,
        started=True,
        restarts=2,
        failures_in_a_row=2,
        last_failure=repr(service.failures[-1]),
    )


async def test_calling_started_twice_in_one_attempt_is_still_an_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def greedy(*, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started(1)
        task_status.started(2)

    policy = RestartPolicy(mode=RestartMode.NEVER)
    with pytest.raises(ServiceGaveUp) as excinfo:
        await bounded(supervise("greedy", greedy, policy=policy))
    assert isinstance(excinfo.value.__cause__, RuntimeError)
    assert "twice" in str(excinfo.value.__cause__)


async def test_gives_up_after_max_restarts_chained_to_the_last_failure(
    autojump_clock: trio.testing.MockClock,
) -> None:
    service = FlakyService(fail_times=10)
    policy = RestartPolicy(initial_backoff=1.0, factor=2.0, jitter=0.0, max_restarts=2)
    t0 = trio.current_time()
    with pytest.raises(ServiceGaveUp) as excinfo:
        await bounded(supervise("doomed", service.run, policy=policy))
    assert relative(service.attempts, t0) == [0.0, 1.0, 3.0]
    assert trio.current_time() - t0 == 3.0
    assert excinfo.value.name == "doomed"
    assert excinfo.value.restarts == 2
    assert excinfo.value.__cause__ is service.failures[-1]
    assert "doomed" in str(excinfo.value)


async def test_start_raises_gave_up_when_the_service_never_served(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    service = FlakyService(fail_times=10)
    policy = RestartPolicy(initial_backoff=1.0, jitter=0.0, max_restarts=1)
    with pytest.raises(ServiceGaveUp):
        await bounded(nursery.start(partial(supervise, policy=policy), "never-served", service.run))
    assert len(service.attempts) == 2


async def test_never_policy_runs_once_and_gives_up(
    autojump_clock: trio.testing.MockClock,
) -> None:
    service = FlakyService(fail_times=1, run_for=4.0)
    t0 = trio.current_time()
    with pytest.raises(ServiceGaveUp) as excinfo:
        await bounded(supervise("once", service.run, policy=RestartPolicy(mode=RestartMode.NEVER)))
    assert relative(service.attempts, t0) == [0.0]
    assert trio.current_time() - t0 == 4.0
    assert excinfo.value.restarts == 0
    assert excinfo.value.__cause__ is service.failures[0]


async def test_a_service_that_returns_is_a_failure(
    autojump_clock: trio.testing.MockClock,
) -> None:
    runs: list[float] = []

    async def quitter(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        runs.append(trio.current_time())
        task_status.started()

    t0 = trio.current_time()
    policy = RestartPolicy(initial_backoff=2.0, jitter=0.0, max_restarts=1)
    with pytest.raises(ServiceGaveUp) as excinfo:
        await bounded(supervise("quitter", quitter, policy=policy))
    assert relative(runs, t0) == [0.0, 2.0]
    assert isinstance(excinfo.value.__cause__, ServiceReturned)
    assert excinfo.value.__cause__.name == "quitter"


async def test_a_healthy_run_resets_backoff_and_restart_budget(
    autojump_clock: trio.testing.MockClock,
) -> None:
    attempts: list[float] = []
    run_for = [0.0, 0.0, 10.0, 0.0, 0.0, 0.0]

    async def service(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        attempt = len(attempts)
        attempts.append(trio.current_time())
        await trio.sleep(run_for[attempt])
        raise Boom(attempt)

    policy = RestartPolicy(
        initial_backoff=1.0, factor=2.0, jitter=0.0, max_restarts=2, reset_after=10.0
    )
    t0 = trio.current_time()
    with pytest.raises(ServiceGaveUp) as excinfo:
        await bounded(supervise("sometimes", service, policy=policy))
    # 0 fails -> +1; 1 fails -> +2; 3 runs 10 s (healthy) and fails at 13 -> reset -> +1;
    # 14 fails -> +2; 16 fails -> third failure in a row -> give up.
    assert relative(attempts, t0) == [0.0, 1.0, 3.0, 14.0, 16.0]
    assert isinstance(excinfo.value.__cause__, Boom)
    assert excinfo.value.__cause__.attempt == 4


async def test_a_short_run_does_not_reset(autojump_clock: trio.testing.MockClock) -> None:
    attempts: list[float] = []

    async def service(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        attempts.append(trio.current_time())
        await trio.sleep(9.5)
        raise Boom(len(attempts))

    policy = RestartPolicy(
        initial_backoff=1.0, factor=2.0, jitter=0.0, max_restarts=2, reset_after=10.0
    )
    t0 = trio.current_time()
    with pytest.raises(ServiceGaveUp):
        await bounded(supervise("short", service, policy=policy))
    assert relative(attempts, t0) == [0.0, 10.5, 22.0]


# --- what is not a failure -----------------------------------------------------------------


async def test_cancellation_passes_untouched_and_never_restarts(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    service = FlakyService(fail_times=0)
    t0 = trio.current_time()
    with trio.move_on_after(5.0) as scope:
        await bounded(supervise("steady", service.run, policy=RestartPolicy()))
    assert scope.cancelled_caught
    assert trio.current_time() - t0 == 5.0
    assert relative(service.attempts, t0) == [0.0]
    assert [r for r in caplog.records if r.name == LOGGER] == []


async def test_cancellation_during_backoff_stops_the_restart(
    autojump_clock: trio.testing.MockClock,
) -> None:
    service = FlakyService(fail_times=10)
    policy = RestartPolicy(initial_backoff=1.0, jitter=0.0)
    t0 = trio.current_time()
    with trio.move_on_after(0.5) as scope:
        await bounded(supervise("sleepy", service.run, policy=policy))
    assert scope.cancelled_caught
    assert trio.current_time() - t0 == 0.5
    assert len(service.attempts) == 1


class Fatal(BaseException):
    """Not an Exception: the supervisor must not treat it as a failure."""


async def test_base_exceptions_propagate_without_restart(
    autojump_clock: trio.testing.MockClock,
) -> None:
    runs: list[float] = []

    async def fatal(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        runs.append(trio.current_time())
        raise Fatal

    with pytest.raises(Fatal):
        await bounded(supervise("fatal", fatal, policy=RestartPolicy()))
    assert len(runs) == 1


async def test_exception_groups_are_kept_whole(autojump_clock: trio.testing.MockClock) -> None:
    async def fail_in(seconds: float) -> None:
        await trio.sleep(seconds)
        raise Boom(int(seconds))

    async def crowd(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(fail_in, 1.0)

    policy = RestartPolicy(mode=RestartMode.NEVER)
    with pytest.raises(ServiceGaveUp) as excinfo:
        await bounded(supervise("crowd", crowd, policy=policy))
    cause = excinfo.value.__cause__
    # A group of one stays a group: the supervisor does not unwrap.
    assert isinstance(cause, ExceptionGroup)
    assert [type(e) for e in cause.exceptions] == [Boom]


# --- logging and statistics ----------------------------------------------------------------


async def test_each_restart_and_the_give_up_are_logged(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    service = FlakyService(fail_times=10)
    policy = RestartPolicy(initial_backoff=1.0, factor=2.0, jitter=0.0, max_restarts=2)
    with pytest.raises(ServiceGaveUp):
        await bounded(supervise("noisy", service.run, policy=policy))
    records = [r for r in caplog.records if r.name == LOGGER]
    assert [r.levelno for r in records] == [logging.WARNING, logging.WARNING, logging.ERROR]
    for record, failure in zip(records, service.failures, strict=True):
        assert "'noisy'" in record.getMessage()
        assert repr(failure) in record.getMessage() or record.levelno == logging.ERROR
        assert record.exc_info is not None
        assert record.exc_info[1] is failure
    assert "restart 1 in 1.000 s" in records[0].getMessage()
    assert "restart 2 in 2.000 s" in records[1].getMessage()
    assert "gave up after 2 restart(s)" in records[2].getMessage()


async def test_statistics_track_running_and_failures(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    service = FlakyService(fail_times=1, run_for=2.0, start_every_attempt=True)
    supervisor = SupervisedService(
        "tracked", service.run, policy=RestartPolicy(initial_backoff=3.0, jitter=0.0)
    )
    before = supervisor.statistics()
    assert before == ServiceStatistics("tracked", False, False, 0, 0, None)
    await bounded(nursery.start(supervisor.run))
    assert supervisor.statistics().running
    await trio.sleep(2.5)  # failed at 2, backing off until 5
    during = supervisor.statistics()
    assert not during.running
    assert during.failures_in_a_row == 1
    assert during.restarts == 0
    assert during.last_failure == repr(service.failures[0])
    await trio.sleep(3.0)
    after = supervisor.statistics()
    assert after.running
    assert after.restarts == 1
    assert supervisor.name == "tracked"
