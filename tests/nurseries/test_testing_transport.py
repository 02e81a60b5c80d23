"""nurseries.testing under the autojump clock: exact virtual times, no real network."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

import attrs
import httpx
import pytest
import trio
import trio.testing
from quart import make_response, request
from quart_trio import QuartTrio

from nurseries.testing import (
    ASGIStreamTransport,
    LifespanError,
    NetworkRefusedError,
    RefuseNetworkTransport,
    ServiceStartTimeout,
    mounted_client,
    open_asgi_transport,
    open_mounted_client,
    open_service,
    start_service,
)

Message = dict[str, Any]

# httpx's aiter_lines() nests async generators (lines -> text -> bytes -> raw -> stream) and
# closing the outer one leaves the inner ones to the garbage collector, which trio reports as a
# ResourceWarning. That is httpx's doing, not the transport's; these tests stop reading early
# on purpose.
HTTPX_NESTED_GENERATORS = pytest.mark.filterwarnings(
    "ignore:Async generator 'httpx._models.Response.aiter_:ResourceWarning",
    "ignore:Async generator 'httpx._client.BoundAsyncStream.__aiter__':ResourceWarning",
)


@attrs.define
class RawApp:
    """A raw ASGI app that records what it sees; routes by path."""

    messages: list[tuple[float, str]] = attrs.Factory(list)  # (virtual time, "path: event")
    scopes: list[dict[str, Any]] = attrs.Factory(list)
    bodies: list[list[tuple[bytes, bool]]] = attrs.Factory(list)
    ended: list[tuple[float, str]] = attrs.Factory(list)
    lifespan: list[str] = attrs.Factory(list)
    support_lifespan: bool = True

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self.run_lifespan(scope, receive, send)
            return
        self.scopes.append(scope)
        path = scope["path"]
        try:
            await getattr(self, "route_" + path.strip("/").replace("/", "_"))(receive, send)
        finally:
            self.ended.append((trio.current_time(), path))

    async def run_lifespan(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if not self.support_lifespan:
            raise RuntimeError("no lifespan here")
        while True:
            message = await receive()
            self.lifespan.append(message["type"])
            if message["type"] == "lifespan.startup":
                scope["state"]["db"] = "open"
                await send({"type": "lifespan.startup.complete"})
            else:
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def read_body(self, receive: Any) -> bytes:
        parts: list[tuple[bytes, bool]] = []
        while True:
            message = await receive()
            assert message["type"] == "http.request"
            parts.append((message["body"], message["more_body"]))
            if not message["more_body"]:
                self.bodies.append(parts)
                return b"".join(body for body, _ in parts)

    async def watch_disconnect(self, receive: Any, path: str) -> None:
        message = await receive()
        self.messages.append((trio.current_time(), f"{path}: {message['type']}"))

    async def route_hello(self, receive: Any, send: Any) -> None:
        await self.read_body(receive)
        await start(send, 200, [(b"content-type", b"text/plain")])
        await send({"type": "http.response.body", "body": b"hello"})
        await self.watch_disconnect(receive, "/hello")

    async def route_echo(self, receive: Any, send: Any) -> None:
        body = await self.read_body(receive)
        await start(send, 200)
        await send({"type": "http.response.body", "body": body})

    async def route_first(self, receive: Any, send: Any) -> None:
        """Reads only the first request message."""
        message = await receive()
        await start(send, 200)
        await send({"type": "http.response.body", "body": message["body"]})

    async def route_events(self, receive: Any, send: Any) -> None:
        """SSE: an event at t0, t0+5, t0+10, then the end of the stream."""
        await self.read_body(receive)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.watch_disconnect, receive, "/events")
            await start(send, 200, [(b"content-type", b"text/event-stream")])
            for i in range(3):
                if i:
                    await trio.sleep(5)
                await send(
                    {
                        "type": "http.response.body",
                        "body": f"data: {i}\n\n".encode(),
                        "more_body": True,
                    }
                )
            await send({"type": "http.response.body", "body": b""})

    async def route_forever(self, receive: Any, send: Any) -> None:
        """A stream that only the client's disconnect ends."""
        await self.read_body(receive)
        await start(send, 200, [(b"content-type", b"text/event-stream")])
        async with trio.open_nursery() as nursery:

            async def ticks() -> None:
                while True:
                    await send({"type": "http.response.body", "body": b"tick\n", "more_body": True})
                    await trio.sleep(1)

            nursery.start_soon(ticks)
            await self.watch_disconnect(receive, "/forever")
            nursery.cancel_scope.cancel()

    async def route_poll(self, receive: Any, send: Any) -> None:
        await self.read_body(receive)
        await trio.sleep(25)
        await start(send, 200)
        await send({"type": "http.response.body", "body": b"round 7"})

    async def route_slow(self, receive: Any, send: Any) -> None:
        await self.read_body(receive)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.watch_disconnect, receive, "/slow")
            await trio.sleep(60)
            await start(send, 200)
            await send({"type": "http.response.body", "body": b"too late"})

    async def route_slow_body(self, receive: Any, send: Any) -> None:
        await self.read_body(receive)
        await start(send, 200)
        await send({"type": "http.response.body", "body": b"first", "more_body": True})
        await trio.sleep(60)
        await send({"type": "http.response.body", "body": b"second"})

    async def route_boom(self, receive: Any, send: Any) -> None:
        raise ValueError("boom before the response")

    async def route_boom_later(self, receive: Any, send: Any) -> None:
        await start(send, 200)
        await send({"type": "http.response.body", "body": b"partial", "more_body": True})
        await trio.sleep(1)
        raise ValueError("boom in the body")

    async def route_silent(self, receive: Any, send: Any) -> None:
        return  # no response at all

    async def route_hang(self, receive: Any, send: Any) -> None:
        await trio.sleep_forever()


async def start(send: Any, status: int, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers or []})


@pytest.fixture
async def app_client() -> AsyncIterator[tuple[RawApp, httpx.AsyncClient]]:
    # Tests using this take ``autojump_clock`` themselves: pytest-trio only picks up a clock
    # from the test function's own arguments, not from its fixtures'.
    app = RawApp()
    async with open_mounted_client({"http://coord": app}, timeout=30.0) as client:
        yield app, client


# --- streaming and time ------------------------------------------------------------------


async def test_sse_events_arrive_one_by_one_in_virtual_time(
    app_client: tuple[RawApp, httpx.AsyncClient], autojump_clock: trio.testing.MockClock
) -> None:
    app, client = app_client
    t0 = trio.current_time()
    seen: list[tuple[float, str, bool]] = []
    async with client.stream("GET", "http://coord/events") as response:
        assert response.status_code == 200
        assert response.headers["content-type"] == "text/event-stream"
        async for line in response.aiter_lines():
            if line:
                seen.append((trio.current_time() - t0, line, bool(app.ended)))
    assert seen == [(0, "data: 0", False), (5, "data: 1", False), (10, "data: 2", False)]
    await trio.testing.wait_all_tasks_blocked()
    assert app.ended == [(t0 + 10, "/events")]
    assert app.messages == [(t0 + 10, "/events: http.disconnect")]  # after the response ended


async def test_long_poll_returns_at_exactly_25_seconds(
    app_client: tuple[RawApp, httpx.AsyncClient], autojump_clock: trio.testing.MockClock
) -> None:
    _, client = app_client
    t0 = trio.current_time()
    response = await client.get("http://coord/poll")
    assert trio.current_time() - t0 == 25
    assert response.text == "round 7"


@HTTPX_NESTED_GENERATORS
async def test_closing_the_response_early_delivers_http_disconnect(
    app_client: tuple[RawApp, httpx.AsyncClient], autojump_clock: trio.testing.MockClock
) -> None:
    app, client = app_client
    t0 = trio.current_time()
    lines = []
    async with (
        client.stream("GET", "http://coord/forever") as response,
        aclosing(response.aiter_lines()) as stream,  # type: ignore[type-var]
    ):
        async for line in stream:
            lines.append(line)
            if len(lines) == 3:
                break
    assert lines == ["tick", "tick", "tick"]
    assert trio.current_time() - t0 == 2
    await trio.testing.wait_all_tasks_blocked()
    assert app.messages == [(t0 + 2, "/forever: http.disconnect")]
    assert app.ended == [(t0 + 2, "/forever")]


async def test_read_timeout_before_the_response_is_exact(
    app_client: tuple[RawApp, httpx.AsyncClient], autojump_clock: trio.testing.MockClock
) -> None:
    app, client = app_client
    t0 = trio.current_time()
    with pytest.raises(httpx.ReadTimeout):
        await client.get("http://coord/slow", timeout=10.0)
    assert trio.current_time() - t0 == 10
    await trio.testing.wait_all_tasks_blocked()
    assert app.messages == [(t0 + 10, "/slow: http.disconnect")]


async def test_read_timeout_between_body_chunks_is_exact(
    app_client: tuple[RawApp, httpx.AsyncClient], autojump_clock: trio.testing.MockClock
) -> None:
    _, client = app_client
    t0 = trio.current_time()
    async with (
        client.stream("GET", "http://coord/slow_body", timeout=7.0) as response,
        aclosing(response.aiter_bytes()) as chunks,  # type: ignore[type-var]
    ):
        assert await anext(chunks) == b"first"
        with pytest.raises(httpx.ReadTimeout):
            await anext(chunks)
    assert trio.current_time() - t0 == 7


async def test_no_timeout_waits_as_long_as_the_app_does(
    app_client: tuple[RawApp, httpx.AsyncClient], autojump_clock: trio.testing.MockClock
) -> None:
    _, client = app_client
    t0 = trio.current_time()
    response = await client.get("http://coord/slow", timeout=None)
    assert response.text == "too late"
    assert trio.current_time() - t0 == 60


# --- requests ---------------------------------------------------------------------------


async def test_post_bodies_arrive_intact(
    app_client: tuple[RawApp, httpx.AsyncClient], autojump_clock: trio.testing.MockClock
) -> None:
    app, client = app_client
    payload = bytes(range(256)) * 4096
    response = await client.post("http://coord/echo", content=payload)
    assert response.content == payload
    assert app.bodies[-1] == [(payload, False)]


async def test_streamed_request_bodies_arrive_chunk_by_chunk(
    app_client: tuple[RawApp, httpx.AsyncClient], autojump_clock: trio.testing.MockClock
) -> None:
    app, client = app_client

    async def upload() -> AsyncIterator[bytes]:
        for part in (b"alpha-", b"", b"beta-", b"gamma"):
            yield part

    response = await client.post("http://coord/echo", content=upload())
    assert response.content == b"alpha-beta-gamma"
    assert app.bodies[-1] == [(b"alpha-", True), (b"beta-", True), (b"gamma", False)]


async def test_empty_bodies_are_one_final_message(
    app_client: tuple[RawApp, httpx.AsyncClient], autojump_clock: trio.testing.MockClock
) -> None:
    app, client = app_client
    await client.get("http://coord/hello")
    await client.post("http://coord/echo", content=b"")
    assert app.bodies == [[(b"", False)], [(b"", False)]]


@attrs.define
class Parts:
    """An async iterable upload that is not a generator and counts what was read of it."""

    parts: list[bytes]
    read: int = 0

    def __aiter__(self) -> Parts:
        return self

    async def __anext__(self) -> bytes:
        if self.read == len(self.parts):
            raise StopAsyncIteration
        self.read += 1
        return self.parts[self.read - 1]


async def test_a_streamed_body_the_app_leaves_unread_is_closed(
    app_client: tuple[RawApp, httpx.AsyncClient], autojump_clock: trio.testing.MockClock
) -> None:
    _, client = app_client
    upload = Parts([b"alpha-", b"beta-", b"gamma"])
    response = await client.post("http://coord/first", content=upload)
    assert response.content == b"alpha-"
    assert upload.read == 2  # the first part, and one of lookahead
    await trio.testing.wait_all_tasks_blocked()
    # httpx wraps the upload in an async generator; left suspended, it would be collected
    # here and trio would report it (an error under filterwarnings=error).
    del response
    gc.collect()


async def test_scope_describes_the_request(
    app_client: tuple[RawApp, httpx.AsyncClient], autojump_clock: trio.testing.MockClock
) -> None:
    app, client = app_client
    await client.get("http://coord/hello?a=1&b=%20x", headers={"X-Token": "t"})
    scope = app.scopes[-1]
    assert scope["method"] == "GET"
    assert scope["path"] == "/hello"
    assert scope["query_string"] == b"a=1&b=%20x"
    assert scope["server"] == ("coord", 80)
    assert (b"x-token", b"t") in scope["headers"]
    assert (b"host", b"coord") in scope["headers"]
    assert scope["state"] == {"db": "open"}  # a copy of the lifespan state


async def test_head_responses_have_no_body(
    app_client: tuple[RawApp, httpx.AsyncClient], autojump_clock: trio.testing.MockClock
) -> None:
    _, client = app_client
    response = await client.head("http://coord/hello")
    assert response.status_code == 200
    assert response.content == b""


# --- app failures -----------------------------------------------------------------------


async def test_app_exceptions_propagate_by_default(autojump_clock: trio.testing.MockClock) -> None:
    async with open_mounted_client({"http://coord": RawApp()}) as client:
        with pytest.raises(ValueError, match="boom before"):
            await client.get("http://coord/boom")
        async with (
            client.stream("GET", "http://coord/boom_later") as response,
            aclosing(response.aiter_bytes()) as chunks,  # type: ignore[type-var]
        ):
            assert await anext(chunks) == b"partial"
            with pytest.raises(ValueError, match="boom in the body"):
                await anext(chunks)


async def test_app_exceptions_can_be_500s_and_cut_bodies(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    async with (
        open_asgi_transport(RawApp(), raise_app_exceptions=False) as transport,
        mounted_client({"http://coord": transport}) as client,
    ):
        response = await client.get("http://coord/boom")
        assert response.status_code == 500
        with pytest.raises(httpx.RemoteProtocolError):
            await client.get("http://coord/boom_later")
    assert "boom before the response" in caplog.text


async def test_an_app_that_returns_without_responding_gives_500(
    app_client: tuple[RawApp, httpx.AsyncClient], autojump_clock: trio.testing.MockClock
) -> None:
    _, client = app_client
    response = await client.get("http://coord/silent")
    assert response.status_code == 500


# --- routing and the network ------------------------------------------------------------


async def test_unmounted_hosts_are_refused(
    app_client: tuple[RawApp, httpx.AsyncClient], autojump_clock: trio.testing.MockClock
) -> None:
    _, client = app_client
    for url in ("http://elsewhere/hello", "https://coord/hello", "http://127.0.0.1:9/"):
        with pytest.raises(NetworkRefusedError, match="no in-process transport"):
            await client.get(url)


async def test_refusal_is_not_a_transport_error() -> None:
    transport = RefuseNetworkTransport(["http://coord"])
    with pytest.raises(NetworkRefusedError, match=r"mounted: http://coord") as info:
        await transport.handle_async_request(httpx.Request("GET", "http://x/"))
    assert not isinstance(info.value, httpx.TransportError)


async def test_requests_route_by_host_and_port(autojump_clock: trio.testing.MockClock) -> None:
    coord, node, node_admin = RawApp(), RawApp(), RawApp()
    apps = {"http://coord": coord, "http://node": node, "http://node:9000": node_admin}
    async with open_mounted_client(apps) as client:
        await client.get("http://coord:8080/hello")
        await client.get("http://node/hello")
        await client.get("http://node:9000/hello")
        with pytest.raises(NetworkRefusedError):
            await client.get("http://coordinator/hello")
    assert [s["server"] for s in coord.scopes] == [("coord", 8080)]
    assert [s["server"] for s in node.scopes] == [("node", 80)]
    assert [s["server"] for s in node_admin.scopes] == [("node", 9000)]


def test_the_catch_all_pattern_is_reserved() -> None:
    with pytest.raises(ValueError, match="reserved"):
        mounted_client({"all://": RefuseNetworkTransport()})


async def test_proxy_variables_cannot_route_around_the_refusal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("ALL_PROXY", "http://127.0.0.1:9")
    async with mounted_client({}) as client:
        with pytest.raises(NetworkRefusedError):
            await client.get("http://example.org/")


# --- lifetimes --------------------------------------------------------------------------


async def test_lifespan_runs_around_the_block(autojump_clock: trio.testing.MockClock) -> None:
    app = RawApp()
    async with open_asgi_transport(app):
        assert app.lifespan == ["lifespan.startup"]
    assert app.lifespan == ["lifespan.startup", "lifespan.shutdown"]


async def test_apps_without_lifespan_still_serve(autojump_clock: trio.testing.MockClock) -> None:
    app = RawApp(support_lifespan=False)
    async with open_mounted_client({"http://coord": app}) as client:
        assert (await client.get("http://coord/hello")).text == "hello"
    assert "state" not in app.scopes[0]


async def test_lifespan_failure_and_timeout(autojump_clock: trio.testing.MockClock) -> None:
    async def failing(scope: Message, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "lifespan.startup.failed", "message": "no database"})

    async def hanging(scope: Message, receive: Any, send: Any) -> None:
        await trio.sleep_forever()

    with pytest.raises(LifespanError, match="no database"):
        async with open_asgi_transport(failing):
            pytest.fail("started although startup failed")
    t0 = trio.current_time()
    with pytest.raises(LifespanError, match="longer than 3"):
        async with open_asgi_transport(hanging, lifespan_timeout=3):
            pytest.fail("started although startup hung")
    assert trio.current_time() - t0 == 3


async def test_closing_the_transport_cuts_requests_in_flight(
    autojump_clock: trio.testing.MockClock,
) -> None:
    app = RawApp()
    errors: list[Exception] = []
    async with trio.open_nursery() as nursery, open_asgi_transport(app) as transport:
        client = mounted_client({"http://coord": transport})

        async def hang() -> None:
            try:
                await client.get("http://coord/hang")
            except httpx.RemoteProtocolError as exc:
                errors.append(exc)

        nursery.start_soon(hang)
        await trio.sleep(1)
    assert len(errors) == 1
    assert app.ended == [(1, "/hang")]
    with pytest.raises(httpx.ConnectError):
        await client.get("http://coord/hello")
    await client.aclose()


async def test_errors_in_the_block_are_not_wrapped(autojump_clock: trio.testing.MockClock) -> None:
    with pytest.raises(KeyError, match="plain"):
        async with open_asgi_transport(RawApp()):
            raise KeyError("plain")
    with pytest.raises(KeyError, match="plain"):
        async with open_mounted_client({"http://coord": RawApp()}):
            raise KeyError("plain")


async def test_a_transport_can_use_the_callers_nursery(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    app = RawApp()
    transport = ASGIStreamTransport(app, nursery)
    async with mounted_client({"http://coord": transport}) as first:
        assert (await first.get("http://coord/hello")).text == "hello"
    async with mounted_client({"http://coord": transport}) as second:  # closing didn't stop it
        assert (await second.get("http://coord/hello")).text == "hello"


# --- quart-trio -------------------------------------------------------------------------


def make_quart_app(stopping: trio.Event) -> QuartTrio:
    app = QuartTrio(__name__)

    @app.get("/events")
    async def events() -> Any:
        async def stream() -> AsyncIterator[bytes]:
            for i in range(3):
                if i:
                    await trio.sleep(5)
                yield f"data: {i}\n\n".encode()

        response = await make_response(stream(), 200, {"content-type": "text/event-stream"})
        response.timeout = None  # type: ignore[union-attr]
        return response

    @app.get("/poll")
    async def poll() -> Any:
        with trio.move_on_after(25):
            await stopping.wait()
        if stopping.is_set():
            return {"detail": "stopping"}, 503, {"Retry-After": "1"}
        return {"round": 7}

    @app.post("/echo")
    async def echo() -> Any:
        return await request.get_data()

    return app


async def test_quart_trio_app_streams_and_long_polls(
    autojump_clock: trio.testing.MockClock,
) -> None:
    stopping = trio.Event()
    async with open_mounted_client({"http://coord": make_quart_app(stopping)}, timeout=30) as c:
        t0 = trio.current_time()
        seen = []
        async with c.stream("GET", "http://coord/events") as response:
            async for line in response.aiter_lines():
                if line:
                    seen.append((trio.current_time() - t0, line))
        assert seen == [(0, "data: 0"), (5, "data: 1"), (10, "data: 2")]

        t0 = trio.current_time()
        response = await c.get("http://coord/poll")
        assert (trio.current_time() - t0, response.json()) == (25, {"round": 7})

        payload = b"\x00\xff" * 50_000
        assert (await c.post("http://coord/echo", content=payload)).content == payload

        async with trio.open_nursery() as nursery:
            answers: list[httpx.Response] = []

            async def poll() -> None:
                answers.append(await c.get("http://coord/poll"))

            nursery.start_soon(poll)
            await trio.sleep(3)
            stopping.set()
        assert answers[0].status_code == 503
        assert trio.current_time() - t0 == 28


@HTTPX_NESTED_GENERATORS
async def test_quart_sees_the_disconnect_of_a_closed_stream(
    autojump_clock: trio.testing.MockClock,
) -> None:
    app = QuartTrio(__name__)
    finished: list[tuple[float, str]] = []

    @app.get("/forever")
    async def forever() -> Any:
        async def stream() -> AsyncIterator[bytes]:
            try:
                while True:
                    yield b"data: tick\n\n"
                    await trio.sleep(1)
            finally:
                finished.append((trio.current_time(), "generator closed"))

        response = await make_response(stream(), 200, {"content-type": "text/event-stream"})
        response.timeout = None  # type: ignore[union-attr]
        return response

    async with open_mounted_client({"http://coord": app}) as client:
        t0 = trio.current_time()
        async with (
            client.stream("GET", "http://coord/forever") as response,
            aclosing(response.aiter_lines()) as lines,  # type: ignore[type-var]
        ):
            assert await anext(lines) == "data: tick"
            await anext(lines)
            assert await anext(lines) == "data: tick"
        await trio.testing.wait_all_tasks_blocked()
        assert finished == [(t0 + 1, "generator closed")]


# --- services ---------------------------------------------------------------------------


@attrs.define
class Counter:
    """A service that is ready after 2 s and then ticks once a second."""

    ticks: int = 0
    crash_at: int | None = None

    async def run(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        await trio.sleep(2)
        task_status.started("ready")
        while True:
            await trio.sleep(1)
            self.ticks += 1
            if self.ticks == self.crash_at:
                raise OSError("counter broke")


async def test_start_service_returns_the_started_value(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    counter = Counter()
    t0 = trio.current_time()
    assert await start_service(nursery, counter.run) == "ready"
    assert trio.current_time() - t0 == 2
    await trio.sleep(3.5)
    assert counter.ticks == 3


async def test_start_service_times_out_at_the_exact_time(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    t0 = trio.current_time()
    with pytest.raises(ServiceStartTimeout, match=r"did not start within 1\.5 s"):
        await start_service(nursery, Counter().run, startup_timeout=1.5)
    assert trio.current_time() - t0 == 1.5


async def test_open_service_cancels_on_exit_and_surfaces_crashes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    counter = Counter()
    async with open_service(counter.run) as value:
        assert value == "ready"
        await trio.sleep(2.5)
    await trio.sleep(10)
    assert counter.ticks == 2  # cancelled with the block

    t0 = trio.current_time()
    with pytest.raises(OSError, match="counter broke"):
        async with open_service(Counter(crash_at=3).run):
            await trio.sleep(100)
    assert trio.current_time() - t0 == 5  # 2 s to start, 3 ticks, then the crash ends the block
