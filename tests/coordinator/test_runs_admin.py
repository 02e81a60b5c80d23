"""Config, roster, pause switch, honeypots and the public reads of a run (spec section 9)."""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from hypertrain.protocol.hashes import NO_HONEYPOT, honeypot_commit
from hypertrain.protocol.keys import Keypair
from tests.coordinator.harness import Harness, roster_of
from tests.coordinator.lifecycle_support import (
    CONFIG,
    MINERS,
    admin,
    create_run,
    drain,
    open_runs,
    push,
    ready_run,
    unpause,
)

UNKNOWN = "ab" * 32


def runs(run_id: str, tail: str = "") -> str:
    return f"/v1/admin/runs/{run_id}{tail}"


async def view(h: Harness, run_id: str) -> dict[str, Any]:
    r = await h.client.get(f"/v1/runs/{run_id}")
    assert r.status_code == 200, r.text
    result: dict[str, Any] = r.json()
    return result


# --- config --------------------------------------------------------------------------------------


async def test_config_is_stored_and_shown(tmp_path: Path) -> None:
    async with open_runs(tmp_path) as h:
        run_id = await create_run(h)
        body = {"train_rounds": 10, "final_after_upload": 5, "total_rounds": 3}
        r = await admin(h, "PUT", runs(run_id, "/config"), body)
        assert r.status_code == 200
        assert r.json() == {"run_id": run_id, "config": body}
        assert (await view(h, run_id))["config"] == body
        r = await admin(h, "PUT", runs(run_id, "/config"), CONFIG)
        assert r.json()["config"] == CONFIG
        assert (await view(h, run_id))["config"] == CONFIG


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"train_rounds": 0, "final_after_upload": 5}, "train_rounds"),
        ({"train_rounds": 1_000_001, "final_after_upload": 5}, "train_rounds"),
        ({"train_rounds": 10, "final_after_upload": True}, "final_after_upload"),
        ({"train_rounds": 10}, "final_after_upload"),
        ({"train_rounds": 10, "final_after_upload": 5, "total_rounds": 0}, "total_rounds"),
        ({"train_rounds": 10, "final_after_upload": 5, "speed": 1}, "speed"),
        ({"train_rounds": "10", "final_after_upload": 5}, "train_rounds"),
    ],
)
async def test_bad_config_is_400_naming_the_field(
    tmp_path: Path, body: dict[str, Any], named: str
) -> None:
    async with open_runs(tmp_path) as h:
        run_id = await create_run(h)
        r = await admin(h, "PUT", runs(run_id, "/config"), body)
        assert r.status_code == 400
        assert named in r.json()["detail"]
        assert (await view(h, run_id))["config"] is None


async def test_config_of_unknown_run_is_404(tmp_path: Path) -> None:
    async with open_runs(tmp_path) as h:
        await create_run(h)
        assert (await admin(h, "PUT", runs(UNKNOWN, "/config"), CONFIG)).status_code == 404


async def test_config_while_running_is_409_and_allowed_once_paused(tmp_path: Path) -> None:
    async with open_runs(tmp_path) as h:
        run_id = await ready_run(h)
        assert (await unpause(h, run_id)).status_code == 200
        other = {"train_rounds": 20, "final_after_upload": 5}
        r = await admin(h, "PUT", runs(run_id, "/config"), other)
        assert r.status_code == 409
        assert (await view(h, run_id))["config"] == CONFIG
        await admin(h, "PUT", runs(run_id, "/paused"), {"paused": True})
        assert (await admin(h, "PUT", runs(run_id, "/config"), other)).status_code == 200


# --- roster --------------------------------------------------------------------------------------


async def test_roster_upsert_remove_and_readmit(tmp_path: Path) -> None:
    async with open_runs(tmp_path) as h:
        run_id = await create_run(h)
        hk = MINERS[0]
        body = {"bond": False, "probation": True, "cluster": "dc-eu-1", "region": "eu"}
        r = await admin(h, "PUT", runs(run_id, f"/roster/{hk}"), {**body, "flags": ["copy"]})
        assert r.status_code == 200
        row = {
            "hotkey": hk,
            **body,
            "flags": ["copy"],
            "admitted_w": 0,
            "removed": False,
            "blacklisted": False,
        }
        assert r.json() == row
        assert list((await roster_of(h.client, run_id)).values()) == [row]
        r = await admin(h, "DELETE", runs(run_id, f"/roster/{hk}"))
        assert r.status_code == 200
        assert r.json() == {"hotkey": hk, "removed": True}
        assert list((await roster_of(h.client, run_id)).values()) == [{**row, "removed": True}]
        counts = (await view(h, run_id))["roster_counts"]
        assert counts == {"total": 1, "active": 0, "removed": 1, "blacklisted": 0}
        r = await admin(h, "PUT", runs(run_id, f"/roster/{hk}"), {})
        defaults = {"bond": False, "probation": False, "cluster": None, "region": None}
        assert r.json() == {**row, **defaults, "flags": []}


async def test_roster_admitted_w_is_the_next_round_to_open(tmp_path: Path) -> None:
    async with open_runs(tmp_path) as h:
        run_id = await ready_run(h, miners=[MINERS[0]])
        assert (await unpause(h, run_id)).status_code == 200
        r = await admin(h, "PUT", runs(run_id, f"/roster/{MINERS[1]}"), {"bond": True})
        assert r.json()["admitted_w"] == 1
        r = await admin(h, "PUT", runs(run_id, f"/roster/{MINERS[0]}"), {"bond": True})
        assert r.json()["admitted_w"] == 0, "an update keeps the admission round"


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"region": "r" * 65}, "region"),
        ({"cluster": "c" * 65}, "cluster"),
        ({"flags": [f"f{i}" for i in range(9)]}, "flags"),
        ({"flags": ["copy", "copy"]}, "flags"),
        ({"bond": "yes"}, "bond"),
        ({"weight": 1}, "weight"),
    ],
)
async def test_bad_roster_body_is_400(tmp_path: Path, body: dict[str, Any], named: str) -> None:
    async with open_runs(tmp_path) as h:
        run_id = await create_run(h)
        r = await admin(h, "PUT", runs(run_id, f"/roster/{MINERS[0]}"), body)
        assert r.status_code == 400
        assert named in r.json()["detail"]
        assert await roster_of(h.client, run_id) == {}


async def test_roster_hotkey_and_run_are_checked(tmp_path: Path) -> None:
    async with open_runs(tmp_path) as h:
        run_id = await create_run(h)
        bad = MINERS[0][:-1] + ("A" if MINERS[0][-1] != "A" else "B")
        assert (await admin(h, "PUT", runs(run_id, f"/roster/{bad}"), {})).status_code == 400
        assert (await admin(h, "PUT", runs(run_id, "/roster/nothex"), {})).status_code == 400
        r = await admin(h, "PUT", runs(UNKNOWN, f"/roster/{MINERS[0]}"), {})
        assert r.status_code == 404
        assert (await admin(h, "DELETE", runs(run_id, f"/roster/{MINERS[1]}"))).status_code == 404
        assert (await admin(h, "DELETE", runs(UNKNOWN, f"/roster/{MINERS[1]}"))).status_code == 404


# --- pause switch --------------------------------------------------------------------------------


async def test_unpause_needs_config_and_a_miner(tmp_path: Path) -> None:
    async with open_runs(tmp_path) as h:
        run_id = await create_run(h)
        r = await unpause(h, run_id)
        assert r.status_code == 409
        assert "config" in r.json()["detail"]
        assert "rostered miner" in r.json()["detail"]
        await admin(h, "PUT", runs(run_id, "/config"), CONFIG)
        r = await unpause(h, run_id)
        assert r.status_code == 409
        assert "config" not in r.json()["detail"]
        assert "rostered miner" in r.json()["detail"]
        await admin(h, "PUT", runs(run_id, f"/roster/{MINERS[0]}"), {})
        await admin(h, "DELETE", runs(run_id, f"/roster/{MINERS[0]}"))
        assert (await unpause(h, run_id)).status_code == 409, "a removed miner does not count"
        state = await view(h, run_id)
        assert state["status"] == "created"
        assert state["rounds"] == []


async def test_unpause_opens_round_zero_once_and_pause_keeps_state(tmp_path: Path) -> None:
    async with open_runs(tmp_path) as h:
        run_id = await ready_run(h)
        r = await unpause(h, run_id)
        assert r.status_code == 200
        assert r.json() == {"run_id": run_id, "status": "running"}
        first = (await h.client.get(f"/v1/runs/{run_id}/rounds/0")).json()["round_open"]
        assert first["body"]["w"] == 0
        r = await admin(h, "PUT", runs(run_id, "/paused"), {"paused": True})
        assert r.json() == {"run_id": run_id, "status": "paused"}
        state = await view(h, run_id)
        assert state["status"] == "paused"
        assert state["rounds"] == [{"w": 0, "state": "OPEN"}]
        assert (await unpause(h, run_id)).json()["status"] == "running"
        again = (await h.client.get(f"/v1/runs/{run_id}/rounds/0")).json()["round_open"]
        assert again == first
        assert (await view(h, run_id))["rounds"] == [{"w": 0, "state": "OPEN"}]
        assert (await h.client.get(f"/v1/runs/{run_id}/rounds/1")).status_code == 404


async def test_paused_body_and_run_are_checked(tmp_path: Path) -> None:
    async with open_runs(tmp_path) as h:
        run_id = await ready_run(h)
        assert (await admin(h, "PUT", runs(run_id, "/paused"), {"paused": 0})).status_code == 400
        assert (await admin(h, "PUT", runs(run_id, "/paused"), {})).status_code == 400
        r = await admin(h, "PUT", runs(UNKNOWN, "/paused"), {"paused": False})
        assert r.status_code == 404
        assert (await view(h, run_id))["status"] == "created"


async def test_unpause_without_coord_key_is_503_and_changes_nothing(tmp_path: Path) -> None:
    async with open_runs(tmp_path) as h:
        run_id = await ready_run(h)
        os.unlink(h.secrets.coord_key)
        r = await unpause(h, run_id)
        assert r.status_code == 503
        state = await view(h, run_id)
        assert state["status"] == "created"
        assert state["rounds"] == []


async def test_unpause_with_a_roster_larger_than_the_dataset_is_409(tmp_path: Path) -> None:
    async with open_runs(tmp_path) as h:
        run_id = await ready_run(h)
        # 781250 samples / 240 per slot: 3255 slots fit, so admit 3256 miners.
        extra = [Keypair.from_seed(i.to_bytes(4, "big") * 8).ss58 for i in range(3256 - 2)]
        await h.ctx.db.write(_admit, run_id, extra)
        r = await unpause(h, run_id)
        assert r.status_code == 409
        assert (await view(h, run_id))["rounds"] == []


def _admit(conn: sqlite3.Connection, run_id: str, hotkeys: list[str]) -> None:
    conn.executemany(
        "INSERT INTO roster (run_id, hotkey, bond, probation, flags, admitted_w)"
        " VALUES (?, ?, 0, 0, '[]', 0)",
        [(run_id, hk) for hk in hotkeys],
    )


# --- honeypots -----------------------------------------------------------------------------------


def _reveal(members: list[tuple[str, str]]) -> tuple[str, dict[str, Any]]:
    salt = secrets.token_bytes(32)
    commitment = honeypot_commit(members, salt)
    body = {
        "commitment": commitment,
        "members": [{"hotkey": h, "mode": m} for h, m in members],
        "salt": salt.hex(),
    }
    return commitment, body


async def test_honeypot_commit_goes_into_round_zero_and_reveals_once(tmp_path: Path) -> None:
    members = [(MINERS[3], "fabricate"), (MINERS[2], "honest")]
    commitment, reveal = _reveal(members)
    async with open_runs(tmp_path) as h:
        run_id = await ready_run(h)
        r = await admin(h, "PUT", runs(run_id, "/honeypot"), {"commitment": commitment})
        assert r.status_code == 200
        assert r.json() == {"run_id": run_id, "honeypot_commit": commitment}
        await unpause(h, run_id)
        body = (await h.client.get(f"/v1/runs/{run_id}/rounds/0")).json()["round_open"]["body"]
        assert body["honeypot_commit"] == commitment
        wrong = {**reveal, "salt": secrets.token_bytes(32).hex()}
        r = await admin(h, "POST", runs(run_id, "/honeypot/reveal"), wrong)
        assert r.status_code == 422
        r = await admin(h, "POST", runs(run_id, "/honeypot/reveal"), reveal)
        assert r.status_code == 200
        assert r.json() == {"commitment": commitment, "verified": True}
        r = await admin(h, "POST", runs(run_id, "/honeypot/reveal"), reveal)
        assert r.status_code == 409


async def test_honeypot_unknown_commitment_and_bad_bodies(tmp_path: Path) -> None:
    _, reveal = _reveal([(MINERS[3], "noise")])
    async with open_runs(tmp_path) as h:
        run_id = await create_run(h)
        r = await admin(h, "POST", runs(run_id, "/honeypot/reveal"), reveal)
        assert r.status_code == 404
        r = await admin(h, "POST", runs(UNKNOWN, "/honeypot/reveal"), reveal)
        assert r.status_code == 404
        bad_mode = {**reveal, "members": [{"hotkey": MINERS[3], "mode": "lazy"}]}
        r = await admin(h, "POST", runs(run_id, "/honeypot/reveal"), bad_mode)
        assert r.status_code == 400
        r = await admin(h, "PUT", runs(run_id, "/honeypot"), {"commitment": "XY" * 32})
        assert r.status_code == 400
        r = await admin(h, "PUT", runs(UNKNOWN, "/honeypot"), {"commitment": "ab" * 32})
        assert r.status_code == 404


async def test_round_zero_without_honeypot_carries_no_honeypot(tmp_path: Path) -> None:
    async with open_runs(tmp_path) as h:
        run_id = await ready_run(h)
        await unpause(h, run_id)
        body = (await h.client.get(f"/v1/runs/{run_id}/rounds/0")).json()["round_open"]["body"]
        assert body["honeypot_commit"] == NO_HONEYPOT


# --- public reads --------------------------------------------------------------------------------


async def test_unknown_run_and_round_are_404_a_bad_round_number_400(tmp_path: Path) -> None:
    async with open_runs(tmp_path) as h:
        run_id = await create_run(h)
        assert (await h.client.get(f"/v1/runs/{UNKNOWN}")).status_code == 404
        assert (await h.client.get(f"/v1/runs/{UNKNOWN}/rounds/0")).status_code == 404
        assert (await h.client.get(f"/v1/runs/{run_id}/rounds/0")).status_code == 404
        for w in ("-1", "x"):  # not a round number at all: 400 naming it (DESIGN 9)
            r = await h.client.get(f"/v1/runs/{run_id}/rounds/{w}")
            assert r.status_code == 400
            assert r.json()["detail"] == f"w: must be an int in [0, 2^53-1], got {w!r}"


async def test_auditor_stats_and_alias(tmp_path: Path) -> None:
    async with open_runs(tmp_path) as h:
        run_id = await create_run(h)
        for path in (f"/run/{run_id}/auditor-stats", f"/v1/runs/{run_id}/auditor-stats"):
            r = await h.client.get(path)
            assert r.status_code == 200
            assert r.json() == {"run_id": run_id, "epochs": []}
        assert (await h.client.get(f"/run/{UNKNOWN}/auditor-stats")).status_code == 404
        assert (await h.client.get(f"/v1/runs/{UNKNOWN}/auditor-stats")).status_code == 404


# --- events --------------------------------------------------------------------------------------


async def test_run_events_name_each_change(tmp_path: Path) -> None:
    async with open_runs(tmp_path) as h:
        await push(h, 1)
        async with h.ctx.events.subscribe(kinds={"run"}) as sub:
            run_id = await ready_run(h, miners=[MINERS[0]])
            await admin(h, "DELETE", runs(run_id, f"/roster/{MINERS[0]}"))
            await admin(h, "PUT", runs(run_id, "/paused"), {"paused": True})
            events = [json.loads(e.json) for e in await drain(sub)]
        assert [(e["run_id"], e["change"]) for e in events] == [
            (run_id, "created"),
            (run_id, "configured"),
            (run_id, "roster"),
            (run_id, "roster"),
            (run_id, "paused"),
        ]
        assert events[1]["config"] == CONFIG
        assert [e.get("removed") for e in events[2:4]] == [False, True]
