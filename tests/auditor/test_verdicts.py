"""The pure checks and verdicts of spec 6.3 on real CPU training (H 6, J 2: leaves at t = 0, 2,
4, 6; windows [0,1], [1,2], [2,3], all drawn in segments mode since k_segments = 3).

Each fault is built so that the check it exercises is the only one that sees it: with that
check deleted the job would get another verdict (usually MISMATCH or MATCH), and the test fails.
"""

from __future__ import annotations

import attrs
import numpy as np
import pytest

from hypertrain.auditor.errors import BadJob, NotReady
from hypertrain.auditor.job import check_job, read_job
from hypertrain.auditor.replayer import TorchReplayer
from hypertrain.auditor.verdict import (
    NO_REPLAY_ROOT,
    Evidence,
    Outcome,
    decide,
    seal_verdict,
)
from hypertrain.miner.honeypot import HoneypotMode, fabricated_start, perturb_after_step
from hypertrain.miner.training import train_round_async
from hypertrain.protocol.envelope import verify
from hypertrain.protocol.hashes import sha256_hex
from hypertrain.protocol.merkle import merkle_root_hex
from hypertrain.protocol.messages import ReplayVerdict
from hypertrain.trainer.loop import RoundResult, StateAt, Stepper, round_result, round_start
from hypertrain.trainer.state import pack_state
from tests.auditor.world import (
    AUDITOR,
    SERVE_DEADLINE,
    Built,
    W,
    World,
    commit_of,
    make_job,
    serve_of,
    set_preimages,
    sha,
)


def audit(world: World, built: Built, now_round: int | None = SERVE_DEADLINE) -> Outcome:
    job = read_job(built.job)
    check_job(job)
    evidence = Evidence(built.blobs, tuple(built.job["state_serves"]), now_round)
    return decide(job, evidence, TorchReplayer(), world.samples)


async def honeypot(world: World, mode: HoneypotMode) -> RoundResult:
    return await train_round_async(
        world.manifest, world.run_id, W, world.theta_start, list(world.ids), world.samples,
        world.carried, mode=mode,
    )  # fmt: skip


async def honeypot_with_states(
    world: World, mode: HoneypotMode
) -> tuple[RoundResult, list[StateAt]]:
    """The honeypot's round as :func:`train_round_async` trains it, with the state at each leaf
    it could serve (what the miner's trainer does not keep)."""
    inner = world.manifest.inner
    ids = list(world.ids)
    honest = round_start(world.manifest, world.theta_start, world.carried)
    stepper = Stepper(world.manifest, world.run_id, W, ids, world.samples, honest)
    leaves, states = [stepper.leaf()], [stepper.state()]
    if mode is HoneypotMode.FABRICATE:
        fake = StateAt(t=0, theta=fabricated_start(world.theta_start), opt=honest.opt)
        stepper = Stepper(world.manifest, world.run_id, W, ids, world.samples, fake)
    for t in range(1, inner.H + 1):
        stepper.step()
        perturb_after_step(mode, t, inner.H, stepper.theta)
        if t % inner.J == 0:
            leaves.append(stepper.leaf())
            states.append(stepper.state())
    result = round_result(world.manifest, world.theta_start, stepper, leaves, states)
    trained = await honeypot(world, mode)
    assert [leaf.digest for leaf in result.leaves] == [leaf.digest for leaf in trained.leaves]
    return trained, states


def _replace_serve(built: Built, world: World, a: int, envelope: dict, blob: bytes) -> None:
    t = a * world.manifest.inner.J
    built.job["state_serves"] = [s for s in built.job["state_serves"] if s["body"]["t"] != t] + [
        envelope
    ]
    built.blobs[sha(blob)] = blob


# -- MATCH ----------------------------------------------------------------------------------


def test_honest_segments_round_matches(carry: World, honest_carry: RoundResult) -> None:
    built = make_job(carry, honest_carry)
    assert [tuple(s) for s in built.job["challenge"]["segments"]] == [(0, 1), (1, 2), (2, 3)]
    outcome = audit(carry, built)
    assert outcome.result == "MATCH", outcome.reason
    assert outcome.first_bad_leaf is None
    replayed = [leaf.digest for leaf in honest_carry.leaves[1:]]
    assert outcome.recomputed_leaves_root == merkle_root_hex(replayed)


def test_honest_full_round_matches(reset: World, honest_reset: RoundResult) -> None:
    outcome = audit(reset, make_job(reset, honest_reset))
    assert outcome.result == "MATCH", outcome.reason
    assert outcome.recomputed_leaves_root == honest_reset.leaves_root


def test_the_sealed_verdict(carry: World, honest_carry: RoundResult) -> None:
    built = make_job(carry, honest_carry)
    job = read_job(built.job)
    envelope = seal_verdict(AUDITOR, job, audit(carry, built))
    checked = verify(envelope.to_json(), expected_run_id=carry.run_id)
    assert envelope.exp_drand == SERVE_DEADLINE + 1200
    assert envelope.signer == AUDITOR.ss58
    verdict = checked.message
    assert isinstance(verdict, ReplayVerdict)
    assert verdict.challenge_hash == job.challenge_hash
    assert verdict.result == "MATCH"
    env = verdict.replay_env
    assert (env.driver, env.sm_count, env.gpu_uuid_sha256) == ("cpu", 1, sha256_hex(b"cpu"))
    assert env.image_digest == carry.manifest.reference_spec.image_digest


# -- MISMATCH: the honeypots (spec 6.5) -------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "first_bad"),
    [(HoneypotMode.FABRICATE, 1), (HoneypotMode.NOISE, 2), (HoneypotMode.LAST_STEP, 3)],
)
async def test_honeypots_mismatch_in_full_mode(
    reset: World, mode: HoneypotMode, first_bad: int
) -> None:
    cheat = await honeypot(reset, mode)
    outcome = audit(reset, make_job(reset, cheat))
    assert (outcome.result, outcome.first_bad_leaf) == ("MISMATCH", first_bad)
    assert outcome.recomputed_leaves_root != cheat.leaves_root


@pytest.mark.parametrize(
    ("mode", "first_bad"),
    [(HoneypotMode.FABRICATE, 1), (HoneypotMode.NOISE, 2), (HoneypotMode.LAST_STEP, 3)],
)
async def test_honeypots_mismatch_in_segments_mode(
    carry: World, mode: HoneypotMode, first_bad: int
) -> None:
    """Each honeypot serves its own states (fabricate: the honest start it published as leaf
    0); the window ending at the first perturbed leaf shows it (last_step: the final one)."""
    cheat, states = await honeypot_with_states(carry, mode)
    outcome = audit(carry, make_job(carry, cheat, states=states))
    assert (outcome.result, outcome.first_bad_leaf) == ("MISMATCH", first_bad)


def test_a_fabricated_start_is_caught_by_leaf_0(carry: World) -> None:
    """A cheater that trains from its own start and commits (and serves) that trajectory
    consistently replays fine window by window; only leaf 0 against the public start shows it."""
    fake = fabricated_start(carry.theta_start)
    cheat = carry.train(theta=fake)
    outcome = audit(carry, make_job(carry, cheat))
    assert (outcome.result, outcome.first_bad_leaf) == ("MISMATCH", 0)


def test_a_wrong_delta_hash_mismatches(carry: World, honest_carry: RoundResult) -> None:
    commit = commit_of(carry, honest_carry, delta_scale=0.5)
    outcome = audit(carry, make_job(carry, honest_carry, commit=commit))
    assert (outcome.result, outcome.first_bad_leaf) == ("MISMATCH", None)
    assert "delta" in outcome.reason


# -- BAD_PROOF --------------------------------------------------------------------------------


def _forge_stage(built: Built, i: int) -> list[dict]:
    preimages = [dict(p) for p in built.job["preimages"]]
    stages = [dict(s) for s in preimages[i]["stages"]]
    stages[0]["m"] = "ab" * 32
    preimages[i]["stages"] = stages
    return preimages


def test_forged_preimages_do_not_merkle_to_the_root(
    reset: World, honest_reset: RoundResult
) -> None:
    built = make_job(reset, honest_reset)
    set_preimages(built, _forge_stage(built, 2), releaf=True)
    outcome = audit(reset, built)
    assert outcome.result == "BAD_PROOF"
    assert "leaves_root" in outcome.reason
    assert outcome.recomputed_leaves_root == NO_REPLAY_ROOT


def test_a_preimage_that_does_not_hash_to_its_leaf(reset: World, honest_reset: RoundResult) -> None:
    built = make_job(reset, honest_reset)
    set_preimages(built, _forge_stage(built, 2), releaf=False)
    outcome = audit(reset, built)
    assert outcome.result == "BAD_PROOF"
    assert "does not hash to leaf 2" in outcome.reason


def test_a_preimage_of_the_wrong_step(reset: World, honest_reset: RoundResult) -> None:
    """The miner commits (the root of) a leaf 2 that claims another step."""
    preimages = [leaf.preimage for leaf in honest_reset.leaves]
    preimages[2] = attrs.evolve(preimages[2], t=5)
    outcome = audit(reset, make_job(reset, honest_reset, preimages=preimages))
    assert outcome.result == "BAD_PROOF"
    assert "preimage 2 is for" in outcome.reason


def _tampered(state: StateAt) -> StateAt:
    theta = {n: a.copy() for n, a in state.theta.items()}
    first = min(theta)
    theta[first].reshape(-1)[0] += np.float32(1e-3)
    return attrs.evolve(state, theta=theta)


def test_a_served_state_that_is_not_its_leaf(carry: World, honest_carry: RoundResult) -> None:
    built = make_job(carry, honest_carry)
    digests = [leaf.digest for leaf in honest_carry.leaves]
    bad = _tampered(honest_carry.leaf_states[1])
    envelope, blob = serve_of(carry, built.job["challenge_hash"], digests, 1, bad)
    _replace_serve(built, carry, 1, envelope, blob)
    outcome = audit(carry, built)
    assert outcome.result == "BAD_PROOF"
    assert "stage hashes" in outcome.reason


def test_a_serve_whose_tensor_root_is_not_its_blobs(
    carry: World, honest_carry: RoundResult
) -> None:
    built = make_job(carry, honest_carry)
    digests = [leaf.digest for leaf in honest_carry.leaves]
    state = honest_carry.leaf_states[1]
    envelope, blob = serve_of(carry, built.job["challenge_hash"], digests, 1, state, step_shift=1)
    _replace_serve(built, carry, 1, envelope, blob)
    outcome = audit(carry, built)
    assert outcome.result == "BAD_PROOF"
    assert "tensor_root" in outcome.reason


def test_a_serve_with_a_proof_of_another_leaf(carry: World, honest_carry: RoundResult) -> None:
    built = make_job(carry, honest_carry)
    digests = [leaf.digest for leaf in honest_carry.leaves]
    state = honest_carry.leaf_states[1]
    envelope, blob = serve_of(carry, built.job["challenge_hash"], digests, 1, state, proof_index=2)
    _replace_serve(built, carry, 1, envelope, blob)
    outcome = audit(carry, built)
    assert outcome.result == "BAD_PROOF"
    assert "proof" in outcome.reason


def test_an_ef_in_blob_that_is_not_the_committed_one(
    carry: World, honest_carry: RoundResult
) -> None:
    built = make_job(carry, honest_carry)
    ef_in = {n: np.full_like(a, 1e-4) for n, a in honest_carry.theta_end.items()}
    blob = pack_state(ef_in)
    built.job["ef_in_sha256"] = sha(blob)
    built.blobs[sha(blob)] = blob
    outcome = audit(carry, built)
    assert outcome.result == "BAD_PROOF"
    assert "ef_in" in outcome.reason


def test_the_committed_ef_in_blob_is_used(carry: World, honest_carry: RoundResult) -> None:
    ef_in = {n: np.full_like(a, 1e-4) for n, a in honest_carry.theta_end.items()}
    built = make_job(carry, honest_carry, commit=commit_of(carry, honest_carry, ef_in=ef_in))
    blob = pack_state(ef_in)
    built.job["ef_in_sha256"] = sha(blob)
    built.blobs[sha(blob)] = blob
    assert audit(carry, built).result == "MATCH"


# -- ASSIGNMENT_VIOLATION and WITHHELD --------------------------------------------------------


@pytest.mark.parametrize("policy", ["carry", "reset"])
def test_training_on_other_ids_is_an_assignment_violation(
    policy: str, carry: World, reset: World
) -> None:
    world = carry if policy == "carry" else reset
    other = world.train(ids=world.other_ids())
    outcome = audit(world, make_job(world, other))
    assert (outcome.result, outcome.first_bad_leaf) == ("ASSIGNMENT_VIOLATION", None)
    assert outcome.recomputed_leaves_root == NO_REPLAY_ROOT


def test_a_missing_serve_is_withheld_after_the_deadline_only(
    carry: World, honest_carry: RoundResult
) -> None:
    built = make_job(carry, honest_carry, serve_starts=[0, 2])
    outcome = audit(carry, built, now_round=SERVE_DEADLINE + 1)
    assert outcome.result == "WITHHELD"
    assert outcome.recomputed_leaves_root == NO_REPLAY_ROOT
    for now in (SERVE_DEADLINE, None):
        with pytest.raises(NotReady) as caught:
            audit(carry, built, now_round=now)
        assert caught.value.retry is True


# -- jobs that fail without retry -------------------------------------------------------------


def test_segments_that_differ_from_the_derivation(carry: World, honest_carry: RoundResult) -> None:
    built = make_job(carry, honest_carry, segments=[(1, 2), (2, 3)])
    with pytest.raises(BadJob, match="differ from the derived") as caught:
        audit(carry, built)
    assert caught.value.retry is False


def test_a_mode_the_state_policy_does_not_imply(
    carry: World, honest_carry: RoundResult, reset: World, honest_reset: RoundResult
) -> None:
    with pytest.raises(BadJob, match="implies segments"):
        audit(carry, make_job(carry, honest_carry, mode="full"))
    with pytest.raises(BadJob, match="implies full"):
        audit(reset, make_job(reset, honest_reset, mode="segments", segments=[(2, 3)]))


def test_a_beacon_signature_that_is_not_the_challenges(
    carry: World, honest_carry: RoundResult
) -> None:
    built = make_job(carry, honest_carry)
    built.job["beacon_signature"] = "00" * 48
    with pytest.raises(BadJob, match="beacon_sig_sha256"):
        audit(carry, built)


def test_a_challenge_not_sealed_by_the_coordinator(carry: World, honest_carry: RoundResult) -> None:
    built = make_job(carry, honest_carry)
    built.job["challenge_envelope"]["sig"] = "00" * 64
    with pytest.raises(BadJob, match="challenge_envelope"):
        audit(carry, built)


def test_a_start_state_that_is_not_the_round_opens(carry: World, honest_carry: RoundResult) -> None:
    built = make_job(carry, honest_carry)
    blob = pack_state(honest_carry.theta_end)
    built.job["theta_start_sha256"] = sha(blob)
    built.blobs[sha(blob)] = blob
    with pytest.raises(BadJob, match="theta_hash"):
        audit(carry, built)


# -- the cheap checks beyond the spec's list ------------------------------------------------


def test_a_metrics_root_that_is_not_the_preimages(reset: World, honest_reset: RoundResult) -> None:
    commit = attrs.evolve(commit_of(reset, honest_reset), metrics_root="cd" * 32)
    outcome = audit(reset, make_job(reset, honest_reset, commit=commit))
    assert outcome.result == "BAD_PROOF"
    assert "metrics_root" in outcome.reason


@pytest.mark.parametrize(
    "change", [{"rng_ctr": 1}, {"loss_f32": "3f800000"}], ids=["rng_ctr", "loss"]
)
def test_a_wrong_leaf_0_is_caught_though_no_window_ends_there(
    carry: World, honest_carry: RoundResult, change: dict[str, object]
) -> None:
    preimages = [leaf.preimage for leaf in honest_carry.leaves]
    preimages[0] = attrs.evolve(preimages[0], **change)  # type: ignore[arg-type]
    outcome = audit(carry, make_job(carry, honest_carry, preimages=preimages))
    assert (outcome.result, outcome.first_bad_leaf) == ("MISMATCH", 0)


def test_served_step_counts_that_do_not_advance_one_a_step(
    carry: World, honest_carry: RoundResult
) -> None:
    built = make_job(carry, honest_carry)
    digests = [leaf.digest for leaf in honest_carry.leaves]
    state = honest_carry.leaf_states[1]
    skewed = attrs.evolve(state, opt=attrs.evolve(state.opt, step=state.opt.step + 1))
    envelope, blob = serve_of(carry, built.job["challenge_hash"], digests, 1, skewed)
    _replace_serve(built, carry, 1, envelope, blob)
    outcome = audit(carry, built)
    assert outcome.result == "BAD_PROOF"
    assert "step counts" in outcome.reason
