"""Running blocking work off the Trio thread, or inline where virtual time needs it.

``RunSync`` is the shape of ``trio.to_thread.run_sync``: ``await run_sync(fn, *args)``. A service
that does seconds of CPU work (a merge, an evaluation) takes one as a parameter: production
passes ``trio.to_thread.run_sync`` so the event loop keeps serving; virtual-time tests pass
:func:`run_inline`, because under the autojump clock a task waiting for a worker thread looks
idle and the clock leaps (DESIGN.md section 8). :func:`offload_for` picks by the wall clock in
use: threads only with the real one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias

import trio

from nurseries._clock import SystemClock, WallClock

__all__ = ["RunSync", "offload_for", "run_inline"]

RunSync: TypeAlias = Callable[..., Awaitable[Any]]
"""``await run_sync(fn, *args)`` returns ``fn(*args)``."""


async def run_inline(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` on the Trio thread (it blocks the loop while it runs), after a checkpoint."""
    await trio.lowlevel.checkpoint()
    return fn(*args)


def offload_for(wall: WallClock) -> RunSync:
    """Worker threads with the real clock, :func:`run_inline` with any other."""
    return trio.to_thread.run_sync if isinstance(wall, SystemClock) else run_inline
