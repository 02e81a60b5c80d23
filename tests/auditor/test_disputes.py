"""The auditor in disputes on real CPU training (the tiny world of conftest.py: H 6, J 2, two
layers), against the fake coordinator, in virtual time.

A :class:`~hypertrain.trainer.fault.Fault` makes one side miscompute one op of step 3 (in
leaf 2, in the challenged window [1, 2]). The test plays the coordinator's bisection
(:func:`~hypertrain.rounds.bisection.advance`) with the other side's hashes computed
independently, so each stage checks the auditor's Bisect; the referee's DisputeWorker then
rules. Faults also make the auditor's own audit a MISMATCH."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

import pytest
import trio.testing

from hypertrain.auditor.dispute import RecomputeStart
from hypertrain.auditor.job import check_job, read_job
from hypertrain.auditor.replayer import TorchReplayer
from hypertrain.auditor.session import Options, run_auditor
from hypertrain.auditor.verdict import Evidence, decide
from hypertrain.rounds.bisection import (
    Point,
    RefereeCase,
    Stage,
    advance,
    first_stage,
)
from hypertrain.trainer.fault import Fault
from hypertrain.trainer.loop import RoundResult
from hypertrain.trainer.recompute import Recompute
from hypertrain.trainer.state import TrainState, unpack_state
from nurseries import run_inline
from tests.auditor.disputes_support import (
    OTHER,
    dispute_worker,
    job_view,
    referee_json,
    stage_json,
    view_json,
)
from tests.auditor.fake import API, TOKEN, FakeCoordinator, coordinator
from tests.auditor.world import AUDITOR, MINER, SERVE_DEADLINE, Built, World, make_job

ARITY: Final = 2
LEAF: Final = 2  # step 3 is in leaf 2 (t = 3, 4)
_FAULTS: dict[str, Fault] = {}


def _setup(world: World, honest: RoundResult) -> tuple[Built, FakeCoordinator]:
    built = make_job(world, honest)
    fake = coordinator(world)
    fake.objects.update(built.blobs)
    fake.job_views[built.job["id"]] = job_view(built)
    return built, fake


def _recompute(world: World, built: Built, fault: Fault | None) -> Any:
    """A side's recomputation built as the auditor builds it (segments: the served state at
    leaf 1, the start of the window [1, 2] holding leaf 2)."""
    job = read_job(job_view(built), leased=False)
    start = _start(world, built)
    recompute: Recompute = TorchReplayer(fault=fault).recompute(job, start, world.samples)
    return recompute


def _start(world: World, built: Built) -> RecomputeStart:
    if world.mode == "full":
        return RecomputeStart(0, TrainState(world.theta_start))
    t = 1 * world.manifest.inner.J
    (serve,) = [s for s in built.job["state_serves"] if s["body"]["t"] == t]
    return RecomputeStart(t, unpack_state(built.blobs[serve["body"]["uri"].rsplit("/", 1)[-1]]))


def spreading(world: World, built: Built) -> Fault:
    """The fault at ``mlp`` of layer 1 in step 3 with the lowest element index whose change
    every later point of the step sees (a one-ulp change is often rounded away)."""
    if world.mode not in _FAULTS:
        job = read_job(job_view(built), leased=False)
        start = _start(world, built)
        clean = TorchReplayer().recompute(job, start, world.samples).trace(3)
        k = 1 + ("attn_norm", "attn", "attn_residual", "mlp_norm", "mlp").index("mlp")
        for index in range(64):
            fault = Fault(3, 1, "mlp", index)
            got = TorchReplayer(fault=fault).recompute(job, start, world.samples).trace(3)
            ops = zip(got.op_points[1][k:], clean.op_points[1][k:], strict=True)
            later = zip(got.layer_points[2:], clean.layer_points[2:], strict=True)
            if all(a != b for a, b in (*ops, *later)):
                _FAULTS[world.mode] = fault
                break
        else:
            raise AssertionError("no element of mlp in layer 1, step 3 spreads")
    return _FAULTS[world.mode]


@pytest.mark.parametrize("liar", ["auditor", "miner"])
async def test_the_party_bisects_to_the_faulty_op_and_the_referee_finds_the_liar(
    carry: World,
    honest_carry: RoundResult,
    tmp_path: Path,
    liar: str,
    autojump_clock: trio.testing.MockClock,
) -> None:
    built, fake = _setup(carry, honest_carry)
    n_layers = carry.manifest.model.n_layers
    FAULT = spreading(carry, built)  # noqa: N806
    auditor_fault = FAULT if liar == "auditor" else None
    miner = _recompute(carry, built, FAULT if liar == "miner" else None)
    expected = _recompute(carry, built, auditor_fault)  # what the auditor should answer
    party = dispute_worker(
        fake, carry, tmp_path, party=TorchReplayer(fault=auditor_fault), referee=TorchReplayer()
    )
    stage: Stage | RefereeCase = first_stage(LEAF, carry.manifest.inner.J, n_layers, ARITY)
    agreed_step: str | None = None
    levels = []
    while isinstance(stage, Stage):
        fake.disputes[:] = [view_json(built, stage=stage_json(stage), first_bad_leaf=LEAF)]
        with trio.fail_after(100):
            (report,) = await party.answer_disputes()
        assert report.state == "bisect", report
        posted = fake.paths("POST", f"/v1/runs/{carry.run_id}/bisect")[-1].body["body"]
        assert posted["hashes"] == expected.hashes(stage)
        assert (posted["level"], posted["interval"], posted["N"]) == (
            stage.level, [stage.a, stage.b], stage.n)  # fmt: skip
        levels.append(stage.level)
        if stage.level == "step":
            agreed_step = posted["hashes"][0]
        stage = advance(
            n_layers, stage, miner.hashes(stage), posted["hashes"], ARITY,
            first_bad_leaf=LEAF, agreed_step=agreed_step,
        )  # fmt: skip
    assert levels[0] == "step"
    assert levels[-1] == "op"
    assert (stage.kind, stage.op_spec) == ("op", "step=3;layer=1;op=mlp")
    assert len(fake.paths("GET", "/v1/worker/jobs/")) == 1

    fake.disputes[:] = [view_json(built, referee=referee_json(stage), first_bad_leaf=LEAF)]
    referee = dispute_worker(
        fake, carry, tmp_path, keypair=OTHER, party=TorchReplayer(), referee=TorchReplayer()
    )
    with trio.fail_after(100):
        (ruled,) = await referee.referee_disputes()
    assert (ruled.state, ruled.loser, ruled.op_spec) == ("ruled", liar, stage.op_spec)
    (resolution,) = fake.paths("POST", f"/v1/runs/{carry.run_id}/resolution")
    body = resolution.body["body"]
    assert body["loser"] == (AUDITOR.ss58 if liar == "auditor" else MINER.ss58)
    honest = _recompute(carry, built, None)
    assert body["output_hash"] == honest.point_hash(stage.point)


async def test_the_full_mode_party_answers_from_the_public_round_start(
    reset: World, honest_reset: RoundResult, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    built, fake = _setup(reset, honest_reset)
    FAULT = spreading(reset, built)  # noqa: N806
    stage = first_stage(LEAF, reset.manifest.inner.J, reset.manifest.model.n_layers, ARITY)
    fake.disputes.append(view_json(built, stage=stage_json(stage), first_bad_leaf=LEAF))
    party = dispute_worker(
        fake, reset, tmp_path, party=TorchReplayer(fault=FAULT), referee=TorchReplayer()
    )
    with trio.fail_after(100):
        (report,) = await party.answer_disputes()
    assert report.state == "bisect"
    posted = fake.paths("POST", f"/v1/runs/{reset.run_id}/bisect")[0].body["body"]
    # the step interval [2, 4]: the state at t=2 is honest, the fault at t=3 shows from there
    faulty, clean = _recompute(reset, built, FAULT), _recompute(reset, built, None)
    assert posted["hashes"] == faulty.hashes(stage)
    assert posted["hashes"][0] == clean.hashes(stage)[0]
    assert posted["hashes"][-1] != clean.hashes(stage)[-1]


def _leaf_case() -> RefereeCase:
    return RefereeCase("leaf", Point("step", LEAF * 2), f"leaf={LEAF}", None, None, leaf=LEAF)


@pytest.mark.parametrize("committed", ["honest", "altered"])
async def test_the_referee_rebuilds_a_leaf_case_against_the_committed_leaf(
    carry: World,
    honest_carry: RoundResult,
    tmp_path: Path,
    committed: str,
    autojump_clock: trio.testing.MockClock,
) -> None:
    built, fake = _setup(carry, honest_carry)
    if committed == "altered":
        fake.job_views[built.job["id"]]["leaves"][LEAF] = "ab" * 32
    case = _leaf_case()
    fake.disputes.append(
        view_json(built, auditor=OTHER.ss58, referee=referee_json(case), first_bad_leaf=LEAF)
    )
    referee = dispute_worker(fake, carry, tmp_path, party=TorchReplayer(), referee=TorchReplayer())
    with trio.fail_after(100):
        (ruled,) = await referee.referee_disputes()
    loser = "auditor" if committed == "honest" else "miner"
    assert (ruled.state, ruled.loser) == ("ruled", loser)
    (resolution,) = fake.paths("POST", f"/v1/runs/{carry.run_id}/resolution")
    assert resolution.body["body"]["output_hash"] == honest_carry.leaves[LEAF].digest.hex()
    assert resolution.body["body"]["op_spec"] == f"leaf={LEAF}"


async def test_the_referee_decides_a_disputed_start_point(
    carry: World, honest_carry: RoundResult, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    built, fake = _setup(carry, honest_carry)
    honest = _recompute(carry, built, None)
    point = Point("step", 1 * carry.manifest.inner.J)
    case = RefereeCase("start", point, f"step={point.t}", honest.point_hash(point), "cd" * 32)
    fake.disputes.append(
        view_json(built, auditor=OTHER.ss58, referee=referee_json(case), first_bad_leaf=LEAF)
    )
    referee = dispute_worker(fake, carry, tmp_path, party=TorchReplayer(), referee=TorchReplayer())
    with trio.fail_after(100):
        (ruled,) = await referee.referee_disputes()
    assert (ruled.state, ruled.loser) == ("ruled", "auditor")
    (resolution,) = fake.paths("POST", f"/v1/runs/{carry.run_id}/resolution")
    assert resolution.body["body"]["loser"] == OTHER.ss58


@pytest.mark.parametrize("world_name", ["carry", "reset"])
def test_a_fault_makes_the_auditors_replay_a_mismatch(
    world_name: str, request: pytest.FixtureRequest
) -> None:
    world: World = request.getfixturevalue(world_name)
    honest: RoundResult = request.getfixturevalue(f"honest_{world_name}")
    built = make_job(world, honest)
    FAULT = spreading(world, built)  # noqa: N806
    job = read_job(built.job)
    check_job(job)
    evidence = Evidence(built.blobs, tuple(built.job["state_serves"]), SERVE_DEADLINE)
    assert decide(job, evidence, TorchReplayer(), world.samples).result == "MATCH"
    outcome = decide(job, evidence, TorchReplayer(fault=FAULT), world.samples)
    assert (outcome.result, outcome.first_bad_leaf) == ("MISMATCH", LEAF)


async def test_one_fault_drives_the_verdict_and_the_bisects_of_run_auditor(
    carry: World, honest_carry: RoundResult, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    built, fake = _setup(carry, honest_carry)
    FAULT = spreading(carry, built)  # noqa: N806
    fake.jobs.append(built.job)
    stage = first_stage(LEAF, carry.manifest.inner.J, carry.manifest.model.n_layers, ARITY)
    fake.disputes.append(view_json(built, stage=stage_json(stage), first_bad_leaf=LEAF))
    options = Options(api=API, run_id=carry.run_id, token=TOKEN, keypair=AUDITOR,
                      data_dir=tmp_path)  # fmt: skip

    async def stop() -> None:
        await trio.sleep(15)

    with trio.fail_after(100):
        status = await run_auditor(
            options, stop=stop, transport=fake.transport(), configure=lambda env: None,
            run_sync=run_inline, fault=FAULT,
        )  # fmt: skip
    assert status == 0
    (complete,) = fake.paths("POST", f"/v1/worker/jobs/{built.job['id']}/complete")
    verdict = complete.body["verdict"]["body"]
    assert (verdict["result"], verdict["first_bad_leaf"]) == ("MISMATCH", LEAF)
    (bisect,) = fake.paths("POST", f"/v1/runs/{carry.run_id}/bisect")
    assert bisect.body["body"]["hashes"] == _recompute(carry, built, FAULT).hashes(stage)
    assert bisect.body["body"]["hashes"] != _recompute(carry, built, None).hashes(stage)
    # the one auditor of the run never referees: it asked, and posted no Resolution
    assert fake.paths("GET", f"/v1/runs/{carry.run_id}/disputes")
    assert fake.paths("POST", f"/v1/runs/{carry.run_id}/resolution") == []
