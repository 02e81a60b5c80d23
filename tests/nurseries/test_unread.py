"""guard_unread_bodies at the ASGI level, in virtual time: a fake server's queue of body
messages, an app that answers early, and what reaches the server's ``send``.

The same guard over real sockets, with the daemon's app, is tests/daemon/test_early_answers.py.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.lowlevel
import trio.testing

from nurseries import guard_unread_bodies

LIMIT = 1000
TIMEOUT = 5.0
CLOSE = (b"connection", b"close")


class FakeServer:
    """hypercorn's side of one request: a queue of messages for ``receive``, a record of what
    the app sent; ``cancel_on_last`` cancels ``app_scope`` inside the last ``send`` and then
    checkpoints, as quart-trio's answer to hypercorn's ``http.disconnect`` does, and
    ``disconnect_after_last`` queues that ``http.disconnect``."""

    def __init__(self, headers: list[tuple[bytes, bytes]], version: str = "1.1") -> None:
        self.scope = {"type": "http", "http_version": version, "headers": headers}
        self.to_app, self.queue = trio.open_memory_channel[dict[str, Any]](100)
        self.sent: list[dict[str, Any]] = []
        self.app_scope: trio.CancelScope | None = None
        self.cancel_on_last = False
        self.disconnect_after_last = False
        self.closed = False

    def body(self, *chunks: bytes, end: bool = True) -> None:
        for i, chunk in enumerate(chunks):
            more = not end or i < len(chunks) - 1
            self.to_app.send_nowait({"type": "http.request", "body": chunk, "more_body": more})

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body"):
            if self.cancel_on_last and self.app_scope is not None:
                self.app_scope.cancel()
            await trio.lowlevel.checkpoint()  # hypercorn's close: cancelled here, unshielded
            await trio.testing.wait_all_tasks_blocked()  # ... and not instant: the queue flows
            self.closed = True
            if self.disconnect_after_last:
                self.to_app.send_nowait({"type": "http.disconnect"})

    def start_headers(self) -> list[tuple[bytes, bytes]]:
        return list(self.sent[0]["headers"])

    def left(self) -> int:
        return self.queue.statistics().current_buffer_used


async def early_answer(scope: Any, receive: Any, send: Any) -> None:
    """Answers 401 without reading the body."""
    await send({"type": "http.response.start", "status": 401, "headers": []})
    await send({"type": "http.response.body", "body": b"no"})


async def serve(server: FakeServer, app: Any = early_answer, **options: Any) -> None:
    guarded = guard_unread_bodies(app, **{"limit": LIMIT, "timeout": TIMEOUT, **options})
    with trio.CancelScope() as server.app_scope:
        await guarded(server.scope, server.queue.receive, server.send)


def length(n: int) -> list[tuple[bytes, bytes]]:
    return [(b"content-length", str(n).encode())]


async def test_an_unread_body_within_the_limit_is_drained_and_the_connection_kept(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = FakeServer(length(900))
    server.body(b"x" * 300, b"x" * 300, b"x" * 300)
    await serve(server)
    assert server.left() == 0
    assert CLOSE not in server.start_headers()
    assert [m["type"] for m in server.sent] == ["http.response.start", "http.response.body"]
    assert trio.current_time() == 0


async def test_a_declared_length_over_the_limit_closes_without_reading(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = FakeServer(length(LIMIT + 1))
    server.body(b"x" * 10, end=False)
    server.cancel_on_last = True
    await serve(server)
    assert server.start_headers() == [CLOSE]
    assert server.left() == 0  # kept flowing during the closing send, not drained before it
    assert server.closed  # the close ran to its end despite the app's own cancellation


async def test_a_chunked_body_past_the_limit_or_a_stalled_client_closes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    endless = FakeServer([(b"transfer-encoding", b"chunked")])
    endless.body(*[b"x" * 400] * 5, end=False)
    await serve(endless)
    assert endless.start_headers() == [CLOSE]
    assert trio.current_time() == 0
    stalled = FakeServer(length(900))
    stalled.body(b"x" * 100, end=False)
    await serve(stalled)
    assert stalled.start_headers() == [CLOSE]
    assert trio.current_time() == TIMEOUT  # the drain's bound, once; the close did not wait


async def test_the_drain_ends_when_the_app_itself_reads_the_last_message(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def reads_alongside(scope: Any, receive: Any, send: Any) -> None:
        # quart-trio reads the body in a task of its own, until http.disconnect.
        async with trio.open_nursery() as nursery:

            async def read_all() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass

            nursery.start_soon(read_all)
            await trio.testing.wait_all_tasks_blocked()  # the reader waits first: it gets it
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})

    server = FakeServer(length(200))
    server.disconnect_after_last = True

    async def deliver_later() -> None:
        await trio.sleep(1)
        server.body(b"x" * 200)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(deliver_later)
        await serve(server, reads_alongside)
    assert CLOSE not in server.start_headers()
    assert trio.current_time() == 1


@pytest.mark.parametrize(
    ("headers", "version"),
    [([(b"connection", b"close")], "1.1"), ([], "1.0")],
)
async def test_a_response_that_closes_anyway_is_shielded_from_the_apps_cancellation(
    headers: list[tuple[bytes, bytes]], version: str, autojump_clock: trio.testing.MockClock
) -> None:
    server = FakeServer(headers, version)
    server.body(b"")
    server.cancel_on_last = True
    await serve(server)
    assert server.closed
    assert CLOSE not in server.start_headers()  # the header is hypercorn's to add here


async def test_other_scopes_and_http2_pass_through() -> None:
    seen: list[Any] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append((receive, send))

    async def receive() -> None: ...

    async def send(message: Any) -> None: ...

    guarded = guard_unread_bodies(app)
    await guarded({"type": "lifespan"}, receive, send)
    await guarded({"type": "http", "http_version": "2", "headers": []}, receive, send)
    assert seen == [(receive, send), (receive, send)]
    with pytest.raises(ValueError, match="timeout"):
        guard_unread_bodies(app, timeout=float("inf"))
