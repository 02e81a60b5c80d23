"""The metagraph check of the miner routes: 403 unregistered, 503 master down, 30 s cache."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import trio.testing

from hypertrain.coordinator.metagraph import METAGRAPH_TTL, MasterMetagraph
from hypertrain.protocol.errors import NotConfigured, UnauthorizedSigner
from nurseries import VirtualClock
from tests.coordinator.lifecycle_support import open_runs
from tests.coordinator.miner_support import KEYS, at_assign

MASTER = "http://master:8080"


class Master:
    """A fake Cortex master: its metagraph, or a failure mode; counts requests."""

    def __init__(self, hotkeys: list[str]) -> None:
        self.hotkeys = hotkeys
        self.status = 200
        self.down = False
        self.body: object | None = None
        self.requests = 0

    def transport(self) -> httpx.MockTransport:
        def handle(request: httpx.Request) -> httpx.Response:
            assert request.url == f"{MASTER}/v1/metagraph/latest"
            self.requests += 1
            if self.down:
                raise httpx.ConnectError("connection refused", request=request)
            body = self.body if self.body is not None else {
                "hotkeys": {hotkey: uid for uid, hotkey in enumerate(self.hotkeys)}
            }  # fmt: skip
            return httpx.Response(self.status, json=body)

        return httpx.MockTransport(handle)


async def test_registered_passes_unregistered_is_403_and_answers_are_cached(
    autojump_clock: trio.testing.MockClock,
) -> None:
    master = Master([KEYS[0].ss58])
    async with httpx.AsyncClient(transport=master.transport()) as client:
        graph = MasterMetagraph(MASTER, client=client, wall=VirtualClock(0.0))
        await graph.check(KEYS[0].ss58)
        with pytest.raises(UnauthorizedSigner, match="not registered on the metagraph"):
            await graph.check(KEYS[1].ss58)
        assert master.requests == 1  # the second check used the cached answer
        master.hotkeys.append(KEYS[1].ss58)
        await trio.sleep(METAGRAPH_TTL - 1)
        with pytest.raises(UnauthorizedSigner):
            await graph.check(KEYS[1].ss58)
        await trio.sleep(1)
        await graph.check(KEYS[1].ss58)  # the cache expired: the new registration is seen
        assert master.requests == 2


@pytest.mark.parametrize("failure", ["down", "500", "not-json", "no-hotkeys"])
async def test_a_master_that_cannot_answer_is_503(
    failure: str, autojump_clock: trio.testing.MockClock
) -> None:
    master = Master([KEYS[0].ss58])
    if failure == "down":
        master.down = True
    elif failure == "500":
        master.status = 500
    elif failure == "no-hotkeys":
        master.body = {"uids": []}
    transport = master.transport()
    if failure == "not-json":
        transport = httpx.MockTransport(lambda request: httpx.Response(200, content=b"<html>"))
    async with httpx.AsyncClient(transport=transport) as client:
        graph = MasterMetagraph(MASTER, client=client, wall=VirtualClock(0.0))
        with pytest.raises(NotConfigured, match="metagraph unavailable") as e:
            await graph.check(KEYS[0].ss58)
        assert e.value.status == 503


async def test_the_accept_route_asks_the_metagraph(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    master = Master([KEYS[1].ss58])  # KEYS[0] is rostered but not registered
    async with (
        open_runs(tmp_path) as h,
        httpx.AsyncClient(transport=master.transport()) as client,
    ):
        h.ctx.metagraph = MasterMetagraph(MASTER, client=client, wall=h.wall, ttl=6.0)
        flow = await at_assign(h)
        refused = await flow.post(
            "accept", flow.accept(KEYS[0], await flow.assignment_hash(KEYS[0]))
        )
        assert refused.status_code == 403, refused.text
        assert "not registered on the metagraph" in refused.json()["detail"]
        assert await flow.status(KEYS[0]) == "ASSIGNED"
        master.down = True
        await flow.to(flow.d.d_assign + 3)  # past the cache's 6 s (3 s rounds)
        down = await flow.post("accept", flow.accept(KEYS[1], await flow.assignment_hash(KEYS[1])))
        assert down.status_code == 503, down.text
        master.down = False
        ok = await flow.post("accept", flow.accept(KEYS[1], await flow.assignment_hash(KEYS[1])))
        assert ok.status_code == 200, ok.text
