"""The beacon pusher: keep a sink's rounds up to date with the relays, one tick per interval.

Each tick (on absolute Trio time, ``nurseries.periodic``; late ticks are skipped, not bunched):

1. ask the source for the latest round: the relays (agreement-checked and BLS-verified, see
   :mod:`hypertrain.beacon.relays`) or a local chain run in-process
   (:class:`~hypertrain.beacon.local.LocalChainSource`);
2. ask the sink which round it holds (``known``);
3. push the missing rounds oldest first, at most ``catch_up`` of them:
   ``max(known + 1, latest - catch_up + 1) .. latest`` (:func:`rounds_to_push`), fetching each
   from the relays with the same agreement rule;
4. report a :class:`TickRecord`, printed by the program as one JSON line
   ``{"pushed": [...], "latest": n, "known": n}`` (a failed tick adds ``error`` and
   ``failures``).

:meth:`Pusher.run` reports, once its first tick is done, the round D it starts from (the newest
round the sink holds) through ``task_status.started``.

Relay failures (:class:`BeaconUnavailable`, disagreements included), sink failures worth a retry
(:class:`SinkUnavailable`) and a tick over ``tick_timeout`` make a *failed* tick; after
``max_failures`` failed ticks in a row the service raises :class:`PusherGaveUp`. A sink that
refuses a round for good (:class:`SinkRefused`: 409, 400, 401/403) or an unusable token file
(:class:`TokenFileError`) ends the service at once with that error. :meth:`Pusher.request_stop`
(the program's SIGTERM hook) lets the tick in flight finish and then ends ``run``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, Protocol

import attrs
import trio

from hypertrain.beacon.chain import BeaconRound
from hypertrain.beacon.errors import BeaconUnavailable, PusherGaveUp, SinkUnavailable
from hypertrain.beacon.sinks import BeaconSink
from nurseries import periodic

__all__ = [
    "DEFAULT_CATCH_UP",
    "DEFAULT_INTERVAL",
    "DEFAULT_MAX_FAILURES",
    "DEFAULT_TICK_TIMEOUT",
    "BeaconSource",
    "Pusher",
    "PusherStatistics",
    "TickRecord",
    "rounds_to_push",
]

DEFAULT_INTERVAL: Final = 3.0
"""Seconds between ticks (quicknet's period)."""
DEFAULT_CATCH_UP: Final = 20
"""Most rounds pushed in one tick: only the last ones matter for deadlines."""
DEFAULT_MAX_FAILURES: Final = 10
"""Failed ticks in a row after which the pusher gives up."""
DEFAULT_TICK_TIMEOUT: Final = 60.0
"""Seconds (Trio clock) one tick may take, relay queries and pushes included."""


class BeaconSource(Protocol):
    """Where rounds come from: :class:`~hypertrain.beacon.relays.RelayClient`, or a local chain.

    Both methods return only rounds already verified, and raise :class:`BeaconUnavailable`
    (retried on the next tick) when they cannot answer.
    """

    async def latest(self) -> BeaconRound: ...

    async def round(self, number: int) -> BeaconRound: ...


def rounds_to_push(known: int, latest: int, catch_up: int) -> range:
    """The rounds to push, oldest first: ``max(known+1, latest-catch_up+1) .. latest``."""
    return range(max(known + 1, latest - catch_up + 1, 1), latest + 1)


@attrs.frozen
class TickRecord:
    """What one tick did. ``latest``/``known`` are None when the tick failed before learning.

    Its JSON (the converter's, defaults omitted) is ``{"pushed", "latest", "known"}``, plus
    ``error`` and ``failures`` for a failed tick.
    """

    pushed: tuple[int, ...]
    latest: int | None
    known: int | None
    error: str | None = None
    failures: int = 0
    """Failed ticks in a row, this one included (0 for a good tick)."""

    @property
    def ok(self) -> bool:
        """Whether the tick succeeded."""
        return self.error is None

    @property
    def held(self) -> int | None:
        """D after the tick: the newest round the sink holds (None if it was never asked)."""
        return self.pushed[-1] if self.pushed else self.known


@attrs.frozen
class PusherStatistics:
    """A snapshot of a :class:`Pusher` for status pages."""

    ticks: int
    failed_ticks: int
    failures_in_row: int
    pushed: int
    last: TickRecord | None


class Pusher:
    """The pusher service (see the module docstring)."""

    def __init__(
        self,
        relays: BeaconSource,
        sink: BeaconSink,
        *,
        interval: float = DEFAULT_INTERVAL,
        catch_up: int = DEFAULT_CATCH_UP,
        max_failures: int = DEFAULT_MAX_FAILURES,
        tick_timeout: float = DEFAULT_TICK_TIMEOUT,
        report: Callable[[TickRecord], object] | None = None,
    ) -> None:
        if not interval > 0 or catch_up < 1 or max_failures < 1 or not tick_timeout > 0:
            raise ValueError("interval and tick_timeout must be > 0, catch_up/max_failures >= 1")
        self._relays = relays
        self._sink = sink
        self._interval = interval
        self._catch_up = catch_up
        self._max_failures = max_failures
        self._tick_timeout = tick_timeout
        self._report = report
        self._ticks = 0
        self._failed = 0
        self._in_row = 0
        self._pushed = 0
        self._last: TickRecord | None = None
        self._stop = trio.Event()
        self._idle: trio.CancelScope | None = None

    async def run(
        self, *, task_status: trio.TaskStatus[int | None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Tick every ``interval``; after the first tick, ``task_status.started(D)`` with D the
        round the pusher starts from: the newest round the sink holds then (None when that tick
        failed before the sink answered; the next ticks retry).

        Runs until cancelled or, after :meth:`request_stop`, until the tick in flight (if any)
        is done. Raises :class:`PusherGaveUp` after ``max_failures`` failed ticks in a row, and
        the fatal sink errors as they come.
        """
        ticks = periodic(self._interval)
        started = False
        while not self._stop.is_set():
            with trio.CancelScope() as self._idle:
                await ticks.__anext__()
            self._idle = None
            if self._stop.is_set():
                break
            record = await self.tick()
            if not started:
                task_status.started(record.held)
                started = True
            if record.failures >= self._max_failures:
                raise PusherGaveUp(f"{record.failures} ticks failed in a row; last: {record.error}")

    def request_stop(self) -> None:
        """Make :meth:`run` return: at once when idle, else after the tick in flight."""
        self._stop.set()
        if self._idle is not None:
            self._idle.cancel()

    async def tick(self) -> TickRecord:
        """One tick (see the module docstring); reports and returns its record."""
        pushed: list[int] = []
        progress: dict[str, int] = {}
        error: str | None = None
        with trio.move_on_after(self._tick_timeout) as scope:
            try:
                await self._push_missing(pushed, progress)
            except (BeaconUnavailable, SinkUnavailable) as e:
                error = f"{type(e).__name__}: {e.detail}"
        if scope.cancelled_caught:
            error = f"tick took longer than {self._tick_timeout:g} s"
        self._ticks += 1
        self._pushed += len(pushed)
        if error is None:
            self._in_row = 0
        else:
            self._failed += 1
            self._in_row += 1
        record = TickRecord(
            pushed=tuple(pushed),
            latest=progress.get("latest"),
            known=progress.get("known"),
            error=error,
            failures=self._in_row,
        )
        self._last = record
        if self._report is not None:
            self._report(record)
        return record

    async def _push_missing(self, pushed: list[int], progress: dict[str, int]) -> None:
        latest = await self._relays.latest()
        progress["latest"] = latest.round
        known = await self._sink.known()
        progress["known"] = known
        for number in rounds_to_push(known, latest.round, self._catch_up):
            rnd: BeaconRound = (
                latest if number == latest.round else await self._relays.round(number)
            )
            await self._sink.push(rnd)
            pushed.append(number)

    def statistics(self) -> PusherStatistics:
        """Tick counts, rounds pushed and the last tick's record."""
        return PusherStatistics(
            ticks=self._ticks,
            failed_ticks=self._failed,
            failures_in_row=self._in_row,
            pushed=self._pushed,
            last=self._last,
        )
