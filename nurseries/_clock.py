"""Wall clocks: where unix time comes from.

Nothing in the code base reads ``time.time()`` directly; components take a `WallClock` and ask
it. Production passes `SystemClock` (the one place that reads ``time.time``); virtual-time tests
pass `VirtualClock`, whose wall time moves with Trio's clock, so a ``MockClock`` with autojump
carries timestamps, day rollovers and expiry checks along with ``trio.sleep``. Pure code that
needs no Trio run takes a `FixedClock` and moves it by hand.

Wall time is for timestamps and for translating external deadlines (drand rounds, lease expiry
written to disk). Waiting is always done on Trio's clock.
"""

from __future__ import annotations

import math
import time
from typing import Protocol, runtime_checkable

import attrs
import trio


@runtime_checkable
class WallClock(Protocol):
    """A source of unix time in seconds (float, UTC, may jump if the host clock is set)."""

    def now(self) -> float:
        """Return the current unix time in seconds."""
        ...


@attrs.frozen
class SystemClock:
    """The host's clock: ``time.time()``. The only code allowed to read it."""

    def now(self) -> float:
        """Return ``time.time()``."""
        return time.time()


@attrs.frozen
class VirtualClock:
    """Wall time that follows Trio's clock: ``epoch + trio.current_time()``.

    Under ``trio.testing.MockClock`` the Trio clock starts at 0, so ``epoch`` is the unix time
    the test pretends the run started at. Calling `now` outside a Trio run raises
    ``RuntimeError`` (from Trio).
    """

    epoch: float = attrs.field(validator=attrs.validators.instance_of((int, float)))

    @epoch.validator
    def _finite(self, _attribute: attrs.Attribute[float], value: float) -> None:
        if not math.isfinite(value):
            raise ValueError(f"epoch must be finite, got {value!r}")

    def now(self) -> float:
        """Return ``epoch + trio.current_time()``."""
        return self.epoch + trio.current_time()


@attrs.define
class FixedClock:
    """A clock that only moves when told to; for tests of pure (non-Trio) code."""

    value: float = 0.0

    def now(self) -> float:
        """Return the current value."""
        return self.value

    def set(self, value: float) -> None:
        """Jump to ``value`` (backwards too, like a host clock being set)."""
        self.value = value

    def advance(self, seconds: float) -> None:
        """Move forward by ``seconds`` (which must not be negative)."""
        if seconds < 0:
            raise ValueError(f"cannot advance by a negative amount: {seconds!r}")
        self.value += seconds
