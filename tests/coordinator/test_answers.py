"""The answer cache of the public views (issue 17 goal 6): a repeated run or round view is
answered in front of Quart with the bytes the route sent, and never once the data changed,
whoever changed it (a route's write, a new beacon round, another connection on the file)."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio.testing

from hypertrain.coordinator.web.answers import AnswerCache, AnswerCacheStatistics
from hypertrain.coordinator.web.http import HEADERS_LIMIT
from hypertrain.store import Stamp
from tests.coordinator.harness import Harness
from tests.coordinator.lifecycle_support import admin, open_runs
from tests.coordinator.miner_support import KEYS, open_flow


def _answers(h: Harness) -> AnswerCache:
    assert h.parts is not None
    return h.parts.answers


async def _counted(h: Harness, path: str, **kw: Any) -> tuple[httpx.Response, int, int]:
    """The answer, and how many renders and cache hits it took."""
    before = _answers(h).statistics()
    r = await h.client.get(path, **kw)
    after = _answers(h).statistics()
    return r, after.renders - before.renders, after.hits - before.hits


async def test_a_repeated_view_is_answered_from_the_cache_with_the_same_bytes(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        flow = await open_flow(h)
        for path in (flow.runs, f"{flow.runs}/rounds/0?limit=2", f"{flow.runs}/rounds/0?full=1"):
            first, renders, hits = await _counted(h, path)
            assert (first.status_code, renders, hits) == (200, 1, 0), first.text
            second, renders, hits = await _counted(h, path)
            assert (second.status_code, renders, hits) == (200, 0, 1)
            assert second.content == first.content
            assert second.headers == first.headers
            assert second.headers["content-type"] == "application/json"


async def test_every_commit_renders_the_view_again_with_the_change(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        flow = await open_flow(h)
        await h.client.get(flow.runs)
        assert (await _counted(h, flow.runs))[2] == 1

        # a route's write: the roster the run view shows
        r = await admin(h, "PUT", f"/v1/admin/runs/{flow.run_id}/roster/{KEYS[2].ss58}", {})
        assert r.status_code == 200, r.text
        r, renders, _ = await _counted(h, flow.runs)
        assert renders == 1
        assert r.json()["roster_counts"]["total"] == 3

        # a new beacon round: D and the round's state
        await flow.to(flow.d.d_assign)
        r, renders, _ = await _counted(h, flow.runs)
        assert renders == 1
        assert r.json()["now_round"] == flow.d.d_assign
        assert r.json()["rounds"][0]["state"] == "ASSIGNED"

        # a commit of another connection (another process on the same file)
        with closing(sqlite3.connect(h.ctx.db.path)) as other, other:
            other.execute("UPDATE runs SET status = 'paused' WHERE run_id = ?", (flow.run_id,))
        r, renders, _ = await _counted(h, flow.runs)
        assert (renders, r.json()["status"]) == (1, "paused")
        assert (await _counted(h, flow.runs))[2] == 1


async def test_concurrent_requests_after_a_commit_render_the_view_once(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        flow = await open_flow(h)
        path = f"{flow.runs}/rounds/0"
        first = await h.client.get(path)
        r = await admin(h, "PUT", f"/v1/admin/runs/{flow.run_id}/roster/{KEYS[2].ss58}", {})
        assert r.status_code == 200, r.text
        before = _answers(h).statistics()
        answers: list[httpx.Response] = []

        async def get() -> None:
            answers.append(await h.client.get(path))

        async with trio.open_nursery() as nursery:
            for _ in range(8):
                nursery.start_soon(get)
        after = _answers(h).statistics()
        assert (after.renders - before.renders, after.hits - before.hits) == (1, 7)
        assert {(r.status_code, r.content) for r in answers} == {(200, first.content)}


async def test_errors_and_unusual_requests_go_to_the_app(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        flow = await open_flow(h)
        for _ in range(2):
            r, _, hits = await _counted(h, f"{flow.runs}/rounds/99")
            assert (r.status_code, hits) == (404, 0)
        await h.client.get(flow.runs)
        r, _, hits = await _counted(h, flow.runs, headers={"x-big": "a" * HEADERS_LIMIT})
        assert (r.status_code, hits) == (431, 0)
        r = await h.client.request("GET", flow.runs, content=b"{}")
        assert r.status_code == 200
        assert _answers(h).statistics().hits == 0


class _Stamps:
    def __init__(self) -> None:
        self.now: Stamp = (0, 0)

    async def stamp(self) -> Stamp:
        return self.now


async def _render(value: Any) -> Any:
    return value


@pytest.mark.parametrize(("entries", "limit", "kept"), [(2, 10**6, 2), (10, 30, 3)])
async def test_the_cache_keeps_the_most_recent_answers_within_its_bounds(
    entries: int, limit: int, kept: int
) -> None:
    stamps = _Stamps()
    cache = AnswerCache(stamps, max_entries=entries, max_bytes=limit)
    keys = [(f"/v/{i}", b"") for i in range(5)]
    for i, key in enumerate(keys):
        assert await cache.answer(key, lambda i=i: _render(f"{i:08d}")) == f'"{i:08d}"'.encode()
    stats = cache.statistics()
    assert (stats.entries, stats.bytes) == (kept, kept * 10)
    assert [await cache.fresh(key) is not None for key in keys] == [False] * (5 - kept) + [
        True
    ] * kept
    stamps.now = (1, 0)
    assert [await cache.fresh(key) for key in keys] == [None] * 5
    await cache.answer(("/big", b""), lambda: _render("x" * limit))
    assert cache.statistics() == AnswerCacheStatistics(
        hits=kept, renders=6, entries=kept, bytes=kept * 10
    )
