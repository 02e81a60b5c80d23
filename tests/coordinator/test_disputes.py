"""Disputes through the routes (spec 6.4, issue 14): open, bisect to one op, referee, outcome.

The parties' hashes here are made up (what the coordinator checks does not depend on how they
were computed); the real recomputation is tested in tests/trainer and over whole networks.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio.testing

from hypertrain.coordinator.flows import disputes as disputes_flow
from hypertrain.protocol.envelope import seal
from hypertrain.protocol.hashes import rerun_claim_bytes
from hypertrain.protocol.jcs import body_digest
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.merkle import merkle_root_hex
from hypertrain.rounds.bisection import inputs_hash
from tests.coordinator.audit_support import (
    AUDITOR,
    BODY,
    STRANGER,
    AuditFlow,
    digests,
    sha,
    uploaded_round,
)
from tests.coordinator.harness import roster_of
from tests.coordinator.lifecycle_support import drain, open_runs
from tests.coordinator.miner_support import KEYS
from tests.coordinator.test_audit_routes import WORKER, lease, worker

REFEREE = Keypair.from_seed(bytes([0x63]) * 32)
TWO_AUDITORS = attrs.evolve(BODY, auditors=(AUDITOR.ss58, REFEREE.ss58))
EXP = 2**40
MINER = KEYS[0]


def h(label: str) -> str:
    return sha(label.encode())


async def _mismatch(a: AuditFlow, key: Keypair = MINER) -> dict[str, Any]:
    """A MISMATCH verdict on ``key`` (first_bad_leaf 1); the verdict envelope."""
    await a.serve_all(key)
    job = (await lease(a)).json()
    assert job["target"] == key.ss58
    verdict = a.verdict(job, "MISMATCH", recomputed=h("auditor root"))
    r = await worker(a, job["id"], "complete", {"lease": job["lease"], "verdict": verdict})
    assert r.status_code == 200, r.text
    return verdict


async def _rerun(a: AuditFlow, key: Keypair, root: str) -> str:
    sig = key.sign(rerun_claim_bytes(a.run_id, 0, key.ss58, root)).hex()
    body = {"w": 0, "hotkey": key.ss58, "leaves_root": root, "sig": sig}
    r = await a.flow.post("rerun", body)
    assert r.status_code == 200, r.text
    return str(r.json()["classification"])


def _committed_root(a: AuditFlow, verdict: dict[str, Any], job: dict[str, Any]) -> str:
    mine = digests(a.run_id, MINER)
    windows = job["challenge"]["body"]["segments"]
    return merkle_root_hex([mine[k] for x, y in windows for k in range(x + 1, y + 1)])


def _dispute(a: AuditFlow, verdict: dict[str, Any], action: str, key: Keypair = MINER) -> Any:
    body = {"hotkey": key.ss58, "verdict_hash": body_digest(verdict["body"]), "action": action}
    return seal(key, "Dispute", a.run_id, body, EXP).to_json()


async def _contested(a: AuditFlow) -> str:
    """MINER is MISMATCHed, reruns to its commitment (CONTEST) and contests: the dispute id."""
    verdict = await _mismatch(a)
    job = await a.job_of(MINER)
    assert await _rerun(a, MINER, _committed_root(a, verdict, job)) == "CONTEST"
    r = await a.flow.post("dispute", _dispute(a, verdict, "contest"))
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "open"
    return str(r.json()["dispute_id"])


def _bisect(a: AuditFlow, key: Keypair, did: str, stage: dict[str, Any], hashes: list[str]) -> Any:
    body = {
        "dispute_id": did,
        "level": stage["level"],
        "interval": stage["interval"],
        "N": stage["N"],
        "hashes": hashes,
        "party": key.ss58,
    }
    return seal(key, "Bisect", a.run_id, body, EXP).to_json()


async def _view(a: AuditFlow, did: str) -> dict[str, Any]:
    r = await a.h.client.get(f"/v1/runs/{a.run_id}/disputes/{did}")
    assert r.status_code == 200, r.text
    view: dict[str, Any] = r.json()
    return view


async def _both(a: AuditFlow, did: str, miner: list[str], auditor: list[str]) -> dict[str, Any]:
    stage = (await _view(a, did))["stage"]
    r = await a.flow.post("bisect", _bisect(a, MINER, did, stage, miner))
    assert r.status_code == 200, r.text
    r = await a.flow.post("bisect", _bisect(a, AUDITOR, did, stage, auditor))
    assert r.status_code == 200, r.text
    return await _view(a, did)


async def _to_referee(a: AuditFlow, did: str) -> dict[str, Any]:
    """Bisect to one op: steps [0, 2] differ at 1; layers of step 1 differ at point 2 (the
    output of layer 1); ops of layer 1 differ at op 3 (attn_residual)."""
    view = await _view(a, did)
    assert view["stage"]["level"] == "step"
    assert view["stage"]["interval"] == [0, 2]
    assert view["stage"]["points"] == [0, 1, 2]
    view = await _both(a, did, [h("s0"), h("m1"), h("m2")], [h("s0"), h("a1"), h("a2")])
    stage = view["stage"]
    assert (stage["level"], stage["t"], stage["interval"]) == ("layer", 1, [0, 3])
    # layer point 3 is the state after step 1: each party repeats its step-1 claim
    view = await _both(
        a, did, [h("tok"), h("L1"), h("mL2"), h("m1")], [h("tok"), h("L1"), h("aL2"), h("a1")]
    )
    stage = view["stage"]
    assert (stage["level"], stage["t"], stage["layer"], stage["interval"]) == ("op", 1, 1, [0, 6])
    ops_m = [h("L1"), h("o1"), h("o2"), h("mo3"), h("mo4"), h("mo5"), h("mL2")]
    ops_a = [h("L1"), h("o1"), h("o2"), h("ao3"), h("ao4"), h("ao5"), h("aL2")]
    view = await _both(a, did, ops_m, ops_a)
    assert view["stage"] is None
    return view


async def test_a_contest_bisects_to_one_op_and_the_referee_vindicates_the_miner(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as hs, hs.ctx.events.subscribe(frozenset({"dispute"})) as sub:
        a = await uploaded_round(hs, body=TWO_AUDITORS)
        did = await _contested(a)
        assert (await a.view())["state"] == "DISPUTE"
        view = await _to_referee(a, did)
        case = view["referee"]
        assert case["kind"] == "op"
        assert case["op_spec"] == "step=1;layer=1;op=attn_residual"
        assert (case["agreed_hash"], case["agreed_step"]) == (h("o2"), h("s0"))
        assert (case["miner_hash"], case["auditor_hash"]) == (h("mo3"), h("ao3"))
        assert case["inputs_hash"] == inputs_hash(h("s0"), h("o2"))
        assert len(view["bisects"]) == 6
        waiting = (await a.h.client.get(f"/v1/runs/{a.run_id}/disputes?referee=1")).json()
        assert [d["dispute_id"] for d in waiting["disputes"]] == [did]

        resolution = {
            "dispute_id": did,
            "op_spec": case["op_spec"],
            "inputs_hash": case["inputs_hash"],
            "output_hash": h("mo3"),
            "loser": AUDITOR.ss58,
        }
        url = f"/v1/runs/{a.run_id}/resolution"

        async def post(key: Keypair, body: dict[str, Any], **kw: Any) -> httpx.Response:
            envelope = seal(key, "Resolution", a.run_id, body, EXP).to_json()
            return await a.h.client.post(url, json=envelope, **kw)

        assert (await post(REFEREE, resolution)).status_code == 401  # no worker token
        r = await post(AUDITOR, resolution, headers=WORKER)
        assert r.status_code == 403  # the disputed auditor never referees
        assert "disputed auditor" in r.json()["detail"]
        assert (await post(STRANGER, resolution, headers=WORKER)).status_code == 403
        wrong_op = {**resolution, "op_spec": "step=1;layer=1;op=attn"}
        assert (await post(REFEREE, wrong_op, headers=WORKER)).status_code == 422
        wrong_in = {**resolution, "inputs_hash": h("x")}
        assert (await post(REFEREE, wrong_in, headers=WORKER)).status_code == 422
        stranger = {**resolution, "loser": STRANGER.ss58}
        assert (await post(REFEREE, stranger, headers=WORKER)).status_code == 422

        r = await post(REFEREE, resolution, headers=WORKER)
        assert r.status_code == 200, r.text
        assert r.json() == {"dispute_id": did, "loser": AUDITOR.ss58, "state": "resolved"}
        assert (await post(REFEREE, resolution, headers=WORKER)).status_code == 409

        view = await _view(a, did)
        assert view["state"] == "resolved"
        outcome = view["outcome"]
        assert (outcome["loser_role"], outcome["cause"]) == ("auditor", "referee")
        assert outcome["op_spec"] == "step=1;layer=1;op=attn_residual"
        assert outcome["referee"] == REFEREE.ss58
        round_view = await a.view()
        miner = next(m for m in round_view["miners"] if m["hotkey"] == MINER.ss58)
        assert miner["status"] == "MATCH"
        assert [f for f in round_view["forfeits"] if f["body"]["hotkey"] == MINER.ss58] == []
        assert round_view["disputes"][0]["dispute_id"] == did
        assert round_view["state"] != "DISPUTE"
        assert not (await roster_of(a.h.client, a.run_id))[MINER.ss58]["blacklisted"]
        stats = (await a.h.client.get(f"/run/{a.run_id}/auditor-stats")).json()
        (epoch,) = stats["epochs"]
        assert (epoch["catches"], epoch["overturned"]) == (1, 1)  # the verdict, overturned
        changes = [json.loads(e.json)["change"] for e in await drain(sub)]
        rounds = ["bisect", "bisect", "stage"] * 2 + ["bisect", "bisect", "referee"]
        assert changes == ["opened", *rounds, "resolved"]


async def test_the_miner_loses_at_the_referee_and_ends_dispute_lost(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as hs:
        a = await uploaded_round(hs, body=TWO_AUDITORS)
        did = await _contested(a)
        case = (await _to_referee(a, did))["referee"]
        body = {
            "dispute_id": did,
            "op_spec": case["op_spec"],
            "inputs_hash": case["inputs_hash"],
            "output_hash": h("ao3"),
            "loser": MINER.ss58,
        }
        envelope = seal(REFEREE, "Resolution", a.run_id, body, EXP).to_json()
        r = await a.h.client.post(f"/v1/runs/{a.run_id}/resolution", json=envelope, headers=WORKER)
        assert r.status_code == 200, r.text
        view = await a.view()
        miner = next(m for m in view["miners"] if m["hotkey"] == MINER.ss58)
        assert miner["status"] == "DISPUTE_LOST"
        (forfeit,) = [f for f in view["forfeits"] if f["body"]["hotkey"] == MINER.ss58]
        assert forfeit["body"]["cause"] == "DISPUTE_LOST"
        assert did in forfeit["body"]["evidence"]
        assert (await roster_of(a.h.client, a.run_id))[MINER.ss58]["blacklisted"]


async def test_bisects_are_refused_from_strangers_for_other_stages_and_when_they_contradict(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as hs:
        a = await uploaded_round(hs, body=TWO_AUDITORS)
        did = await _contested(a)
        stage = (await _view(a, did))["stage"]
        three = [h("s0"), h("m1"), h("m2")]
        r = await a.flow.post("bisect", _bisect(a, STRANGER, did, stage, three))
        assert r.status_code == 403  # not a party
        r = await a.flow.post("bisect", _bisect(a, REFEREE, did, stage, three))
        assert r.status_code == 403  # an auditor of the run, but not the disputed one
        other = {**stage, "interval": [0, 1], "N": 2}
        r = await a.flow.post("bisect", _bisect(a, MINER, did, other, three))
        assert r.status_code == 409  # not the dispute's current stage
        assert "is at step [0, 2] N=2" in r.json()["detail"]
        r = await a.flow.post("bisect", _bisect(a, MINER, did, stage, three))
        assert r.status_code == 200, r.text
        r = await a.flow.post("bisect", _bisect(a, MINER, did, stage, [h("s0"), h("x"), h("m2")]))
        assert r.status_code == 409  # the miner already published this stage
        assert (await _view(a, did))["stage"]["awaiting"] == ["auditor"]
        r = await a.flow.post(
            "bisect", _bisect(a, AUDITOR, did, stage, [h("s0"), h("a1"), h("a2")])
        )
        assert r.status_code == 200, r.text
        layer = (await _view(a, did))["stage"]
        moved = [h("tok"), h("L1"), h("L2"), h("not m1")]  # step 1's state was m1
        r = await a.flow.post("bisect", _bisect(a, MINER, did, layer, moved))
        assert r.status_code == 422
        assert "step=1" in r.json()["detail"]


async def test_a_silent_party_loses_at_its_deadline(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as hs:
        a = await uploaded_round(hs, body=TWO_AUDITORS)
        did = await _contested(a)
        stage = (await _view(a, did))["stage"]
        r = await a.flow.post("bisect", _bisect(a, MINER, did, stage, [h("s"), h("1"), h("2")]))
        assert r.status_code == 200, r.text
        deadline = stage["deadline_round"]
        assert deadline == (await _view(a, did))["opened_round"] + BODY.verify.T.dispute_per_level
        await a.flow.to(deadline)
        assert (await _view(a, did))["state"] == "open"  # the deadline round itself still counts
        await a.flow.to(deadline + 1)
        view = await _view(a, did)
        assert view["state"] == "resolved"
        assert (view["outcome"]["loser_role"], view["outcome"]["cause"]) == ("auditor", "timeout")
        late = _bisect(a, AUDITOR, did, stage, [h("s"), h("1"), h("3")])
        assert (await a.flow.post("bisect", late)).status_code == 409


async def test_who_may_dispute_what(tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    async with open_runs(tmp_path) as hs:
        a = await uploaded_round(hs, body=TWO_AUDITORS)
        verdict = await _mismatch(a)
        r = await a.flow.post("dispute", _dispute(a, verdict, "contest"))
        assert r.status_code == 409  # no rerun yet
        assert "CONTEST rerun" in r.json()["detail"]
        r = await a.flow.post("dispute", _dispute(a, verdict, "accept", key=KEYS[1]))
        assert r.status_code == 404  # not KEYS[1]'s verdict
        forged = _dispute(a, verdict, "accept")
        forged["signer"] = KEYS[1].ss58
        assert (await a.flow.post("dispute", forged)).status_code in (401, 403)
        r = await a.flow.post("dispute", _dispute(a, verdict, "accept"))
        assert r.status_code == 200, r.text
        assert r.json()["state"] == "accepted"
        assert (await a.flow.post("dispute", _dispute(a, verdict, "contest"))).status_code == 409
        listed = (await a.h.client.get(f"/v1/runs/{a.run_id}/disputes?party={MINER.ss58}")).json()
        assert [d["action"] for d in listed["disputes"]] == ["accept"]
        bad = await a.h.client.get(f"/v1/runs/{a.run_id}/disputes?state=maybe")
        assert bad.status_code == 400
        job = listed["disputes"][0]["job_id"]
        assert (await a.h.client.get(f"/v1/worker/jobs/{job}")).status_code == 401
        stored = await a.h.client.get(f"/v1/worker/jobs/{job}", headers=WORKER)
        assert stored.status_code == 200, stored.text
        assert stored.json()["state"] == "done"
        assert stored.json()["leaves"] == [d.hex() for d in digests(a.run_id, MINER)]


async def test_a_disputed_start_or_full_agreement_goes_to_the_referee(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as hs:
        a = await uploaded_round(hs, body=TWO_AUDITORS)
        did = await _contested(a)
        view = await _both(a, did, [h("m0"), h("1"), h("2")], [h("a0"), h("1"), h("2")])
        case = view["referee"]
        assert (case["kind"], case["op_spec"], case["point"]["t"]) == ("start", "step=0", 0)
        assert (case["miner_hash"], case["auditor_hash"]) == (h("m0"), h("a0"))
        assert view["stage"] is None

    async with open_runs(tmp_path / "again") as hs:
        a = await uploaded_round(hs, body=TWO_AUDITORS)
        did = await _contested(a)
        same = [h("s0"), h("s1"), h("s2")]
        case = (await _both(a, did, same, same))["referee"]
        # every state agrees: the leaf differs in something else, the referee rebuilds it
        assert (case["kind"], case["op_spec"], case["leaf"]) == ("leaf", "leaf=1", 1)
        assert case["inputs_hash"] == inputs_hash(None, None)


async def test_unknown_disputes_and_jobs_are_404(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as hs:
        a = await uploaded_round(hs, body=TWO_AUDITORS)
        r = await a.h.client.get(f"/v1/runs/{a.run_id}/disputes/{h('none')}")
        assert r.status_code == 404
        r = await a.h.client.get(f"/v1/runs/{a.run_id}/disputes/nothex")
        assert r.status_code == 400
        r = await a.h.client.get("/v1/worker/jobs/a_0000000000000000", headers=WORKER)
        assert r.status_code == 404
        stage = {"level": "step", "interval": [0, 2], "N": 2}
        r = await a.flow.post("bisect", _bisect(a, MINER, h("none"), stage, [h("1")] * 3))
        assert r.status_code == 404


async def test_a_malformed_lease_or_dispute_id_in_the_url_is_a_400_not_a_500(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as hs:
        a = await uploaded_round(hs, body=TWO_AUDITORS)
        job = (await a.job_of(MINER))["id"]
        r = await a.h.client.get(f"/v1/worker/jobs/{job}/serves?lease=nope", headers=WORKER)
        assert r.status_code == 400
        assert r.json()["detail"].startswith("lease: must be a lease token")
        r = await a.h.client.get(f"/v1/runs/{a.run_id}/disputes/{'A' * 64}")
        assert r.status_code == 400
        assert r.json()["detail"].startswith("dispute_id:")


async def test_a_single_auditor_run_cannot_referee_so_a_contest_is_refused(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as hs:
        a = await uploaded_round(hs)  # BODY names one auditor
        verdict = await _mismatch(a)
        job = await a.job_of(MINER)
        assert await _rerun(a, MINER, _committed_root(a, verdict, job)) == "CONTEST"
        r = await a.flow.post("dispute", _dispute(a, verdict, "contest"))
        assert r.status_code == 409
        assert "single auditor" in r.json()["detail"]
        r = await a.flow.post("dispute", _dispute(a, verdict, "accept"))
        assert r.status_code == 200, r.text


async def test_every_stage_gets_a_whole_deadline_even_inside_one_level(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With N = 2 the layer level of step 1 ([0, 3]) takes two rounds: a party publishing at
    # the last round of the first must leave the other a whole window for the second.
    monkeypatch.setattr(disputes_flow, "ARITY", 2)
    async with open_runs(tmp_path) as hs:
        a = await uploaded_round(hs, body=TWO_AUDITORS)
        did = await _contested(a)
        view = await _both(a, did, [h("s0"), h("m1"), h("m2")], [h("s0"), h("a1"), h("a2")])
        layer = view["stage"]
        assert (layer["level"], layer["interval"], layer["N"]) == ("layer", [0, 3], 2)
        await a.flow.to(layer["deadline_round"])  # both publish at the very last round
        view = await _both(a, did, [h("t"), h("mL"), h("m1")], [h("t"), h("aL"), h("a1")])
        second = view["stage"]
        assert (second["level"], second["interval"]) == ("layer", [0, 2])
        assert second["deadline_round"] == layer["deadline_round"] + BODY.verify.T.dispute_per_level
        await a.flow.to(layer["deadline_round"] + 1)
        assert (await _view(a, did))["state"] == "open"


async def test_a_resolution_must_carry_the_miners_value_to_vindicate_it_and_no_party_rules(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    three = attrs.evolve(BODY, auditors=(AUDITOR.ss58, REFEREE.ss58, MINER.ss58))
    async with open_runs(tmp_path) as hs:
        a = await uploaded_round(hs, body=three)
        did = await _contested(a)
        case = (await _to_referee(a, did))["referee"]
        body = {
            "dispute_id": did,
            "op_spec": case["op_spec"],
            "inputs_hash": case["inputs_hash"],
            "output_hash": h("something else"),
            "loser": AUDITOR.ss58,
        }
        url = f"/v1/runs/{a.run_id}/resolution"

        async def post(key: Keypair, **over: str) -> httpx.Response:
            env = seal(key, "Resolution", a.run_id, {**body, **over}, EXP).to_json()
            return await a.h.client.post(url, json=env, headers=WORKER)

        r = await post(MINER, output_hash=h("mo3"))  # an auditor of the run, and the miner
        assert r.status_code == 403
        assert "disputing miner" in r.json()["detail"]
        r = await post(REFEREE)
        assert r.status_code == 422  # the auditor loses only to the miner's value
        assert "only to the miner's value" in r.json()["detail"]
        assert (await post(REFEREE, output_hash=h("mo3"))).status_code == 200


async def test_a_verdict_naming_a_leaf_past_the_last_is_refused(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as hs:
        a = await uploaded_round(hs, body=TWO_AUDITORS)
        await a.serve_all(MINER)
        job = (await lease(a)).json()
        verdict = a.verdict(job, "MISMATCH")
        body = {**verdict["body"], "first_bad_leaf": BODY.inner.H // BODY.inner.J + 1}
        exp = job["challenge"]["serve_deadline"] + 1200
        bad = seal(AUDITOR, "ReplayVerdict", a.run_id, body, exp).to_json()
        r = await worker(a, job["id"], "complete", {"lease": job["lease"], "verdict": bad})
        assert r.status_code == 422
        assert "past the round's last leaf" in r.json()["detail"]


async def test_a_contest_with_nothing_to_bisect_goes_to_a_new_audit_by_the_referee(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as hs:
        a = await uploaded_round(hs, body=TWO_AUDITORS)
        await a.serve_all(MINER)
        job = (await lease(a)).json()
        verdict = a.verdict(job, "MISMATCH")
        body = {**verdict["body"], "first_bad_leaf": None}  # "the delta did not match"
        exp = job["challenge"]["serve_deadline"] + 1200
        verdict = seal(AUDITOR, "ReplayVerdict", a.run_id, body, exp).to_json()
        r = await worker(a, job["id"], "complete", {"lease": job["lease"], "verdict": verdict})
        assert r.status_code == 200, r.text
        root = _committed_root(a, verdict, await a.job_of(MINER))
        assert await _rerun(a, MINER, root) == "CONTEST"
        r = await a.flow.post("dispute", _dispute(a, verdict, "contest"))
        assert r.status_code == 200, r.text
        did = r.json()["dispute_id"]
        view = await _view(a, did)
        assert (view["state"], view["stage"]) == ("open", None)
        case = view["referee"]
        assert (case["kind"], case["op_spec"], case["point"]) == ("verdict", "verdict", None)
        assert (await a.view())["state"] == "DISPUTE"
        body = {
            "dispute_id": did,
            "op_spec": "verdict",
            "inputs_hash": case["inputs_hash"],
            "output_hash": h("not the committed root"),
            "loser": AUDITOR.ss58,
        }
        url = f"/v1/runs/{a.run_id}/resolution"
        env = seal(REFEREE, "Resolution", a.run_id, body, EXP).to_json()
        assert (await a.h.client.post(url, json=env, headers=WORKER)).status_code == 422
        env = seal(REFEREE, "Resolution", a.run_id, {**body, "output_hash": root}, EXP).to_json()
        r = await a.h.client.post(url, json=env, headers=WORKER)
        assert r.status_code == 200, r.text
        miner = next(m for m in (await a.view())["miners"] if m["hotkey"] == MINER.ss58)
        assert miner["status"] == "MATCH"
