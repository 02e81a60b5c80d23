"""Reads of many rounds or miners never walk the envelopes in their rows
(``0016_view_indexes.sql``, ``0017_bounded_reads.sql``; issue 17 goal 6): the round-state feed,
run on every beacon round, searches only the rounds not yet RELEASED; the audit draw, run on
every beacon round too, reads only the rounds not drawn yet; the run view's page reads the
deadlines from a covering index and counts the roster without reading its rows; the roster's
page reads along its primary key; the auditor stats read each verdict's round from a covering
index, never a RoundOpen; the round view's default page (no envelopes) and its uploaded miners
read the miners from a covering index (``EXPLAIN QUERY PLAN`` of every statement on the
table)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import attrs
import trio.testing

from hypertrain.coordinator.flows.auditdraw import due_draws
from hypertrain.coordinator.flows.auditstats import EpochClock, auditor_stats
from hypertrain.coordinator.flows.pages import Page
from hypertrain.coordinator.flows.runview import roster_view, run_view
from hypertrain.coordinator.tables.audits import insert_draw, verdicts_of_run
from hypertrain.coordinator.tables.miners import miner_details, uploaded_hotkeys
from hypertrain.coordinator.tables.rounds import pending_state_changes, round_page
from tests.coordinator.audit_support import BODY
from tests.coordinator.lifecycle_support import open_runs
from tests.coordinator.miner_support import open_flow
from tests.coordinator.test_view_pages import SCAN, _plans, _traced

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


async def test_the_draw_reads_only_the_rounds_not_drawn_yet(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        flow = await open_flow(h, BODY)  # its manifest names an auditor
        await h.ctx.db.write(_grow(flow.run_id))  # type: ignore[arg-type]
        undrawn = {0, 7, ROUNDS - 1}

        def draw_the_others(conn: sqlite3.Connection) -> None:
            for w in set(range(ROUNDS)) - undrawn:
                insert_draw(conn, flow.run_id, w, [], 1)

        await h.ctx.db.write(draw_the_others)
        d = 10**9  # every round's d_audit has passed

        def plans(conn: sqlite3.Connection) -> tuple[list[str], list[int]]:
            return _plans(conn, lambda c: due_draws(c, d)), [r.w for r in due_draws(conn, d)]

        details, due = await h.ctx.db.read(plans)
        assert due == sorted(undrawn)
        assert details[0] == "SCAN undrawn_rounds", details
        # then one round read by its key per round due, no search of the others
        assert details[1:] == ["SEARCH rounds USING PRIMARY KEY (run_id=? AND w=?)"] * 3, details


async def test_rounds_of_a_run_without_auditors_never_wait_for_a_draw(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        flow = await open_flow(h, attrs.evolve(BODY, auditors=()))
        await h.ctx.db.write(_grow(flow.run_id))  # type: ignore[arg-type]

        def waiting(conn: sqlite3.Connection) -> int:
            (count,) = conn.execute("SELECT count(*) FROM undrawn_rounds").fetchone()
            return int(count)

        assert await h.ctx.db.read(waiting) == 0
        assert await h.ctx.db.read(due_draws, 10**9) == []


async def test_the_run_view_counts_the_roster_and_its_page_reads_the_key(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        flow = await open_flow(h)

        def plans(conn: sqlite3.Connection) -> tuple[list[str], list[str], list[str]]:
            view = _traced(conn, lambda c: run_view(c, flow.run_id, Page()))
            page = _plans(conn, lambda c: roster_view(c, flow.run_id, Page(1, 5)))
            return [s for s in view if " roster " in s], _on("roster", page), page

        view, page, details = await h.ctx.db.read(plans)
        # the run view reads no roster row: one count over the run's key range
        assert len(view) == 1, view
        assert view[0].startswith("SELECT count(*)"), view
        assert page == ["SEARCH roster USING PRIMARY KEY (run_id=?)"], page
        assert not [d for d in details if SCAN.search(d)], details


async def test_the_auditor_stats_read_no_round_open(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        flow = await open_flow(h, BODY)
        await h.ctx.db.write(_grow(flow.run_id))  # type: ignore[arg-type]
        clock = EpochClock.of(h.ctx.settings, h.ctx.chain)

        def plans(conn: sqlite3.Connection) -> tuple[list[str], list[str]]:
            stats = _traced(conn, lambda c: auditor_stats(c, flow.run_id, h.ctx.chain, clock))
            return stats, _on("r", _plans(conn, lambda c: verdicts_of_run(c, flow.run_id)))

        statements, rounds = await h.ctx.db.read(plans)
        assert not [s for s in statements if "round_open" in s], statements
        assert rounds == ["SEARCH r USING COVERING INDEX rounds_dates (run_id=? AND w=?)"]
