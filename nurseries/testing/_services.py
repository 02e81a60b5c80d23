"""Starting services the way the composition root does, with a bound on startup."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import trio

from nurseries.testing._groups import single_exception_unwrapped

__all__ = ["DEFAULT_STARTUP_TIMEOUT", "ServiceStartTimeout", "open_service", "start_service"]

DEFAULT_STARTUP_TIMEOUT: float = 60.0
"""Seconds on the trio clock (virtual under the autojump clock) a service may take to start."""


class ServiceStartTimeout(Exception):
    """A service did not call ``task_status.started`` within its startup timeout."""


async def start_service(
    nursery: trio.Nursery,
    fn: Callable[..., Awaitable[object]],
    *args: object,
    name: str | None = None,
    startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
) -> Any:
    """``await nursery.start(fn, *args)``, failing with `ServiceStartTimeout` if it hangs.

    Returns what the service passed to ``task_status.started``. A service that times out is
    cancelled (``nursery.start`` runs it under the caller's scope until it has started). Use it
    from fixtures: ``yield await start_service(nursery, svc.run)``.
    """
    label = name or getattr(fn, "__qualname__", repr(fn))
    try:
        with trio.fail_after(startup_timeout):
            return await nursery.start(fn, *args, name=name)
    except trio.TooSlowError as exc:
        raise ServiceStartTimeout(f"{label} did not start within {startup_timeout} s") from exc


@asynccontextmanager
async def open_service(
    fn: Callable[..., Awaitable[object]],
    *args: object,
    name: str | None = None,
    startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
) -> AsyncIterator[Any]:
    """Run one service in a nursery of its own for the duration of the block.

    Yields the started value; cancels the service when the block ends. If the service crashes,
    the block is cancelled and the service's exception propagates (unwrapped when it is alone).
    """
    with single_exception_unwrapped():
        async with trio.open_nursery() as nursery:
            value = await start_service(
                nursery, fn, *args, name=name, startup_timeout=startup_timeout
            )
            try:
                yield value
            finally:
                nursery.cancel_scope.cancel()
