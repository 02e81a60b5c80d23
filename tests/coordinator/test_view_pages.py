"""Pages of the run view (its rounds, newest first) and of the round view (its miners), issue 17
goal 6: every item exactly once by following ``next_offset``, a bad ``offset``/``limit``/``full``
a 400 naming it, the miners' envelopes only with ``full=1``, and reads bounded by the page
(``EXPLAIN QUERY PLAN``: a primary-key search, no scan and no sort)."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import trio.testing

from hypertrain.coordinator.flows.pages import MAX_LIMIT, Page, page_of
from hypertrain.coordinator.tables.miners import miner_details
from hypertrain.coordinator.tables.rounds import round_page
from hypertrain.protocol.errors import Malformed
from hypertrain.protocol.pages import ROSTER_LISTS, ROUND_VIEW_LISTS, read_all_pages
from tests.coordinator.harness import Harness
from tests.coordinator.lifecycle_support import admin, open_runs
from tests.coordinator.miner_support import KEYS, at_assign, open_flow

ROUNDS = 23
BAD = [
    ("offset", "-1"),
    ("offset", "1.5"),
    ("offset", "abc"),
    ("offset", "9" * 40),
    ("limit", "0"),
    ("limit", str(MAX_LIMIT + 1)),
    ("limit", "x"),
    ("full", "yes"),
]


async def _more_rounds(h: Harness, run_id: str, count: int) -> None:
    """Rounds 1 .. count - 1 as copies of round 0's row (the run view reads their columns)."""

    def copy(conn: sqlite3.Connection) -> None:
        conn.executemany(
            "INSERT INTO rounds SELECT run_id, ?, round_open, d_open, d_assign, d_commit,"
            " d_audit, d_upload, d_final, base, reasons, opened_round, published_state"
            " FROM rounds WHERE run_id = ? AND w = 0",
            [(w, run_id) for w in range(1, count)],
        )

    await h.ctx.db.write(copy)


async def _get(h: Harness, path: str, **params: Any) -> dict[str, Any]:
    r = await h.client.get(path, params=params)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


async def test_paging_the_run_view_reads_every_round_once_newest_first(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        flow = await open_flow(h)
        await _more_rounds(h, flow.run_id, ROUNDS)
        seen: list[int] = []
        offset: int | None = 0
        while offset is not None:
            view = await _get(h, flow.runs, offset=offset, limit=7)
            assert view["page"]["offset"] == offset
            assert view["manifest_envelope"]["type"] == "RunManifest"  # on every page
            seen += [r["w"] for r in view["rounds"]]
            offset = view["page"]["next_offset"]
        assert seen == list(reversed(range(ROUNDS)))
        first = await _get(h, flow.runs)
        assert first["page"] == {"offset": 0, "limit": 256, "next_offset": None}
        assert first["rounds"][0] == {"w": ROUNDS - 1, "state": "OPEN"}
        assert (await _get(h, flow.runs, offset=ROUNDS))["rounds"] == []
        assert "roster" not in first  # its own paged view; the run view counts it


async def test_paging_the_roster_reads_every_row_once_by_hotkey(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        flow = await open_flow(h)  # KEYS[0] and KEYS[1] on the roster
        for key in KEYS[2:4]:
            r = await admin(h, "PUT", f"/v1/admin/runs/{flow.run_id}/roster/{key.ss58}", {})
            assert r.status_code == 200, r.text
        r = await admin(h, "DELETE", f"/v1/admin/runs/{flow.run_id}/roster/{KEYS[3].ss58}")
        assert r.status_code == 200, r.text
        hotkeys = sorted(key.ss58 for key in KEYS[:4])
        path = f"{flow.runs}/roster"
        pages = [await _get(h, path, limit=3, offset=offset) for offset in (0, 3)]
        assert [p["page"]["next_offset"] for p in pages] == [3, None]
        assert [row["hotkey"] for p in pages for row in p["roster"]] == hotkeys
        whole = await _get(h, path)
        assert [row["hotkey"] for row in whole["roster"]] == hotkeys
        assert [row["removed"] for row in whole["roster"]] == [
            hotkey == KEYS[3].ss58 for hotkey in hotkeys
        ]

        async def one_by_one(offset: int) -> dict[str, Any]:
            return await _get(h, path, limit=1, offset=offset)

        assert (await read_all_pages(one_by_one, ROSTER_LISTS))["roster"] == whole["roster"]
        counts = (await _get(h, flow.runs))["roster_counts"]
        assert counts == {"total": 4, "active": 3, "removed": 1, "blacklisted": 0}


@pytest.mark.parametrize(("name", "value"), BAD)
async def test_a_bad_page_parameter_is_a_400_naming_it(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, name: str, value: str
) -> None:
    async with open_runs(tmp_path) as h:
        flow = await open_flow(h)
        for path in (flow.runs, f"{flow.runs}/roster", f"{flow.runs}/rounds/0"):
            r = await h.client.get(path, params={name: value})
            assert r.status_code == 400, r.text
            assert r.json()["detail"].startswith(f"{name}:")


def test_page_of_reads_the_defaults_and_the_bounds() -> None:
    assert page_of({}) == Page(0, 256, False)
    assert page_of({"offset": "3", "limit": str(MAX_LIMIT), "full": "1"}) == Page(3, 1024, True)
    with pytest.raises(Malformed, match=r"^limit: must be an int in \[1, 1024\]"):
        page_of({"limit": "2000"})


async def test_the_round_view_pages_its_miners_and_hides_envelopes_unless_full(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        flow = await at_assign(h)
        await flow.accepted(KEYS[0])
        await flow.to(flow.d.d_commit + 1)
        assert (await flow.post("commit", flow.commit(KEYS[0]))).status_code == 200
        path = f"{flow.runs}/rounds/0"
        envelopes = {"commit", "receipt", "delta_manifest", "verdict"}

        whole = await _get(h, path)
        assert [m["hotkey"] for m in whole["miners"]] == sorted(k.ss58 for k in KEYS[:2])
        assert all(envelopes.isdisjoint(m) and "delta_hash" in m for m in whole["miners"])
        full = {m["hotkey"]: m for m in (await _get(h, path, full=1))["miners"]}
        assert envelopes <= set(full[KEYS[0].ss58])
        assert full[KEYS[0].ss58]["commit"]["type"] == "Commit"

        pages = [await _get(h, path, limit=1, offset=i) for i in range(3)]
        assert [p["page"]["next_offset"] for p in pages] == [1, None, None]
        assert [[m["hotkey"] for m in p["miners"]] for p in pages[:2]] == [
            [m["hotkey"] for m in whole["miners"][:1]],
            [m["hotkey"] for m in whole["miners"][1:]],
        ]
        assert [[a["hotkey"] for a in p["assignment"]] for p in pages[:2]] == [
            [m["hotkey"] for m in whole["miners"][:1]],
            [m["hotkey"] for m in whole["miners"][1:]],
        ]
        assert pages[2]["miners"] == pages[2]["assignment"] == []
        assert pages[0]["round_open"] == whole["round_open"]  # round-level fields on every page

        async def one_by_one(offset: int) -> dict[str, Any]:
            return await _get(h, path, limit=1, offset=offset)

        merged = await read_all_pages(one_by_one, ROUND_VIEW_LISTS)
        assert (merged["miners"], merged["assignment"]) == (whole["miners"], whole["assignment"])


# -- the reads are bounded by the page --------------------------------------------------------

SCAN = re.compile(r"^SCAN |USE TEMP B-TREE")


def _traced(conn: sqlite3.Connection, read: Any) -> list[str]:
    """The SELECT statements ``read(conn)`` runs, in order."""
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    try:
        read(conn)
    finally:
        conn.set_trace_callback(None)
    return [sql for sql in statements if sql.lstrip().upper().startswith("SELECT")]


def _plans(conn: sqlite3.Connection, read: Any) -> list[str]:
    details = []
    for sql in _traced(conn, read):
        details += [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}")]
    return details


async def test_the_paged_reads_search_the_primary_key_without_a_sort(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        flow = await open_flow(h)
        await _more_rounds(h, flow.run_id, 40)

        def plans(conn: sqlite3.Connection) -> list[str]:
            return _plans(conn, lambda c: round_page(c, flow.run_id, 5, 10)) + _plans(
                conn, lambda c: miner_details(c, flow.run_id, 0, 1, 2)
            )

        details = await h.ctx.db.read(plans)
        assert len(details) == 2
        along_key = ("USING PRIMARY KEY (run_id=?", "USING COVERING INDEX rounds_dates (run_id=?")
        assert all(any(way in d for way in along_key) for d in details), details
        assert not [d for d in details if SCAN.search(d)], details
