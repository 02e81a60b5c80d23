"""Ingest: verified rounds stored once, idempotent repeats, conflicts refused and never stored."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from hypertrain.beacon.chain import QUICKNET, BeaconRound, InvalidRound
from hypertrain.beacon.check import QUICKNET_VECTORS
from hypertrain.beacon.ingest import (
    IngestResult,
    decide,
    get_round,
    ingest_round,
    latest_round,
    store_round,
)
from hypertrain.protocol.errors import Conflict
from hypertrain.store import Database, open_database
from nurseries import FixedClock

NOW = 1_700_000_000.0
LOW, HIGH = QUICKNET_VECTORS  # rounds 1,000,000 and 20,000,000
OTHER_SIG = "a" * 96


def forged(rnd: BeaconRound) -> BeaconRound:
    """Same round, another (well-formed, not genuine) signature."""
    return BeaconRound(
        round=rnd.round,
        signature=OTHER_SIG,
        randomness=hashlib.sha256(bytes.fromhex(OTHER_SIG)).hexdigest(),
    )


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    async with open_database(tmp_path / "state.db", wall_clock=FixedClock(NOW)) as database:
        yield database


def rows(conn: sqlite3.Connection) -> list[tuple[int, str, str, int]]:
    return conn.execute(
        "SELECT round, signature, randomness, received_at FROM beacon ORDER BY round"
    ).fetchall()


async def test_migration_creates_the_beacon_table(db: Database) -> None:
    assert db.statistics().schema_version >= 2
    assert await db.read(latest_round) == 0
    assert await db.read(get_round, 5) is None
    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
        await db.write(store_round, BeaconRound(0, LOW.signature, LOW.randomness), 1)
    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
        await db.write(store_round, BeaconRound(3, "XY" * 48, LOW.randomness), 1)
    assert await db.read(rows) == []


async def test_ingest_stores_verified_rounds_and_reports_latest(db: Database) -> None:
    result = await ingest_round(db, QUICKNET, HIGH, now=NOW + 0.7)
    assert result == IngestResult(round=HIGH.round, latest=HIGH.round, created=True)
    assert result.to_json() == {"round": 20_000_000, "latest": 20_000_000}
    older = await ingest_round(db, QUICKNET, LOW, now=NOW + 5)
    assert older.to_json() == {"round": 1_000_000, "latest": 20_000_000}  # D is max(round)
    assert await db.read(rows) == [
        (LOW.round, LOW.signature, LOW.randomness, int(NOW + 5)),
        (HIGH.round, HIGH.signature, HIGH.randomness, int(NOW)),
    ]
    assert await db.read(get_round, LOW.round) == LOW
    assert await db.read(latest_round) == HIGH.round


async def test_repeating_a_stored_round_is_an_idempotent_success(db: Database) -> None:
    await ingest_round(db, QUICKNET, LOW, now=NOW)
    again = await ingest_round(db, QUICKNET, LOW, now=NOW + 60)
    assert again == IngestResult(round=LOW.round, latest=LOW.round, created=False)
    assert await db.read(rows) == [(LOW.round, LOW.signature, LOW.randomness, int(NOW))]


async def test_an_invalid_round_is_refused_and_nothing_is_stored(db: Database) -> None:
    with pytest.raises(InvalidRound, match="G1 point") as refused:
        await ingest_round(db, QUICKNET, forged(LOW), now=NOW)
    assert refused.value.status == 400
    shifted = BeaconRound(LOW.round + 1, LOW.signature, LOW.randomness)
    with pytest.raises(InvalidRound, match="does not verify"):
        await ingest_round(db, QUICKNET, shifted, now=NOW)
    bad_randomness = BeaconRound(LOW.round, LOW.signature, HIGH.randomness)
    with pytest.raises(InvalidRound, match="randomness"):
        await ingest_round(db, QUICKNET, bad_randomness, now=NOW)
    assert await db.read(rows) == []
    assert db.statistics().writes == 0


async def test_a_conflicting_signature_is_409_and_never_overwrites(db: Database) -> None:
    # A row that got in under another key (say, a chain configured wrongly before): the genuine
    # round for that number must not replace it silently.
    await db.write(store_round, forged(LOW), 123)
    with pytest.raises(Conflict, match="another signature") as refused:
        await ingest_round(db, QUICKNET, LOW, now=NOW)
    assert refused.value.status == 409
    assert await db.read(rows) == [(LOW.round, OTHER_SIG, forged(LOW).randomness, 123)]
    assert db.statistics().rollbacks == 1


def test_decide_is_pure() -> None:
    assert decide(None, LOW) is True
    assert decide(LOW, LOW) is False
    with pytest.raises(Conflict):
        decide(forged(LOW), LOW)
    with pytest.raises(Conflict):
        decide(BeaconRound(LOW.round, LOW.signature, HIGH.randomness), LOW)
