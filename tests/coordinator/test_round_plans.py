"""Reads of many rounds or miners never walk the envelopes in their rows
(``0016_view_indexes.sql``; issue 17 goal 6): the round-state feed, run on every beacon round,
searches only the rounds not yet RELEASED; the run view's page reads the deadlines from a
covering index; the round view's default page (no envelopes) and its uploaded miners read the
miners from a covering index (``EXPLAIN QUERY PLAN`` of every statement on the table)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import trio.testing

from hypertrain.coordinator.tables.miners import miner_details, uploaded_hotkeys
from hypertrain.coordinator.tables.rounds import pending_state_changes, round_page
from tests.coordinator.lifecycle_support import open_runs
from tests.coordinator.miner_support import open_flow
from tests.coordinator.test_view_pages import SCAN, _plans

ROUNDS = 40
IN_FLIGHT = {0, ROUNDS - 2, ROUNDS - 1}
"""The rounds the store below has not published RELEASED."""


def _grow(run_id: str) -> object:
    def grow(conn: sqlite3.Connection) -> None:
        conn.executemany(
            "INSERT INTO rounds SELECT run_id, ?, round_open, d_open, d_assign, d_commit,"
            " d_audit, d_upload, d_final, base, reasons, opened_round, ?"
            " FROM rounds WHERE run_id = ? AND w = 0",
            [(w, None if w in IN_FLIGHT else "RELEASED", run_id) for w in range(1, ROUNDS)],
        )

    return grow


def _on(table: str, details: list[str]) -> list[str]:
    return [d for d in details if f" {table} " in f"{d} "]


async def test_the_feed_searches_only_the_rounds_in_flight_and_pages_read_an_index(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        flow = await open_flow(h)
        await h.ctx.db.write(_grow(flow.run_id))  # type: ignore[arg-type]
        d = flow.d.d_assign

        def plans(conn: sqlite3.Connection) -> tuple[list[str], list[str]]:
            feed = _plans(conn, lambda c: pending_state_changes(c, d))
            page = _plans(conn, lambda c: round_page(c, flow.run_id, 0, 10))
            return _on("rounds", feed), _on("rounds", page)

        feed, page = await h.ctx.db.read(plans)
        # the partial index holds the rounds in flight only: its scan is bounded by them
        assert feed[0] == "SCAN rounds USING COVERING INDEX rounds_unreleased", feed
        assert not [p for p in feed[1:] if SCAN.search(p)], feed
        assert page == ["SEARCH rounds USING COVERING INDEX rounds_dates (run_id=?)"], page

        changes = await h.ctx.db.read(pending_state_changes, d)
        assert {ROUNDS - 2, ROUNDS - 1} <= {c.w for c in changes} <= IN_FLIGHT


async def test_the_round_views_default_page_reads_the_miners_from_an_index(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        flow = await open_flow(h)

        def plans(conn: sqlite3.Connection) -> list[str]:
            reads = _plans(conn, lambda c: miner_details(c, flow.run_id, 0, 0, 5, envelopes=False))
            return _on(
                "miners", reads + _plans(conn, lambda c: uploaded_hotkeys(c, flow.run_id, 0))
            )

        assert (
            await h.ctx.db.read(plans)
            == ["SEARCH miners USING COVERING INDEX miners_facts (run_id=? AND w=?)"] * 2
        )
