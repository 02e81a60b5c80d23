"""The audit draw, state serves and the worker routes at the coordinator (spec 6.2-6.3, 9)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import attrs
import httpx
import trio.testing

from hypertrain.coordinator.flows.roundopen import RoundPlan, plan_round
from hypertrain.coordinator.services.reaper import LeaseReaper
from hypertrain.coordinator.tables.runs import active_roster, get_run
from hypertrain.protocol.envelope import verify
from hypertrain.protocol.hashes import honeypot_commit
from hypertrain.rounds.audit import Q_ONE
from hypertrain.rounds.segments import select_segments
from tests.coordinator.audit_support import (
    AUDITOR,
    BODY,
    STRANGER,
    AuditFlow,
    leaf_blob,
    sha,
    uploaded_round,
)
from tests.coordinator.harness import WORKER_TOKEN, roster_of
from tests.coordinator.lifecycle_support import COORD, admin, drain, open_runs, push
from tests.coordinator.miner_support import KEYS, open_flow

WORKER = {"Authorization": f"Bearer {WORKER_TOKEN}"}


async def lease(a: AuditFlow, body: Any = None) -> httpx.Response:
    kw = {} if body is None else {"json": body}
    return await a.h.client.post("/v1/worker/lease", headers=WORKER, **kw)


async def worker(a: AuditFlow, job_id: str, route: str, body: Any) -> httpx.Response:
    return await a.h.client.post(f"/v1/worker/jobs/{job_id}/{route}", headers=WORKER, json=body)


async def test_the_draw_selects_probation_miners_and_seals_segment_challenges(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h, h.ctx.events.subscribe(frozenset({"audit"})) as sub:
        a = await uploaded_round(h)
        view = await a.view()
        hotkeys = sorted(k.ss58 for k in KEYS[:2])
        assert view["selected"] == hotkeys  # new miners are on probation: q = 1
        assert [m["selected"] for m in view["miners"]] == [True, True]
        assert view["state_sha256"] is not None  # round 0's genesis start state, published
        for job in view["jobs"]:
            challenge = verify(job["challenge"], expected_run_id=a.run_id)
            assert challenge.envelope.signer == COORD.ss58
            assert challenge.body_digest == job["challenge_hash"]
            body = job["challenge"]["body"]
            assert body["mode"] == "segments"
            assert body["reasons"] == ["probation", "final"]
            assert body["serve_deadline"] == a.flow.d.d_audit + BODY.verify.T.serve_deadline
            expected = select_segments(
                a.run_id,
                0,
                body["beacon_sig_sha256"],
                job["target"],
                u=3,
                k_segments=BODY.verify.k_segments,
                q_top=BODY.verify.Q_top,
                norms=["00000000"] * 4,
            )
            windows = [tuple(s) for s in body["segments"]]
            assert windows == list(expected) == [(0, 1), (1, 2), (2, 3)]
            assert (job["state"], job["result"], job["serves"]) == ("waiting", None, [])
        events = [json.loads(e.json) for e in await drain(sub) if e.kind == "audit"]
        assert sorted(e["target"] for e in events) == hotkeys
        assert all(e["change"] == "selected" for e in events)


async def test_nothing_is_leased_until_every_window_is_served(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        a = await uploaded_round(h)
        assert (await h.client.post("/v1/worker/lease")).status_code == 401
        assert (await lease(a)).status_code == 204
        await a.serve_all(KEYS[0])
        r = await lease(a, {"run_id": a.run_id})
        assert r.status_code == 200, r.text
        job = r.json()
        assert job["target"] == KEYS[0].ss58
        assert len(job["lease"]) == 32
        assert job["lease_expires_round"] == a.flow.d.d_audit + 600
        assert len(job["state_serves"]) == 3
        assert job["theta_start_sha256"] == (await a.view())["state_sha256"]
        assert job["assignment"]["global_step0"] == 0
        assert len(job["assignment"]["sample_ids"]) == BODY.inner.H * BODY.inner.micro_batch
        assert len(job["leaves"]) == len(job["preimages"]) == 4
        assert sha(bytes.fromhex(job["beacon_signature"])) == job["challenge"]["beacon_sig_sha256"]
        assert (await lease(a)).status_code == 204  # the other target has served nothing
        r = await lease(a, {"run_id": "0" * 64})
        assert r.status_code == 204
        serves = await h.client.get(
            f"/v1/worker/jobs/{job['id']}/serves", params={"lease": job["lease"]}, headers=WORKER
        )
        assert serves.status_code == 200, serves.text
        assert [s["blob_sha256"] for s in serves.json()["serves"]] == [
            sha(leaf_blob(KEYS[0], k)) for k in range(3)
        ]
        wrong = await h.client.get(
            f"/v1/worker/jobs/{job['id']}/serves", params={"lease": "f" * 32}, headers=WORKER
        )
        assert wrong.status_code == 409


async def test_a_served_state_must_be_the_committed_leaf(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        a = await uploaded_round(h)
        job = await a.job_of(KEYS[0])
        ch = job["challenge_hash"]
        # leaf 1's state served as leaf 0: stored blob, right tensor_root, wrong leaf
        await a.upload_blob(KEYS[0], ch, leaf_blob(KEYS[0], 1))
        wrong = a.serve_body(KEYS[0], ch, 1, t=0)
        r = await a.flow.post("state", wrong)
        assert r.status_code == 422, r.text
        assert "leaf 0" in r.json()["detail"]
        await a.upload_blob(KEYS[0], ch, leaf_blob(KEYS[0], 0))
        r = await a.flow.post("state", a.serve_body(KEYS[0], ch, 0, tensor_root="1" * 64))
        assert r.status_code == 422
        assert "tensor_root" in r.json()["detail"]
        bad_proof = a.serve_body(KEYS[0], ch, 0, merkle_proof_leaf_in_leaves_root=["2" * 64] * 2)
        assert (await a.flow.post("state", bad_proof)).status_code == 422
        r = await a.flow.post("state", a.serve_body(KEYS[0], ch, 0, t=1))
        assert r.status_code == 422  # not a window start
        missing = a.serve_body(KEYS[0], ch, 0, uri="objects/" + "3" * 64)
        assert (await a.flow.post("state", missing)).status_code == 422
        other = a.serve_body(KEYS[1], ch, 0)  # KEYS[1] is not this challenge's target
        assert (await a.flow.post("state", other)).status_code == 404
        good = a.serve_body(KEYS[0], ch, 0)
        first = await a.flow.post("state", good)
        assert first.status_code == 200, first.text
        assert first.json() == {"challenge_hash": ch, "t": 0, "stored": True}
        again = await a.flow.post("state", good)
        assert (again.status_code, again.json()) == (200, first.json())  # idempotent
        assert (await a.job_of(KEYS[0]))["serves"] == [
            {"t": 0, "blob_sha256": sha(leaf_blob(KEYS[0], 0))}
        ]
        await push(h, job["challenge"]["body"]["serve_deadline"] + 1)
        late = await a.flow.post("state", a.serve_body(KEYS[0], ch, 1))
        assert late.status_code == 409
        assert "serve_deadline" in late.json()["detail"]


async def test_a_fault_verdict_blacklists_and_seals_a_forfeit(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        a = await uploaded_round(h)
        await a.serve_all(KEYS[0])
        job = (await lease(a)).json()
        lease_body = {"lease": job["lease"]}
        beat = await worker(a, job["id"], "heartbeat", lease_body)
        assert beat.json() == {"id": job["id"], "lease_expires_round": a.flow.d.d_audit + 600}
        # a key that is not a manifest auditor
        stranger = a.verdict(job, "MATCH", signer=STRANGER)
        r = await worker(a, job["id"], "complete", {**lease_body, "verdict": stranger})
        assert r.status_code == 403, r.text
        # a verdict for another challenge
        other = a.verdict(job, "MATCH", challenge_hash="4" * 64)
        r = await worker(a, job["id"], "complete", {**lease_body, "verdict": other})
        assert r.status_code == 422, r.text
        # a lease that is not the job's
        good = a.verdict(job, "MISMATCH")
        r = await worker(a, job["id"], "complete", {"lease": "5" * 32, "verdict": good})
        assert r.status_code == 409
        r = await worker(a, job["id"], "complete", {**lease_body, "verdict": good})
        assert r.status_code == 200, r.text
        answer = r.json()
        assert (answer["state"], answer["result"]) == ("done", "MISMATCH")
        forfeit = verify(answer["forfeit"], expected_run_id=a.run_id)
        assert forfeit.envelope.signer == COORD.ss58
        assert forfeit.envelope.body["cause"] == "MISMATCH"
        assert forfeit.envelope.body["blacklist"] is True
        assert forfeit.envelope.body["evidence"][0] == job["challenge_hash"]
        view = await a.view()
        miners = {m["hotkey"]: m for m in view["miners"]}
        assert miners[KEYS[0].ss58]["status"] == "MISMATCH"
        assert miners[KEYS[0].ss58]["verdict"] == good
        assert view["forfeits"] == [answer["forfeit"]]
        roster = await roster_of(h.client, a.run_id)
        assert roster[KEYS[0].ss58]["blacklisted"] is True
        assert roster[KEYS[1].ss58]["blacklisted"] is False
        again = await worker(a, job["id"], "complete", {**lease_body, "verdict": good})
        assert again.status_code == 409  # done: the lease is gone


async def test_an_expired_lease_is_refused_and_requeued(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        a = await uploaded_round(h)
        await a.serve_all(KEYS[0])
        job = (await lease(a)).json()
        await push(h, job["lease_expires_round"] + 1)
        r = await worker(
            a, job["id"], "complete", {"lease": job["lease"], "verdict": a.verdict(job, "MATCH")}
        )
        assert r.status_code == 409
        assert "expired" in r.json()["detail"]
        assert (await a.job_of(KEYS[0]))["state"] == "leased"
        await LeaseReaper(h.ctx).reap()
        assert (await a.job_of(KEYS[0]))["state"] == "queued"
        again = (await lease(a)).json()
        assert again["id"] == job["id"]
        assert again["lease"] != job["lease"]
        r = await worker(
            a, job["id"], "fail", {"lease": again["lease"], "reason": "bad job", "retry": False}
        )
        assert r.json() == {"id": job["id"], "state": "failed"}
        assert (await lease(a)).status_code == 204


async def test_auditor_stats_count_revealed_honeypots_per_epoch(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        members = [(KEYS[0].ss58, "fabricate"), (KEYS[1].ss58, "honest")]
        salt = bytes(range(32))
        commitment = honeypot_commit(members, salt)
        stats_path = "/run/{}/auditor-stats"

        async def setup_commit(run_id: str) -> None:
            path = f"/v1/admin/runs/{run_id}/honeypot"
            r = await admin(h, "PUT", path, {"commitment": commitment})
            assert r.status_code == 200, r.text

        a = await uploaded_round(h, before_unpause=setup_commit)
        for key, result in ((KEYS[0], "MISMATCH"), (KEYS[1], "MATCH")):
            await a.serve_all(key)
            job = (await lease(a)).json()
            assert job["target"] == key.ss58
            r = await worker(
                a, job["id"], "complete", {"lease": job["lease"], "verdict": a.verdict(job, result)}
            )
            assert r.status_code == 200, r.text
        before = (await h.client.get(stats_path.format(a.run_id))).json()["epochs"]
        assert [(e["audits"], e["catches"], e["hp_bad"], e["hp_honest"]) for e in before] == [
            (2, 1, 0, 0)
        ]
        assert before[0]["honeypot_catch_rate"] is None  # nothing revealed yet
        reveal = {
            "commitment": commitment,
            "members": [{"hotkey": k, "mode": m} for k, m in members],
            "salt": salt.hex(),
        }
        r = await admin(h, "POST", f"/v1/admin/runs/{a.run_id}/honeypot/reveal", reveal)
        assert r.status_code == 200, r.text
        (epoch,) = (await h.client.get(stats_path.format(a.run_id))).json()["epochs"]
        assert {k: epoch[k] for k in epoch if k != "epoch"} == {
            "audits": 2,
            "catches": 1,
            "overturned": 0,
            "hp_bad": 1,
            "hp_bad_caught": 1,
            "hp_honest": 1,
            "hp_honest_flagged": 0,
            "honeypot_catch_rate": 1.0,
            "honeypot_false_positive_rate": 0.0,
        }
        assert AUDITOR.ss58 in BODY.auditors


async def test_the_copy_screens_raise_q_puts_a_miner_at_q_one_in_the_round_it_opens(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        flow = await open_flow(h, BODY)
        for key in KEYS[:2]:  # bonded: past probation, audited at q_base
            path = f"/v1/admin/runs/{flow.run_id}/roster/{key.ss58}"
            assert (await admin(h, "PUT", path, {"bond": True})).status_code == 200

        def plan(conn: sqlite3.Connection, raised: frozenset[str]) -> RoundPlan:
            run = get_run(conn, flow.run_id)
            return plan_round(conn, run, active_roster(conn, flow.run_id), 1, 100, raised)

        plain = await h.ctx.db.read(plan, frozenset())
        raised = await h.ctx.db.read(plan, frozenset({KEYS[0].ss58}))
    assert {e.q_i for e in plain.roster} == {BODY.verify.q_base}
    rates = {e.hotkey: e.q_i for e in raised.roster}
    assert rates == {KEYS[0].ss58: Q_ONE, KEYS[1].ss58: BODY.verify.q_base}
    assert raised.reasons[KEYS[0].ss58] == ("outlier",)
    assert raised.reasons[KEYS[1].ss58] == ("random",)


async def test_a_target_that_serves_nothing_is_leasable_after_its_deadline_and_withheld(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        a = await uploaded_round(h)
        assert (await lease(a)).status_code == 204  # nothing served yet: not replayable
        job = await a.job_of(KEYS[1])
        await push(h, job["challenge"]["body"]["serve_deadline"] + 1)
        leased = await lease(a)
        assert leased.status_code == 200, leased.text
        first = leased.json()
        assert first["state_serves"] == []
        r = await worker(
            a,
            first["id"],
            "complete",
            {"lease": first["lease"], "verdict": a.verdict(first, "WITHHELD")},
        )
        assert r.status_code == 200, r.text
        assert r.json()["forfeit"]["body"]["cause"] == "WITHHELD"
        miners = {m["hotkey"]: m["status"] for m in (await a.view())["miners"]}
        assert miners[first["target"]] == "WITHHELD"


async def test_hostile_worker_bodies_are_400s_naming_the_field(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        a = await uploaded_round(h)
        for body, field in (
            ({"run_id": "nope"}, "run_id"),
            ({"run_id": a.run_id, "extra": 1}, "extra"),
            ([1, 2], ""),
        ):
            r = await lease(a, body)
            assert r.status_code == 400, (body, r.text)
            assert field in r.json()["detail"]
        job = (await a.job_of(KEYS[0]))["id"]
        for route, body in (
            ("heartbeat", {"lease": "ZZ"}),
            ("fail", {"lease": "a" * 32, "reason": "x" * 501}),
            ("complete", {"lease": "a" * 32, "verdict": "not an envelope"}),
        ):
            r = await worker(a, job, route, body)
            assert r.status_code == 400, (route, r.text)
        r = await h.client.get(f"/v1/worker/jobs/{job}/serves", headers=WORKER)
        assert r.status_code == 400
        assert "lease" in r.json()["detail"]
        r = await worker(a, "a_0000000000000000", "heartbeat", {"lease": "a" * 32})
        assert r.status_code == 404


async def test_a_run_whose_manifest_names_no_auditor_is_never_drawn(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        flow = await open_flow(h, attrs.evolve(BODY, auditors=()))
        await flow.to(flow.d.d_audit + 5)
        view = await flow.view()
        assert (view["selected"], view["jobs"]) == (None, [])
