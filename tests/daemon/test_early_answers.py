"""Early answers over a real socket (DESIGN.md section 9): the daemon answers 401, 413 or 503
before reading a POST's body, and the keep-alive connection still serves the next request at
once (or is really closed after ``Connection: close``); a thousand clients that vanish right
after such an answer leave no CLOSE-WAIT socket and no open file behind.

Real time and real loopback sockets (the behaviour is about sockets): every wait is bounded by a
generous ``fail_after``, and nothing asserts how fast anything was.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import h11
import trio

from hypertrain.daemon.main import DaemonHandle
from tests.daemon.support import daemon_settings, running_daemon

ANSWER_BOUND = 20.0
"""Real seconds within which an answer must come; far above any honest answer's time."""
SETTLE_BOUND = 30.0
"""Real seconds the daemon's sockets and files may take to settle after the clients left."""
CLOSE_WAIT = "08"
"""The state column of ``/proc/net/tcp`` for CLOSE-WAIT."""

RESULT = "/v1/compute/jobs/0/result"  # no node key: 401 before the body is read
REGISTER = "/v1/compute/register"  # the compute bodies' 64 KiB limit: 413 before parsing
WORKER_LEASE = "/v1/worker/lease"  # no worker token configured: 503 before the body is read
NEXT_REQUEST = b"GET /health HTTP/1.1\r\nHost: daemon\r\n\r\n"


@asynccontextmanager
async def _daemon(tmp_path: Path) -> AsyncIterator[tuple[DaemonHandle, int]]:
    async with running_daemon(daemon_settings(tmp_path, period=1.0), services=()) as handle:
        yield handle, int(handle.url.rsplit(":", 1)[1])


class _Client:
    """One HTTP/1.1 keep-alive connection, spoken with h11 so each exchange is visible."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.h11 = h11.Connection(h11.CLIENT)

    async def exchange(
        self, method: str, path: str, body: bytes = b"", *, declared: int | None = None
    ) -> tuple[h11.Response, bytes]:
        """Send a request (its body concurrently, as a client streaming an upload does) and
        read the whole answer; ``declared`` overrides the ``Content-Length`` sent."""
        headers = [("Host", "daemon"), ("Content-Length", str(declared or len(body)))]
        request = h11.Request(method=method, target=path, headers=headers)
        await self.stream.send_all(self.h11.send(request))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._send_body, body)
            answer = await self._read_answer()
            nursery.cancel_scope.cancel()
        return answer

    async def _send_body(self, body: bytes) -> None:
        # Raw (h11 would insist on the declared length); the server may close before taking
        # it all, as it may after an early answer.
        with contextlib.suppress(trio.BrokenResourceError):
            await self.stream.send_all(body)

    async def _read_answer(self) -> tuple[h11.Response, bytes]:
        response: h11.Response | None = None
        data = b""
        while True:
            event = self.h11.next_event()
            if event is h11.NEED_DATA:
                self.h11.receive_data(await self.stream.receive_some())
            elif isinstance(event, h11.Response):
                response = event
            elif isinstance(event, h11.Data):
                data += event.data
            elif isinstance(event, h11.EndOfMessage):
                assert response is not None
                return response, data
            else:
                raise AssertionError(f"unexpected {event!r}")

    def next_cycle(self) -> None:
        """The client side is done with this exchange (the body went out raw)."""
        self.h11 = h11.Connection(h11.CLIENT)


def _says_close(response: h11.Response) -> bool:
    return any(k == b"connection" and b"close" in v.lower() for k, v in response.headers)


async def test_the_next_request_on_the_connection_is_answered_after_each_early_answer(
    tmp_path: Path,
) -> None:
    early = [
        ("POST", RESULT, 700_000, 401),  # ~11 reads of hypercorn's: the size that used to leak
        ("POST", RESULT, 1_000, 401),
        ("POST", WORKER_LEASE, 300_000, 503),
        ("POST", REGISTER, 200_000, 413),
    ]
    async with _daemon(tmp_path) as (_, port):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            client = _Client(stream)
            for method, path, size, status in early:
                with trio.fail_after(ANSWER_BOUND):
                    response, _ = await client.exchange(method, path, b"x" * size)
                    assert response.status_code == status, (path, size)
                    assert not _says_close(response)  # drained: the connection stays open
                    client.next_cycle()
                    health, _ = await client.exchange("GET", "/health")
                assert health.status_code in (200, 503)  # answered, on the same connection
                client.next_cycle()


async def test_an_unread_body_over_the_limit_closes_the_connection_for_real(
    tmp_path: Path,
) -> None:
    async with _daemon(tmp_path) as (_, port):
        for path, status in ((REGISTER, 413), (RESULT, 401)):
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            async with stream:
                client = _Client(stream)
                with trio.fail_after(ANSWER_BOUND):
                    # 8 MiB declared, over the daemon's 1 MiB body limit: not worth draining.
                    response, _ = await client.exchange(
                        "POST", path, b"x" * 100_000, declared=8 << 20
                    )
                    assert response.status_code == status
                    assert _says_close(response)
                    while await stream.receive_some():  # the server closes: EOF, not a hang
                        pass


def _close_wait_sockets(port: int) -> int:
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == CLOSE_WAIT:
                    count += 1
    return count


def _open_files() -> int:
    return len(os.listdir("/proc/self/fd"))


async def _vanish_after_the_answer(port: int, path: str, body: bytes) -> None:
    """A keep-alive client: it sends the request and its body (unless the server closes
    first), reads the early answer, sends its next request on the same connection and is gone
    without waiting for that answer."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        client = _Client(stream)
        head = client.h11.send(
            h11.Request(
                method="POST",
                target=path,
                headers=[("Host", "daemon"), ("Content-Length", str(len(body)))],
            )
        )
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client._send_body, head + body)
            response, _ = await client._read_answer()
        assert response.status_code in (401, 413)
        await client._send_body(NEXT_REQUEST)


async def test_a_thousand_vanishing_clients_leave_no_socket_or_file_behind(
    tmp_path: Path,
) -> None:
    big, over = b"x" * 700_000, b"x" * 1_500_000  # under and over the 1 MiB body limit
    kinds = [
        (RESULT, big),  # 401, drained
        (RESULT, over),  # 401, over the limit: closed by the server
        (REGISTER, big),  # 413 once the declared length is read, drained
        (REGISTER, over),
    ]
    async with _daemon(tmp_path) as (_, port):
        await _vanish_after_the_answer(port, RESULT, b"{}")  # lazily opened files, if any
        files_before = _open_files()
        limiter = trio.CapacityLimiter(16)

        async def one(i: int) -> None:
            async with limiter:
                await _vanish_after_the_answer(port, *kinds[i % len(kinds)])

        with trio.fail_after(300):
            async with trio.open_nursery() as nursery:
                for i in range(1000):
                    nursery.start_soon(one, i)
        with trio.move_on_after(SETTLE_BOUND):  # polled: the kernel's state has no event
            while _close_wait_sockets(port) or _open_files() > files_before:  # noqa: ASYNC110
                await trio.sleep(0.1)
        leaked = {"close_wait": _close_wait_sockets(port), "files": _open_files() - files_before}
        assert leaked["close_wait"] == 0, leaked
        assert leaked["files"] <= 0, leaked
