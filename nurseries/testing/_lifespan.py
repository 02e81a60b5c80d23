"""Drive an ASGI app's lifespan protocol for in-process tests."""

from __future__ import annotations

import logging
from typing import Any

import trio

from nurseries._serve import ASGIApp

__all__ = ["LifespanDriver", "LifespanError"]

log = logging.getLogger(__name__)


class LifespanError(RuntimeError):
    """The app reported ``lifespan.*.failed``, or did not answer within the timeout."""


class LifespanDriver:
    """Runs ``app`` with a lifespan scope and sends it ``startup`` and ``shutdown``.

    As ASGI servers do, an app that raises or returns before completing startup is taken not to
    support lifespan, and requests proceed without it. ``state`` is the lifespan state dict;
    each request scope gets a shallow copy.
    """

    def __init__(self, app: ASGIApp, timeout: float) -> None:
        self._app = app
        self._timeout = timeout
        self.state: dict[str, Any] = {}
        self.supported = True
        self._inbox_send, self._inbox = trio.open_memory_channel[dict[str, Any]](1)
        self._answered = {"startup": trio.Event(), "shutdown": trio.Event()}
        self._answers: dict[str, str] = {}

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The lifespan task: runs the app until it returns or is cancelled."""
        scope = {
            "type": "lifespan",
            "asgi": {"version": "3.0", "spec_version": "2.0"},
            "state": self.state,
        }
        task_status.started()
        try:
            await self._app(scope, self._inbox.receive, self._send)
        except Exception:
            if "startup" not in self._answers:
                log.debug("ASGI lifespan raised; continuing without lifespan", exc_info=True)
            else:
                log.exception("ASGI lifespan raised after startup")
        finally:
            if "startup" not in self._answers:
                self.supported = False
            for event in self._answered.values():
                event.set()

    async def startup(self) -> None:
        """Send ``lifespan.startup`` and wait for the answer; raises `LifespanError`."""
        await self._exchange("startup")

    async def shutdown(self) -> None:
        """Send ``lifespan.shutdown`` and wait for the answer; raises `LifespanError`."""
        if self.supported:
            await self._exchange("shutdown")

    async def _exchange(self, stage: str) -> None:
        try:
            with trio.fail_after(self._timeout):
                await self._inbox_send.send({"type": f"lifespan.{stage}"})
                await self._answered[stage].wait()
        except trio.TooSlowError as exc:
            raise LifespanError(f"lifespan {stage} took longer than {self._timeout} s") from exc
        answer = self._answers.get(stage)
        if answer is not None and answer != "complete":
            raise LifespanError(f"lifespan {stage} failed: {answer}")

    async def _send(self, message: dict[str, Any]) -> None:
        kind = message["type"]
        for stage in ("startup", "shutdown"):
            if kind == f"lifespan.{stage}.complete":
                self._answers[stage] = "complete"
            elif kind == f"lifespan.{stage}.failed":
                self._answers[stage] = str(message.get("message", "")) or "(no message)"
            else:
                continue
            self._answered[stage].set()
            return
        raise RuntimeError(f"unexpected lifespan message {kind!r}")
