"""``GET /v1/events``: the event hub as server-sent events (auth none).

Each event is a frame ``id: <seq>\\nevent: <kind>\\ndata: <json>\\n\\n``; ``?kinds=a,b`` keeps
only those kinds. While idle the stream sends a comment (``: keep-alive``) every
:data:`KEEPALIVE_INTERVAL` seconds so proxies keep it open. The stream ends when the coordinator
starts stopping (``ctx.stopping``) or the hub is closed; a request that arrives while stopping
gets 503 with ``Retry-After``. ``response.timeout`` is None: Quart's response timeout would
otherwise cut the stream.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Final, Literal

import trio
from quart import Response, request
from quart_trio import QuartTrio

from hypertrain.coordinator.context import Coordinator
from hypertrain.coordinator.events import HubEvent, Subscription
from hypertrain.coordinator.web.http import stopping_response
from hypertrain.coordinator.web.routedoc import Doc, Media, Param, add_route, errors
from hypertrain.protocol.errors import Malformed

if TYPE_CHECKING:
    from hypertrain.coordinator.web.app import AppParts

__all__ = ["KEEPALIVE_INTERVAL", "MAX_KINDS", "register"]

KEEPALIVE_INTERVAL: Final = 15.0
"""Seconds of silence after which a keep-alive comment is sent."""
MAX_KINDS: Final = 32
"""Most kinds one ``?kinds=`` filter may name."""
_OPENING: Final = b": connected\n\n"
_KEEPALIVE: Final = b": keep-alive\n\n"


def _kinds(raw: str | None) -> frozenset[str] | None:
    if raw is None:
        return None
    kinds = frozenset(part.strip() for part in raw.split(",") if part.strip())
    if not kinds or len(kinds) > MAX_KINDS or any(not k.isprintable() for k in kinds):
        raise Malformed(f"kinds: expected 1..{MAX_KINDS} comma-separated names, got {raw!r}")
    return kinds


async def _next_event(
    subscription: Subscription, stopping: trio.Event, deadline: float
) -> HubEvent | Literal["idle", "end"]:
    """The next event; "end" when the hub closed or stopping was set; "idle" at ``deadline``."""
    outcome: list[HubEvent | Literal["end"]] = []
    async with trio.open_nursery() as nursery:

        async def receive() -> None:
            event = await subscription.receive()
            outcome.append("end" if event is None else event)
            nursery.cancel_scope.cancel()

        async def stop() -> None:
            await stopping.wait()
            outcome.append("end")
            nursery.cancel_scope.cancel()

        nursery.start_soon(receive)
        nursery.start_soon(stop)
        nursery.cancel_scope.deadline = deadline
    return outcome[0] if outcome else "idle"


async def _stream(ctx: Coordinator, kinds: frozenset[str] | None) -> AsyncIterator[bytes]:
    async with ctx.events.subscribe(kinds) as subscription:
        yield _OPENING
        while not ctx.stopping.is_set():
            event = await _next_event(
                subscription, ctx.stopping, trio.current_time() + KEEPALIVE_INTERVAL
            )
            if event == "end":
                return
            yield _KEEPALIVE if event == "idle" else event.to_sse()


def register(app: QuartTrio, ctx: Coordinator, parts: AppParts) -> None:
    """Add ``GET /v1/events`` to ``app``."""

    async def events() -> Response:
        if ctx.stopping.is_set():
            return stopping_response()
        kinds = _kinds(request.args.get("kinds"))
        response = Response(
            _stream(ctx, kinds),
            content_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
        response.timeout = None
        return response

    add_route(
        app,
        "/v1/events",
        "events.stream",
        events,
        "GET",
        Doc(
            summary="server-sent events (run, round_state, audit, dispute, compute ...)",
            params=(Param(name="kinds", description=f"1..{MAX_KINDS} comma-separated kinds"),),
            answers={200: Media("text/event-stream")},
            errors=errors(503),
        ),
    )
