"""The dispute loops against the fake coordinator, in virtual time, with a recomputer that
records what it was asked (the torch side is tested in test_disputes.py): what is posted,
what is skipped, what is cached, and how errors end a pass or a dispute."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from hypertrain.auditor.dispute import RecomputeStart
from hypertrain.auditor.errors import AuditorFatal
from hypertrain.auditor.job import AuditJob
from hypertrain.auditor.verdict import Samples
from hypertrain.protocol.envelope import verify
from hypertrain.protocol.messages import Bisect, Resolution
from hypertrain.rounds.bisection import (
    Point,
    RefereeCase,
    Ruling,
    Stage,
    first_stage,
    inputs_hash,
    points,
)
from hypertrain.trainer.loop import RoundResult
from tests.auditor.disputes_support import (
    DISPUTE_ID,
    OTHER,
    dispute_worker,
    job_view,
    referee_json,
    stage_json,
    view_json,
)
from tests.auditor.fake import FakeCoordinator, coordinator
from tests.auditor.world import AUDITOR, MINER, Built, World, make_job


def fake_hashes(stage: Stage) -> list[str]:
    return [
        hashlib.sha256(f"{stage.level}{stage.t}{p}".encode()).hexdigest()
        for p in points(stage.a, stage.b, stage.n)
    ]


@attrs.define
class FakeRecomputation:
    job: AuditJob
    start: RecomputeStart
    loser: str = "auditor"
    fail: bool = False
    stages: list[Stage] = attrs.Factory(list)
    cases: list[tuple[RefereeCase, str | None]] = attrs.Factory(list)

    def hashes(self, stage: Stage) -> list[str]:
        if self.fail:
            raise RuntimeError("a bug in the recomputation")
        self.stages.append(stage)
        return fake_hashes(stage)

    def judge(self, case: RefereeCase, committed_leaf: str | None = None) -> tuple[Ruling, str]:
        self.cases.append((case, committed_leaf))
        return Ruling(self.loser, f"the {self.loser} is wrong"), "ee" * 32  # type: ignore[arg-type]


@attrs.define
class FakeRecomputer:
    loser: str = "auditor"
    fail: bool = False
    built: list[FakeRecomputation] = attrs.Factory(list)

    def recompute(self, job: AuditJob, start: RecomputeStart, samples: Samples) -> Any:
        assert samples([job.assignment.sample_ids[0]]).shape[0] == 1
        made = FakeRecomputation(job, start, self.loser, self.fail)
        self.built.append(made)
        return made


def _world(carry: World, honest: RoundResult) -> tuple[Built, FakeCoordinator]:
    built = make_job(carry, honest)
    fake = coordinator(carry)
    fake.objects.update(built.blobs)
    fake.job_views[built.job["id"]] = job_view(built)
    return built, fake


def _first(world: World) -> Stage:
    inner, n_layers = world.manifest.inner, world.manifest.model.n_layers
    return first_stage(2, inner.J, n_layers, 2)


async def test_the_party_posts_its_hashes_for_each_stage_it_owes(
    carry: World, honest_carry: RoundResult, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    built, fake = _world(carry, honest_carry)
    stage = _first(carry)
    fake.disputes.append(view_json(built, stage=stage_json(stage), first_bad_leaf=2))
    party = FakeRecomputer()
    worker = dispute_worker(fake, carry, tmp_path, party=party, referee=FakeRecomputer())
    with trio.fail_after(100):
        (report,) = await worker.answer_disputes()
    assert (report.state, report.role, report.level, report.N) == ("bisect", "auditor",
                                                                  stage.level, stage.n)  # fmt: skip
    (listed,) = fake.paths("GET", f"/v1/runs/{carry.run_id}/disputes")
    assert listed.query == f"state=open&party={AUDITOR.ss58}"
    (posted,) = fake.paths("POST", f"/v1/runs/{carry.run_id}/bisect")
    checked = verify(posted.body, expected_run_id=carry.run_id)
    assert checked.envelope.signer == AUDITOR.ss58
    assert checked.envelope.exp_drand == 2**40
    bisect = checked.message
    assert isinstance(bisect, Bisect)
    (made,) = party.built
    assert made.stages == [stage]
    assert bisect == Bisect(DISPUTE_ID, stage.level, (stage.a, stage.b), stage.n,
                            tuple(fake_hashes(stage)), AUDITOR.ss58)  # fmt: skip
    # segments mode: the served state at the start of the window [1, 2] holding leaf 2
    assert made.start.t == 1 * carry.manifest.inner.J
    assert made.start.state.step is not None
    assert made.start.state.m is not None

    # the miner answered, the dispute moved on: the same recomputation answers the next stage
    nxt = Stage("layer", 0, carry.manifest.model.n_layers + 1, 2, t=stage.b)
    fake.disputes[0] = view_json(built, stage=stage_json(nxt, ["auditor"]), first_bad_leaf=2)
    with trio.fail_after(100):
        (report,) = await worker.answer_disputes()
    assert report.state == "bisect"
    assert party.built == [made]
    assert made.stages == [stage, nxt]
    assert len(fake.paths("GET", "/v1/worker/jobs/")) == 1
    assert len(fake.paths("POST", f"/v1/runs/{carry.run_id}/bisect")) == 2


async def test_the_party_posts_nothing_it_does_not_owe(
    carry: World, honest_carry: RoundResult, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    built, fake = _world(carry, honest_carry)
    stage = _first(carry)
    fake.disputes += [
        view_json(built, stage=stage_json(stage, ["miner"]), first_bad_leaf=2),
        view_json(built, stage=None, referee=None, dispute_id="d2" * 32),
    ]
    party = FakeRecomputer()
    worker = dispute_worker(fake, carry, tmp_path, party=party, referee=FakeRecomputer())
    with trio.fail_after(100):
        assert await worker.answer_disputes() == []
    assert party.built == []
    assert fake.paths("GET", "/v1/worker/jobs/") == []
    assert fake.paths("POST") == []


async def test_the_full_mode_party_starts_from_the_public_round_start(
    reset: World, honest_reset: RoundResult, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    built, fake = _world(reset, honest_reset)
    fake.disputes.append(view_json(built, stage=stage_json(_first(reset)), first_bad_leaf=2))
    party = FakeRecomputer()
    worker = dispute_worker(fake, reset, tmp_path, party=party, referee=FakeRecomputer())
    with trio.fail_after(100):
        (report,) = await worker.answer_disputes()
    assert report.state == "bisect"
    (made,) = party.built
    assert made.start.t == 0
    assert made.start.state.m is None
    assert made.start.state.theta_hash() == built.job["round_open"]["body"]["theta_hash"]


def _case(world: World) -> RefereeCase:
    point = Point("op", 3, 0, 2)
    return RefereeCase("op", point, "step=3;layer=0;op=attn_norm", "aa" * 32, "bb" * 32,
                       agreed=Point("op", 3, 0, 1), agreed_hash="cc" * 32,
                       agreed_step="dd" * 32)  # fmt: skip


async def test_the_referee_rules_on_other_auditors_disputes_only(
    carry: World,
    honest_carry: RoundResult,
    tmp_path: Path,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    built, fake = _world(carry, honest_carry)
    case = _case(carry)
    fake.disputes += [
        view_json(built, auditor=AUDITOR.ss58, referee=referee_json(case), dispute_id="d2" * 32),
        view_json(built, auditor=OTHER.ss58, referee=referee_json(case), first_bad_leaf=2),
    ]
    referee = FakeRecomputer(loser="auditor")
    party = FakeRecomputer()
    worker = dispute_worker(fake, carry, tmp_path, party=party, referee=referee)
    with trio.fail_after(100), caplog.at_level(logging.INFO):
        (report,) = await worker.referee_disputes()
    (listed,) = fake.paths("GET", f"/v1/runs/{carry.run_id}/disputes")
    assert listed.query == "referee=1"
    assert (report.dispute, report.role, report.state, report.loser) == (
        DISPUTE_ID, "referee", "ruled", "auditor")  # fmt: skip
    assert party.built == []
    (made,) = referee.built
    assert made.cases == [(case, None)]
    (posted,) = fake.paths("POST", f"/v1/runs/{carry.run_id}/resolution")
    checked = verify(posted.body, expected_run_id=carry.run_id)
    assert checked.envelope.signer == AUDITOR.ss58
    assert checked.message == Resolution(
        dispute_id=DISPUTE_ID,
        op_spec=case.op_spec,
        inputs_hash=inputs_hash(case.agreed_step, case.agreed_hash),
        output_hash="ee" * 32,
        loser=OTHER.ss58,
    )
    assert "the auditor is wrong" in caplog.text
    # next poll: the own dispute is not noted again, the ruled one is not ruled again
    with trio.fail_after(100):
        assert await worker.referee_disputes() == []
    assert len(fake.paths("POST", f"/v1/runs/{carry.run_id}/resolution")) == 1


async def test_a_leaf_case_is_judged_against_the_committed_leaf(
    carry: World, honest_carry: RoundResult, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    built, fake = _world(carry, honest_carry)
    case = RefereeCase("leaf", Point("step", 4), "leaf=2", None, None, leaf=2)
    fake.disputes.append(
        view_json(built, auditor=OTHER.ss58, referee=referee_json(case), first_bad_leaf=2)
    )
    referee = FakeRecomputer(loser="miner")
    worker = dispute_worker(fake, carry, tmp_path, party=FakeRecomputer(), referee=referee)
    with trio.fail_after(100):
        (report,) = await worker.referee_disputes()
    assert (report.state, report.loser) == ("ruled", "miner")
    assert referee.built[0].cases == [(case, built.job["leaves"][2])]
    (posted,) = fake.paths("POST", f"/v1/runs/{carry.run_id}/resolution")
    assert posted.body["body"]["loser"] == MINER.ss58
    assert posted.body["body"]["inputs_hash"] == inputs_hash(None, None)


async def test_a_resolution_taken_by_another_referee_is_normal(
    carry: World, honest_carry: RoundResult, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    built, fake = _world(carry, honest_carry)
    fake.disputes.append(view_json(built, auditor=OTHER.ss58, referee=referee_json(_case(carry))))
    fake.statuses[f"POST /v1/runs/{carry.run_id}/resolution"] = [409]
    worker = dispute_worker(fake, carry, tmp_path, party=FakeRecomputer(),
                            referee=FakeRecomputer())  # fmt: skip
    with trio.fail_after(100):
        (report,) = await worker.referee_disputes()
        assert report.state == "taken"
        assert "another referee" in report.reason
        assert await worker.referee_disputes() == []
    assert len(fake.paths("POST", f"/v1/runs/{carry.run_id}/resolution")) == 1


async def test_a_job_that_is_not_the_disputes_is_not_retried(
    carry: World, honest_carry: RoundResult, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    built, fake = _world(carry, honest_carry)
    view = view_json(built, stage=stage_json(_first(carry)), first_bad_leaf=2)
    view["challenge_hash"] = "ef" * 32
    fake.disputes.append(view)
    party = FakeRecomputer()
    worker = dispute_worker(fake, carry, tmp_path, party=party, referee=FakeRecomputer())
    with trio.fail_after(100):
        (report,) = await worker.answer_disputes()
        assert (report.state, report.retry) == ("failed", False)
        assert "not the disputed audit" in report.reason
        assert await worker.answer_disputes() == []
    assert party.built == []
    assert len(fake.paths("GET", "/v1/worker/jobs/")) == 1


async def test_a_bug_is_logged_and_retried_at_the_next_poll(
    carry: World,
    honest_carry: RoundResult,
    tmp_path: Path,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    built, fake = _world(carry, honest_carry)
    fake.disputes.append(view_json(built, stage=stage_json(_first(carry)), first_bad_leaf=2))
    party = FakeRecomputer(fail=True)
    worker = dispute_worker(fake, carry, tmp_path, party=party, referee=FakeRecomputer())
    with trio.move_on_after(15):
        await worker.run_party()
    assert "unexpected failure" in caplog.text
    assert "a bug in the recomputation" in caplog.text
    assert [c.at for c in fake.paths("GET", f"/v1/runs/{carry.run_id}/disputes")] == [0.0, 10.0]
    assert fake.paths("POST") == []


async def test_an_unreachable_coordinator_ends_the_pass_not_the_loop(
    carry: World, honest_carry: RoundResult, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    built, fake = _world(carry, honest_carry)
    fake.disputes.append(view_json(built, auditor=OTHER.ss58, referee=referee_json(_case(carry))))
    fake.statuses[f"GET /v1/runs/{carry.run_id}/disputes"] = [503] * 5
    worker = dispute_worker(fake, carry, tmp_path, party=FakeRecomputer(),
                            referee=FakeRecomputer())  # fmt: skip
    with trio.move_on_after(25):
        await worker.run_referee()
    lists = fake.paths("GET", f"/v1/runs/{carry.run_id}/disputes")
    assert [c.at for c in lists] == [0.0, 1.0, 3.0, 7.0, 15.0, 20.0]
    assert len(fake.paths("POST", f"/v1/runs/{carry.run_id}/resolution")) == 1


@pytest.mark.parametrize("status", [401, 403])
async def test_a_refused_token_is_fatal(
    carry: World,
    honest_carry: RoundResult,
    tmp_path: Path,
    status: int,
    autojump_clock: trio.testing.MockClock,
) -> None:
    built, fake = _world(carry, honest_carry)
    fake.disputes.append(view_json(built, stage=stage_json(_first(carry)), first_bad_leaf=2))
    fake.statuses[f"POST /v1/runs/{carry.run_id}/bisect"] = [status]
    worker = dispute_worker(fake, carry, tmp_path, party=FakeRecomputer(),
                            referee=FakeRecomputer())  # fmt: skip
    with trio.fail_after(100), pytest.raises(AuditorFatal):
        await worker.run_party()
