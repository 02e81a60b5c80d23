"""Restart safety: a coordinator reopened on the same state directory resumes the run."""

from __future__ import annotations

import json
from pathlib import Path

import trio
import trio.testing

from hypertrain.protocol.converter import structure
from hypertrain.protocol.messages import RoundOpen
from tests.coordinator.harness import roster_of
from tests.coordinator.lifecycle_support import (
    MINERS,
    admin,
    drain,
    open_runs,
    push,
    ready_run,
    unpause,
)


async def test_reopen_gives_the_same_run_round_roster_and_beacon(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    data = tmp_path / "data"
    async with open_runs(tmp_path / "first", state_dir=data) as h:
        run_id = await ready_run(h, miners=MINERS[:3])
        await admin(h, "DELETE", f"/v1/admin/runs/{run_id}/roster/{MINERS[2]}")
        await unpause(h, run_id)
        round_0 = (await h.client.get(f"/v1/runs/{run_id}/rounds/0")).json()
        body = structure(RoundOpen, round_0["round_open"]["body"])
        assert sorted(e.hotkey for e in body.roster) == sorted(MINERS[:2])
        await push(h, *range(2, body.d_assign))
        run_before = (await h.client.get(f"/v1/runs/{run_id}")).json()
        roster_before = await roster_of(h.client, run_id)
        beacon_before = (await h.client.get("/v1/beacon/latest")).json()
        round_before = (await h.client.get(f"/v1/runs/{run_id}/rounds/0")).json()

    async with open_runs(tmp_path / "second", state_dir=data) as h:
        assert h.ctx.beacon.latest == body.d_assign - 1
        assert (await h.client.get(f"/v1/runs/{run_id}")).json() == run_before
        assert await roster_of(h.client, run_id) == roster_before
        assert (await h.client.get("/v1/beacon/latest")).json() == beacon_before
        assert (await h.client.get(f"/v1/runs/{run_id}/rounds/0")).json() == round_before
        assert run_before["status"] == "running"
        removed = {hotkey: r["removed"] for hotkey, r in roster_before.items()}
        assert removed == {MINERS[0]: False, MINERS[1]: False, MINERS[2]: True}
        async with h.ctx.events.subscribe(kinds={"round_state"}) as sub:
            await push(h, body.d_assign)
            events = [json.loads(e.json) for e in await drain(sub)]
        assert [(e["state"], e["D"]) for e in events] == [("ASSIGNED", body.d_assign)]
        again = (await h.client.get(f"/v1/runs/{run_id}/rounds/0")).json()
        assert again["assignment"] is not None
        assert again["round_open"] == round_before["round_open"]
        # The run keeps its single-run rule and its round 0 across the restart.
        r = await unpause(h, run_id)
        assert r.status_code == 200
        assert (await h.client.get(f"/v1/runs/{run_id}/rounds/1")).status_code == 404


async def test_state_changes_while_down_are_published_once_after_restart(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    data = tmp_path / "data"
    async with open_runs(tmp_path / "first", state_dir=data) as h:
        run_id = await ready_run(h)
        await unpause(h, run_id)
        round_0 = (await h.client.get(f"/v1/runs/{run_id}/rounds/0")).json()
        body = structure(RoundOpen, round_0["round_open"]["body"])

    async with open_runs(tmp_path / "second", state_dir=data) as h:
        async with h.ctx.events.subscribe(kinds={"round_state"}) as sub:
            await push(h, body.d_commit + 1, body.d_commit + 2)
            events = [json.loads(e.json) for e in await drain(sub)]
        assert [(e["state"], e["D"]) for e in events] == [("COMMIT_CLOSED", body.d_commit + 1)]
