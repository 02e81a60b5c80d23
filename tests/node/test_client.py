"""The node's HTTP client (retries, caps, one origin), its URL rules and the CLI's usage errors."""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import pytest
import trio
import trio.testing

from hypertrain.compute.keys import mint_key
from hypertrain.compute.wire import InputFile, LeaseRequest, ResultPost
from hypertrain.node.cache import InputCache
from hypertrain.node.client import RETRY_BUDGET, NodeClient
from hypertrain.node.errors import BadOffer, IdentityError, InputMismatch, Refused, Unreachable
from hypertrain.node.identity import coordinator_url, origin_of
from hypertrain.node.main import main
from tests.node.fake import FakeCoordinator

URL = "http://127.0.0.1:8000"
KEY = mint_key()
POST = ResultPost(lease="lt_x", ok=True, result={})
COUNTED = {
    "copy": "j1.1",
    "status": "counted",
    "verdict": None,
    "job_state": "queued",
    "compute_credits": 1,
}
REGISTERED = {
    "id": "n1",
    "handle": "node-1",
    "capabilities": ["delta-loss"],
    "hardware": "cpu-generic",
    "jobs_done": 0,
    "credits": 0,
    "compute_credits": 0,
    "last_seen": 0,
    "node_id": "n1",
}

Handler = Callable[[httpx.Request], httpx.Response]


def _client(handler: Handler, **kwargs: object) -> NodeClient:
    client = NodeClient(URL, transport=httpx.MockTransport(handler), jitter=lambda: 1.0, **kwargs)  # type: ignore[arg-type]
    client.use_key(KEY)
    return client


def _streamed(data: bytes) -> httpx.Response:
    async def body() -> AsyncIterator[bytes]:
        yield data

    return httpx.Response(200, content=body(), headers={"Content-Length": str(len(data))})


def _result_handler(script: list[int | type[Exception]], seen: list[float]) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(trio.current_time())
        step = script.pop(0) if script else 200
        if isinstance(step, int) and step != 200:
            return httpx.Response(step, json={"detail": "x"})
        if isinstance(step, int):
            registering = request.url.path.endswith("/register")
            return httpx.Response(200, json=REGISTERED if registering else COUNTED)
        raise step("network down")

    return handler


async def test_the_result_post_retries_network_errors_only(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[float] = []
    async with _client(_result_handler([httpx.ConnectError, httpx.ReadTimeout], seen)) as client:
        answer = await client.post_result("j1.1", POST)
    assert (answer.accepted, answer.status) == (True, "counted")
    assert [round(b - a, 3) for a, b in itertools.pairwise(seen)] == [0.5, 1.0]
    seen.clear()
    async with _client(_result_handler([503], seen)) as client:
        with pytest.raises(Refused, match="503"):
            await client.post_result("j1.1", POST)
    assert len(seen) == 1
    seen.clear()
    async with _client(_result_handler([httpx.ConnectError] * 9, seen)) as client:
        with pytest.raises(Unreachable, match="ConnectError"):
            await client.post_result("j1.1", POST)
    # 0.5 s doubling to 8 s (jitter draws of 1), the last try at the budget's end exactly
    assert [round(t - seen[0], 3) for t in seen] == [0.0, 0.5, 1.5, 3.5, 7.5, 15.5, 23.5, 30.0]
    assert seen[-1] - seen[0] == RETRY_BUDGET
    seen.clear()
    async with _client(_result_handler([httpx.ConnectError] * 9, seen)) as client:
        with pytest.raises(Unreachable, match="ConnectError"):
            await client.post_result("j1.1", POST, deadline=trio.current_time() + 2.0)
    assert [round(t - seen[0], 3) for t in seen] == [0.0, 0.5, 1.5, 2.0]  # the lease's deadline
    async with _client(_result_handler([410], seen)) as client:
        late = await client.post_result("j1.1", POST)
    assert (late.accepted, late.http_status) == (False, 410)
    async with _client(_result_handler([], seen)) as client:
        with pytest.raises(Refused, match="over 65536 bytes"):
            await client.post_result("j1.1", ResultPost(lease="lt_x", ok=False, error="x" * 70_000))


async def test_a_result_post_retried_after_a_lost_answer_carries_no_next_lease(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The first try may have been taken with its lease: the retry asks for the result's
    answer only, so no second copy is leased to this node (and left to expire)."""
    bodies: list[dict[str, object]] = []
    respond = _result_handler([httpx.ReadTimeout], [])

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return respond(request)

    carrying = ResultPost(
        lease="lt_x", ok=True, result={}, next=LeaseRequest(capabilities=["delta-loss"])
    )
    async with _client(handler) as client:
        answer = await client.post_result("j1.1", carrying)
    assert (answer.accepted, answer.next) == (True, None)
    assert ["next" in body for body in bodies] == [True, False]
    assert bodies[1] == {k: v for k, v in bodies[0].items() if k != "next"}


async def test_a_mint_is_not_repeated_once_the_request_may_have_arrived(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[float] = []
    async with _client(_result_handler([httpx.ReadTimeout], seen)) as client:
        with pytest.raises(Unreachable):
            await client.register(None, None, ["delta-loss"], "cpu-generic")
    assert len(seen) == 1
    seen.clear()
    async with _client(_result_handler([httpx.ConnectError, 502], seen)) as client:
        with pytest.raises(Unreachable):
            await client.register(None, None, ["delta-loss"], "cpu-generic")
    assert len(seen) == 2
    seen.clear()
    async with _client(_result_handler([502, httpx.ReadTimeout], seen)) as client:
        answer = await client.register(KEY, None, ["delta-loss"], "cpu-generic")
    assert answer.node_id == "n1"
    assert len(seen) == 3


async def test_a_server_error_is_retried_after_its_retry_after_and_not_past_the_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[float] = []
    asks = ["7"]

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(trio.current_time())
        if not asks:
            return httpx.Response(200, json=REGISTERED)
        return httpx.Response(503, json={"detail": "x"}, headers={"Retry-After": asks.pop(0)})

    async with _client(handler) as client:
        await client.register(KEY, None, ["delta-loss"], "cpu-generic")
        # 7 s asked, more than the backoff's 0.5 s
        assert [round(t - seen[0], 3) for t in seen] == [0.0, 7.0]
        seen.clear()
        asks[:] = ["40"]  # beyond the 30 s budget: no retry, and the wait travels with the error
        with pytest.raises(Unreachable, match="503") as caught:
            await client.register(KEY, None, ["delta-loss"], "cpu-generic")
    assert len(seen) == 1
    assert caught.value.retry_after == 40.0


async def test_inputs_stream_from_the_coordinator_only_with_the_declared_size_as_a_cap(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    data = b"trace" * 1000
    spec = InputFile("trace.u16", hashlib.sha256(data).hexdigest(), len(data))
    script: list[httpx.Response] = [
        httpx.Response(503, json={"detail": "stopping"}),
        _streamed(data),
    ]
    requests: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        return script.pop(0)

    cache = InputCache(tmp_path)
    async with _client(handler) as client:
        path = await cache.ensure(spec, lambda s: client.fetch_input("j1.1", "lt_tok", s))
        assert path.read_bytes() == data
        assert [str(r.url) for r in requests] == [
            f"{URL}/v1/compute/jobs/j1.1/inputs/trace.u16"
        ] * 2
        assert requests[1].headers["authorization"] == f"Bearer {KEY}"
        assert requests[1].headers["x-ht-lease"] == "lt_tok"
        assert requests[1].headers["accept-encoding"] == "identity"
        other = InputFile("state.bin", spec.sha256, len(data) - 1)
        script.append(_streamed(data))
        with pytest.raises(InputMismatch, match="offers 5000 bytes, declared 4999"):
            await cache.ensure(other, lambda s: client.fetch_input("j1.1", "lt_tok", s))
        script.append(httpx.Response(302, headers={"Location": "https://evil.example/x"}))
        with pytest.raises(Refused, match="redirect refused"):
            await cache.ensure(other, lambda s: client.fetch_input("j1.1", "lt_tok", s))
    assert all(r.url.host == "127.0.0.1" for r in requests)
    assert not (tmp_path / "cache" / spec.sha256).with_name("state.bin").exists()


def test_the_coordinator_url_is_https_or_loopback_http() -> None:
    assert coordinator_url(None, {}) == URL
    assert coordinator_url(None, {"HYPERTRAIN_COORDINATOR_URL": "https://c.example/"}) == (
        "https://c.example"
    )
    assert coordinator_url("http://localhost:9/", {"HYPERTRAIN_COORDINATOR_URL": "x"}) == (
        "http://localhost:9"
    )
    for bad in ("http://c.example", "ftp://c.example", "https://u:p@c.example", "https://c/?q=1"):
        with pytest.raises(IdentityError):
            coordinator_url(bad, {})
    assert origin_of("HTTPS://C.example:443/api") == "https://c.example"
    assert origin_of("http://[::1]:8000") == "http://[::1]:8000"


def test_main_reports_usage_errors_in_one_line_with_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--url", "http://c.example"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("hypertrain-node: coordinator URL")
    assert main(["--key", "ht_nope", "--dir", str(tmp_path), "--once"]) == 2
    captured = capsys.readouterr()
    assert (
        captured.err
        == "hypertrain-node: --key: not a node key (ht_ followed by 32 letters and digits)\n"
    )
    assert main(["--handle", "../x", "--dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("hypertrain-node: --handle:")
    with pytest.raises(SystemExit) as exit_info:
        main(["--bogus"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1
    (tmp_path / "node.json").write_text(json.dumps({"key": KEY}))
    (tmp_path / "node.json").chmod(0o644)
    assert main(["--dir", str(tmp_path), "--once"]) == 2
    assert "lets others read it" in capsys.readouterr().err


async def test_a_hostile_lease_answer_is_a_bad_offer_naming_the_field(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Decoded by the shared wire class before anything is fetched: bools are not ints, ints
    stay within 2^53 - 1, names are safe; an answer that is not an object at all is refused."""
    good = FakeCoordinator().offer("j1.1")
    cases = [
        ({**good, "version": True}, "version"),
        ({**good, "deadline_ms": 2**53}, "deadline_ms"),
        ({**good, "inputs": [{**good["inputs"][0], "name": "../x"}]}, "name"),
        ({**good, "lease": 7}, "token"),
    ]
    requests: list[httpx.Request] = []
    for job, field in cases:

        def handler(request: httpx.Request, job: object = job) -> httpx.Response:
            requests.append(request)
            return httpx.Response(200, json={"job": job})

        async with _client(handler) as client:
            with pytest.raises(BadOffer, match=field):
                await client.lease(["delta-loss"], "cpu-generic")
    assert all(r.url.path == "/v1/compute/jobs/lease" for r in requests)
    async with _client(lambda r: httpx.Response(200, json=[good])) as client:
        with pytest.raises(Refused, match="not a JSON object"):
            await client.lease(["delta-loss"], "cpu-generic")
