"""offload_for: worker threads with the real clock, inline (and virtual-time safe) otherwise."""

from __future__ import annotations

import threading

import trio
import trio.testing

from nurseries import FixedClock, SystemClock, VirtualClock, offload_for, run_inline


def _thread_name(tag: str) -> tuple[str, str]:
    return tag, threading.current_thread().name


async def test_the_real_clock_offloads_to_a_worker_thread() -> None:
    tag, name = await offload_for(SystemClock())(_thread_name, "x")
    assert (tag, name != threading.current_thread().name) == ("x", True)


async def test_other_clocks_run_inline_without_moving_virtual_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    start = trio.current_time()
    for wall in (VirtualClock(epoch=0.0), FixedClock(5.0)):
        run_sync = offload_for(wall)
        assert run_sync is run_inline
        assert await run_sync(_thread_name, "y") == ("y", threading.current_thread().name)
    assert trio.current_time() == start
