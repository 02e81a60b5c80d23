"""serve_asgi over real loopback sockets; real time, so every test has an absolute deadline."""

from __future__ import annotations

import logging
import re
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import attrs
import httpx
import pytest
import trio

from nurseries._serve import (
    DEFAULT_BACKLOG,
    DEFAULT_GRACEFUL_TIMEOUT,
    DEFAULT_KEEP_ALIVE_TIMEOUT,
    SERVING_GC_THRESHOLDS,
    make_config,
    serve_asgi,
)

TEST_DEADLINE = 15.0  # real seconds
HOST = "127.0.0.1"


@attrs.define
class RawApp:
    """A tiny raw ASGI app with lifespan, a stopping event and a few routes."""

    stopping: trio.Event = attrs.Factory(trio.Event)
    lifespan: list[str] = attrs.Factory(list)
    waiting: trio.Event = attrs.Factory(trio.Event)  # a /poll or /stubborn request is waiting

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                self.lifespan.append(message["type"])
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        path = scope["path"]
        if path == "/echo":
            await self.respond(send, 200, body)
        elif path == "/poll":  # a long poll that also waits on the app-level stopping event
            self.waiting.set()
            with trio.move_on_after(25):
                await self.stopping.wait()
            if self.stopping.is_set():
                await self.respond(send, 503, b"stopping", [(b"retry-after", b"1")])
            else:
                await self.respond(send, 200, b"nothing new")
        elif path == "/stubborn":  # ignores the stopping event
            self.waiting.set()
            await trio.sleep(25)
            await self.respond(send, 200, b"late")
        else:
            await self.respond(send, 200, b"hello")

    @staticmethod
    async def respond(
        send: Any, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None
    ) -> None:
        await send({"type": "http.response.start", "status": status, "headers": headers or []})
        await send({"type": "http.response.body", "body": body})


@attrs.define
class Running:
    url: str
    app: RawApp
    ended: trio.Event
    ended_at: list[float]


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(trust_env=False, timeout=10.0) as c:
        yield c


async def start(nursery: trio.Nursery, app: RawApp, **options: Any) -> Running:
    ended, ended_at = trio.Event(), []

    async def run(task_status: trio.TaskStatus[str]) -> None:
        await serve_asgi(
            app, HOST, 0, shutdown_trigger=app.stopping.wait, task_status=task_status, **options
        )
        ended_at.append(trio.current_time())
        ended.set()

    url = await nursery.start(run)
    return Running(url, app, ended, ended_at)


async def test_port_zero_reports_the_bound_url_and_serves(client: httpx.AsyncClient) -> None:
    app = RawApp()
    with trio.fail_after(TEST_DEADLINE):
        async with trio.open_nursery() as nursery:
            running = await start(nursery, app)
            assert app.lifespan == ["lifespan.startup"]  # started only after startup completed
            match = re.fullmatch(r"http://127\.0\.0\.1:(\d+)", running.url)
            assert match is not None
            assert int(match.group(1)) != 0
            response = await client.get(running.url + "/")
            assert (response.status_code, response.content) == (200, b"hello")
            response = await client.post(running.url + "/echo", content=b"x" * 100_000)
            assert response.content == b"x" * 100_000
            await client.aclose()
            app.stopping.set()
        assert app.lifespan == ["lifespan.startup", "lifespan.shutdown"]


async def test_shutdown_wakes_long_polls_through_the_app_event(client: httpx.AsyncClient) -> None:
    app = RawApp()
    graceful = 5.0
    with trio.fail_after(TEST_DEADLINE):
        async with trio.open_nursery() as nursery:
            running = await start(nursery, app, graceful_timeout=graceful)
            answers: list[httpx.Response] = []

            async def poll() -> None:
                answers.append(await client.get(running.url + "/poll", timeout=30.0))
                await client.aclose()  # idle keep-alive connections would hold shutdown

            nursery.start_soon(poll)
            await app.waiting.wait()
            triggered_at = trio.current_time()
            app.stopping.set()
            await running.ended.wait()
        assert answers[0].status_code == 503
        assert answers[0].headers["retry-after"] == "1"
        assert running.ended_at[0] - triggered_at < 2.0 < graceful


async def test_requests_that_ignore_stopping_are_cut_at_graceful_timeout(
    client: httpx.AsyncClient,
) -> None:
    app = RawApp()
    graceful = 1.0
    with trio.fail_after(TEST_DEADLINE):
        async with trio.open_nursery() as nursery:
            running = await start(nursery, app, graceful_timeout=graceful)
            errors: list[Exception] = []

            async def stubborn() -> None:
                try:
                    await client.get(running.url + "/stubborn", timeout=30.0)
                except httpx.TransportError as exc:
                    errors.append(exc)

            nursery.start_soon(stubborn)
            await app.waiting.wait()
            triggered_at = trio.current_time()
            app.stopping.set()
            await running.ended.wait()
            elapsed = running.ended_at[0] - triggered_at
            assert graceful - 0.1 <= elapsed < graceful + 1.0
        assert isinstance(errors[0], httpx.RemoteProtocolError)


async def test_after_shutdown_the_port_refuses_connections(client: httpx.AsyncClient) -> None:
    app = RawApp()
    with trio.fail_after(TEST_DEADLINE):
        async with trio.open_nursery() as nursery:
            running = await start(nursery, app)
            app.stopping.set()
        with pytest.raises(httpx.ConnectError):
            await client.get(running.url + "/")


async def test_cancelling_the_nursery_stops_the_server(client: httpx.AsyncClient) -> None:
    app = RawApp()
    with trio.fail_after(TEST_DEADLINE):
        async with trio.open_nursery() as nursery:
            running = await start(nursery, app)
            assert (await client.get(running.url + "/")).status_code == 200
            nursery.cancel_scope.cancel()
        assert not running.ended.is_set()  # it did not return: it was cancelled
        with pytest.raises(httpx.ConnectError):
            await client.get(running.url + "/")


async def test_cancellation_stops_serving_promptly(client: httpx.AsyncClient) -> None:
    app = RawApp()
    with trio.fail_after(TEST_DEADLINE):
        async with trio.open_nursery() as outer:
            server_scope = trio.CancelScope()

            async def run_server(task_status: trio.TaskStatus[str]) -> None:
                with server_scope:
                    await serve_asgi(app, HOST, 0, task_status=task_status)

            url = await outer.start(run_server)
            assert (await client.get(url + "/")).status_code == 200
            errors: list[Exception] = []

            async def stubborn() -> None:
                try:
                    await client.get(url + "/stubborn", timeout=30.0)
                except httpx.TransportError as exc:
                    errors.append(exc)

            outer.start_soon(stubborn)
            await app.waiting.wait()
            cancelled_at = trio.current_time()
            server_scope.cancel()
        assert trio.current_time() - cancelled_at < 1.0  # no graceful period on cancellation
        assert isinstance(errors[0], httpx.RemoteProtocolError)
        with pytest.raises(httpx.ConnectError):
            await client.get(url + "/")


async def test_address_in_use_is_a_plain_os_error() -> None:
    with socket.socket() as taken:
        taken.bind((HOST, 0))
        taken.listen()
        port = taken.getsockname()[1]
        with trio.fail_after(TEST_DEADLINE), pytest.raises(OSError, match="in use"):
            await serve_asgi(RawApp(), HOST, port)


async def test_logging_goes_through_stdlib_loggers_only(
    client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.INFO)
    errors = logging.getLogger("test.serve.error")
    access = logging.getLogger("test.serve.access")
    app = RawApp()
    with trio.fail_after(TEST_DEADLINE):
        async with trio.open_nursery() as nursery:
            url = await nursery.start(
                partial(
                    serve_asgi,
                    app,
                    HOST,
                    0,
                    shutdown_trigger=app.stopping.wait,
                    logger=errors,
                    access_logger=access,
                )
            )
            await client.get(url + "/echo")
            await client.aclose()
            app.stopping.set()
    by_logger = {(r.name, r.getMessage()) for r in caplog.records}
    assert ("test.serve.error", f"Running on {url} (CTRL + C to quit)") in by_logger
    assert any(name == "test.serve.access" and "/echo" in msg for name, msg in by_logger)
    assert errors.handlers == []
    assert access.handlers == []
    assert capsys.readouterr() == ("", "")


async def test_without_an_access_logger_there_are_no_access_lines(
    client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    app = RawApp()
    with trio.fail_after(TEST_DEADLINE):
        async with trio.open_nursery() as nursery:
            running = await start(nursery, app)
            await client.get(running.url + "/echo")
            await client.aclose()
            app.stopping.set()
    ours = [r for r in caplog.records if not r.name.startswith(("httpx", "httpcore"))]
    assert not [r for r in ours if "/echo" in r.getMessage()]
    assert any(r.name == "nurseries._serve" for r in caplog.records)


def test_config_follows_the_measured_settings() -> None:
    config = make_config(HOST, 0)
    assert config.backlog == DEFAULT_BACKLOG == 2048
    assert config.graceful_timeout == DEFAULT_GRACEFUL_TIMEOUT
    assert 1.0 <= DEFAULT_GRACEFUL_TIMEOUT <= 2.0
    assert config.read_timeout is None
    assert config.accesslog is None
    assert isinstance(config.errorlog, logging.Logger)
    assert config.bind == ["127.0.0.1:0"]
    assert make_config("::1", 8080).bind == ["[::1]:8080"]


def test_a_connection_may_wait_a_minute_for_its_first_request_to_be_read() -> None:
    """hypercorn's idle timeout also runs from accept to the first request read: its 5 s
    closed connections of a 10,000-poll burst the server had not read yet (module doc)."""
    assert make_config(HOST, 0).keep_alive_timeout == DEFAULT_KEEP_ALIVE_TIMEOUT == 60.0
    assert make_config(HOST, 0, keep_alive_timeout=2.0).keep_alive_timeout == 2.0


def test_a_serving_process_freezes_its_startup_heap_and_collects_less_often() -> None:
    """In a child process (it changes the process's collector for good): what startup built
    is frozen (never walked again) and the young generation's threshold is raised."""
    code = (
        "import gc, nurseries\n"
        "startup = [object() for _ in range(10)]\n"
        "nurseries.tune_collector_for_serving()\n"
        "print(gc.get_freeze_count() > 0, gc.get_threshold())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split("\n")[0] == f"True {SERVING_GC_THRESHOLDS}"
