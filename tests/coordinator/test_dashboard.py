"""The run dashboard's pages in process, as a browser with JavaScript off gets them: the runs at
``/``, one run at ``/runs/{id}`` with its rounds (a page, newest first), the loss chart's points,
the miners; hostile text from the database escaped; a 404 page naming an unknown run (the
house's JSON ``{detail}`` for a client that does not ask for HTML); paging links and a 400 page
naming a bad parameter."""

from __future__ import annotations

import html
import re
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import trio.testing

from hypertrain.coordinator.flows.aggregation import AggregationRow, insert_aggregation
from hypertrain.coordinator.flows.heldout import LossRow, record_loss
from hypertrain.coordinator.web.dashboard import ROUNDS_MAX, ROUNDS_SHOWN
from tests.coordinator.harness import Harness
from tests.coordinator.lifecycle_support import open_runs
from tests.coordinator.miner_support import KEYS, Flow, open_flow

ROUNDS = 40
HOSTILE = '<script>alert("pwned")</script>'
LOSSES = {0: 5.5, 1: 5.25, 2: 5.0, 3: 4.75}
"""Held-out loss of theta(t) for t = 0..3 (rounds 0..2 merged)."""


async def _rounds(h: Harness, run_id: str) -> None:
    """Rounds 1 .. ROUNDS - 1 as copies of round 0's row, with round 0's miners in the newest
    one plus one whose hotkey is hostile text; rounds 0..2 merged and evaluated."""
    newest = ROUNDS - 1

    def write(conn: sqlite3.Connection) -> None:
        conn.executemany(
            "INSERT INTO rounds SELECT run_id, ?, round_open, d_open, d_assign, d_commit,"
            " d_audit, d_upload, d_final, base, reasons, opened_round, published_state"
            " FROM rounds WHERE run_id = ? AND w = 0",
            [(w, run_id) for w in range(1, ROUNDS)],
        )
        conn.execute(
            "INSERT INTO miners (run_id, w, hotkey, slot, status)"
            " SELECT run_id, ?, hotkey, slot, status FROM miners WHERE run_id = ? AND w = 0",
            (newest, run_id),
        )
        conn.execute(
            "INSERT INTO miners (run_id, w, hotkey, slot, status) VALUES (?, ?, ?, 7, ?)",
            (run_id, newest, HOSTILE, HOSTILE),
        )
        for w in range(3):
            row = AggregationRow("t" * 64, "o" * 64, "s" * 64, "h" * 64, 0.125 * (w + 1), w, None)
            insert_aggregation(conn, run_id, w, row, 1)
        for t, loss in LOSSES.items():
            record_loss(conn, run_id, t, LossRow("h" * 64, loss, 64, 1))

    await h.ctx.db.write(write)


@asynccontextmanager
async def _open_board(tmp_path: Path) -> AsyncIterator[Flow]:
    """A running run (round 0 open, two miners) with the rounds of :func:`_rounds`."""
    async with open_runs(tmp_path) as h:
        flow = await open_flow(h)
        await _rounds(h, flow.run_id)
        yield flow


BROWSER_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"


async def _page(flow: Flow, path: str, status: int = 200) -> str:
    r: httpx.Response = await flow.h.client.get(path, headers={"Accept": BROWSER_ACCEPT})
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "text/html; charset=utf-8"
    return r.text


def _tbody(page: str, body_id: str) -> list[str]:
    """The rows of ``<tbody id=body_id>``, each its cells' text (markup stripped)."""
    found = re.search(rf'<tbody id="{body_id}">(.*?)</tbody>', page, re.S)
    assert found is not None, page
    return [
        " | ".join(
            html.unescape(re.sub(r"<[^>]+>", "", cell))
            for cell in re.findall(r"<td[^>]*>(.*?)</td>", row)
        )
        for row in re.findall(r"<tr>(.*?)</tr>", found[1], re.S)
    ]


def _points(page: str) -> list[tuple[int, float]]:
    return [
        (int(t), float(loss))
        for t, loss in re.findall(
            r'<circle class="pt"[^>]* data-t="(\d+)" data-loss="([0-9.]+)"', page
        )
    ]


async def test_the_run_page_shows_rounds_chart_and_miners_without_javascript(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with _open_board(tmp_path) as flow:
        page = await _page(flow, f"/runs/{flow.run_id}")

    rounds = _tbody(page, "rounds")
    assert len(rounds) == ROUNDS_SHOWN  # the newest page only
    assert rounds[0].startswith(f"{ROUNDS - 1} | OPEN | ")
    assert [r.split(" | ")[0] for r in rounds] == [str(w) for w in range(39, 39 - ROUNDS_SHOWN, -1)]
    assert _points(page) == []  # rounds 15..39 were never merged nor evaluated
    assert "no held-out loss yet" in page
    miners = _tbody(page, "miners")
    assert [m.split(" | ")[0] for m in miners] == sorted([HOSTILE, *(k.ss58 for k in KEYS[:2])])
    # Hostile text is escaped wherever it appears, never markup.
    assert HOSTILE not in page
    assert "&lt;script&gt;alert(&quot;pwned&quot;)&lt;/script&gt;" in page
    assert page.count("<script>") == 1  # the page's own live script
    assert 'href="/compute"' in page
    assert re.search(r'<main id="live" data-kinds="[a-z_,]+" data-run="' + flow.run_id, page)


async def test_older_pages_hold_the_merged_rounds_and_the_loss_chart(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with _open_board(tmp_path) as flow:
        first = await _page(flow, f"/runs/{flow.run_id}")
        older = re.search(r'<a href="([^"]+)" rel="next">older</a>', first)
        assert older is not None
        last = await _page(flow, older[1].replace("&amp;", "&"))
        small = await _page(flow, f"/runs/{flow.run_id}?offset=36&limit=2")

    assert older[1] == f"/runs/{flow.run_id}?offset={ROUNDS_SHOWN}&amp;limit={ROUNDS_SHOWN}"
    rounds = _tbody(last, "rounds")
    assert [int(r.split(" | ")[0]) for r in rounds] == list(
        range(ROUNDS - ROUNDS_SHOWN - 1, -1, -1)
    )
    assert 'rel="next"' not in last
    assert 'rel="prev"' in last
    assert rounds[-1] == "0 | APPLIED | 0 / 2 | 0.1250 | 0 | 5.5000 | 5.2500 | 0 / 0 / 0 of 0 | –"
    assert rounds[-3].startswith("2 | APPLIED | 0 / 0 | 0.3750 | 2 | 5.0000 | 4.7500 | ")
    assert _points(last) == sorted(LOSSES.items())
    assert "4 points" in last
    assert [int(r.split(" | ")[0]) for r in _tbody(small, "rounds")] == [3, 2]
    assert _points(small) == [(2, 5.0), (3, 4.75)]  # theta(2), theta(3) of round 2


async def test_the_runs_index_links_each_run_and_the_compute_page(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        empty = await h.client.get("/")
        flow = await open_flow(h)
        page = await _page(flow, "/")

    assert empty.status_code == 200
    assert "no run yet" in empty.text
    assert _tbody(page, "runs") == [f"{flow.run_id} | running"]
    assert f'href="/runs/{flow.run_id}"' in page
    assert 'href="/compute"' in page


async def test_unknown_runs_and_bad_pages_get_a_page_naming_the_problem(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        flow = await open_flow(h)
        missing = await _page(flow, "/runs/" + "ab" * 32, 404)
        hostile = await _page(flow, "/runs/%3Cscript%3Ex", 404)
        too_many = await _page(flow, f"/runs/{flow.run_id}?limit={ROUNDS_MAX + 1}", 400)
        negative = await _page(flow, f"/runs/{flow.run_id}?offset=-1", 400)
        plain = await h.client.get("/runs/" + "ab" * 32)  # Accept: */*, a JSON client

    assert re.search(r'<p class="bad" id="detail">[^<]*' + "ab" * 32, missing)
    assert "<script>x" not in hostile
    assert "&lt;script&gt;x" in hostile
    assert f"limit: expected an integer from 1 to {ROUNDS_MAX}" in too_many
    assert "offset" in re.search(r'id="detail">([^<]*)<', negative)[1]  # type: ignore[index]
    assert plain.status_code == 404
    assert plain.headers["content-type"].startswith("application/json")
    assert "ab" * 32 in plain.json()["detail"]
