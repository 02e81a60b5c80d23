"""Audits at the edges of the round: before the upload, without leaves, past the verdict window,
and verdicts the coordinator can check itself."""

from __future__ import annotations

from pathlib import Path

import attrs
import trio.testing

from hypertrain.coordinator.flows.worker import VERDICT_WINDOW
from hypertrain.datasets.manifest import MANIFEST_FILE, DatasetManifest, load_record
from tests.coordinator.audit_support import BODY, upload_delta, uploaded_round
from tests.coordinator.lifecycle_support import admin, manifest, open_runs, push
from tests.coordinator.miner_support import KEYS, at_assign
from tests.coordinator.test_audit_routes import lease, worker
from tests.coordinator.test_scoring_outbox import (
    built,
    next_round,
    open_round_after,
    post_delta,
    uploaded,
)

__all__ = ["built"]  # the built-dataset fixture, shared with the scoring tests

FULL = attrs.evolve(BODY, inner=attrs.evolve(BODY.inner, state_policy="reset"))
"""Full-mode audits: a job is ready as soon as the target's leaves are stored."""


async def test_a_match_before_the_upload_still_takes_the_delta(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        a = await uploaded_round(h, body=FULL, upload=False)
        assert h.ctx.beacon.latest < a.flow.d.d_upload  # uploads still open
        for _ in KEYS[:2]:
            job = (await lease(a)).json()
            verdict = a.verdict(job, "MATCH")
            r = await worker(a, job["id"], "complete", {"lease": job["lease"], "verdict": verdict})
            assert r.status_code == 200, r.text
        await upload_delta(a.flow, KEYS[0])  # 200s all along (was 409 "is MATCH")
        view = await a.view()
        miners = {m["hotkey"]: m for m in view["miners"]}
        assert miners[KEYS[0].ss58]["status"] == "MATCH"  # the verdict stays the status
        assert miners[KEYS[0].ss58]["delta_manifest"] is not None
        assert miners[KEYS[1].ss58]["delta_manifest"] is None


async def test_a_selected_miner_without_leaves_is_audited_from_d_upload(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        a = await uploaded_round(h, body=FULL, leaves=(KEYS[0],))
        first = (await lease(a)).json()
        assert first["target"] == KEYS[0].ss58
        assert (await lease(a)).status_code == 204  # KEYS[1] posted no leaves: not yet
        await push(h, a.flow.d.d_upload)  # no leaves are taken from here on
        late = await lease(a)
        assert late.status_code == 200, late.text
        job = late.json()
        assert (job["target"], job["preimages"], job["leaves"]) == (KEYS[1].ss58, [], [])
        verdict = a.verdict(job, "BAD_PROOF")
        r = await worker(a, job["id"], "complete", {"lease": job["lease"], "verdict": verdict})
        assert r.json()["forfeit"]["body"]["cause"] == "MISMATCH"


async def test_a_job_past_its_verdict_window_is_failed_not_handed_out(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        a = await uploaded_round(h, body=FULL)
        job = await a.job_of(KEYS[0])
        await push(h, job["challenge"]["body"]["serve_deadline"] + VERDICT_WINDOW + 1)
        assert (await lease(a)).status_code == 204
        assert {j["state"] for j in (await a.view())["jobs"]} == {"failed"}


async def test_verdicts_the_coordinator_can_check_are_checked(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    judge = attrs.evolve(FULL, auditors=(*FULL.auditors, KEYS[0].ss58, KEYS[1].ss58))
    async with open_runs(tmp_path) as h:
        a = await uploaded_round(h, body=judge)
        job = (await lease(a)).json()
        body = {"lease": job["lease"]}
        withheld = a.verdict(job, "WITHHELD")  # full mode: nothing was to be served
        r = await worker(a, job["id"], "complete", {**body, "verdict": withheld})
        assert r.status_code == 422, r.text
        assert "WITHHELD" in r.json()["detail"]
        (target,) = [k for k in KEYS[:2] if k.ss58 == job["target"]]
        own = a.verdict(job, "MATCH", signer=target)  # a miner that is also an auditor
        r = await worker(a, job["id"], "complete", {**body, "verdict": own})
        assert r.status_code == 403, r.text
        r = await worker(a, job["id"], "complete", {**body, "verdict": a.verdict(job, "MATCH")})
        assert r.status_code == 200, r.text


async def test_an_external_aggregator_cannot_open_round_w_plus_2_before_round_ws_audits(
    tmp_path: Path, built: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        record = load_record(DatasetManifest, built / MANIFEST_FILE)
        audited = attrs.evolve(manifest(), dataset=record.dataset_spec())  # names an auditor
        assert audited.auditors
        flow = await at_assign(h, audited)
        await uploaded(flow, KEYS[0])
        await post_delta(flow, KEYS[0])
        await flow.to(flow.d.d_audit)  # the draw needs drand[d_audit] itself stored
        await open_round_after(flow, 0)  # round 1: nothing to wait for
        prefix = f"/v1/aggregator/runs/{flow.run_id}/rounds/1"
        inputs = (await admin(h, "GET", f"{prefix}/inputs")).json()
        await flow.to(inputs["round_open"]["body"]["d_upload"])
        template = (await admin(h, "GET", f"{prefix}/inputs")).json()["next_round_template"]
        r = await admin(h, "POST", f"{prefix}/aggregate", next_round(flow.run_id, template))
        assert r.status_code == 409, r.text
        assert "w+2" in r.json()["detail"]
        (job,) = (await flow.view())["jobs"]  # round 0's audit of KEYS[0], never replayed
        await flow.to(job["challenge"]["body"]["serve_deadline"] + 1)
        await open_round_after(flow, 1)  # settled by its deadline: round 2 opens
