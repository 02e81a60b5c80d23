"""Graceful shutdown of a supervisor nursery on SIGINT/SIGTERM/SIGHUP, bounded by a grace period.

``open_supervisor(grace=...)`` opens a nursery for a program's services and listens for the
shutdown signals while it is open: SIGINT (Ctrl-C), SIGTERM (``kill``, systemd) and SIGHUP (the
terminal or the program that started it went away) alike. With ``lifeline=`` it also watches a
lifeline (`nurseries.open_lifeline`): once the program that started this one is gone, even by
SIGKILL, shutdown goes as on SIGHUP. Shutdown, whether asked for by a signal, the lifeline or
`Supervisor.request_shutdown`, goes in this order:

1. the ``on_shutdown`` hook runs (once): set the app's "stopping" event, trigger the HTTP
   server's shutdown, so that work that can finish early does;
2. the nursery's cancel scope gets the deadline ``now + grace``: work still running then is
   cancelled. If everything finishes sooner, the block ends sooner;
3. a second signal (or ``request_shutdown(immediate=True)``) cancels the work at once.

A program that starts children stops them from its own cancellation (`nurseries.run_process`
kills the child's process group when cancelled), so they stop within the same grace.

Ending by shutdown, on time or cut short, is a normal exit of the ``async with`` block: the
cancellation is absorbed by the supervisor's own scope, and `Supervisor.shutdown_signal` /
`Supervisor.work_cancelled` tell the caller what happened. Failures of the work are not
touched: they leave the block as the nursery raised them (an exception group), exactly as from a
plain ``trio.open_nursery()``.

Why not raise a shutdown exception into the nursery (hypercorn's ``worker_serve``)? The watcher
must outlive the first signal to hear the second, and must not keep the work nursery open once
the work is done, so it lives in a nursery of its own around the work; the grace period is then
just the work scope's deadline, and no exception needs catching.
"""

from __future__ import annotations

import contextlib
import logging
import math
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable

import trio

from nurseries._lifeline import wait_lifeline_cut

__all__ = ["DEFAULT_SHUTDOWN_SIGNALS", "Supervisor", "open_supervisor", "run_until_shutdown"]

logger = logging.getLogger(__name__)

DEFAULT_SHUTDOWN_SIGNALS: tuple[signal.Signals, ...] = (
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
)


class Supervisor:
    """The handle `open_supervisor` yields: a nursery for the work, and shutdown controls."""

    def __init__(self, grace: float, on_shutdown: Callable[[], object] | None) -> None:
        self._grace = grace
        self._on_shutdown = on_shutdown
        self._scope = trio.CancelScope()
        self._requested = trio.Event()
        self._signal: signal.Signals | None = None
        self._nursery: trio.Nursery | None = None

    @property
    def nursery(self) -> trio.Nursery:
        """The nursery to start services in; it is inside the graceful-shutdown scope."""
        if self._nursery is None:
            raise RuntimeError("the supervisor's nursery is open only inside its async with")
        return self._nursery

    @property
    def grace(self) -> float:
        """Seconds in-flight work gets between the shutdown request and cancellation."""
        return self._grace

    @property
    def shutdown_requested(self) -> bool:
        """Whether shutdown was requested (by a signal or `request_shutdown`)."""
        return self._requested.is_set()

    @property
    def shutdown_signal(self) -> signal.Signals | None:
        """The signal that requested shutdown; ``None`` if none did."""
        return self._signal

    @property
    def work_cancelled(self) -> bool:
        """Whether work had to be cancelled (grace ran out, or immediate shutdown)."""
        return self._scope.cancelled_caught

    async def wait_shutdown_requested(self) -> None:
        """Return once shutdown has been requested."""
        await self._requested.wait()

    def request_shutdown(self, *, immediate: bool = False) -> None:
        """Start shutdown as a signal would: hook, then ``grace`` seconds, then cancel.

        Repeated graceful requests change nothing (the first deadline stands);
        ``immediate=True`` cancels the work now, like a second signal.
        """
        if not self._requested.is_set():
            self._requested.set()
            self._run_hook()
            self._scope.deadline = min(self._scope.deadline, trio.current_time() + self._grace)
        if immediate:
            self._scope.cancel()

    def _run_hook(self) -> None:
        if self._on_shutdown is None:
            return
        try:
            self._on_shutdown()
        except Exception:
            # A broken hook must not stop the shutdown it belongs to.
            logger.exception("on_shutdown hook failed; shutting down anyway")

    async def _watch(self, receiver: AsyncIterator[int]) -> None:
        async for signum in receiver:
            received = signal.Signals(signum)
            if self._requested.is_set():
                logger.warning("%s received again: cancelling remaining work now", received.name)
                self.request_shutdown(immediate=True)
            else:
                logger.info("%s received: shutting down within %g s", received.name, self._grace)
                self._signal = received
                self.request_shutdown()

    async def _watch_lifeline(self, fd: int) -> None:
        await wait_lifeline_cut(fd)
        if not self._requested.is_set():
            logger.warning("the parent process is gone: shutting down within %g s", self._grace)
            self._signal = signal.SIGHUP
            self.request_shutdown()


@contextlib.asynccontextmanager
async def open_supervisor(
    *,
    grace: float,
    signals: Iterable[int] = DEFAULT_SHUTDOWN_SIGNALS,
    on_shutdown: Callable[[], object] | None = None,
    lifeline: int | None = None,
) -> AsyncIterator[Supervisor]:
    """Open a supervisor nursery that shuts down gracefully on ``signals``; see the module doc.

    ``grace`` (finite, >= 0) is a named setting of the caller. ``signals=()`` listens for no
    signal (for use outside the main thread); shutdown is then only programmatic. ``lifeline``
    is the descriptor `nurseries.lifeline_from_env` gave (``None``: none); once it is cut,
    shutdown goes as on SIGHUP (`Supervisor.shutdown_signal` says SIGHUP). Listening
    starts before the block's body runs. The block ends when the work (body and every task in
    `Supervisor.nursery`) has finished or been cancelled by shutdown.
    """
    if not (math.isfinite(grace) and grace >= 0):
        raise ValueError(f"grace must be finite and >= 0, got {grace!r}")
    supervisor = Supervisor(grace, on_shutdown)
    failure: BaseException | None = None
    with contextlib.ExitStack() as stack:
        wanted = tuple(signals)
        receiver = stack.enter_context(trio.open_signal_receiver(*wanted)) if wanted else None
        async with trio.open_nursery() as watchers:
            if receiver is not None:
                watchers.start_soon(supervisor._watch, receiver, name="shutdown signal watcher")
            if lifeline is not None:
                watchers.start_soon(supervisor._watch_lifeline, lifeline, name="lifeline watcher")
            try:
                with supervisor._scope:
                    async with trio.open_nursery() as work:
                        supervisor._nursery = work
                        yield supervisor
            except BaseException as exc:
                # Re-raised below, after the watcher is gone, so that it leaves this function
                # as the work raised it rather than wrapped in the watchers' group.
                failure = exc
            finally:
                supervisor._nursery = None
                watchers.cancel_scope.cancel()
    if supervisor.work_cancelled:
        logger.warning("shutdown cancelled the remaining work (grace %g s)", grace)
    if failure is not None:
        raise failure


async def run_until_shutdown(
    main: Callable[[Supervisor], Awaitable[object]],
    *,
    grace: float,
    signals: Iterable[int] = DEFAULT_SHUTDOWN_SIGNALS,
    on_shutdown: Callable[[], object] | None = None,
    lifeline: int | None = None,
) -> signal.Signals | None:
    """Run ``main(supervisor)`` inside `open_supervisor` until shutdown or until all work ends.

    ``main`` is the composition root: it starts services in ``supervisor.nursery`` and may
    return at once. Returns the signal that asked for shutdown, or ``None``.
    """
    async with open_supervisor(
        grace=grace, signals=signals, on_shutdown=on_shutdown, lifeline=lifeline
    ) as sup:
        await main(sup)
    return sup.shutdown_signal
