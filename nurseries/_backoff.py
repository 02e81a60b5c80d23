"""The retry schedule: exponential backoff with full jitter, under a deadline. Pure.

`next_delay` is the one rule every client of the project waits by between two tries of a
call (the async `nurseries.retry` and the synchronous loops that cannot use Trio); it takes
the time as a parameter and returns the delay as a value, so a test asserts exact seconds.

The retry that follows ``failures`` failures in a row (``failures >= 1``) waits

    ``max(not_before, u * min(maximum, initial * factor ** (failures - 1)))``

seconds, ``u`` drawn from the caller's random source in ``[0, 1)`` (full jitter: many clients
cut off by the same outage come back spread over the whole window, not in one herd);
``not_before`` is what the server asked for (a ``Retry-After``), 0 when it said nothing.

The deadline (an absolute time on the caller's clock) bounds it: no try starts after it. A wait
that would end past it is shortened so that the last try starts at the deadline itself; when
``now`` is at or past the deadline, or the server asks for more time than is left, the answer is
None: give up now.
"""

from __future__ import annotations

import math
from typing import Any, Final

import attrs

__all__ = ["DEFAULT_BACKOFF", "Backoff", "next_delay", "parse_retry_after"]


def _finite_non_negative(_instance: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{attribute.name} must be finite and >= 0, got {value!r}")


@attrs.frozen(kw_only=True)
class Backoff:
    """The growth of the waits between tries (seconds): ``initial`` after the first failure,
    times ``factor`` after each further one, never above ``maximum`` (before jitter)."""

    initial: float = attrs.field(default=0.5, validator=_finite_non_negative)
    factor: float = attrs.field(default=2.0, validator=_finite_non_negative)
    maximum: float = attrs.field(default=30.0, validator=_finite_non_negative)

    def __attrs_post_init__(self) -> None:
        if self.factor < 1.0:
            raise ValueError(f"factor must be >= 1, got {self.factor!r}")
        if self.maximum < self.initial:
            raise ValueError(f"maximum ({self.maximum!r}) is below initial ({self.initial!r})")

    def ceiling(self, failures: int) -> float:
        """The longest wait after ``failures`` failures in a row (>= 1), before jitter."""
        if failures < 1:
            raise ValueError(f"failures must be >= 1, got {failures!r}")
        try:
            grown = self.initial * self.factor ** (failures - 1)
        except OverflowError:
            grown = math.inf
        return min(self.maximum, grown)


DEFAULT_BACKOFF: Final = Backoff()


def next_delay(
    backoff: Backoff,
    failures: int,
    u: float,
    *,
    now: float,
    deadline: float,
    not_before: float = 0.0,
) -> float | None:
    """Seconds to wait before the next try, or None when no try may start by ``deadline``
    (module doc). ``u`` is the jitter draw in ``[0, 1)``; ``now`` and ``deadline`` are times
    on one clock; ``not_before`` the server's ``Retry-After`` (0: none)."""
    if not 0.0 <= u <= 1.0:
        raise ValueError(f"jitter draw must lie in [0, 1], got {u!r}")
    if not (math.isfinite(not_before) and not_before >= 0):
        raise ValueError(f"not_before must be finite and >= 0, got {not_before!r}")
    left = deadline - now
    if not left > 0 or not_before > left:
        return None
    return min(max(not_before, u * backoff.ceiling(failures)), left)


def parse_retry_after(value: str | None) -> float | None:
    """The seconds of a ``Retry-After`` header in its delta-seconds form (``"5"``); None when
    absent or in any other form (an HTTP date, garbage): the client's own backoff applies."""
    if value is None:
        return None
    value = value.strip()
    if not (value.isascii() and value.isdigit() and len(value) <= 9):
        return None
    return float(int(value))
