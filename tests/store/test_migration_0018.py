"""Migration 0018 on a database written by 0001-0017: every node is its own account, with no
known network and no probation; old copies and strikes have no network; the book reads the
nodes and pairs them as before (issue 19 items 1-2)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from hypertrain.compute import get_node
from hypertrain.compute.model import DEFAULT_SETTINGS
from hypertrain.compute.sybils import probation_at_mint, strikes_today
from hypertrain.store import open_database
from nurseries import FixedClock
from tests.store.test_migration_0017 import _schema_up_to

T0 = 1_704_067_200_000


def fill_version_17(conn: sqlite3.Connection) -> None:
    """Two nodes, one struck (and disabled) on T0's day."""
    for node_id in ("n1", "n2"):
        conn.execute(
            "INSERT INTO compute_nodes (node_id, key_hash, handle, capabilities, hardware,"
            " created_ms, last_seen_ms) VALUES (?, ?, ?, '[]', 'cpu-generic', ?, ?)",
            (node_id, node_id * 32, f"h{node_id}", T0, T0),
        )
    conn.execute(
        "INSERT INTO compute_jobs (job_id, challenge, version, subject, step, inputs,"
        " created_ms, wait_ms, wait_deadline_ms) VALUES ('j1', 'delta-loss', 1, '{}', 'public',"
        " '[]', ?, 1, ?)",
        (T0, T0 + 1),
    )
    conn.execute(
        "INSERT INTO compute_copies (copy_id, job_id, seq, state, queued_ms, node_id)"
        " VALUES ('j1.1', 'j1', 1, 'answered', ?, 'n1')",
        (T0,),
    )
    conn.execute("INSERT INTO compute_strikes VALUES ('j1.1', 'n1', '2024-01-01', ?)", (T0,))
    conn.execute("UPDATE compute_nodes SET disabled_until_ms = ? WHERE node_id = 'n1'", (T0 + 1,))


async def test_0018_makes_each_node_its_own_account_on_no_known_network(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    old = _schema_up_to(tmp_path, 17)
    async with open_database(path, migrations=old, wall_clock=FixedClock(1.0)):
        pass
    with sqlite3.connect(path) as conn:
        fill_version_17(conn)
    conn.close()
    async with open_database(path, wall_clock=FixedClock(2.0)) as db:
        assert db.statistics().schema_version >= 18
        n1, n2 = await db.read(get_node, "n1"), await db.read(get_node, "n2")
        assert [(n.account, n.network, n.probation) for n in (n1, n2)] == [
            ("n1", None, 0),
            ("n2", None, 0),
        ]
        rows = await db.read(
            lambda c: c.execute(
                "SELECT c.network, s.network, s.disabled_until_ms FROM compute_copies c"
                " JOIN compute_strikes s USING (copy_id)"
            ).fetchall()
        )
        assert rows == [(None, None, None)]
        assert await db.read(strikes_today, ["n1"], [], T0) == ({"n1": 1}, {})
        # an old disablement names no network: nobody minted now is put on probation by it
        assert await db.read(probation_at_mint, "198.51.100.0/24", T0, DEFAULT_SETTINGS) == 0
