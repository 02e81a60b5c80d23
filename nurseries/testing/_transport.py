"""A streaming in-process ASGI transport for httpx that works in virtual time.

Why not `httpx.ASGITransport`: it runs the app to completion inside the request call and
buffers the whole response, so an SSE stream never arrives (the request only returns when the
stream ends) and httpx timeouts are not applied at all (a slow app hangs the client instead of
raising `httpx.ReadTimeout`). Here the app runs in a task of its own, the response starts as soon
as the app sends ``http.response.start``, and body chunks flow through an unbuffered trio memory
channel, so the client sees them one by one, with backpressure, at the (virtual) times the app
sends them. No threads are involved, so the autojump clock stays exact.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, Literal

import httpx
import trio

from nurseries._serve import ASGIApp
from nurseries.testing._groups import single_exception_unwrapped
from nurseries.testing._lifespan import LifespanDriver

__all__ = ["DEFAULT_LIFESPAN_TIMEOUT", "ASGIStreamTransport", "open_asgi_transport"]

log = logging.getLogger(__name__)

DEFAULT_LIFESPAN_TIMEOUT: float = 60.0
"""Seconds (trio clock) the app's lifespan startup, and separately its shutdown, may take."""

_DEFAULT_PORTS = {"http": 80, "https": 443}
_BODY_CLOSE_TIMEOUT = 5.0  # seconds to close a streamed request body the app left unread
_Outcome = Literal["running", "returned", "raised", "cancelled"]


class ASGIStreamTransport(httpx.AsyncBaseTransport):
    """Serves httpx requests from ``app``, each in a task of ``nursery``.

    Promises, per request:

    * The request body is streamed to the app as ``http.request`` messages; after it, and once
      the response is complete or the client closed it, ``receive()`` answers
      ``http.disconnect``.
    * The response is returned at ``http.response.start``; body chunks reach the client as they
      are sent (no buffering: the app's ``send`` waits until the client took the chunk). Closing
      the response early delivers ``http.disconnect`` to the app; later sends are dropped.
    * httpx's read timeout is honoured on the trio clock, for the response start and for each
      chunk, by raising `httpx.ReadTimeout`.
    * An exception from the app propagates to the client (from ``send`` before the response
      started, from reading the body after) when ``raise_app_exceptions`` is true, the default,
      as with `httpx.ASGITransport`. Otherwise it becomes a 500 before the response started and a
      `httpx.RemoteProtocolError` (a cut-off body) after. An app that returns without
      responding gives a 500; one cancelled before responding (its transport shut down) gives a
      `httpx.RemoteProtocolError`, as a real server that went away would.

    The transport's lifetime is the nursery's: `aclose` (called by an `httpx.AsyncClient` on
    close) does nothing, so several clients may share a transport. Use `open_asgi_transport`
    for a transport that owns its nursery and runs the app's lifespan.
    """

    def __init__(
        self,
        app: ASGIApp,
        nursery: trio.Nursery,
        *,
        raise_app_exceptions: bool = True,
        client: tuple[str, int] = ("127.0.0.1", 50000),
        root_path: str = "",
        state: dict[str, Any] | None = None,
    ) -> None:
        self._app = app
        self._nursery = nursery
        self._raise_app_exceptions = raise_app_exceptions
        self._client = client
        self._root_path = root_path
        self._state = state

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        exchange = _Exchange(request, self._scope(request))
        try:
            self._nursery.start_soon(self._run_app, exchange, name=f"asgi {request.url}")
        except RuntimeError as exc:  # the nursery is closed: the app is not running any more
            raise httpx.ConnectError("in-process ASGI app is not running", request=request) from exc
        try:
            with _read_deadline(request):
                await exchange.started.wait()
        except BaseException:
            exchange.client_gone()
            raise
        if exchange.status is None:
            exchange.client_gone()
            return self._no_response(exchange)
        return httpx.Response(
            exchange.status,
            headers=exchange.headers,
            stream=_ResponseStream(exchange, self._raise_app_exceptions),
            extensions={"http_version": b"HTTP/1.1"},
            request=request,
        )

    async def aclose(self) -> None:
        """Does nothing: the app runs as long as the transport's nursery does."""

    async def _run_app(self, exchange: _Exchange) -> None:
        try:
            await self._app(exchange.scope, exchange.receive, exchange.send)
        except Exception as exc:
            if not self._raise_app_exceptions or exchange.disconnected.is_set():
                log.error("ASGI app raised for %s", exchange.request.url, exc_info=exc)
            exchange.app_ended("raised", exc)
        else:
            exchange.app_ended("returned", None)
        finally:
            exchange.app_ended("cancelled", None)  # no-op unless cancelled
            await exchange.close_body()

    def _no_response(self, exchange: _Exchange) -> httpx.Response:
        if exchange.outcome == "cancelled":
            raise httpx.RemoteProtocolError(
                "in-process ASGI app stopped without sending a response", request=exchange.request
            )
        if exchange.error is not None and self._raise_app_exceptions:
            raise exchange.error
        return httpx.Response(
            500,
            headers=[(b"content-type", b"text/plain; charset=utf-8")],
            content=b"Internal Server Error",
            request=exchange.request,
        )

    def _scope(self, request: httpx.Request) -> dict[str, Any]:
        url = request.url
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": request.method,
            "scheme": url.scheme,
            "path": url.path,
            "raw_path": url.raw_path.split(b"?", 1)[0],
            "query_string": url.query,
            "root_path": self._root_path,
            "headers": [(name.lower(), value) for name, value in request.headers.raw],
            "server": (url.host, url.port or _DEFAULT_PORTS.get(url.scheme, 80)),
            "client": self._client,
        }
        if self._state is not None:
            scope["state"] = dict(self._state)
        return scope


class _Exchange:
    """One request/response between a client task and the app's task."""

    def __init__(self, request: httpx.Request, scope: dict[str, Any]) -> None:
        self.request = request
        self.scope = scope
        self._body = _request_stream(request).__aiter__()
        self._body_started = False
        self._body_done = False
        self._lookahead: bytes | None = None
        self.started = trio.Event()  # response start arrived, or the app ended
        self.disconnected = trio.Event()  # the client let go, or the response is complete
        self.status: int | None = None
        self.headers: list[tuple[bytes, bytes]] = []
        self.complete = False
        self.outcome: _Outcome = "running"
        self.error: Exception | None = None
        self._chunks_in, self.chunks = trio.open_memory_channel[bytes](0)
        self._suppress_body = request.method == "HEAD"

    async def receive(self) -> dict[str, Any]:
        if not self._body_done and not self.disconnected.is_set():
            # One chunk of lookahead: the last chunk carries more_body=False, and the client's
            # body iterator is exhausted by the time the app has seen the whole body.
            if not self._body_started:
                self._body_started = True
                self._lookahead = await self._next_chunk()
            chunk, self._lookahead = self._lookahead, None
            if chunk is not None:
                self._lookahead = await self._next_chunk()
            self._body_done = self._lookahead is None
            return {"type": "http.request", "body": chunk or b"", "more_body": not self._body_done}
        await self.disconnected.wait()
        return {"type": "http.disconnect"}

    async def _next_chunk(self) -> bytes | None:
        while (chunk := await anext(self._body, None)) == b"":
            pass
        return chunk

    async def close_body(self) -> None:
        """Close the request body iterator if the app stopped reading it part way."""
        if self._body_started and not self._body_done:
            aclose = getattr(self._body, "aclose", None)
            if aclose is not None:
                with trio.move_on_after(_BODY_CLOSE_TIMEOUT, shield=True):
                    await aclose()

    async def send(self, message: dict[str, Any]) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            if self.status is not None:
                raise RuntimeError("http.response.start sent twice")
            self.status = int(message["status"])
            self.headers = [(bytes(k), bytes(v)) for k, v in message.get("headers", [])]
            self.started.set()
        elif kind == "http.response.body":
            if self.status is None or self.complete:
                raise RuntimeError("http.response.body outside a started, incomplete response")
            body = bytes(message.get("body", b""))
            if body and not self._suppress_body and not self.disconnected.is_set():
                # BrokenResourceError: the client closed the response; http.disconnect tells the app
                with contextlib.suppress(trio.BrokenResourceError):
                    await self._chunks_in.send(body)
            if not message.get("more_body", False):
                self.complete = True
                self._chunks_in.close()
                self.disconnected.set()
        else:
            raise RuntimeError(f"unsupported ASGI message {kind!r}")

    def client_gone(self) -> None:
        self.disconnected.set()
        self.chunks.close()

    def app_ended(self, outcome: _Outcome, error: Exception | None) -> None:
        if self.outcome != "running":
            return
        self.outcome, self.error = outcome, error
        self.started.set()
        self._chunks_in.close()


class _ResponseStream(httpx.AsyncByteStream):
    def __init__(self, exchange: _Exchange, raise_app_exceptions: bool) -> None:
        self._exchange = exchange
        self._raise_app_exceptions = raise_app_exceptions

    def __aiter__(self) -> _ResponseStream:
        return self

    async def __anext__(self) -> bytes:
        exchange = self._exchange
        try:
            with _read_deadline(exchange.request):
                return await exchange.chunks.receive()
        except trio.EndOfChannel:
            pass
        if exchange.complete:
            raise StopAsyncIteration
        if exchange.error is not None and self._raise_app_exceptions:
            raise exchange.error
        raise httpx.RemoteProtocolError(
            "in-process ASGI app ended without completing the response body",
            request=exchange.request,
        )

    async def aclose(self) -> None:
        self._exchange.client_gone()


def _request_stream(request: httpx.Request) -> httpx.AsyncByteStream:
    stream = request.stream
    if not isinstance(stream, httpx.AsyncByteStream):
        raise TypeError("ASGIStreamTransport needs an async request stream (httpx.AsyncClient)")
    return stream


@contextmanager
def _read_deadline(request: httpx.Request) -> Iterator[None]:
    timeouts = request.extensions.get("timeout", {})
    seconds = timeouts.get("read")
    if seconds is None:
        yield
        return
    try:
        with trio.fail_after(seconds):
            yield
    except trio.TooSlowError as exc:
        raise httpx.ReadTimeout(f"no response data within {seconds} s", request=request) from exc


@asynccontextmanager
async def open_asgi_transport(
    app: ASGIApp,
    *,
    lifespan: bool = True,
    lifespan_timeout: float = DEFAULT_LIFESPAN_TIMEOUT,
    raise_app_exceptions: bool = True,
    client: tuple[str, int] = ("127.0.0.1", 50000),
    root_path: str = "",
) -> AsyncIterator[ASGIStreamTransport]:
    """An `ASGIStreamTransport` whose app runs in nurseries this context manager owns.

    With ``lifespan`` the app's lifespan startup runs (and must succeed, or `LifespanError` is
    raised) before the transport is handed out. When the block ends, requests still in flight
    are cancelled; then, on a clean exit only, the lifespan shutdown runs (bounded by
    ``lifespan_timeout``); then the app's remaining tasks are cancelled. An exception from the
    block propagates as itself, not wrapped in an exception group.
    """
    with single_exception_unwrapped():
        async with trio.open_nursery() as app_nursery:
            driver = LifespanDriver(app, lifespan_timeout) if lifespan else None
            if driver is not None:
                await app_nursery.start(driver.run)
                await driver.startup()
            async with trio.open_nursery() as request_nursery:
                transport = ASGIStreamTransport(
                    app,
                    request_nursery,
                    raise_app_exceptions=raise_app_exceptions,
                    client=client,
                    root_path=root_path,
                    state=driver.state if driver is not None and driver.supported else None,
                )
                try:
                    yield transport
                finally:
                    request_nursery.cancel_scope.cancel()
            if driver is not None:
                await driver.shutdown()
            app_nursery.cancel_scope.cancel()
