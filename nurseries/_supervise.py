"""Supervise a forever-service: restart it on failure with capped exponential backoff.

A service is ``async def run(*args, task_status=trio.TASK_STATUS_IGNORED)``: it calls
``task_status.started(value)`` once it can serve and ends only by cancellation. `supervise`
(or `SupervisedService.run`, the same thing with `statistics`) runs such a service and:

- forwards the first ``started(value)`` of any attempt to its own ``task_status``, so
  ``await nursery.start(supervise, ...)`` returns once the service first serves (after however
  many failed attempts that takes) and raises `ServiceGaveUp` if it never does;
- gives every attempt a fresh task status, so a restarted service may call ``started()`` again
  (later values are logged at debug level and otherwise dropped);
- on a failure (any ``Exception``, exception groups included and kept whole) logs the service
  name and the exception, sleeps for the policy's backoff and runs the service again;
- treats a normal return as a failure (`ServiceReturned`): a forever-service that returns is a
  bug, and restarting it under the same policy keeps the daemon alive and the bug visible;
- gives up, per `RestartPolicy`, by raising `ServiceGaveUp` chained (``from``) to the last
  failure;
- lets ``trio.Cancelled`` and every other ``BaseException`` (``KeyboardInterrupt``, groups that
  hold a ``Cancelled``) pass untouched: cancellation is never a failure.

Backoff: restart ``n`` (1-based, counting failures in a row) waits
``min(max_backoff, initial_backoff * factor ** (n - 1)) * (1 - jitter * u)`` seconds, with ``u``
drawn from the injected jitter source in ``[0, 1]``; jitter only shortens the delay, so
``max_backoff`` is a true cap. An attempt that ran for at least ``reset_after`` seconds before
failing counts as healthy: the run of failures (and with it the backoff and the
``max_restarts`` budget) starts again from zero.
"""

from __future__ import annotations

import enum
import logging
import math
import random
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn

import attrs
import trio

logger = logging.getLogger(__name__)

__all__ = [
    "RestartMode",
    "RestartPolicy",
    "ServiceGaveUp",
    "ServiceReturned",
    "ServiceStatistics",
    "SupervisedService",
    "supervise",
]


class RestartMode(enum.Enum):
    """Whether a failed service is run again."""

    NEVER = "never"
    ON_FAILURE = "on_failure"


def _non_negative_finite(_instance: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{attribute.name} must be finite and >= 0, got {value!r}")


@attrs.frozen(kw_only=True)
class RestartPolicy:
    """How a supervised service is restarted. All durations are seconds of Trio time.

    ``max_restarts`` is the number of restarts allowed in a row (``None``: unlimited); with
    ``max_restarts=2`` the service runs at most three times before `ServiceGaveUp`.
    ``reset_after=None`` never forgives earlier failures.
    """

    mode: RestartMode = RestartMode.ON_FAILURE
    initial_backoff: float = attrs.field(default=1.0, validator=_non_negative_finite)
    factor: float = attrs.field(default=2.0, validator=_non_negative_finite)
    max_backoff: float = attrs.field(default=60.0, validator=_non_negative_finite)
    jitter: float = attrs.field(
        default=0.1, validator=attrs.validators.and_(_non_negative_finite, attrs.validators.le(1.0))
    )
    max_restarts: int | None = attrs.field(
        default=None,
        validator=attrs.validators.optional(
            attrs.validators.and_(attrs.validators.instance_of(int), attrs.validators.ge(0))
        ),
    )
    reset_after: float | None = 60.0

    def __attrs_post_init__(self) -> None:
        if self.reset_after is not None:
            _non_negative_finite(self, attrs.fields(RestartPolicy).reset_after, self.reset_after)
        if self.factor < 1.0:
            raise ValueError(f"factor must be >= 1, got {self.factor!r}")
        if self.max_backoff < self.initial_backoff:
            raise ValueError(
                f"max_backoff ({self.max_backoff!r}) is below initial_backoff "
                f"({self.initial_backoff!r})"
            )

    def backoff(self, failures: int, u: float) -> float:
        """Delay before the restart that follows ``failures`` failures in a row (>= 1).

        ``u`` in ``[0, 1]`` is the jitter draw: 0 gives the full capped delay, 1 shortens it by
        the ``jitter`` fraction.
        """
        if failures < 1:
            raise ValueError(f"failures must be >= 1, got {failures!r}")
        if not 0.0 <= u <= 1.0:
            raise ValueError(f"jitter draw must lie in [0, 1], got {u!r}")
        try:
            grown = self.initial_backoff * self.factor ** (failures - 1)
        except OverflowError:
            grown = math.inf
        return min(self.max_backoff, grown) * (1.0 - self.jitter * u)


class ServiceReturned(Exception):
    """A supervised forever-service returned instead of running until cancelled."""

    def __init__(self, name: str) -> None:
        super().__init__(f"service {name!r} returned; forever-services end only by cancellation")
        self.name = name


class ServiceGaveUp(Exception):
    """The supervisor stopped restarting a service. ``__cause__`` is the last failure."""

    def __init__(self, name: str, restarts: int) -> None:
        super().__init__(f"service {name!r} failed; gave up after {restarts} restart(s) in a row")
        self.name = name
        self.restarts = restarts


@attrs.frozen
class ServiceStatistics:
    """A snapshot of one supervised service, for status pages."""

    name: str
    running: bool
    started: bool
    restarts: int
    failures_in_a_row: int
    last_failure: str | None


class _AttemptStatus:
    """The task status one attempt sees: usable once, forwards only the first ``started``."""

    def __init__(self, owner: SupervisedService) -> None:
        self._owner = owner
        self._used = False

    def started(self, value: object = None) -> None:
        if self._used:
            raise RuntimeError("called 'started' twice on the same task status")
        self._used = True
        self._owner._attempt_started(value)


class SupervisedService:
    """Runs ``fn(*args, task_status=...)`` under a `RestartPolicy`; see the module docstring.

    ``jitter_source`` returns draws in ``[0, 1]`` (``random.Random().random`` fits); tests
    inject a fixed sequence to make restart times exact.
    """

    def __init__(
        self,
        name: str,
        fn: Callable[..., Awaitable[object]],
        *args: object,
        policy: RestartPolicy,
        jitter_source: Callable[[], float] = random.random,
    ) -> None:
        self._name = name
        self._fn = fn
        self._args = args
        self._policy = policy
        self._jitter_source = jitter_source
        self._task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED
        self._started = False
        self._running = False
        self._restarts = 0
        self._failures_in_a_row = 0
        self._last_failure: Exception | None = None

    @property
    def name(self) -> str:
        """The name used in logs and errors."""
        return self._name

    def statistics(self) -> ServiceStatistics:
        """Return a frozen snapshot of this supervisor's state."""
        return ServiceStatistics(
            name=self._name,
            running=self._running,
            started=self._started,
            restarts=self._restarts,
            failures_in_a_row=self._failures_in_a_row,
            last_failure=None if self._last_failure is None else repr(self._last_failure),
        )

    async def run(
        self, *, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED
    ) -> NoReturn:
        """Run the service until cancelled, or raise `ServiceGaveUp`."""
        self._task_status = task_status
        while True:
            failure = await self._attempt()
            self._record(failure)
            if self._should_give_up():
                gave_up = ServiceGaveUp(self._name, self._failures_in_a_row - 1)
                logger.error("%s", gave_up, exc_info=failure)
                raise gave_up from failure
            delay = self._policy.backoff(self._failures_in_a_row, self._jitter_source())
            logger.warning(
                "service %r failed (%d in a row): %r; restart %d in %.3f s",
                self._name,
                self._failures_in_a_row,
                failure,
                self._restarts + 1,
                delay,
                exc_info=failure,
            )
            await trio.sleep(delay)
            self._restarts += 1

    async def _attempt(self) -> Exception:
        """Run the service once and return how it failed. ``BaseException``s propagate."""
        began = trio.current_time()
        self._running = True
        try:
            await self._fn(*self._args, task_status=_AttemptStatus(self))
        except Exception as exc:
            failure: Exception = exc
        else:
            failure = ServiceReturned(self._name)
        finally:
            self._running = False
        reset_after = self._policy.reset_after
        if reset_after is not None and trio.current_time() - began >= reset_after:
            self._failures_in_a_row = 0
        return failure

    def _record(self, failure: Exception) -> None:
        self._failures_in_a_row += 1
        self._last_failure = failure

    def _should_give_up(self) -> bool:
        if self._policy.mode is RestartMode.NEVER:
            return True
        limit = self._policy.max_restarts
        return limit is not None and self._failures_in_a_row > limit

    def _attempt_started(self, value: object) -> None:
        if self._started:
            logger.debug("service %r started again: %r", self._name, value)
            return
        self._started = True
        self._task_status.started(value)


async def supervise(
    name: str,
    fn: Callable[..., Awaitable[object]],
    *args: object,
    policy: RestartPolicy,
    jitter_source: Callable[[], float] = random.random,
    task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED,
) -> NoReturn:
    """Run ``fn(*args, task_status=...)`` under ``policy`` until cancelled.

    ``nursery.start`` passes no keyword arguments, so start it as
    ``await nursery.start(SupervisedService("beacon", beacon.run, policy=p).run)`` or with
    ``functools.partial(supervise, policy=p)``. Raises `ServiceGaveUp` (chained to the last
    failure) when the policy stops restarting.
    """
    service = SupervisedService(name, fn, *args, policy=policy, jitter_source=jitter_source)
    await service.run(task_status=task_status)
