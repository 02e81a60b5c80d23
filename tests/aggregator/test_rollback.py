"""Rollback of rounds w and w+1 without faulted miners (spec 7 "Rollback"; aggregator/rollback.py).

Two real rounds of the tiny model are merged with ``merge_blobs`` (round 0 from genesis, round 1
from its output), then rolled back. Checked: the faulted miner leaves no trace (both rounds equal
fresh merges of the others, also when it took part in both), the new tapes replay, the Rollback
body and its envelope, determinism, a fault only in w+1 (round w's tape comes back byte for byte
and ``recomputed`` names w+1 only), the refusals (no faulted id, an id only ever excluded, tapes
that do not chain, another key, a missing or wrong object) and what ``verify_rollback`` catches.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np
import pytest

from hypertrain.aggregator.merge import Params
from hypertrain.aggregator.outerstate import unpack_outer
from hypertrain.aggregator.rollback import (
    RollbackError,
    RollbackInputs,
    RollbackMismatch,
    RollbackStep,
    compute_rollback,
    plan_rollback,
    rollback_blobs,
    seal_rollback,
    verify_rollback,
)
from hypertrain.aggregator.step import MergeInputs, Step, merge_blobs
from hypertrain.aggregator.tape import SignedTape, parse_signed_tape, seal_tape
from hypertrain.aggregator.tape_replay import replay_tape
from hypertrain.protocol.converter import unstructure
from hypertrain.protocol.envelope import NEVER, verify
from hypertrain.protocol.errors import NotFound, SchemaError, UnauthorizedSigner
from hypertrain.protocol.f32 import f32_hex
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.manifest import RunManifest
from hypertrain.protocol.messages import Rollback
from hypertrain.trainer.state import unpack_state
from nurseries import run_inline
from tests.aggregator.chain import delta, key_of, merge_round
from tests.trainer.helpers import tiny_manifest

COORD = Keypair.from_seed(b"\x01" * 32)
A, B, X, Y, Z = (Keypair.from_seed(bytes([i]) * 32).ss58 for i in (2, 3, 4, 5, 6))
CAUSE = hashlib.sha256(b"verdict").hexdigest()

Uploads = Mapping[str, bytes]


@attrs.frozen
class World:
    """The run, the store and the applied steps of rounds 0 and 1."""

    manifest: RunManifest
    store: dict[str, bytes]
    steps: tuple[Step, Step]

    @property
    def run_id(self) -> str:
        return self.manifest.run_id()

    def tape(self, i: int) -> SignedTape:
        return parse_signed_tape(self.store[self.steps[i].tape_key])

    def inputs(self, *faulted: str, causes: tuple[str, ...] = (CAUSE,)) -> RollbackInputs:
        return RollbackInputs(self.manifest, self.tape(0), self.tape(1), faulted, causes)

    def rollback(self, *faulted: str) -> RollbackStep:
        return rollback_blobs(self.inputs(*faulted), self.store, COORD)

    def after(self, rb: RollbackStep) -> dict[str, bytes]:
        return {**self.store, **{key_of(blob): blob for blob in rb.objects}}


def _manifest() -> RunManifest:
    """The tiny model's manifest with our K_coord."""
    return attrs.evolve(tiny_manifest(), coord_pubkey=COORD.ss58)


def _world(round0: Uploads, round1: Uploads) -> World:
    manifest = _manifest()
    store: dict[str, bytes] = {}
    step0 = merge_round(manifest, 0, None, round0, store)
    step1 = merge_round(manifest, 1, step0, round1, store)
    return World(manifest, store, (step0, step1))


@pytest.fixture(scope="module")
def manifest() -> RunManifest:
    return _manifest()


@pytest.fixture(scope="module")
def deltas(manifest: RunManifest) -> dict[str, bytes]:
    """Honest small deltas, X's huge (decodable, preclipped, still pulling hard) and Y's garbage."""
    return {
        "a0": delta(manifest, 10, 1e-3),
        "b0": delta(manifest, 11, 2e-3),
        "x0": delta(manifest, 12, 1e6),
        "a1": delta(manifest, 20, 1e-3),
        "b1": delta(manifest, 21, 2e-3),
        "x1": delta(manifest, 22, -1e6),
        "z1": delta(manifest, 23, 3e-3),
        "garbage": b"not a delta payload",
    }


@pytest.fixture(scope="module")
def world(deltas: dict[str, bytes]) -> World:
    """X takes part in both rounds; Y's round-0 delta does not decode (the tape excludes it)."""
    round0 = {A: deltas["a0"], B: deltas["b0"], X: deltas["x0"], Y: deltas["garbage"]}
    round1 = {A: deltas["a1"], B: deltas["b1"], X: deltas["x1"], Z: deltas["z1"]}
    return _world(round0, round1)


def test_the_world_is_as_described(world: World) -> None:
    body0, body1 = world.tape(0).body, world.tape(1).body
    assert [i.id for i in body0.inputs] == sorted([A, B, X])
    assert body0.excluded == (Y,)
    assert [i.id for i in body1.inputs] == sorted([A, B, X, Z])
    assert body1.prev_state == body0.out_state


def test_the_faulted_miner_leaves_no_trace_in_either_round(
    world: World, deltas: dict[str, bytes]
) -> None:
    rb = world.rollback(X)
    fresh: dict[str, bytes] = {}
    clean0 = merge_round(world.manifest, 0, None, {A: deltas["a0"], B: deltas["b0"]}, fresh)
    clean1 = merge_round(
        world.manifest, 1, clean0, {A: deltas["a1"], B: deltas["b1"], Z: deltas["z1"]}, fresh
    )
    for new, clean in zip(rb.steps, (clean0, clean1), strict=True):
        assert new.out_state == clean.out_state
        assert new.theta_start_sha256 == clean.theta_start_sha256
        assert (new.theta_hash, new.outer_state_hash, new.center_hash) == (
            clean.theta_hash,
            clean.outer_state_hash,
            clean.center_hash,
        )
    assert rb.theta_hash == clean1.theta_hash != world.steps[1].theta_hash
    assert rb.out_state == clean1.out_state
    assert rb.theta_start_sha256_w1 == clean0.theta_start_sha256
    assert rb.theta_start_sha256_w2 == clean1.theta_start_sha256
    # X's pull was real: the applied chain is another one
    assert world.steps[0].theta_hash != clean0.theta_hash


def test_the_new_tapes_exclude_the_faulted_miner_and_replay(world: World) -> None:
    rb = world.rollback(X)
    store = world.after(rb)
    params = Params.from_outer(world.manifest.outer)
    tapes = [parse_signed_tape(store[key]) for key in rb.tape_keys]
    half, third = f32_hex(0.5), f32_hex(float(np.float32(1) / np.float32(3)))
    assert [(i.id, i.weight) for i in tapes[0].body.inputs] == sorted([(A, half), (B, half)])
    assert tapes[0].body.excluded == tuple(sorted([X, Y]))  # X faulted, Y did not decode
    assert [i.id for i in tapes[1].body.inputs] == sorted([A, B, Z])
    assert {i.weight for i in tapes[1].body.inputs} == {third}
    assert tapes[1].body.excluded == (X,)
    assert tapes[0].body.prev_state == world.tape(0).body.prev_state
    assert tapes[1].body.prev_state == tapes[0].body.out_state == rb.steps[0].out_state
    for tape in tapes:
        report = replay_tape(
            tape, coord_ss58=COORD.ss58, load_object=store.__getitem__, outer_params=params
        )
        assert report.out_state == tape.body.out_state
    assert tapes[1].body.out_state == rb.out_state
    assert (rb.theta_hash, rb.outer_state_hash, rb.center_hash) == (
        tapes[1].body.theta_hash,
        tapes[1].body.outer_state_hash,
        tapes[1].body.center_hash,
    )
    # the start states are theta-only states of the new OuterStates
    for key, out in (
        (rb.theta_start_sha256_w1, rb.steps[0].out_state),
        (rb.theta_start_sha256_w2, rb.out_state),
    ):
        theta = unpack_state(store[key]).theta
        expected = unpack_outer(store[out]).theta
        assert all(np.array_equal(theta[n], expected[n]) for n in expected)


def test_the_rollback_body_and_its_envelope(world: World) -> None:
    rb = rollback_blobs(world.inputs(X, causes=(CAUSE, "00" * 32, CAUSE)), world.store, COORD)
    assert unstructure(rb.body) == {
        "w": 0,
        "excluded": [X],
        "old_theta_hash_w2": world.steps[1].theta_hash,
        "new_theta_hash_w2": rb.theta_hash,
        "new_outer_state_hash": rb.outer_state_hash,
        "recomputed": ["agg_w", "step_w", "agg_w1", "step_w1"],
        "cause_hashes": ["00" * 32, CAUSE],
    }
    envelope = seal_rollback(COORD, world.run_id, rb.body)
    assert (envelope.type, envelope.signer, envelope.exp_drand) == ("Rollback", COORD.ss58, NEVER)
    checked = verify(
        envelope.to_json(),
        expected_run_id=world.run_id,
        signer_allowed=lambda _t, signer: signer == world.manifest.coord_pubkey,
    )
    assert checked.message == rb.body


def test_several_faulted_ids_are_sorted_and_distinct(world: World) -> None:
    rb = world.rollback(Z, X, Z)
    assert rb.body.excluded == tuple(sorted([X, Z]))
    assert [i.id for i in parse_signed_tape(world.after(rb)[rb.tape_keys[1]]).body.inputs] == (
        sorted([A, B])
    )


def test_the_recomputation_is_deterministic(world: World) -> None:
    first, second = world.rollback(X), world.rollback(X)
    assert first.objects == second.objects
    assert first.tape_keys == second.tape_keys
    assert first.body == second.body
    assert seal_rollback(COORD, world.run_id, first.body) == seal_rollback(
        COORD, world.run_id, second.body
    )
    assert len(first.objects) == len({key_of(blob) for blob in first.objects})


def test_a_fault_only_in_w1_gives_round_w_back_byte_for_byte(world: World) -> None:
    rb = world.rollback(Z)
    old0, old1 = world.steps
    assert rb.tape_keys[0] == old0.tape_key
    assert rb.steps[0].objects == old0.objects
    assert rb.theta_start_sha256_w1 == old0.theta_start_sha256
    assert rb.tape_keys[1] != old1.tape_key
    assert rb.body.recomputed == ("agg_w1", "step_w1")
    assert rb.body.excluded == (Z,)
    new1 = parse_signed_tape(world.after(rb)[rb.tape_keys[1]]).body
    assert [i.id for i in new1.inputs] == sorted([A, B, X])
    assert new1.excluded == (Z,)
    assert new1.prev_state == old0.out_state


def test_a_fault_only_in_w_recomputes_all_four(deltas: dict[str, bytes]) -> None:
    world = _world({A: deltas["a0"], X: deltas["x0"]}, {A: deltas["a1"], B: deltas["b1"]})
    rb = world.rollback(X)
    assert rb.body.recomputed == ("agg_w", "step_w", "agg_w1", "step_w1")
    new0, new1 = (parse_signed_tape(world.after(rb)[k]).body for k in rb.tape_keys)
    assert new0.excluded == (X,)
    assert new1.excluded == ()  # X was not in round 1: nothing to leave out there
    assert [i.id for i in new1.inputs] == sorted([A, B])
    assert new1.inputs == world.tape(1).body.inputs  # same deltas, same weights
    assert new1.prev_state != world.tape(1).body.prev_state


def test_refusals(world: World) -> None:
    with pytest.raises(RollbackError, match="no faulted miner"):
        world.rollback()
    with pytest.raises(RollbackError, match=f"{Y} is only excluded by"):
        world.rollback(Y)
    stranger = Keypair.from_seed(b"\x09" * 32).ss58
    with pytest.raises(RollbackError, match=f"{stranger} is not in"):
        world.rollback(X, stranger)
    tape0, tape1 = world.tape(0), world.tape(1)
    with pytest.raises(RollbackError, match="are not w, w\\+1"):
        plan_rollback(tape1, tape0, [X], coord_ss58=COORD.ss58)
    with pytest.raises(RollbackError, match="are not w, w\\+1"):
        plan_rollback(tape0, tape0, [X], coord_ss58=COORD.ss58)
    unchained = seal_tape(COORD, attrs.evolve(tape1.body, prev_state="00" * 32))
    with pytest.raises(RollbackError, match="is not round 0's out_state"):
        plan_rollback(tape0, unchained, [X], coord_ss58=COORD.ss58)
    other = Keypair.from_seed(b"\x08" * 32)
    with pytest.raises(UnauthorizedSigner):
        plan_rollback(tape0, tape1, [X], coord_ss58=other.ss58)
    with pytest.raises(RollbackError, match="is not the run's K_coord"):
        rollback_blobs(world.inputs(X), world.store, other)


async def test_compute_rollback_fetches_then_computes_the_same(world: World) -> None:
    fetched: list[str] = []

    async def fetch(key: str) -> bytes:
        fetched.append(key)
        if key not in world.store:
            raise NotFound(f"object {key}")
        return world.store[key]

    rb = await compute_rollback(fetch, world.inputs(X), COORD, run_inline)
    assert rb.objects == world.rollback(X).objects
    plan = plan_rollback(world.tape(0), world.tape(1), [X], coord_ss58=COORD.ss58)
    assert fetched == list(plan.object_keys())
    assert key_of(world.store[world.tape(0).body.inputs[0].object]) in fetched
    x_objects = {
        i.object for t in (world.tape(0), world.tape(1)) for i in t.body.inputs if i.id == X
    }
    assert not x_objects & set(fetched)  # the faulted deltas are never read

    async def forgetful(key: str) -> bytes:
        if key == plan.rounds[1].uploads[0][1]:
            raise NotFound(f"object {key}")
        return world.store[key]

    with pytest.raises(NotFound):
        await compute_rollback(forgetful, world.inputs(X), COORD, run_inline)

    async def liar(key: str) -> bytes:
        return b"other bytes"

    with pytest.raises(RollbackError, match="hashes to something else"):
        await compute_rollback(liar, world.inputs(X), COORD, run_inline)
    with pytest.raises(RollbackError, match="no faulted miner"):
        await compute_rollback(liar, world.inputs(), COORD, run_inline)


def test_a_kept_delta_that_no_longer_decodes_is_an_error(world: World) -> None:
    a_object = next(i.object for i in world.tape(0).body.inputs if i.id == A)
    broken = {**world.store, a_object: b"corrupt"}
    with pytest.raises(RollbackError, match=f"stored delta of {A} no longer decodes"):
        rollback_blobs(world.inputs(X), broken, COORD)


def test_merge_blobs_excluded_is_like_a_missing_blob(
    world: World, deltas: dict[str, bytes]
) -> None:
    tape = world.tape(0)
    inputs = MergeInputs(
        world.run_id,
        0,
        world.manifest,
        tape.body.prev_theta_hash,
        tape.body.prev_state,
        tuple((i.id, i.object) for i in tape.body.inputs),
    )
    prev = world.store[tape.body.prev_state]
    blobs = [(A, deltas["a0"]), (B, deltas["b0"]), (X, deltas["x0"])]
    left_out = merge_blobs(inputs, prev, blobs, COORD, excluded=[X])
    missing = merge_blobs(inputs, prev, [*blobs[:2], (X, None)], COORD)
    assert left_out.objects == missing.objects
    assert merge_blobs(inputs, prev, blobs[:2], COORD, excluded=[X]).objects == missing.objects


# --- verify_rollback -------------------------------------------------------------------------


def _verify(
    world: World, body: Rollback, new: tuple[SignedTape, SignedTape], store: dict[str, bytes]
) -> Any:
    return verify_rollback(
        body,
        (world.tape(0), world.tape(1)),
        new,
        run_id=world.run_id,
        manifest=world.manifest,
        load_object=store.__getitem__,
    )


@pytest.mark.parametrize("faulted", [(X,), (Z,), (X, Z)])
def test_verify_rollback_accepts_the_computed_rollback(
    world: World, faulted: tuple[str, ...]
) -> None:
    rb = world.rollback(*faulted)
    store = world.after(rb)
    new = (parse_signed_tape(store[rb.tape_keys[0]]), parse_signed_tape(store[rb.tape_keys[1]]))
    report = _verify(world, rb.body, new, store)
    assert report.tape_keys == rb.tape_keys
    assert report.excluded == rb.body.excluded
    assert (report.out_state, report.theta_hash, report.outer_state_hash, report.center_hash) == (
        rb.out_state,
        rb.theta_hash,
        rb.outer_state_hash,
        rb.center_hash,
    )


def _mismatch(
    world: World, body: Rollback, new: tuple[SignedTape, SignedTape], store: dict[str, bytes]
) -> str:
    with pytest.raises(RollbackMismatch) as info:
        _verify(world, body, new, store)
    return info.value.field


def test_verify_rollback_catches_what_is_wrong(world: World) -> None:
    rb = world.rollback(X)
    store = world.after(rb)
    new = (parse_signed_tape(store[rb.tape_keys[0]]), parse_signed_tape(store[rb.tape_keys[1]]))
    old = (world.tape(0), world.tape(1))
    wrong = "ee" * 32
    for field in ("old_theta_hash_w2", "new_theta_hash_w2", "new_outer_state_hash"):
        assert _mismatch(world, attrs.evolve(rb.body, **{field: wrong}), new, store) == field
    assert (
        _mismatch(world, attrs.evolve(rb.body, recomputed=("agg_w1", "step_w1")), new, store)
        == "recomputed"
    )
    assert _mismatch(world, attrs.evolve(rb.body, w=1), new, store) == "w"
    assert (
        _mismatch(world, attrs.evolve(rb.body, cause_hashes=(wrong, CAUSE)), new, store)
        == "cause_hashes"
    )
    # the old tapes as the "new" ones: X is still an input
    assert _mismatch(world, rb.body, old, store) == "new_w.inputs"
    # another excluded set than the body says
    assert _mismatch(world, attrs.evolve(rb.body, excluded=(Z,)), new, store) == "new_w.inputs"
    # the tapes swapped
    assert _mismatch(world, rb.body, (new[1], new[0]), store) == "new_w.w"
    # a new tape of w+1 that does not start from the new w
    stale = seal_tape(COORD, attrs.evolve(new[1].body, prev_state=old[1].body.prev_state))
    assert _mismatch(world, rb.body, (new[0], stale), store) == "new_w1.prev_state"
    # a new tape whose numbers are not what the merge gives (signed, well-formed, wrong)
    forged = seal_tape(COORD, attrs.evolve(new[1].body, theta_hash=wrong))
    assert _mismatch(
        world, attrs.evolve(rb.body, new_theta_hash_w2=wrong), (new[0], forged), store
    ) == ("new_w1.theta_hash")
    # a tape signed by someone else
    other = Keypair.from_seed(b"\x08" * 32)
    with pytest.raises(UnauthorizedSigner):
        _verify(world, rb.body, (new[0], seal_tape(other, new[1].body)), store)


def test_a_prev_state_that_is_not_the_tapes_is_an_error(world: World) -> None:
    lying = seal_tape(COORD, attrs.evolve(world.tape(0).body, prev_theta_hash="ee" * 32))
    inputs = attrs.evolve(world.inputs(X), tape_w=lying)
    with pytest.raises(RollbackError, match="stored prev_state has TH"):
        rollback_blobs(inputs, world.store, COORD)


def test_a_cause_hash_that_is_not_a_digest_is_refused(world: World) -> None:
    with pytest.raises(SchemaError, match="cause_hashes"):
        rollback_blobs(world.inputs(X, causes=("not a digest",)), world.store, COORD)
