"""The event hub (drop-oldest, never blocking) and ``GET /v1/events`` as SSE in virtual time."""

from __future__ import annotations

from contextlib import aclosing
from pathlib import Path

import httpx
import pytest
import trio
import trio.testing

from hypertrain.coordinator.events import EventHub
from hypertrain.coordinator.web.events import KEEPALIVE_INTERVAL
from tests.coordinator.harness import Harness, open_harness

STREAM_TIMEOUT = 120.0  # virtual seconds any one stream test may take
READ = httpx.Timeout(60.0)  # above the 15 s keep-alive interval

# httpx's aiter_lines() nests async generators; closing the outer one (these tests stop reading
# early on purpose) leaves the inner ones to the garbage collector, which trio reports as a
# ResourceWarning. That is httpx's doing (see tests/nurseries/test_testing_transport.py).
pytestmark = pytest.mark.filterwarnings(
    "ignore:Async generator 'httpx._models.Response.aiter_:ResourceWarning",
    "ignore:Async generator 'httpx._client.BoundAsyncStream.__aiter__':ResourceWarning",
)


async def test_publish_never_blocks_and_a_slow_subscriber_drops_the_oldest() -> None:
    hub = EventHub(capacity=3)
    async with hub.subscribe() as slow, hub.subscribe(capacity=100) as fast:
        with trio.testing.assert_no_checkpoints():
            for n in range(10):
                hub.publish("tick", {"n": n})
        assert slow.dropped == 7
        assert fast.dropped == 0
        kept = [await slow.receive() for _ in range(3)]
        assert [e.json for e in kept if e is not None] == ['{"n":7}', '{"n":8}', '{"n":9}']
        assert [e.seq for e in kept if e is not None] == [8, 9, 10]
        assert hub.statistics().dropped == 7
        assert hub.statistics().subscribers == 2
    assert hub.statistics().subscribers == 0


async def test_kinds_filter_and_close_ends_every_subscription() -> None:
    hub = EventHub()
    async with hub.subscribe(kinds={"beacon"}) as beacons:
        hub.publish("run", {"x": 1})
        hub.publish("beacon", {"round": 1})
        hub.close()
        hub.publish("beacon", {"round": 2})  # ignored after close
        assert [e.kind async for e in beacons] == []  # closed: buffered events are not served
    async with hub.subscribe() as late:
        assert await late.receive() is None
    assert hub.statistics().closed


async def test_receive_nowait_takes_what_is_buffered_and_never_waits() -> None:
    hub = EventHub()
    async with hub.subscribe(kinds={"tick"}) as sub:
        with pytest.raises(trio.WouldBlock):
            sub.receive_nowait()
        hub.publish("tick", {"n": 1})
        hub.publish("other", {})
        hub.publish("tick", {"n": 2})
        with trio.testing.assert_no_checkpoints():
            assert [sub.receive_nowait().json for _ in range(2)] == ['{"n":1}', '{"n":2}']
            with pytest.raises(trio.WouldBlock):
                sub.receive_nowait()
        hub.publish("tick", {"n": 3})
        hub.close()
        with pytest.raises(trio.EndOfChannel):
            sub.receive_nowait()


async def test_data_must_be_json() -> None:
    hub = EventHub()
    with pytest.raises(ValueError, match="Out of range float"):
        hub.publish("bad", {"x": float("nan")})


async def test_receive_waits_until_something_is_published(
    autojump_clock: trio.testing.MockClock,
) -> None:
    hub = EventHub()
    async with hub.subscribe() as sub, trio.open_nursery() as nursery:
        got: list[float] = []

        async def reader() -> None:
            event = await sub.receive()
            assert event is not None
            got.append(trio.current_time())

        nursery.start_soon(reader)
        await trio.sleep(7)
        hub.publish("x", {})
    assert got == [7.0]


async def _frames(response: httpx.Response, until: int) -> list[dict[str, str]]:
    """Parse SSE frames (comments included as ``{"comment": ...}``) until ``until`` frames."""
    frames: list[dict[str, str]] = []
    current: dict[str, str] = {}
    async with aclosing(response.aiter_lines()) as lines:
        async for line in lines:
            if line == "":
                if current:
                    frames.append(current)
                    current = {}
                if len(frames) >= until:
                    break
                continue
            if line.startswith(":"):
                current["comment"] = line[1:].strip()
                current["at"] = str(trio.current_time())
            else:
                field, _, value = line.partition(": ")
                current[field] = value
    return frames


async def test_sse_subscriber_sees_beacon_events_as_they_happen(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_harness(tmp_path) as h, trio.open_nursery() as nursery:

        async def push_rounds(harness: Harness) -> None:
            for number in (1, 2, 3):
                await trio.sleep_until(h.ctx.chain.time_of(number) - h.wall.epoch)
                await harness.post_round(harness.round(number))

        with trio.fail_after(STREAM_TIMEOUT):
            async with h.client.stream(
                "GET", "/v1/events?kinds=beacon,other", timeout=READ
            ) as response:
                assert response.status_code == 200
                assert response.headers["content-type"].startswith("text/event-stream")
                nursery.start_soon(push_rounds, h)
                frames = await _frames(response, until=4)
        assert frames[0]["comment"] == "connected"
        assert [(f["id"], f["event"], f["data"]) for f in frames[1:]] == [
            ("1", "beacon", '{"round":1,"latest":1}'),
            ("2", "beacon", '{"round":2,"latest":2}'),
            ("3", "beacon", '{"round":3,"latest":3}'),
        ]
        assert trio.current_time() == pytest.approx(6.0)  # round 3 is due 6 s after genesis


async def test_sse_filters_kinds_and_keeps_alive(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_harness(tmp_path) as h:
        with trio.fail_after(STREAM_TIMEOUT):
            async with h.client.stream("GET", "/v1/events?kinds=run", timeout=READ) as response:
                h.ctx.events.publish("beacon", {"round": 1})  # filtered out
                frames = await _frames(response, until=3)
        assert [f.get("comment") for f in frames] == ["connected", "keep-alive", "keep-alive"]
        assert [float(f["at"]) for f in frames[1:]] == [KEEPALIVE_INTERVAL, 2 * KEEPALIVE_INTERVAL]


async def test_sse_bad_kinds_is_400(tmp_path: Path) -> None:
    async with open_harness(tmp_path) as h:
        response = await h.client.get("/v1/events?kinds=,,")
        assert response.status_code == 400


async def test_sse_stream_ends_when_stopping_and_new_ones_get_503(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_harness(tmp_path) as h:
        with trio.fail_after(STREAM_TIMEOUT):
            async with (
                h.client.stream("GET", "/v1/events", timeout=READ) as response,
                aclosing(response.aiter_lines()) as lines,
            ):
                assert await lines.__anext__() == ": connected"
                await trio.sleep(5)
                h.ctx.stopping.set()
                rest = [line async for line in lines]
        assert rest == [""]
        assert trio.current_time() == pytest.approx(5.0)
        refused = await h.client.get("/v1/events")
        assert refused.status_code == 503
        assert refused.headers["retry-after"] == "5"
        assert refused.json() == {"detail": "shutting down"}
