"""The answer cache's front renders each view once at a time (issue 17 goal 6): requests that
miss on the same view at the same data wait for the render in progress and are answered with
its bytes; a leader cancelled mid-render leaves no waiter hung; a commit during a render is
never answered with the older render; every wait is bounded. In virtual time, over a fake app
whose renders wait for the test to let them finish."""

from __future__ import annotations

import collections
import json
from typing import Any

import trio
import trio.testing

from hypertrain.coordinator.web.answers import AnswerCache, key_of
from hypertrain.coordinator.web.front import RENDER_WAIT, serve_answers
from hypertrain.store import Stamp

PATH = "/v1/runs/r/rounds/0"


class _Data:
    """A database of one version number, with its stamp."""

    def __init__(self) -> None:
        self.version = 0

    async def stamp(self) -> Stamp:
        return self.version, 0

    def commit(self) -> None:
        self.version += 1


class _Bench:
    """A front over an app whose route renders ``{"version": ...}`` through the cache; each
    render waits until its gate (by the version it read) is set."""

    def __init__(self) -> None:
        self.data = _Data()
        self.cache = AnswerCache(self.data)
        self.gates: collections.defaultdict[int, trio.Event] = collections.defaultdict(trio.Event)
        self.reads: list[int] = []
        self.front = serve_answers(self._app, self.cache, headers_limit=16 * 1024)

    async def _app(self, scope: Any, receive: Any, send: Any) -> None:
        async def produce() -> dict[str, int]:
            version = self.data.version
            self.reads.append(version)
            await self.gates[version].wait()
            return {"version": version}

        body = await self.cache.answer(key_of(scope), produce)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})

    async def get(self, answers: list[int]) -> None:
        """One request; appends the version its answer shows."""
        scope = {"type": "http", "method": "GET", "path": PATH, "query_string": b"", "headers": []}
        sent: list[bytes] = []

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.body":
                sent.append(message["body"])

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        await self.front(scope, receive, send)
        answers.append(json.loads(b"".join(sent))["version"])

    async def primed(self) -> None:
        """The view rendered once (the cache knows it), then a commit: the next requests miss."""
        self.gates[0].set()
        await self.get([])
        self.data.commit()


async def test_concurrent_misses_are_answered_by_one_render() -> None:
    bench = _Bench()
    await bench.primed()
    answers: list[int] = []
    async with trio.open_nursery() as nursery:
        for _ in range(10):
            nursery.start_soon(bench.get, answers)
        await trio.testing.wait_all_tasks_blocked()
        assert bench.reads == [0, 1]
        bench.gates[1].set()
    assert answers == [1] * 10
    stats = bench.cache.statistics()
    assert (stats.renders, stats.hits) == (2, 9)


async def test_a_leader_cancelled_mid_render_leaves_its_waiters_an_answer() -> None:
    bench = _Bench()
    await bench.primed()
    answers: list[int] = []
    async with trio.open_nursery() as nursery:
        leader = trio.CancelScope()

        async def led() -> None:
            with leader:
                await bench.get(answers)

        nursery.start_soon(led)
        await trio.testing.wait_all_tasks_blocked()
        for _ in range(5):
            nursery.start_soon(bench.get, answers)
        await trio.testing.wait_all_tasks_blocked()
        assert bench.reads == [0, 1]
        leader.cancel()
        await trio.testing.wait_all_tasks_blocked()
        assert bench.reads == [0, 1, 1]  # one waiter leads the next render, the others wait
        bench.gates[1].set()
    assert answers == [1] * 5
    assert bench.cache.statistics().renders == 2


async def test_a_commit_during_a_render_is_never_answered_with_the_older_render() -> None:
    bench = _Bench()
    await bench.primed()
    early: list[int] = []
    late: list[int] = []
    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(bench.get, early)
        await trio.testing.wait_all_tasks_blocked()
        bench.data.commit()  # during the render of version 1
        for _ in range(3):
            nursery.start_soon(bench.get, late)
        await trio.testing.wait_all_tasks_blocked()
        assert bench.reads == [0, 1, 2]  # the late requests lead their own render
        bench.gates[1].set()
        await trio.testing.wait_all_tasks_blocked()
        assert late == []  # the render of version 1 ended: none of them is answered with it
        assert early == [1]  # its leader's own answer; its waiters now wait for version 2
        bench.gates[2].set()
    assert early == [1, 2, 2]
    assert late == [2, 2, 2]
    assert bench.cache.statistics().renders == 3


async def test_waits_are_bounded(autojump_clock: trio.testing.MockClock) -> None:
    bench = _Bench()
    await bench.primed()
    answers: list[int] = []
    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(bench.get, answers)
        await trio.testing.wait_all_tasks_blocked()
        await trio.sleep(RENDER_WAIT * 0.99)
        assert bench.reads == [0, 1]
        await trio.sleep(RENDER_WAIT * 0.02)
        assert bench.reads == [0, 1, 1, 1]  # the waiters gave up and render themselves
        bench.gates[1].set()
    assert answers == [1] * 3


async def test_a_view_the_cache_does_not_know_never_waits() -> None:
    bench = _Bench()
    answers: list[int] = []
    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(bench.get, answers)
        await trio.testing.wait_all_tasks_blocked()
        assert bench.reads == [0, 0, 0]
        bench.gates[0].set()
    assert answers == [0] * 3
