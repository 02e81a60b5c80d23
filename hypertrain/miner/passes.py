"""Poll passes of a forever task beside the round loop, and waiting for them to settle.

The AuditServer and the DisputeFollower both run one pass over their rounds every
``poll_seconds`` and let the session wait, after the last round, until nothing is pending.
:class:`Passes` is that loop and that wait, once::

    passes = Passes()
    await passes.run(self.poll_once, interval)   # the task: ends only by cancellation
    await passes.wait_while(self.pending)        # elsewhere: returns after the pass that
                                                 # left nothing pending
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import NoReturn

import trio

__all__ = ["Passes"]


class Passes:
    """See the module docstring."""

    def __init__(self) -> None:
        self._done = trio.Event()

    async def run(self, one_pass: Callable[[], Awaitable[object]], interval: float) -> NoReturn:
        """``one_pass`` every ``interval`` seconds, waking the waiters after each."""
        while True:
            await one_pass()
            done, self._done = self._done, trio.Event()
            done.set()
            await trio.sleep(interval)

    async def wait_while(self, pending: Callable[[], object]) -> None:
        """Return once ``pending()`` is falsy, checked after each pass (:meth:`run` must be
        running; the caller bounds the wait)."""
        while pending():
            await self._done.wait()
