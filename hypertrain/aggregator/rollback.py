"""Rollback of rounds ``w`` and ``w + 1`` without faulted miners (spec/protocol.md section 7).

A replay fault found in round ``w`` or ``w + 1`` before finality undoes that miner's influence:
round ``w`` is merged again from its tape's ``prev_state`` without the faulted ids, then round
``w + 1`` from that new output, re-aggregated around the new center (the new OuterState's
``center``). Round ``w + 1``'s miners trained from the *old* theta; their deltas are applied,
unchanged, to the corrected one. The new state after ``w + 1`` is what RoundOpen(``w + 2``)
names. Promises:

- :func:`plan_rollback` checks the request before anything is fetched: both tapes verify as
  K_coord's, share one run, are consecutive (``w + 1``'s ``prev_state`` is ``w``'s
  ``out_state``), the faulted set is not empty and every faulted id is an *input* of one of the
  two tapes (an id a tape only names in ``excluded`` never influenced it, so it is no cause):
  :class:`RollbackError` otherwise;
- each round is merged by :func:`~hypertrain.aggregator.step.merge_blobs`, the one merge: its
  inputs are the old tape's inputs (same delta objects, in order) less the faulted ids, with the
  uniform weight over those left; its ``excluded`` is the old tape's ``excluded`` plus the
  faulted ids that were its inputs (a faulted miner is blacklisted, so it is left out of both
  rounds). The old ``excluded`` ids are not looked at again. A kept delta that no longer decodes
  is a :class:`RollbackError`, not a silent exclusion;
- :func:`rollback_blobs` is a function of :class:`RollbackInputs`, the object bytes and K_coord:
  ed25519 signatures are deterministic, so running it twice gives the same objects under the
  same keys, byte for byte; :func:`compute_rollback` fetches the objects (the previous state of
  ``w`` and every kept delta; each must hash to its key) and computes in the caller's
  ``run_sync``, like :func:`~hypertrain.aggregator.step.compute_step`;
- the Rollback body is ``{w, excluded (the faulted ids, sorted), old_theta_hash_w2 (the old
  tape ``w + 1``'s theta_hash), new_theta_hash_w2, new_outer_state_hash (the new state after
  ``w + 1``), recomputed, cause_hashes (the caller's, sorted and distinct)}``, sealed by
  :func:`seal_rollback` with ``exp_drand = NEVER`` like RoundOpen;
- ``recomputed`` names the rounds whose record changed: ``agg_w, step_w`` when the new tape of
  ``w`` differs from the old one, ``agg_w1, step_w1`` likewise for ``w + 1``, in that order. A
  tape records a round's aggregation and its step together, so they are listed together. With
  faulted ids only in ``w + 1``, round ``w`` is recomputed to the very same tape (same bytes,
  same key) and only ``[agg_w1, step_w1]`` is listed; with one in ``w``, all four (round
  ``w + 1`` then starts from another state);
- :func:`verify_rollback` needs no key: it checks the Rollback body against the two old and two
  new tapes and replays both new tapes from the stored objects
  (:func:`~hypertrain.aggregator.tape_replay.replay_tape`): together, the new tape bodies are
  what this module computes, field for field, and signed by K_coord.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING

from attrs import frozen

from hypertrain.aggregator.merge import Params, sorted_ids
from hypertrain.aggregator.step import Fetch, MergeInputs, Step, merge_blobs
from hypertrain.aggregator.tape import SignedTape, parse_signed_tape, tape_key, verify_tape
from hypertrain.aggregator.tape_replay import TapeMismatch, replay_tape
from hypertrain.protocol.envelope import NEVER, Envelope, seal
from hypertrain.protocol.errors import ContractMismatch, SchemaError
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.manifest import RunManifest
from hypertrain.protocol.messages import RecomputedPart, Rollback
from hypertrain.protocol.validators import FieldError

if TYPE_CHECKING:
    from nurseries import RunSync

__all__ = [
    "RollbackError",
    "RollbackInputs",
    "RollbackMismatch",
    "RollbackPlan",
    "RollbackReport",
    "RollbackStep",
    "RoundPlan",
    "compute_rollback",
    "plan_rollback",
    "recomputed_parts",
    "rollback_blobs",
    "seal_rollback",
    "verify_rollback",
]

_PARTS: tuple[tuple[RecomputedPart, RecomputedPart], tuple[RecomputedPart, RecomputedPart]] = (
    ("agg_w", "step_w"),
    ("agg_w1", "step_w1"),
)


class RollbackError(ContractMismatch):
    """A rollback that cannot be computed: tapes that do not chain, no or wrong faulted ids, a
    stored object that is not what the tape says."""


class RollbackMismatch(RollbackError):
    """A Rollback that does not verify; ``field`` names the first item found wrong."""

    def __init__(self, field: str, detail: str) -> None:
        super().__init__(f"rollback mismatch at {field}: {detail}")
        self.field = field


@frozen
class RollbackInputs:
    """Everything a rollback needs besides the objects (module doc)."""

    manifest: RunManifest
    tape_w: SignedTape
    """The applied global tape of round ``w``."""
    tape_w1: SignedTape
    """The applied global tape of round ``w + 1``, chained from ``tape_w``."""
    faulted: tuple[str, ...]
    """The faulted hotkeys (any order; duplicates are ignored)."""
    cause_hashes: tuple[str, ...] = ()
    """Why (e.g. the body digests of the fault verdicts); sorted and deduplicated here."""


@frozen
class RoundPlan:
    """How one round is merged again: the inputs kept and the ids its new tape excludes."""

    w: int
    uploads: tuple[tuple[str, str], ...]
    """``(hotkey, delta_hash)`` of the old tape's inputs less the faulted ids, in tape order."""
    excluded: tuple[str, ...]
    """The old tape's ``excluded`` plus the faulted ids among its inputs, sorted."""


@frozen
class RollbackPlan:
    """A checked rollback request (:func:`plan_rollback`)."""

    run_id: str
    w: int
    faulted: tuple[str, ...]
    """Sorted and distinct: the Rollback's ``excluded``."""
    prev_state: str
    """Round ``w``'s ``prev_state`` (store key), where the recomputation starts."""
    rounds: tuple[RoundPlan, RoundPlan]

    def object_keys(self) -> tuple[str, ...]:
        """The objects the recomputation reads: ``prev_state`` and every kept delta, once."""
        keys = [self.prev_state, *(obj for r in self.rounds for _, obj in r.uploads)]
        return tuple(dict.fromkeys(keys))


@frozen(eq=False)
class RollbackStep:
    """A computed rollback: the objects to store and what the coordinator records."""

    run_id: str
    w: int
    objects: tuple[bytes, ...]
    """New OuterStates, theta-only start states of ``w + 1`` and ``w + 2``, the two signed
    tapes (and round ``w``'s previous state, already stored), each once."""
    tape_keys: tuple[str, str]
    """The new tapes of rounds ``w`` and ``w + 1``."""
    theta_start_sha256_w1: str
    """The corrected start state of round ``w + 1``."""
    theta_start_sha256_w2: str
    """The start state of round ``w + 2``."""
    out_state: str
    """The new OuterState after ``w + 1`` (store key)."""
    theta_hash: str
    outer_state_hash: str
    center_hash: str
    """The new state's hashes after ``w + 1``: RoundOpen(``w + 2``)'s."""
    body: Rollback
    steps: tuple[Step, Step]
    """The two merges, as :func:`~hypertrain.aggregator.step.merge_blobs` returned them."""


@frozen
class RollbackReport:
    """A Rollback that verified (:func:`verify_rollback`)."""

    w: int
    excluded: tuple[str, ...]
    tape_keys: tuple[str, str]
    out_state: str
    theta_hash: str
    outer_state_hash: str
    center_hash: str


def _round_plan(tape: SignedTape, faulted: frozenset[str]) -> RoundPlan:
    body = tape.body
    kept = tuple((i.id, i.object) for i in body.inputs if i.id not in faulted)
    gone = {i.id for i in body.inputs if i.id in faulted}
    return RoundPlan(body.w, kept, tuple(sorted_ids(gone | set(body.excluded))))


def plan_rollback(
    tape_w: SignedTape, tape_w1: SignedTape, faulted: Collection[str], *, coord_ss58: str
) -> RollbackPlan:
    """Check a rollback request (module doc) and say what each round merges."""
    for tape in (tape_w, tape_w1):
        verify_tape(tape, coord_ss58=coord_ss58)
    body_w, body_w1 = tape_w.body, tape_w1.body
    if body_w1.run_id != body_w.run_id:
        raise RollbackError(f"rollback: the tapes are of runs {body_w.run_id} and {body_w1.run_id}")
    if body_w1.w != body_w.w + 1:
        raise RollbackError(f"rollback: tapes of rounds {body_w.w} and {body_w1.w} are not w, w+1")
    if body_w1.prev_state != body_w.out_state:
        raise RollbackError(
            f"rollback: round {body_w1.w}'s prev_state {body_w1.prev_state} is not round"
            f" {body_w.w}'s out_state {body_w.out_state}"
        )
    ids = frozenset(faulted)
    if not ids:
        raise RollbackError("rollback: no faulted miner given")
    inputs = {i.id for b in (body_w, body_w1) for i in b.inputs}
    for hotkey in sorted_ids(ids - inputs):
        only = "only excluded by" if hotkey in {*body_w.excluded, *body_w1.excluded} else "not in"
        raise RollbackError(
            f"rollback: {hotkey} is {only} the tapes of rounds {body_w.w} and {body_w1.w};"
            " only a merged input can be rolled back"
        )
    return RollbackPlan(
        run_id=body_w.run_id,
        w=body_w.w,
        faulted=tuple(sorted_ids(ids)),
        prev_state=body_w.prev_state,
        rounds=(_round_plan(tape_w, ids), _round_plan(tape_w1, ids)),
    )


def recomputed_parts(
    old: tuple[SignedTape, SignedTape], new: tuple[SignedTape, SignedTape]
) -> tuple[RecomputedPart, ...]:
    """The Rollback's ``recomputed``: a round's ``agg`` and ``step`` when its tape body changed."""
    return tuple(
        part
        for o, n, parts in zip(old, new, _PARTS, strict=True)
        if o.body != n.body
        for part in parts
    )


async def compute_rollback(
    fetch: Fetch, inputs: RollbackInputs, coord: Keypair, run_sync: RunSync
) -> RollbackStep:
    """Plan (before any fetch), fetch every object the rollback reads (each must hash to its
    key; NotFound passes through: a merged object must be there), then compute in
    ``run_sync``."""
    plan = _plan(inputs, coord)
    blobs: dict[str, bytes] = {}
    for key in plan.object_keys():
        data = await fetch(key)
        if hashlib.sha256(data).hexdigest() != key:
            raise RollbackError(f"rollback: the object fetched as {key} hashes to something else")
        blobs[key] = data
    step: RollbackStep = await run_sync(rollback_blobs, inputs, blobs, coord)
    return step


def _plan(inputs: RollbackInputs, coord: Keypair) -> RollbackPlan:
    coord_ss58 = inputs.manifest.coord_pubkey
    if coord.ss58 != coord_ss58:
        raise RollbackError(f"rollback: the key {coord.ss58} is not the run's K_coord {coord_ss58}")
    return plan_rollback(inputs.tape_w, inputs.tape_w1, inputs.faulted, coord_ss58=coord_ss58)


def _by_key(step: Step) -> dict[str, bytes]:
    return {hashlib.sha256(blob).hexdigest(): blob for blob in step.objects}


def rollback_blobs(
    inputs: RollbackInputs, blobs: Mapping[str, bytes], coord: Keypair
) -> RollbackStep:
    """The computing half of :func:`compute_rollback` (pure): ``blobs`` maps store keys to the
    bytes of at least :meth:`RollbackPlan.object_keys`."""
    plan = _plan(inputs, coord)
    old = (inputs.tape_w, inputs.tape_w1)
    prev_key, prev_blob = plan.prev_state, blobs[plan.prev_state]
    theta_hash = inputs.tape_w.body.prev_theta_hash
    steps: list[Step] = []
    tapes: list[SignedTape] = []
    for round_plan in plan.rounds:
        merge = MergeInputs(
            plan.run_id, round_plan.w, inputs.manifest, theta_hash, prev_key, round_plan.uploads
        )
        uploads = [(hotkey, blobs[obj]) for hotkey, obj in round_plan.uploads]
        step = merge_blobs(merge, prev_blob, uploads, coord, excluded=round_plan.excluded)
        objects = _by_key(step)
        tape = parse_signed_tape(objects[step.tape_key])
        kept = tuple((i.id, i.object) for i in tape.body.inputs)
        if kept != round_plan.uploads:
            lost = sorted_ids({h for h, _ in round_plan.uploads} - {h for h, _ in kept})
            raise RollbackError(
                f"rollback: round {round_plan.w}: the stored delta of {lost[0]} no longer decodes"
            )
        if tape.body.prev_theta_hash != theta_hash:  # round w: the stored state is the tape's?
            raise RollbackError(
                f"rollback: round {plan.w}'s stored prev_state has TH(theta)"
                f" {tape.body.prev_theta_hash}, its tape says {theta_hash}"
            )
        steps.append(step)
        tapes.append(tape)
        prev_key, prev_blob, theta_hash = step.out_state, objects[step.out_state], step.theta_hash
    step_w, step_w1 = steps
    try:
        body = Rollback(
            w=plan.w,
            excluded=plan.faulted,
            old_theta_hash_w2=inputs.tape_w1.body.theta_hash,
            new_theta_hash_w2=step_w1.theta_hash,
            new_outer_state_hash=step_w1.outer_state_hash,
            recomputed=recomputed_parts(old, (tapes[0], tapes[1])),
            cause_hashes=tuple(sorted(set(inputs.cause_hashes))),
        )
    except FieldError as e:
        raise SchemaError(f"Rollback: {e}") from e
    return RollbackStep(
        run_id=plan.run_id,
        w=plan.w,
        objects=tuple(dict.fromkeys((*step_w.objects, *step_w1.objects))),
        tape_keys=(step_w.tape_key, step_w1.tape_key),
        theta_start_sha256_w1=step_w.theta_start_sha256,
        theta_start_sha256_w2=step_w1.theta_start_sha256,
        out_state=step_w1.out_state,
        theta_hash=step_w1.theta_hash,
        outer_state_hash=step_w1.outer_state_hash,
        center_hash=step_w1.center_hash,
        body=body,
        steps=(step_w, step_w1),
    )


def seal_rollback(coord: Keypair, run_id: str, body: Rollback) -> Envelope:
    """``body`` sealed by K_coord, never expiring (like RoundOpen)."""
    return seal(coord, "Rollback", run_id, body, NEVER)


def _expect(field: str, expected: object, actual: object) -> None:
    if expected != actual:
        raise RollbackMismatch(field, f"it says {actual!r:.200}, the tapes give {expected!r:.200}")


def verify_rollback(
    body: Rollback,
    old: tuple[SignedTape, SignedTape],
    new: tuple[SignedTape, SignedTape],
    *,
    run_id: str,
    manifest: RunManifest,
    load_object: Callable[[str], bytes],
) -> RollbackReport:
    """Check that ``new`` are the tapes the rollback ``body`` of ``old`` computes (module doc).

    ``load_object(key) -> bytes`` reads the store (the old and new objects). Raises
    :class:`RollbackError` for old tapes that cannot be rolled back as ``body`` says,
    :class:`RollbackMismatch` naming the first wrong item (``new_w1.inputs``,
    ``new_w.out_state``, ``recomputed``...), and what :func:`verify_tape` raises for a bad
    signature.
    """
    coord_ss58 = manifest.coord_pubkey
    plan = plan_rollback(old[0], old[1], body.excluded, coord_ss58=coord_ss58)
    _expect("run_id", run_id, plan.run_id)
    _expect("w", plan.w, body.w)
    _expect("excluded", plan.faulted, body.excluded)
    _expect("cause_hashes", tuple(sorted(set(body.cause_hashes))), body.cause_hashes)
    params = Params.from_outer(manifest.outer)
    prev_state = plan.prev_state
    for name, tape, round_plan in zip(("new_w", "new_w1"), new, plan.rounds, strict=True):
        verify_tape(tape, coord_ss58=coord_ss58)
        got = tape.body
        _expect(f"{name}.run_id", plan.run_id, got.run_id)
        _expect(f"{name}.w", round_plan.w, got.w)
        _expect(f"{name}.prev_state", prev_state, got.prev_state)
        _expect(f"{name}.inputs", round_plan.uploads, tuple((i.id, i.object) for i in got.inputs))
        _expect(f"{name}.excluded", round_plan.excluded, got.excluded)
        try:
            replay_tape(tape, coord_ss58=coord_ss58, load_object=load_object, outer_params=params)
        except TapeMismatch as e:
            raise RollbackMismatch(f"{name}.{e.field}", e.detail) from e
        prev_state = got.out_state
    last = new[1].body
    _expect("old_theta_hash_w2", old[1].body.theta_hash, body.old_theta_hash_w2)
    _expect("new_theta_hash_w2", last.theta_hash, body.new_theta_hash_w2)
    _expect("new_outer_state_hash", last.outer_state_hash, body.new_outer_state_hash)
    _expect("recomputed", recomputed_parts(old, new), body.recomputed)
    return RollbackReport(
        w=plan.w,
        excluded=plan.faulted,
        tape_keys=(tape_key(new[0]), tape_key(new[1])),
        out_state=last.out_state,
        theta_hash=last.theta_hash,
        outer_state_hash=last.outer_state_hash,
        center_hash=last.center_hash,
    )
