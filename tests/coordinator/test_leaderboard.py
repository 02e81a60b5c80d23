"""``GET /v1/compute/leaderboard`` and one node's standing (issue 19 item 7), on the real
daemon in virtual time: nodes register over HTTP; their credits, jobs and strikes are set in
the book directly, so each test chooses the order it checks."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import trio
import trio.testing

from hypertrain.compute.leaderboard import leaderboard_rows, standing_of
from hypertrain.daemon.main import DaemonHandle
from hypertrain.node.client import NodeClient
from hypertrain.node.runner_types import standing_line
from nurseries.testing import open_asgi_transport
from tests.coordinator.test_compute_routes import API, Fallbacks, _daemon, _node

HOSTILE = '<img src=x onerror="alert(1)">\u202e"\\'
"""A handle no register would take (a row of an older or hand-edited book): data all the same."""
BOARD = "/v1/compute/leaderboard"


async def _standings(handle: DaemonHandle, nodes: dict[str, tuple[int, int, int]]) -> None:
    """Give each node (by id) its (compute credits, jobs done, strikes)."""

    def write(conn: sqlite3.Connection) -> None:
        for node_id, (credits, jobs, strikes) in nodes.items():
            conn.execute(
                "UPDATE compute_nodes SET compute_credits = ?, credits = ?, jobs_done = ?"
                " WHERE node_id = ?",
                (credits, credits, jobs, node_id),
            )
            for i in range(strikes):
                conn.execute(
                    "INSERT INTO compute_jobs (job_id, challenge, version, subject, step, inputs,"
                    " created_ms, wait_ms, wait_deadline_ms) VALUES (?, 'delta-loss', 1, ?,"
                    " 'public', '[]', 0, 0, 0)",
                    (f"j-{node_id}-{i}", f'{{"s":"{node_id}-{i}"}}'),
                )
                conn.execute(
                    "INSERT INTO compute_copies (copy_id, job_id, seq, queued_ms, node_id)"
                    " VALUES (?, ?, 1, 0, ?)",
                    (f"c-{node_id}-{i}", f"j-{node_id}-{i}", node_id),
                )
                conn.execute(
                    "INSERT INTO compute_strikes (copy_id, node_id, day, struck_ms)"
                    " VALUES (?, ?, '2023-11-14', 0)",
                    (f"c-{node_id}-{i}", node_id),
                )

    await handle.ctx.db.write(write)


async def _five(handle: DaemonHandle, client: httpx.AsyncClient) -> list[dict[str, Any]]:
    """Five nodes: credits 5, 9, 0, 9, 2 (two tied at 9), the last with a hostile handle."""
    nodes = [await _node(client) for _ in range(5)]
    await _standings(
        handle,
        {
            nodes[0]["node_id"]: (5, 3, 1),
            nodes[1]["node_id"]: (9, 9, 0),
            nodes[2]["node_id"]: (0, 0, 0),
            nodes[3]["node_id"]: (9, 9, 3),
            nodes[4]["node_id"]: (2, 2, 2),
        },
    )
    hostile = nodes[4]["node_id"]
    await handle.ctx.db.write(
        lambda conn: conn.execute(
            "UPDATE compute_nodes SET handle = ? WHERE node_id = ?", (HOSTILE, hostile)
        )
    )
    return nodes


async def test_the_leaderboard_ranks_by_credits_then_id_and_pages_every_node_once(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with _daemon(tmp_path, Fallbacks()) as (handle, client):
        nodes = await _five(handle, client)
        whole = (await client.get(BOARD)).json()
        pages, offset = [], 0
        while offset is not None:
            answer = await client.get(BOARD, params={"offset": offset, "limit": 2})
            assert answer.status_code == 200
            pages.append(answer.json())
            offset = answer.json()["page"]["next_offset"]
        again = await client.get(BOARD, params={"offset": 0, "limit": 2})
        mine = [(await client.get(f"{BOARD}/{n['node_id']}")).json() for n in nodes]
    tied = sorted([nodes[1]["node_id"], nodes[3]["node_id"]])
    order = [*tied, nodes[0]["node_id"], nodes[4]["node_id"], nodes[2]["node_id"]]
    assert [row["id"] for row in whole["nodes"]] == order
    assert [row["rank"] for row in whole["nodes"]] == [1, 2, 3, 4, 5]
    assert whole["page"] == {"offset": 0, "limit": 256, "next_offset": None}
    assert [p["page"] for p in pages] == [
        {"offset": 0, "limit": 2, "next_offset": 2},
        {"offset": 2, "limit": 2, "next_offset": 4},
        {"offset": 4, "limit": 2, "next_offset": None},
    ]
    assert [row for p in pages for row in p["nodes"]] == whole["nodes"]
    assert again.json() == pages[0]
    third = whole["nodes"][2]
    assert third == {
        "rank": 3,
        "id": nodes[0]["node_id"],
        "handle": nodes[0]["handle"],
        "compute_credits": 5,
        "jobs_done": 3,
        "strikes": 1,
        "agreement_ppm": 750_000,
        "last_seen": nodes[0]["last_seen"],
    }
    assert whole["nodes"][4]["agreement_ppm"] is None  # no verdict yet
    assert whole["nodes"][3]["handle"] == HOSTILE  # returned as data, byte for byte
    assert mine == [next(r for r in whole["nodes"] if r["id"] == n["node_id"]) for n in nodes]


async def test_bad_parameters_are_400_naming_them_and_an_unknown_node_404(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with _daemon(tmp_path, Fallbacks()) as (_handle, client):
        bad = {
            "offset=-1": "offset",
            "offset=abc": "offset",
            "offset=" + "9" * 40: "offset",
            "limit=0": "limit",
            "limit=5000": "limit",
            "limit=1.5": "limit",
        }
        answers = {query: await client.get(f"{BOARD}?{query}") for query in bad}
        unknown = await client.get(f"{BOARD}/nobody")
        long = await client.get(f"{BOARD}/{'x' * 65}")
    for query, name in bad.items():
        assert answers[query].status_code == 400, query
        assert name in answers[query].json()["detail"], query
    assert unknown.status_code == 404
    assert (long.status_code, "node" in long.json()["detail"]) == (400, True)


async def test_the_leaderboard_reads_walk_the_credits_index_without_a_scan_or_sort(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with _daemon(tmp_path, Fallbacks()) as (handle, client):
        nodes = await _five(handle, client)
        node_id = nodes[0]["node_id"]

        def plans(conn: sqlite3.Connection) -> list[str]:
            statements: list[str] = []
            conn.set_trace_callback(statements.append)
            try:
                leaderboard_rows(conn, offset=1, count=3)
                standing_of(conn, node_id)
            finally:
                conn.set_trace_callback(None)
            found = []
            for sql in statements:
                found += [str(r[3]) for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}")]
            return found

        details = await handle.ctx.db.read(plans)
    assert details
    assert not [d for d in details if re.search(r"^SCAN \w+$|TEMP B-TREE", d)], details
    assert any("compute_nodes_by_credits" in d for d in details), details


async def test_the_compute_page_shows_the_leaderboard_beside_its_status_and_events(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with _daemon(tmp_path, Fallbacks()) as (_handle, client):
        page = (await client.get("/compute")).text
    assert "/v1/compute/leaderboard?offset=" in page
    assert "/v1/compute/status" in page
    assert 'new EventSource("/v1/events?kinds=compute")' in page
    assert "innerHTML" not in page  # every value is written as text


async def test_the_nodes_client_reads_its_row_from_the_daemon(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with _daemon(tmp_path, Fallbacks()) as (handle, client):
        nodes = await _five(handle, client)
        async with (
            open_asgi_transport(handle.app, lifespan=False) as transport,
            NodeClient(API, transport=transport) as node_client,
        ):
            row = await node_client.standing(nodes[0]["node_id"])
    assert standing_line(row) == (
        "leaderboard: rank 3, 5 compute credits, 3 jobs done, agreement 75.0 %, 1 strike"
    )
