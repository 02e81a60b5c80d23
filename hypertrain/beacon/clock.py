"""The round <-> time clock: drand rounds as deadlines on Trio's clock.

Every deadline in hypertrain is a drand round. :class:`BeaconClock` joins a chain's schedule to
an injected :class:`~nurseries.WallClock` and to the rounds actually ingested:

- ``round_at(t)`` / ``time_of(r)`` / ``now_round()``: the chain's schedule (spec section 4.1);
  ``now_round()`` is the round *due* by wall time, which may be ahead of what was ingested.
- ``latest``: D, the latest round *ingested* (verified and stored). Only :meth:`observe` moves
  it, and only upwards.
- ``await wait_round(n)`` returns once ``latest >= n``. It is woken by :meth:`observe` alone,
  never by wall time, so a stalled beacon stalls it: callers bound it with
  ``trio.move_on_at(clock.deadline_of(n) + margin)`` or ``trio.fail_at(...)``.
- ``deadline_of(r)`` turns "when round r is due" into a Trio deadline by measuring the distance
  on the wall clock and adding it to ``trio.current_time()``. With ``VirtualClock`` and the
  autojump clock this is exact; with ``SystemClock`` it follows wall-clock steps made before the
  call (a deadline already computed does not move).
"""

from __future__ import annotations

import heapq
import itertools

import attrs
import trio

from hypertrain.beacon.chain import ChainInfo
from nurseries import WallClock

__all__ = ["BeaconClock", "BeaconClockStatistics"]


@attrs.frozen
class BeaconClockStatistics:
    """A snapshot of a :class:`BeaconClock` for status pages."""

    latest: int
    """D: the latest ingested round (0 before any)."""
    now_round: int
    """The round due by wall time."""
    lag: int
    """``now_round - latest`` (how far ingestion is behind the chain; may be negative)."""
    observed: int
    """How many calls to ``observe`` raised ``latest``."""
    waiters: int
    """Tasks blocked in ``wait_round``."""


class BeaconClock:
    """Schedule of one chain plus the latest ingested round, with waiters on it."""

    def __init__(self, info: ChainInfo, wall: WallClock, *, latest: int = 0) -> None:
        if latest < 0:
            raise ValueError(f"latest must be >= 0, got {latest}")
        self._info = info
        self._wall = wall
        self._latest = latest
        self._observed = 0
        # (round, sequence, event): the sequence keeps heap entries comparable.
        self._waiting: list[tuple[int, int, trio.Event]] = []
        self._sequence = itertools.count()

    @property
    def info(self) -> ChainInfo:
        """The chain this clock follows."""
        return self._info

    @property
    def latest(self) -> int:
        """D: the latest round ingested so far (0 before the first)."""
        return self._latest

    def round_at(self, t: float) -> int:
        """The latest round due at unix time ``t`` (0 before genesis)."""
        return self._info.round_at(t)

    def time_of(self, round_: int) -> float:
        """Unix time at which ``round_`` (>= 1) is due."""
        return self._info.time_of(round_)

    def now_round(self) -> int:
        """The round due now by the wall clock (not necessarily ingested yet)."""
        return self._info.round_at(self._wall.now())

    def deadline_of(self, round_: int) -> float:
        """The Trio deadline at which ``round_`` is due by the wall clock.

        ``trio.current_time() + (time_of(round_) - wall.now())``; in the past for a round
        already due. Use with ``trio.move_on_at`` / ``trio.fail_at``.
        """
        return trio.current_time() + (self._info.time_of(round_) - self._wall.now())

    def observe(self, round_: int) -> None:
        """Record that ``round_`` was ingested: raise ``latest`` and wake the waiters it frees.

        A round at or below ``latest`` changes nothing (pushes may arrive out of order).
        """
        if round_ <= self._latest:
            return
        self._latest = round_
        self._observed += 1
        while self._waiting and self._waiting[0][0] <= round_:
            _, _, event = heapq.heappop(self._waiting)
            event.set()

    async def wait_round(self, round_: int) -> None:
        """Return once ``latest >= round_`` (a checkpoint even if it already is).

        Woken only by :meth:`observe`; bound it with ``deadline_of``. Cancellation is safe: an
        abandoned waiter's entry is dropped when its round is observed.
        """
        if self._latest >= round_:
            await trio.lowlevel.checkpoint()
            return
        event = trio.Event()
        heapq.heappush(self._waiting, (round_, next(self._sequence), event))
        try:
            await event.wait()
        finally:
            if not event.is_set():
                self._forget(event)

    async def wait_next_round(self, *, margin: float, idle: float) -> None:
        """Wait for the round after ``latest``, at most until ``margin`` seconds past its
        wall-clock due time and at most ``idle`` seconds (a service's pause between passes)."""
        target = self._latest + 1
        deadline = min(self.deadline_of(target) + margin, trio.current_time() + idle)
        with trio.move_on_at(deadline):
            await self.wait_round(target)

    def statistics(self) -> BeaconClockStatistics:
        """Latest, due round, lag, observe count and waiter count."""
        now_round = self.now_round()
        return BeaconClockStatistics(
            latest=self._latest,
            now_round=now_round,
            lag=now_round - self._latest,
            observed=self._observed,
            waiters=len(self._waiting),
        )

    def _forget(self, event: trio.Event) -> None:
        self._waiting = [entry for entry in self._waiting if entry[2] is not event]
        heapq.heapify(self._waiting)
