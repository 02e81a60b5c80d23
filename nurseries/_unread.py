"""Early answers never hang a keep-alive connection: the rest of an unread body is drained, or
the connection is closed (DESIGN.md section 9, "Early answers close the connection").

`guard_unread_bodies` wraps an ASGI app for hypercorn's HTTP/1.1 trio worker, which
`serve_asgi` uses. What it fixes, as read in hypercorn 0.18.0 and quart-trio 0.12.0 and
measured over loopback:

- When a response ends while the request body is still arriving, hypercorn cannot reuse the
  connection (h11 is not ``DONE`` on the client's side) and closes it, but it does so from
  *inside the app's last* ``send``: it first hands the app ``http.disconnect``, and quart-trio
  answers that by cancelling its own request nursery, which holds that very ``send``. The close
  is cancelled at its first checkpoint and the socket is never closed. The connection is then
  wedged: the rest of the body is read and dropped, and a next request waits forever on h11's
  ``PAUSED`` (the client sees a hang until its own timeout); with a body of more than about ten
  64 KiB reads still to come, hypercorn's reader blocks on the app's full queue (quart-trio
  stopped reading it), never sees the client leave, and the socket stays in CLOSE-WAIT.
- So, when the app starts its response (``http.response.start``) before the body ended, the
  guard first reads and discards the rest itself, at most ``limit`` bytes (none when the
  declared ``Content-Length`` already says more) within ``timeout`` seconds. A body that ended
  leaves h11 ``DONE`` and the connection is reused as usual; the app's answer is unchanged.
- Otherwise the response gets ``Connection: close``, and its last ``send`` runs shielded from
  the app's cancellation (bounded by ``timeout``) while the guard keeps the app's queue
  flowing, so hypercorn's close really happens. Every other response that closes the
  connection (the app's or the client's ``Connection: close``, HTTP/1.0) ends the same way.

The app still sees every message it receives; what the guard drained after the response
started is not delivered to anyone. Lifespan, websocket and HTTP/2 scopes pass through untouched
(an HTTP/2 stream's unread body does not block its connection).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final

import trio

from nurseries._cleanup import cleanup_scope

__all__ = [
    "DEFAULT_DRAIN_TIMEOUT",
    "DEFAULT_UNREAD_BODY_LIMIT",
    "ASGIApp",
    "guard_unread_bodies",
]

ASGIApp = Callable[[Any, Any, Any], Awaitable[None]]
"""An ASGI 3 application: ``await app(scope, receive, send)``."""

Message = MutableMapping[str, Any]

DEFAULT_UNREAD_BODY_LIMIT: Final = 1 << 20
"""Bytes of an unread request body drained to keep a connection open (1 MiB)."""
DEFAULT_DRAIN_TIMEOUT: Final = 5.0
"""Seconds the drain, and separately the closing last ``send``, may take."""

_CLOSE: Final = (b"connection", b"close")


def guard_unread_bodies(
    app: ASGIApp,
    *,
    limit: int = DEFAULT_UNREAD_BODY_LIMIT,
    timeout: float = DEFAULT_DRAIN_TIMEOUT,
) -> ASGIApp:
    """``app`` with every HTTP/1 response that starts before its request body ended made safe
    for keep-alive: the body drained (at most ``limit`` bytes, ``timeout`` seconds) or the
    connection closed, really (module doc)."""
    if limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit!r}")
    if not (math.isfinite(timeout) and timeout > 0):
        raise ValueError(f"timeout must be finite and > 0, got {timeout!r}")

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not str(scope.get("http_version", "1.1")).startswith("1"):
            await app(scope, receive, send)
            return
        exchange = _Exchange(scope, receive, send, limit, timeout)
        await app(scope, exchange.receive, exchange.send)

    return guarded


def _header(headers: Any, name: bytes) -> bytes | None:
    for key, value in headers:
        if bytes(key).lower() == name:
            return bytes(value)
    return None


def _is_close(value: bytes | None) -> bool:
    return value is not None and b"close" in value.lower()


def _says_close(headers: Any) -> bool:
    return _is_close(_header(headers, b"connection"))


def _request_framing(headers: Any) -> tuple[int | None, bool]:
    """A request's declared ``Content-Length`` (None: none, or not a number) and whether it
    says ``Connection: close``, in one pass over its headers."""
    length: bytes | None = None
    connection: bytes | None = None
    for key, value in headers:
        name = bytes(key).lower()
        if name == b"content-length" and length is None:
            length = bytes(value)
        elif name == b"connection" and connection is None:
            connection = bytes(value)
    try:
        declared = int(length) if length is not None else None
    except ValueError:
        declared = None  # h11 refuses such a request before any app sees it
    return declared, _is_close(connection)


class _Exchange:
    """One HTTP/1 request's ``receive`` and ``send``, as the guarded app sees them."""

    def __init__(self, scope: Any, receive: Any, send: Any, limit: int, timeout: float) -> None:
        self._receive = receive
        self._send = send
        self._limit = limit
        self._timeout = timeout
        self._declared, says_close = _request_framing(scope.get("headers", ()))
        self._received = 0
        self._ended = False  # the body's last message, or a disconnect, went by
        self._disconnected = False
        self._drain: trio.CancelScope | None = None
        self._closing = scope.get("http_version") == "1.0" or says_close

    async def receive(self) -> Message:
        message: Message = await self._receive()
        kind = message["type"]
        if kind == "http.request":
            self._received += len(message.get("body", b""))
            if not message.get("more_body", False):
                self._end()
        elif kind == "http.disconnect":
            self._disconnected = True
            self._end()
        return message

    def _end(self) -> None:
        self._ended = True
        if self._drain is not None:  # the app read the last message while we drained
            self._drain.cancel()

    async def send(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            headers = list(message.get("headers", ()))
            if not await self._finish_body():
                self._closing = True
                if not _says_close(headers):
                    message = {**message, "headers": [*headers, _CLOSE]}
            elif _says_close(headers):
                self._closing = True
        elif self._closing and kind == "http.response.body" and not message.get("more_body"):
            await self._send_last(message)
            return
        await self._send(message)

    async def _finish_body(self) -> bool:
        """True when the body ended (read by the app, or drained here within the bounds)."""
        if not self._ended:
            if self._declared is not None and self._declared - self._received > self._limit:
                return False
            start = self._received
            with trio.move_on_after(self._timeout), trio.CancelScope() as self._drain:
                try:
                    while not self._ended and self._received - start <= self._limit:
                        await self.receive()
                finally:
                    self._drain = None
        return self._ended and not self._disconnected

    async def _send_last(self, message: Message) -> None:
        """The response's last message, whose ``send`` closes the connection inside hypercorn:
        shielded from the app's own cancellation, with the app's queue kept flowing."""
        with cleanup_scope(self._timeout, what="closing an HTTP connection"):
            async with trio.open_nursery() as nursery:
                if not self._ended:
                    nursery.start_soon(self._discard)
                await self._send(message)
                nursery.cancel_scope.cancel()

    async def _discard(self) -> None:
        while not self._ended:
            await self.receive()
