"""Round 0 over time (autojump clock): its RoundOpen, the assignment at d_assign, state events."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import trio
import trio.testing

from hypertrain.protocol.converter import structure, unstructure
from hypertrain.protocol.envelope import NEVER, verify
from hypertrain.protocol.hashes import ZERO_STATE, roster_hash
from hypertrain.protocol.messages import RoundOpen
from hypertrain.rounds import Q_ONE, Deadlines, RunConfig, assign, template, transitions
from tests.coordinator.harness import Harness
from tests.coordinator.lifecycle_support import (
    CONFIG,
    COORD,
    MINERS,
    admin,
    drain,
    manifest,
    open_runs,
    push,
    ready_run,
    unpause,
)


async def round_zero(h: Harness, run_id: str) -> dict[str, Any]:
    r = await h.client.get(f"/v1/runs/{run_id}/rounds/0")
    assert r.status_code == 200, r.text
    result: dict[str, Any] = r.json()
    return result


async def test_round_zero_round_open_is_coord_signed_from_the_template(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        await push(h, 1, 2, 3, 4, 5)
        run_id = await ready_run(h, miners=[MINERS[1], MINERS[0]])
        await admin(h, "PUT", f"/v1/admin/runs/{run_id}/roster/{MINERS[1]}", {"bond": True})
        assert (await unpause(h, run_id)).status_code == 200
        view = await round_zero(h, run_id)
        envelope = view["round_open"]
        verified = verify(
            envelope,
            expected_run_id=run_id,
            now_round=10**12,
            signer_allowed=lambda t, s: t == "RoundOpen" and s == COORD.ss58,
        )
        body = verified.message
        assert isinstance(body, RoundOpen)
        assert envelope["exp_drand"] == NEVER
        assert envelope["signer"] == COORD.ss58
        m = manifest()
        assert body.w == 0
        assert body.d_open == 5 + 1
        assert Deadlines.of(body) == template(6, m.verify.T, structure(RunConfig, CONFIG))
        assert body.theta_hash == body.prev_final_hash == m.init_state_hash
        assert body.outer_state_hash == body.center_hash == ZERO_STATE
        roster = envelope["body"]["roster"]
        assert body.roster_hash == roster_hash(roster)
        first, second = sorted([MINERS[0], MINERS[1]])
        # Sorted by hotkey; unbonded (probation) at q = 1, bonded at q_base.
        q = {MINERS[0]: Q_ONE, MINERS[1]: m.verify.q_base}
        assert roster == [
            {"hotkey": first, "slot": 0, "q_i": q[first]},
            {"hotkey": second, "slot": 1, "q_i": q[second]},
        ]
        assert view["state"] == "OPEN"
        assert view["now_round"] == 5
        assert view["base"] == 0
        assert view["assignment"] is None
        assert [(x["hotkey"], x["slot"], x["status"]) for x in view["miners"]] == [
            (first, 0, "ASSIGNED"),
            (second, 1, "ASSIGNED"),
        ]
        assert view["jobs"] == []
        assert view["forfeits"] == []
        assert view["rollback"] is None
        assert view["finalize"] is None
        assert view["audit_beacon_round"] == body.d_audit
        assert view["audit_beacon_signature"] is None


async def test_assignment_appears_exactly_at_d_assign(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        run_id = await ready_run(h)
        await unpause(h, run_id)
        body = structure(RoundOpen, (await round_zero(h, run_id))["round_open"]["body"])
        await push(h, *range(2, body.d_assign))
        before = await round_zero(h, run_id)
        assert before["state"] == "OPEN"
        assert before["assignment"] is None
        await push(h, body.d_assign)
        at = await round_zero(h, run_id)
        assert at["state"] == "ASSIGNED"
        signature = h.round(body.d_assign).signature
        assert at["assignment_beacon_signature"] == signature
        expected = assign(manifest(), run_id, 0, bytes.fromhex(signature), body.roster, base=0)
        assert at["assignment"] == [unstructure(a) for a in expected]
        assert [a["hotkey"] for a in at["assignment"]] == [e.hotkey for e in body.roster]
        assert all(len(a["samples"]) == 240 for a in at["assignment"])
        await push(h, body.d_assign + 1)
        later = await round_zero(h, run_id)
        assert later["state"] == "TRAINING"
        assert later["assignment"] == at["assignment"]


async def test_missing_d_assign_beacon_is_reported_not_invented(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        run_id = await ready_run(h)
        await unpause(h, run_id)
        body = structure(RoundOpen, (await round_zero(h, run_id))["round_open"]["body"])
        await push(h, body.d_assign + 1)
        view = await round_zero(h, run_id)
        assert view["state"] == "TRAINING"
        assert view["assignment"] is None
        assert view["assignment_beacon_round"] == body.d_assign
        assert view["assignment_beacon_signature"] is None
        await push(h, body.d_assign)  # a late push of that round fills it in
        assert (await round_zero(h, run_id))["assignment"] is not None


async def test_round_state_events_follow_the_deadlines(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        run_id = await ready_run(h)
        async with h.ctx.events.subscribe(kinds={"round_state", "run"}) as sub:
            await unpause(h, run_id)
            body = structure(RoundOpen, (await round_zero(h, run_id))["round_open"]["body"])
            deadlines = Deadlines.of(body)
            await push(h, *range(2, deadlines.d_upload + 3))
            events = await drain(sub)
        states = [(e.kind, e.json) for e in events]
        run_events = [j for k, j in states if k == "run"]
        assert len(run_events) == 1
        assert '"change":"unpaused"' in run_events[0]
        seen = [json.loads(j) for k, j in states if k == "round_state"]
        expected = [(1, "OPEN")] + [(d, s.value) for d, s in transitions(deadlines)[1:]]
        assert [(e["D"], e["state"]) for e in seen] == expected
        assert all(e["run_id"] == run_id and e["w"] == 0 for e in seen)
        view = (await h.client.get(f"/v1/runs/{run_id}")).json()
        assert view["rounds"] == [{"w": 0, "state": "UPLOAD_CLOSED"}]


async def test_a_jump_over_deadlines_publishes_only_the_state_reached(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        run_id = await ready_run(h)
        await unpause(h, run_id)
        body = structure(RoundOpen, (await round_zero(h, run_id))["round_open"]["body"])
        async with h.ctx.events.subscribe(kinds={"round_state"}) as sub:
            await push(h, body.d_commit)
            await push(h, body.d_commit + 1)
            events = await drain(sub)
        assert [e.json for e in events] == [
            f'{{"run_id":"{run_id}","w":0,"state":"COMMIT_CLOSED","D":{body.d_commit}}}'
        ]
