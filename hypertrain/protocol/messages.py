"""The signed message bodies of protocol ``ht/1`` and the unsigned LeafPreimage (spec section 3).

Every body is a frozen attrs class whose validators enforce the spec's field rules; the one
converter (:mod:`hypertrain.protocol.converter`) is the only way to and from JSON. Arrays are
tuples here and JSON arrays on the wire; reals are f32 hex strings; ints are ``U``
(``0..2^53-1``) or ``Pos`` (``1..2^53-1``) and never bools. The RunManifest and its sub-objects
live in :mod:`hypertrain.protocol.manifest`.

Decisions where the spec leaves a rule open (each checked in ``__attrs_post_init__`` or a
validator, and documented on the class):

- free-text fields are bounded strings (``driver_version`` 128, ``uri`` 512, ``op_spec`` 256);
- arrays hold at most :data:`~hypertrain.protocol.validators.MAX_ITEMS` items, Merkle proofs at
  most 64;
- ``DeltaManifest.uri`` must be exactly ``objects/{delta_hash}``;
- ``StateServe.uri``'s last ``/`` segment must be a sha256 hex digest;
- ``AuditChallenge.segments`` are ``[a, b]`` with ``a < b``; ``reasons`` are distinct;
  ``serve_deadline > beacon_round``;
- ``Rollback.recomputed`` items are distinct (a subset); ``Finalize.included`` is sorted and
  distinct ("ss58 sorted").
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final, Literal

from attrs import field, frozen

from hypertrain.protocol.manifest import RunManifest
from hypertrain.protocol.validators import (
    MAX_PROOF,
    Check,
    FieldError,
    f32,
    hex64,
    image_digest,
    instance_of,
    int_in,
    is_hex64,
    is_u_int,
    list_of,
    one_of_literal,
    optional,
    pos_int,
    ss58,
    strict_bool,
    text,
    u_int,
)

__all__ = [
    "MESSAGE_TYPES",
    "SIGNER_BOUND_TYPES",
    "Accept",
    "AuditChallenge",
    "Bisect",
    "Chunk",
    "Commit",
    "DeltaManifest",
    "Dispute",
    "Finalize",
    "Forfeit",
    "LeafPreimage",
    "Message",
    "Receipt",
    "ReplayEnv",
    "ReplayVerdict",
    "Resolution",
    "Rollback",
    "RosterEntry",
    "RoundOpen",
    "StageState",
    "StateServe",
    "check_deadline_order",
]

DeltaFormat = Literal["ht-sparse-v1", "ht-dense-int8-v1"]
AuditMode = Literal["full", "segments"]
AuditReason = Literal["random", "final", "topQ", "probation", "outlier", "cluster", "honeypot"]
VerdictResult = Literal["MATCH", "MISMATCH", "WITHHELD", "BAD_PROOF", "ASSIGNMENT_VIOLATION"]
DisputeAction = Literal["accept", "contest"]
BisectLevel = Literal["step", "layer", "op"]
ForfeitCause = Literal[
    "MISMATCH", "WITHHELD", "DISPUTE_LOST", "ASSIGNMENT_VIOLATION", "TRANSIENT", "NO_UPLOAD"
]
RecomputedPart = Literal["agg_w", "step_w", "agg_w1", "step_w1"]
LeafScheme = Literal["ht-leaf-v1"]


def _segment(value: object) -> bool:
    return (
        isinstance(value, tuple)
        and len(value) == 2
        and all(is_u_int(x) for x in value)
        and value[0] < value[1]
    )


def _sha256_suffix(value: object) -> bool:
    return isinstance(value, str) and len(value) <= 512 and is_hex64(value.rsplit("/", 1)[-1])


_segment_check = Check(_segment, "must be [a, b] with ints 0 <= a < b")
_uri_check = Check(_sha256_suffix, "must end with the blob's sha256 hex (<= 512 chars)")


def check_deadline_order(
    d_open: int, d_assign: int, d_commit: int, d_audit: int, d_upload: int, d_final: int
) -> None:
    """The order RoundOpen's deadlines must keep (spec section 3); FieldError otherwise::

    d_open < d_assign < d_commit < d_audit < d_final   and   d_commit < d_upload <= d_final
    """
    if not d_open < d_assign < d_commit < d_audit < d_final:
        raise FieldError("d_final", "need d_open < d_assign < d_commit < d_audit < d_final")
    if not d_commit < d_upload <= d_final:
        raise FieldError("d_upload", "need d_commit < d_upload <= d_final")


@frozen
class RosterEntry:
    """One admitted miner in a RoundOpen: its slot and audit rate ``q_i`` (f32 hex)."""

    hotkey: str = field(validator=ss58)
    slot: int = field(validator=u_int)
    q_i: str = field(validator=f32)


@frozen
class RoundOpen:
    """Opens round ``w`` (K_coord). Deadlines are drand rounds ordered as spec section 4.1 says."""

    w: int = field(validator=u_int)
    prev_final_hash: str = field(validator=hex64)
    theta_hash: str = field(validator=hex64)
    outer_state_hash: str = field(validator=hex64)
    center_hash: str = field(validator=hex64)
    roster: tuple[RosterEntry, ...] = field(validator=list_of(instance_of(RosterEntry)))
    roster_hash: str = field(validator=hex64)
    honeypot_commit: str = field(validator=hex64)
    d_open: int = field(validator=pos_int)
    d_assign: int = field(validator=pos_int)
    d_commit: int = field(validator=pos_int)
    d_audit: int = field(validator=pos_int)
    d_upload: int = field(validator=pos_int)
    d_final: int = field(validator=pos_int)

    def __attrs_post_init__(self) -> None:
        check_deadline_order(
            self.d_open, self.d_assign, self.d_commit, self.d_audit, self.d_upload, self.d_final
        )


@frozen
class Accept:
    """A miner accepts its assignment for round ``w`` (``d_assign <= D < d_commit``)."""

    w: int = field(validator=u_int)
    hotkey: str = field(validator=ss58)
    assignment_hash: str = field(validator=hex64)
    image_digest: str = field(validator=image_digest)
    driver_version: str = field(validator=text(128))
    n_gpus: int = field(validator=pos_int)


@frozen
class Commit:
    """A miner's commitment to its round ``w`` training (leaf Merkle roots and delta hash)."""

    w: int = field(validator=u_int)
    hotkey: str = field(validator=ss58)
    leaf_scheme: LeafScheme = field(validator=one_of_literal(LeafScheme))
    n_leaves: int = field(validator=pos_int)
    leaves_root: str = field(validator=hex64)
    metrics_root: str = field(validator=hex64)
    final_theta_hash: str = field(validator=hex64)
    ef_in_hash: str = field(validator=hex64)
    ef_out_hash: str = field(validator=hex64)
    delta_hash: str = field(validator=hex64)
    delta_bytes: int = field(validator=u_int)
    tokens: int = field(validator=u_int)


@frozen
class Receipt:
    """K_coord's receipt for a Commit: ``commit_hash = body_digest(commit body)``, at round D."""

    w: int = field(validator=u_int)
    commit_hash: str = field(validator=hex64)
    received_round: int = field(validator=pos_int)


@frozen
class Chunk:
    """One chunk of an uploaded delta: byte offset, length and sha256."""

    off: int = field(validator=u_int)
    len: int = field(validator=pos_int)
    sha256: str = field(validator=hex64)


@frozen
class DeltaManifest:
    """Where a miner's delta lies: chunks contiguous from offset 0 summing to ``size``."""

    w: int = field(validator=u_int)
    hotkey: str = field(validator=ss58)
    delta_hash: str = field(validator=hex64)
    uri: str = field(validator=text(512))
    size: int = field(validator=u_int)
    format: DeltaFormat = field(validator=one_of_literal(DeltaFormat))
    chunks: tuple[Chunk, ...] = field(validator=list_of(instance_of(Chunk)))

    def __attrs_post_init__(self) -> None:
        if self.uri != f"objects/{self.delta_hash}":
            raise FieldError("uri", "must be objects/{delta_hash}")
        position = 0
        for index, chunk in enumerate(self.chunks):
            if chunk.off != position:
                raise FieldError(f"chunks[{index}]", f"off must be {position} (contiguous from 0)")
            position += chunk.len
        if position != self.size:
            raise FieldError("size", f"must equal the sum of chunk lengths ({position})")


@frozen
class AuditChallenge:
    """K_coord selects miner ``target`` of round ``w`` for a full or segment replay."""

    w: int = field(validator=u_int)
    target: str = field(validator=ss58)
    beacon_round: int = field(validator=pos_int)
    beacon_sig_sha256: str = field(validator=hex64)
    mode: AuditMode = field(validator=one_of_literal(AuditMode))
    segments: tuple[tuple[int, int], ...] = field(validator=list_of(_segment_check))
    reasons: tuple[AuditReason, ...] = field(
        validator=list_of(one_of_literal(AuditReason), min_len=1, unique=True)
    )
    serve_deadline: int = field(validator=pos_int)

    def __attrs_post_init__(self) -> None:
        if self.serve_deadline <= self.beacon_round:
            raise FieldError("serve_deadline", "must be after beacon_round")


@frozen
class StateServe:
    """A miner serves the optimizer state at step ``t`` for a segment audit."""

    hotkey: str = field(validator=ss58)
    challenge_hash: str = field(validator=hex64)
    t: int = field(validator=u_int)
    uri: str = field(validator=_uri_check)
    tensor_root: str = field(validator=hex64)
    merkle_proof_leaf_in_leaves_root: tuple[str, ...] = field(
        validator=list_of(hex64, max_len=MAX_PROOF)
    )


@frozen
class ReplayEnv:
    """The auditor's replay environment."""

    image_digest: str = field(validator=image_digest)
    driver: str = field(validator=text(128))
    gpu_uuid_sha256: str = field(validator=hex64)
    sm_count: int = field(validator=pos_int)


@frozen
class ReplayVerdict:
    """An auditor's verdict; ``first_bad_leaf`` is required and may be null (sent as JSON null)."""

    challenge_hash: str = field(validator=hex64)
    first_bad_leaf: int | None = field(validator=optional(u_int))
    result: VerdictResult = field(validator=one_of_literal(VerdictResult))
    recomputed_leaves_root: str = field(validator=hex64)
    replay_env: ReplayEnv = field(validator=instance_of(ReplayEnv))


@frozen
class Dispute:
    """A miner accepts or contests a verdict (``verdict_hash = body_digest(verdict body)``)."""

    hotkey: str = field(validator=ss58)
    verdict_hash: str = field(validator=hex64)
    action: DisputeAction = field(validator=one_of_literal(DisputeAction))


@frozen
class Bisect:
    """One N-ary bisection step: N+1 hashes over ``interval`` ``[a, b]`` with ``a < b``."""

    dispute_id: str = field(validator=hex64)
    level: BisectLevel = field(validator=one_of_literal(BisectLevel))
    interval: tuple[int, int] = field(validator=_segment_check)
    N: int = field(validator=int_in(2, 1024))
    hashes: tuple[str, ...] = field(validator=list_of(hex64, min_len=3, max_len=1025))
    party: str = field(validator=ss58)

    def __attrs_post_init__(self) -> None:
        if len(self.hashes) != self.N + 1:
            raise FieldError("hashes", f"must hold N+1 = {self.N + 1} items")


@frozen
class Resolution:
    """The referee's ruling on a dispute (``op_spec`` e.g. ``"step=5;layer=2;op=update"``)."""

    dispute_id: str = field(validator=hex64)
    op_spec: str = field(validator=text(256))
    inputs_hash: str = field(validator=hex64)
    output_hash: str = field(validator=hex64)
    loser: str = field(validator=ss58)


@frozen
class Forfeit:
    """K_coord records a miner's forfeit (burned reward and escrow, blacklist, debt)."""

    w: int = field(validator=u_int)
    hotkey: str = field(validator=ss58)
    cause: ForfeitCause = field(validator=one_of_literal(ForfeitCause))
    evidence: tuple[str, ...] = field(validator=list_of(hex64))
    round_reward_burned: int = field(validator=u_int)
    escrow_burned_units: int = field(validator=u_int)
    blacklist: bool = field(validator=strict_bool)
    debt_units: int = field(validator=u_int)


@frozen
class Rollback:
    """The aggregator recomputes rounds ``w`` and ``w+1`` without the ``excluded`` miners."""

    w: int = field(validator=u_int)
    excluded: tuple[str, ...] = field(validator=list_of(ss58, min_len=1))
    old_theta_hash_w2: str = field(validator=hex64)
    new_theta_hash_w2: str = field(validator=hex64)
    new_outer_state_hash: str = field(validator=hex64)
    recomputed: tuple[RecomputedPart, ...] = field(
        validator=list_of(one_of_literal(RecomputedPart), max_len=4, unique=True)
    )
    cause_hashes: tuple[str, ...] = field(validator=list_of(hex64))


@frozen
class Finalize:
    """K_coord finalises round ``w``; ``included`` is sorted and distinct."""

    w: int = field(validator=u_int)
    final_theta_hash_w1: str = field(validator=hex64)
    included: tuple[str, ...] = field(validator=list_of(ss58, strictly_sorted=True))
    entitlements_root: str = field(validator=hex64)


@frozen
class StageState:
    """TH digests of one pipeline stage's theta, m and v at a leaf."""

    theta: str = field(validator=hex64)
    m: str = field(validator=hex64)
    v: str = field(validator=hex64)


@frozen
class LeafPreimage:
    """The preimage of one ``ht-leaf-v1`` leaf digest (posted unsigned via ``/leaves``)."""

    run_id: str = field(validator=hex64)
    w: int = field(validator=u_int)
    t: int = field(validator=u_int)
    stages: tuple[StageState, ...] = field(validator=list_of(instance_of(StageState), min_len=1))
    batch_ids_sha256: str = field(validator=hex64)
    rng_ctr: int = field(validator=u_int)
    loss_f32: str = field(validator=f32)
    norm_f32: str = field(validator=f32)


Message = (
    RunManifest
    | RoundOpen
    | Accept
    | Commit
    | Receipt
    | DeltaManifest
    | AuditChallenge
    | StateServe
    | ReplayVerdict
    | Dispute
    | Bisect
    | Resolution
    | Forfeit
    | Rollback
    | Finalize
)
"""Any of the 15 signed bodies."""

MESSAGE_TYPES: Final[Mapping[str, type[Any]]] = MappingProxyType(
    {
        cls.__name__: cls
        for cls in (
            RunManifest,
            RoundOpen,
            Accept,
            Commit,
            Receipt,
            DeltaManifest,
            AuditChallenge,
            StateServe,
            ReplayVerdict,
            Dispute,
            Bisect,
            Resolution,
            Forfeit,
            Rollback,
            Finalize,
        )
    }
)
"""The envelope ``type`` names and their body classes."""

SIGNER_BOUND_TYPES: Final[frozenset[type[Any]]] = frozenset(
    {Commit, Accept, DeltaManifest, StateServe, Dispute}
)
"""Types whose body ``hotkey`` must equal the envelope signer (spec section 2.3)."""
