"""The run store functions on their own: preconditions the HTTP routes cannot reach."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from hypertrain.coordinator.flows.lifecycle import set_paused
from hypertrain.coordinator.tables.runs import (
    RosterRequest,
    get_run,
    insert_run,
    record_seen,
    remove_roster,
    set_config,
    upsert_roster,
)
from hypertrain.protocol.errors import Conflict, NotFound, ReplayError
from hypertrain.protocol.keys import Keypair
from hypertrain.rounds import RunConfig
from hypertrain.store import Database, open_database
from nurseries import FixedClock
from tests.coordinator.lifecycle_support import COORD, MINERS, sealed

RUN = "cd" * 32


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    async with open_database(tmp_path / "state.db", wall_clock=FixedClock(0.0)) as database:
        yield database


def _coord() -> Keypair:
    return COORD


def _setup(conn: sqlite3.Connection) -> None:
    insert_run(conn, RUN, str(sealed()), 1, 0)
    set_config(conn, RUN, RunConfig(train_rounds=10, final_after_upload=5))
    upsert_roster(conn, RUN, MINERS[0], RosterRequest())


async def test_unpause_without_a_beacon_round_is_409(db: Database) -> None:
    await db.write(_setup)
    with pytest.raises(Conflict, match="beacon round") as caught:
        await db.write(set_paused, RUN, False, _coord)
    assert "config" not in caught.value.detail
    assert "miner" not in caught.value.detail
    assert (await db.read(get_run, RUN)).status == "created"


async def test_a_replay_key_is_accepted_once(db: Database) -> None:
    key = (RUN, "0", "Accept", MINERS[0], MINERS[0])
    await db.write(record_seen, key, 5)
    with pytest.raises(ReplayError):
        await db.write(record_seen, key, 6)
    await db.write(record_seen, (RUN, "1", "Accept", MINERS[0], MINERS[0]), 6)


async def test_one_run_per_state_directory(db: Database) -> None:
    await db.write(_setup)
    with pytest.raises(Conflict, match="already holds run"):
        await db.write(insert_run, "ef" * 32, "{}", 2, 0)


async def test_readmission_restarts_admitted_w_at_the_next_round(db: Database) -> None:
    def scenario(conn: sqlite3.Connection) -> list[int]:
        _setup(conn)
        conn.execute(
            "INSERT INTO rounds (run_id, w, round_open, d_open, d_assign, d_commit, d_audit,"
            " d_upload, d_final, base, reasons, opened_round)"
            " VALUES (?, 0, '{}', 2, 22, 32, 72, 332, 337, 0, '{}', 1)",
            (RUN,),
        )
        seen = [upsert_roster(conn, RUN, MINERS[0], RosterRequest(bond=True)).admitted_w]
        remove_roster(conn, RUN, MINERS[0])
        seen.append(upsert_roster(conn, RUN, MINERS[0], RosterRequest()).admitted_w)
        return seen

    assert await db.write(scenario) == [0, 1]


async def test_unknown_run_is_404_for_every_writer(db: Database) -> None:
    with pytest.raises(NotFound):
        await db.write(upsert_roster, RUN, MINERS[0], RosterRequest())
    with pytest.raises(NotFound):
        await db.write(set_paused, RUN, True, _coord)
    with pytest.raises(NotFound):
        await db.write(set_config, RUN, RunConfig(train_rounds=1, final_after_upload=1))
