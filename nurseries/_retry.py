"""Retry one call until it succeeds, fails for good, or the caller's deadline passes.

``await retry(call, deadline=d, transient=t)`` runs ``call()`` and returns its value. When it
raises an ``Exception``, ``transient(error)`` decides:

- None: the failure is final (a refusal, a bug); the error propagates as itself, untouched;
- a number of seconds (0.0 when the server said nothing, else its ``Retry-After``): the
  failure is transient; the next try follows after `next_delay` (exponential backoff, full
  jitter, drawn from the injected ``draw``) — unless no try may start by ``deadline``: then
  `GaveUp` is raised, chained (``from``) to the last failure.

``deadline`` is an absolute time on the Trio clock (``trio.current_time()`` plus the caller's
bound, or a protocol deadline converted to it), so tests under the autojump clock see exact
delays. A try in progress is not cancelled at the deadline: each try is bounded by its own
timeouts (httpx's); only new tries and waits are. ``trio.Cancelled`` and other
``BaseException`` pass untouched, from the call and from the sleeps.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

import trio

from nurseries._backoff import DEFAULT_BACKOFF, Backoff, next_delay

__all__ = ["GaveUp", "Transient", "retry"]

T = TypeVar("T")

Transient = Callable[[Exception], float | None]
"""A failure's class: None when final, else the least seconds to wait before the next try."""


class GaveUp(Exception):
    """No try may start before the deadline; ``last`` (also ``__cause__``) is the last failure.

    ``tries`` counts the tries made (all failed)."""

    def __init__(self, tries: int, last: Exception) -> None:
        super().__init__(f"gave up after {tries} tries at the deadline; last: {_brief(last)}")
        self.tries = tries
        self.last = last


def _brief(error: Exception) -> str:
    text = " ".join(str(error).split())[:200]
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


async def retry(
    call: Callable[[], Awaitable[T]],
    *,
    deadline: float,
    transient: Transient,
    backoff: Backoff = DEFAULT_BACKOFF,
    draw: Callable[[], float] = random.random,
    on_retry: Callable[[Exception, float], None] | None = None,
) -> T:
    """``call()``'s value, retried while it fails transiently (module doc); ``on_retry(error,
    delay)`` is told about each wait before it starts (for a log line)."""
    failures = 0
    while True:
        try:
            return await call()
        except Exception as error:
            wait = transient(error)
            if wait is None:
                raise
            failures += 1
            now = trio.current_time()
            delay = next_delay(
                backoff, failures, draw(), now=now, deadline=deadline, not_before=wait
            )
            if delay is None:
                raise GaveUp(failures, error) from error
            if on_retry is not None:
                on_retry(error, delay)
        await trio.sleep(delay)
