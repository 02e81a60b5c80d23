"""The node's key goes to its coordinator only: proxy variables in the environment are ignored,
``--proxy URL`` is the one way to use a proxy (real loopback sockets: proxying is about them)."""

from __future__ import annotations

import json
from functools import partial
from typing import Any

import pytest
import trio

from hypertrain.node.client import NodeClient
from hypertrain.node.main import main
from nurseries import serve_asgi
from tests.node.test_client import REGISTERED

DEADLINE = 15.0  # real seconds


class Recorder:
    """An ASGI app that answers every request with a registration and remembers the targets."""

    def __init__(self) -> None:
        self.targets: list[bytes] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        self.targets.append(scope["raw_path"])
        while (await receive()).get("more_body"):
            pass
        body = json.dumps(REGISTERED).encode()
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


async def _register(url: str, **options: Any) -> str:
    async with NodeClient(url, **options) as client:
        answer = await client.register(None, None, ["delta-loss"], "cpu-generic")
    return answer.node_id


async def test_proxy_variables_are_ignored_and_only_the_proxy_flag_is_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    coordinator, proxy = Recorder(), Recorder()
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            url = await nursery.start(partial(serve_asgi, coordinator, "127.0.0.1", 0))
            proxy_url = await nursery.start(partial(serve_asgi, proxy, "127.0.0.1", 0))
            for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "all_proxy"):
                monkeypatch.setenv(name, proxy_url)
            monkeypatch.delenv("NO_PROXY", raising=False)
            monkeypatch.delenv("no_proxy", raising=False)
            assert await _register(url) == "n1"
            assert (coordinator.targets, proxy.targets) == ([b"/v1/compute/register"], [])
            assert await _register(url, proxy=proxy_url) == "n1"
            # A proxy is asked for the absolute URL: the request went through it.
            assert proxy.targets == [f"{url}/v1/compute/register".encode()]
            assert len(coordinator.targets) == 1
            nursery.cancel_scope.cancel()


def test_a_proxy_flag_that_is_not_an_http_url_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for bad in ("socks5://127.0.0.1:1080", "127.0.0.1:3128", "http://"):
        assert main(["--once", "--proxy", bad]) == 2
        assert "--proxy: not an http(s) proxy URL" in capsys.readouterr().err
