"""Pairing rules and sybil brakes over HTTP, in virtual time (issue 19 items 1 and 2; spec
compute-network section 6 scenarios 1 and 8).

The real daemon with address networks (its default), each node a plain HTTP client whose peer
address is chosen (the in-process transport's ``client``), so every request comes from a
known network; the fallback scorer is a fake. Key ages are not compared here
(``compute_pair_min_age_s = 0``: the book's tests cover them).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import httpx
import trio
import trio.testing

from hypertrain.coordinator.services.fallback import FallbackPool
from hypertrain.daemon.main import DaemonHandle
from hypertrain.daemon.services import SERVICES, DaemonParts, ServiceFn, ServiceSpec
from nurseries.testing import open_asgi_transport
from tests.coordinator.test_compute_routes import (
    API,
    LOSS,
    OTHER,
    Fallbacks,
    _enqueue,
    _lease,
    _post,
)
from tests.daemon.support import daemon_settings, running_daemon

PROXY = "10.0.0.1"
REGISTER = {"key": None, "handle": None, "capabilities": ["delta-loss"], "hardware": "cpu"}


@attrs.define
class Net:
    """The daemon, and HTTP clients from chosen peer addresses."""

    handle: DaemonHandle
    fallbacks: Fallbacks
    stack: AsyncExitStack
    clients: dict[str, httpx.AsyncClient] = attrs.field(factory=dict)

    async def client(self, address: str) -> httpx.AsyncClient:
        """A client whose requests come from ``address`` (one per address)."""
        if address not in self.clients:
            transport = await self.stack.enter_async_context(
                open_asgi_transport(self.handle.app, lifespan=False, client=(address, 40000))
            )
            client = httpx.AsyncClient(transport=transport, base_url=API, timeout=60)
            self.clients[address] = await self.stack.enter_async_context(client)
        return self.clients[address]

    async def register(
        self, address: str, forwarded: str | None = None, **body: Any
    ) -> httpx.Response:
        headers = {} if forwarded is None else {"X-Forwarded-For": forwarded}
        client = await self.client(address)
        return await client.post("/v1/compute/register", json=REGISTER | body, headers=headers)

    async def node(self, address: str, forwarded: str | None = None) -> dict[str, Any]:
        """A node minted from ``address`` (its record, key and ``ip``)."""
        r = await self.register(address, forwarded)
        assert r.status_code == 200, r.text
        return {**r.json(), "ip": address}


@asynccontextmanager
async def _daemon(tmp_path: Path, **coordinator: Any) -> AsyncIterator[Net]:
    fallbacks = Fallbacks()

    def pool(parts: DaemonParts) -> ServiceFn:
        return FallbackPool(parts.ctx, fallbacks.score, 2).run

    services = [s if s.name != "fallback" else ServiceSpec("fallback", pool) for s in SERVICES]
    fields = {"compute_networks": "address", "compute_pair_min_age_s": 0} | coordinator
    settings = daemon_settings(tmp_path, period=1.0, trusted_proxies=PROXY, **fields)
    async with running_daemon(settings, services) as handle, AsyncExitStack() as stack:
        yield Net(handle, fallbacks, stack)


async def _step_view(net: Net, job: str) -> dict[str, Any]:
    r = await (await net.client("127.0.0.1")).get(f"/v1/compute/steps/{job}")
    return dict(r.json())


async def test_two_keys_of_one_network_wait_for_another_network_or_fall_back(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Scenario 1: two keys on one /24 never hold copies of one job; the step falls back
    when nobody else comes, and settles by agreement with a node of another network. Held
    polls are handed copies by the same rules."""
    async with _daemon(tmp_path) as net:
        a, b = await net.node("198.51.100.7"), await net.node("198.51.100.8")
        c = await net.node("203.0.113.5")
        ca, cb = await net.client("198.51.100.7"), await net.client("198.51.100.8")
        cc = await net.client("203.0.113.5")
        alone = await _enqueue(net.handle, "alone")
        ja = (await _lease(ca, a)).json()["job"]
        refused = await _lease(cb, b, wait_ms=1000)
        await trio.sleep(25)  # the 20 s window ends: the fallback scores it
        fallen = await _step_view(net, alone)

        got: dict[str, Any] = {}
        async with trio.open_nursery() as polls:

            async def poll(name: str, client: httpx.AsyncClient, node: dict[str, Any]) -> None:
                got[name] = (await _lease(client, node, wait_ms=10_000)).json()["job"]

            polls.start_soon(poll, "a", ca, a)
            await trio.sleep(1)
            polls.start_soon(poll, "b", cb, b)
            await trio.sleep(1)
            paired = await _enqueue(net.handle, "paired")  # handed to the held polls
            await trio.sleep(1)
            polls.start_soon(poll, "c", cc, c)
        # Woken together, either of a and b leases first; the other is refused its network's
        # second copy and answers null at the end of its poll.
        (first, grant), *_ = [(n, got[k]) for k, n in (("a", a), ("b", b)) if got[k] is not None]
        await _post(await net.client(first["ip"]), first, grant, LOSS)
        settled = (await _post(cc, c, got["c"], LOSS)).json()
        agreed = await _step_view(net, paired)
    assert ja["job"] == alone
    assert refused.json() == {"job": None}
    assert (fallen["state"], fallen["how"]) == ("settled", "fallback")
    assert got["c"]["job"] == paired
    assert sorted(str(got[k] and got[k]["job"]) for k in "ab") == sorted([paired, "None"])
    assert (settled["verdict"], settled["job_state"]) == ("paid", "settled")
    assert (agreed["state"], agreed["how"]) == ("settled", "agreement")


async def _mints(net: Net, addresses: list[str]) -> list[int]:
    return [(await net.register(address)).status_code for address in addresses]


async def test_the_eleventh_mint_in_a_minute_from_one_network_is_429(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Ten keys a minute per /24 (IPv4) or /48 (IPv6), 429 with Retry-After past it; another
    network is not limited; a minute later the network mints again."""
    async with _daemon(tmp_path) as net:
        v4 = await _mints(net, [f"198.51.100.{i}" for i in range(1, 11)])
        await trio.sleep(20)
        limited = await net.register("198.51.100.200")
        other = await _mints(net, ["198.51.101.1", "203.0.113.1"])
        v6 = await _mints(net, [f"2001:db8:1:{i}::1" for i in range(10)])
        v6_limited = await net.register("2001:db8:1:ffff::9")
        v6_other = await _mints(net, ["2001:db8:2::1"])
        await trio.sleep(40)
        again = await _mints(net, ["198.51.100.201"])
    assert v4 == [200] * 10
    assert limited.status_code == 429
    assert limited.headers["Retry-After"] == "40"
    assert "at most 10 node keys are minted per minute" in limited.json()["detail"]
    assert other == [200, 200]
    assert v6 == [200] * 10
    assert v6_limited.status_code == 429
    assert v6_other == [200]
    assert again == [200]


async def test_a_trusted_proxy_names_the_client_and_nobody_else_does(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """X-Forwarded-For counts only from HYPERTRAIN_TRUSTED_PROXIES: through the proxy two
    clients of two networks are paired and minting is counted per client network; from an
    untrusted peer the header is ignored, so it neither splits one network nor escapes it."""
    async with _daemon(tmp_path, compute_mint_per_minute=2) as net:
        behind = [await net.node(PROXY, "198.51.100.5"), await net.node(PROXY, "203.0.113.5")]
        proxied = await net.register(PROXY, "192.0.2.9, 198.51.100.6")
        third = await net.register(PROXY, "198.51.100.7")
        spoofed = [await net.register("192.0.2.1", f"203.0.113.{i}") for i in (1, 2, 3)]
        await _enqueue(net.handle, "x")
        proxy = await net.client(PROXY)
        headers = [{"X-Forwarded-For": ip} for ip in ("198.51.100.5", "203.0.113.5")]
        jobs = []
        for node, forwarded in zip(behind, headers, strict=True):
            body = {"capabilities": ["delta-loss"], "hardware": "cpu", "wait_ms": 0}
            auth = {"Authorization": f"Bearer {node['key']}", **forwarded}
            r = await proxy.post("/v1/compute/jobs/lease", json=body, headers=auth)
            jobs.append(r.json()["job"])
    assert proxied.status_code == 200  # 198.51.100.0/24's second key
    assert third.status_code == 429  # its third: counted per client network
    assert [r.status_code for r in spoofed] == [200, 200, 429]  # all 192.0.2.0/24
    assert jobs[0] is not None
    assert jobs[1] is not None
    assert jobs[0]["job"] == jobs[1]["job"]


async def _strike_out(net: Net, liar: dict[str, Any], honest: list[dict[str, Any]]) -> None:
    """Three steps on which ``liar`` (from 198.51.100.66) is outvoted by two honest nodes."""
    cl = await net.client("198.51.100.66")
    c1, c2 = await net.client("203.0.113.1"), await net.client("192.0.2.1")
    for n in range(3):
        await _enqueue(net.handle, f"liar{n}")
        jl = (await _lease(cl, liar)).json()["job"]
        j1 = (await _lease(c1, honest[0])).json()["job"]
        await _post(cl, liar, jl, OTHER)
        await _post(c1, honest[0], j1, LOSS)
        j2 = (await _lease(c2, honest[1])).json()["job"]
        assert (await _post(c2, honest[1], j2, LOSS)).json()["job_state"] == "settled"


async def test_a_key_reminted_where_a_node_was_disabled_is_on_probation(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Scenario 8: the liar's network mints a fresh key: it is on probation, earns nothing for
    its first agreed answer beside an established node, then earns; the register answer and
    the status show its standing and its network's strikes."""
    async with _daemon(tmp_path, compute_probation_answers=1) as net:
        liar = await net.node("198.51.100.66")
        honest = [await net.node("203.0.113.1"), await net.node("192.0.2.1")]
        await _strike_out(net, liar, honest)
        disabled = await _lease(await net.client("198.51.100.66"), liar)
        sybil = await net.node("198.51.100.99")
        cs, ch = await net.client("198.51.100.99"), await net.client("203.0.113.1")
        paid = []
        for n in range(2):
            await _enqueue(net.handle, f"sybil{n}")
            jh = (await _lease(ch, honest[0])).json()["job"]
            js = (await _lease(cs, sybil)).json()["job"]
            await _post(ch, honest[0], jh, LOSS)
            paid.append((await _post(cs, sybil, js, LOSS)).json()["compute_credits"])
        status = (await (await net.client("127.0.0.1")).get("/v1/compute/status")).json()
    assert disabled.status_code == 403
    assert (sybil["probation"], sybil["strikes_today"], sybil["network_strikes_today"]) == (1, 0, 3)
    assert paid == [0, 1]
    entries = {n["id"]: n for n in status["nodes"]}
    assert entries[liar["node_id"]]["strikes_today"] == 3
    assert entries[sybil["node_id"]]["network_strikes_today"] == 3
    assert entries[sybil["node_id"]]["probation"] == 0
    assert "198.51.100" not in str(status)
