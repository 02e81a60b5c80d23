"""The finality flow's reads on a real database: when a rollback is still possible, who is
vindicated at finality, and the ledger feed's start check against the journal (review findings
of issue 15)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from hypertrain.beacon.chain import ChainInfo
from hypertrain.coordinator.flows.finalize import _rollback_possible, _won_before_finality
from hypertrain.coordinator.services.ledgerclock import LedgerClock
from hypertrain.coordinator.services.ledgerfeed import LedgerFeed
from hypertrain.coordinator.settings import CoordinatorSettings
from hypertrain.coordinator.tables.finality import (
    FinalRow,
    insert_final,
    queue_outcome,
    unsynced_outcomes,
)
from hypertrain.coordinator.tables.runs import insert_run, set_config
from hypertrain.ledger import Ledger
from hypertrain.protocol.hashes import sha256_hex
from hypertrain.rounds.deadlines import RunConfig
from hypertrain.rounds.finality import Entry, Verdict
from hypertrain.store import Database, open_database
from nurseries import FixedClock
from tests.coordinator.lifecycle_support import sealed

RUN = "ab" * 32


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    async with open_database(tmp_path / "state.db", wall_clock=FixedClock(0.0)) as database:
        yield database


def _run(conn: sqlite3.Connection, total: int | None) -> None:
    insert_run(conn, RUN, str(sealed()), 1, 0)
    set_config(conn, RUN, RunConfig(train_rounds=5, final_after_upload=2, total_rounds=total))


def _merged(conn: sqlite3.Connection, *rounds: int) -> None:
    for w in rounds:
        conn.execute(
            "INSERT INTO aggregations VALUES (?, ?, 'tape', 'out', ?, 'th', 1.0, 0, 9, '[]')",
            (RUN, w, f"{w + 1:064x}"),
        )


async def test_a_round_can_be_rolled_back_only_until_the_next_round_is_merged(
    db: Database,
) -> None:
    await db.write(_run, 4)
    await db.write(_merged, 0)
    assert await db.read(_rollback_possible, RUN, 0)  # round 1 not merged: its merge rolls back
    await db.write(_merged, 1)
    assert not await db.read(_rollback_possible, RUN, 0)  # a fault found now is money only
    # Round 2 of 4: round 3 is the last and is never followed by a round 4 to open; a late
    # fault in round 2 once round 3 is merged must not hold finality forever.
    await db.write(_merged, 2)
    assert await db.read(_rollback_possible, RUN, 2)
    await db.write(_merged, 3)
    assert not await db.read(_rollback_possible, RUN, 2)
    assert not await db.read(_rollback_possible, RUN, 3)  # the last round: nothing follows


def _final(conn: sqlite3.Connection, w: int) -> None:
    insert_final(conn, FinalRow(RUN, w, "{}", (), 10, 100, 0, 11, 12, ledger_synced=True))


async def test_the_feed_refuses_a_journal_behind_the_database(db: Database, tmp_path: Path) -> None:
    settings = CoordinatorSettings(state_dir=tmp_path / "state")
    chain = ChainInfo(public_key="00" * 96, period_ms=1000, genesis_ms=1_000_000, hash="11" * 32)
    clock = LedgerClock.of(settings, chain)
    await db.write(_run, None)
    with Ledger.open(settings.state_dir, clock.params) as ledger:
        feed = LedgerFeed(ledger, clock)
        assert await feed.check(db) == []
        await db.write(_final, 0)  # the database says round 0 was fed; the journal is fresh
        (problem,) = await feed.check(db)
        assert problem.startswith(f"round 0 of run {RUN} was fed to the ledger, but ")


def _dispute(conn: sqlite3.Connection, hotkey: str, loser_role: str | None, state: str) -> None:
    conn.execute(
        "INSERT OR IGNORE INTO rounds VALUES (?, 0, '{}', 1, 2, 3, 4, 5, 6, 0, '{}', 1, NULL)",
        (RUN,),
    )
    conn.execute("INSERT INTO miners (run_id, w, hotkey, slot) VALUES (?, 0, ?, 0)", (RUN, hotkey))
    outcome = None if loser_role is None else json.dumps({"loser_role": loser_role})
    conn.execute(
        "INSERT INTO disputes (dispute_id, run_id, w, hotkey, auditor, job_id, verdict_hash,"
        " action, state, outcome, envelope, opened_round) VALUES (?, ?, 0, ?, 'a', 'j', ?,"
        " 'contest', ?, ?, '{}', 1)",
        (
            sha256_hex(hotkey.encode()),
            RUN,
            hotkey,
            sha256_hex(b"v" + hotkey.encode()),
            state,
            outcome,
        ),
    )


async def test_a_rolled_out_miner_that_won_its_dispute_before_finality_is_vindicated(
    db: Database,
) -> None:
    await db.write(_run, None)
    await db.write(_dispute, "won", "auditor", "resolved")  # rolled out, then won: vindicate
    await db.write(_dispute, "lost", "miner", "resolved")  # its FAULT stands
    await db.write(_dispute, "open", None, "open")  # still open: vindicated when it wins
    await db.write(_dispute, "merged", "auditor", "resolved")  # won in time: MATCH, paid
    entries = (
        Entry("won", Verdict.NO_UPLOAD, 10, 0),
        Entry("lost", Verdict.FAULT, 10, 0),
        Entry("open", Verdict.NO_UPLOAD, 10, 0),
        Entry("merged", Verdict.MATCH, 10, 0),
    )
    assert await db.read(_won_before_finality, RUN, 0, entries) == ["won"]


def _final_round(conn: sqlite3.Connection) -> None:
    entries = (
        Entry("g", Verdict.MATCH, 10, 0),
        Entry("h", Verdict.NO_UPLOAD, 10, 0),
        Entry("k", Verdict.NO_UPLOAD, 10, 0),
    )
    insert_final(conn, FinalRow(RUN, 0, "{}", entries, 10, 1_000_100, 0, 11, 12, False))
    queue_outcome(conn, RUN, 0, "h", "vindicate", 20)  # h won its dispute after finality
    queue_outcome(conn, RUN, 0, "k", "fault", 21)  # k lost its


async def test_the_feed_applies_a_final_round_then_its_post_final_outcomes_once(
    db: Database, tmp_path: Path
) -> None:
    settings = CoordinatorSettings(state_dir=tmp_path / "state")
    chain = ChainInfo(public_key="00" * 96, period_ms=1000, genesis_ms=1_000_000, hash="11" * 32)
    clock = LedgerClock.of(settings, chain)
    await db.write(_run, None)
    await db.write(_final_round)
    with Ledger.open(settings.state_dir, clock.params) as ledger:
        feed = LedgerFeed(ledger, clock)
        (row,) = await feed.sync(db)
        assert row.w == 0
        assert ledger.is_finalized(RUN, 0)
        third = 10**6 // 3
        assert ledger.balance("g").pending == third
        assert ledger.balance("h").pending == third  # vindicated: its forgone slice is escrow
        assert ledger.balance("k").frozen  # faulted after finality: never paid again
        records = ledger.statistics().records
        assert await feed.sync(db) == []
        assert ledger.statistics().records == records  # nothing twice
        assert await db.read(unsynced_outcomes) == []
        assert await feed.check(db) == []
