"""Periodic loops scheduled on absolute Trio time.

``async for tick in periodic(5.0): ...`` runs the body at ``t0``, ``t0 + 5``, ``t0 + 10``, ...
where ``t0`` is the Trio time of the first iteration (or the ``start`` passed in). Ticks are
computed from ``t0``, never from "now + period", so a body's run time does not make the
schedule drift. When the body runs past one or more tick times those ticks are skipped, not
bunched: the next iteration happens at the first tick time not yet passed, and the `Tick`
says how many were missed.
"""

from __future__ import annotations

import math

import attrs
import trio

__all__ = ["Periodic", "Tick", "periodic"]


@attrs.frozen
class Tick:
    """One iteration of a periodic loop.

    ``index`` is ``k`` in ``scheduled = t0 + k * period`` (0 for the first tick); ``missed`` is
    how many tick times passed without an iteration since the previous one (for the first
    tick: since ``start``). ``trio.current_time() - scheduled`` is how late the body starts.
    """

    index: int
    scheduled: float
    missed: int


def _next_index(t0: float, period: float, after: int, now: float) -> int:
    """The smallest ``k > after`` whose tick time ``t0 + k * period`` is not before ``now``."""
    k = max(after + 1, math.ceil((now - t0) / period))
    # Correct for rounding in the division, in both directions.
    while k - 1 > after and t0 + (k - 1) * period >= now:
        k -= 1
    while t0 + k * period < now:
        k += 1
    return k


class Periodic:
    """The async iterator `periodic` returns. A plain object, not an async generator, so
    leaving the loop early (``break``, an exception) needs no ``aclosing``."""

    def __init__(self, period: float, start: float | None) -> None:
        if not (math.isfinite(period) and period > 0):
            raise ValueError(f"period must be finite and > 0, got {period!r}")
        if start is not None and not math.isfinite(start):
            raise ValueError(f"start must be finite, got {start!r}")
        self._period = period
        self._t0 = start
        self._last: int | None = None

    @property
    def period(self) -> float:
        """Seconds between tick times."""
        return self._period

    def __aiter__(self) -> Periodic:
        return self

    async def __anext__(self) -> Tick:
        now = trio.current_time()
        if self._t0 is None:
            self._t0 = now
        after = -1 if self._last is None else self._last
        k = _next_index(self._t0, self._period, after, now)
        scheduled = self._t0 + k * self._period
        self._last = k
        await trio.sleep_until(scheduled)
        return Tick(index=k, scheduled=scheduled, missed=k - after - 1)


def periodic(period: float, *, start: float | None = None) -> Periodic:
    """Iterate ticks at ``start + k * period`` for k = 0, 1, 2, ..., skipping late ticks.

    ``start`` is an absolute Trio time (default: the time of the first iteration). The first
    tick is at ``start`` itself; if ``start`` lies in the past, ticks already passed count as
    missed. Every iteration waits with ``trio.sleep_until`` and so is a checkpoint; the loop
    ends only when the caller stops iterating or is cancelled. Raises ``ValueError`` at once
    for a period that is not finite and positive or a start that is not finite.
    """
    return Periodic(period, start)
