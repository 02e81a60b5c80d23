"""A miner's round at the coordinator (spec 1.3 steps 3-6, 5.4-5.5, 9): the decisions.

Each ``post_*`` function is one write transaction (``await db.write(fn, ...)``); it raises a
:class:`~hypertrain.protocol.errors.ProtocolError` to refuse, which rolls everything back, the
envelope's replay key included (so a corrected resend is accepted). Common steps:

1. D = the latest stored beacon round;
2. envelopes: the type must be the route's (400), then
   :func:`~hypertrain.protocol.envelope.verify` with the route's run and ``now_round = D``
   (bad signature 401, expired / other run / bad body 400, body hotkey != signer 403);
3. round ``w`` must be open (404) and the miner in its RoundOpen roster and still on the run's
   roster, neither removed nor blacklisted (403);
4. the replay key is recorded in ``seen`` in the same transaction (409 on a replay).

Per route (statuses of spec 9):

- :func:`post_accept`: ``d_assign <= D < d_commit`` (409), status ASSIGNED (409),
  ``drand[d_assign]`` stored (409), ``assignment_hash`` equal to the derived one of the miner's
  slot, ``image_digest`` equal to the manifest's and ``driver_version`` in a non-empty
  ``driver_allowlist`` (422) -> ACCEPTED.
- :func:`post_commit`: status ACCEPTED (409), ``n_leaves == H/J + 1`` (422) -> COMMITTED, or
  EXCLUDED when ``D >= d_audit``; answers a K_coord Receipt ``{w, commit_hash =
  body_digest(commit body), received_round = D}`` with ``exp_drand = NEVER``. A second Commit
  of the same miner and round is 409; when it is the very envelope already stored, the 409
  carries the stored receipt (:class:`DuplicateCommit`) so a restarted client recovers it.
- :func:`post_leaves` (unsigned): status COMMITTED or UPLOADED (409), ``D < d_upload`` (409),
  exactly ``n_leaves`` preimages for ``t = 0, J, ..., H`` of this run and round whose
  ``ht-leaf-v1`` digests Merkle to the committed ``leaves_root`` (422); idempotent.
- :func:`grant_upload` (unsigned): status COMMITTED or MATCH (an audit may come first; 409
  otherwise), ``D < d_upload`` (409), ``sha256 ==
  delta_hash`` (422) -> a grant for ``PUT /v1/uploads/{grant}`` expiring at ``d_upload``.
- :func:`post_delta`: a DeltaManifest naming the committed ``delta_hash`` and ``delta_bytes``
  (422) once the object is stored (409 "upload first"), status COMMITTED, ``D < d_upload``
  (409) -> UPLOADED, with the miner row's ``delta_hash`` column and the upload's row in the
  scoring outbox (the scoring feed enqueues its scoring steps) in the same transaction, so a
  refused manifest leaves neither. Re-posting the stored manifest answers the same 200
  (idempotent) and changes nothing.
"""

from __future__ import annotations

import functools
import json
import sqlite3
from collections.abc import Callable
from typing import Any, Final, Literal

from attrs import field, frozen

from hypertrain.beacon.ingest import get_round, latest_round
from hypertrain.coordinator.flows.lifecycle import parse_manifest
from hypertrain.coordinator.flows.replies import (
    Accepted,
    Committed,
    LeavesTaken,
    Uploaded,
    UploadGrant,
)
from hypertrain.coordinator.tables.miners import (
    GrantRow,
    MinerRow,
    get_grant,
    get_leaves_root,
    get_miner,
    insert_grant,
    insert_leaves,
    is_active_member,
    set_accepted,
    set_committed,
    set_uploaded,
)
from hypertrain.coordinator.tables.rounds import RoundRow, get_round_row
from hypertrain.coordinator.tables.runs import dumps, get_run, record_seen
from hypertrain.coordinator.tables.scoring import Upload, queue_upload
from hypertrain.protocol.converter import structure, unstructure
from hypertrain.protocol.envelope import NEVER, Verified, check_shape, seal, verify
from hypertrain.protocol.errors import (
    Conflict,
    ContractMismatch,
    Malformed,
    NotFound,
    PayloadTooLarge,
    ReplayError,
    UnauthorizedSigner,
)
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.merkle import merkle_root_hex
from hypertrain.protocol.messages import Accept, Commit, DeltaManifest, LeafPreimage, Receipt
from hypertrain.protocol.validators import hex64, instance_of, list_of, optional, ss58, u_int
from hypertrain.rounds.assignment import Assignment, assign
from hypertrain.trainer.leaves import preimage_digest

__all__ = [
    "MAX_PREIMAGES",
    "MAX_UPLOAD_BYTES",
    "DuplicateCommit",
    "LeavesRequest",
    "UploadRequest",
    "grant_upload",
    "post_accept",
    "post_commit",
    "post_delta",
    "post_leaves",
    "signer_of",
    "upload_grant",
]

AUDITED: Final = ("MATCH", "MISMATCH", "WITHHELD", "BAD_PROOF", "ASSIGNMENT_VIOLATION")
"""Statuses a verdict set: an audit can come before the upload window closes (a MATCH miner may
still upload its delta; leaves re-posted after any verdict are answered idempotently)."""
MAX_PREIMAGES: Final = 4097
"""Most preimages one ``POST .../leaves`` may carry (spec 9)."""
MAX_UPLOAD_BYTES: Final = 1 << 32
"""Largest delta object a grant is issued for (4 GiB); larger commits are refused (413)."""


class DuplicateCommit(ReplayError):
    """409: this very Commit envelope was already accepted; ``receipt`` is the stored one."""

    def __init__(self, detail: str, receipt: dict[str, Any]) -> None:
        super().__init__(detail)
        self.receipt = receipt


@frozen
class LeavesRequest:
    """``POST .../leaves`` (unsigned: the preimages must Merkle to the committed root)."""

    w: int = field(validator=u_int)
    hotkey: str = field(validator=ss58)
    preimages: tuple[LeafPreimage, ...] = field(
        validator=list_of(instance_of(LeafPreimage), min_len=1, max_len=MAX_PREIMAGES)
    )
    ef_in_sha256: str | None = field(default=None, validator=optional(hex64))


@frozen
class UploadRequest:
    """``POST .../uploads``: the miner asks where to PUT its committed delta."""

    w: int = field(validator=u_int)
    hotkey: str = field(validator=ss58)
    sha256: str = field(validator=hex64)
    challenge_hash: str | None = field(default=None, validator=optional(hex64))
    """Set: a grant for a state blob served to that audit challenge
    (:func:`hypertrain.coordinator.flows.serves.grant_state_upload`)."""


def signer_of(raw: object) -> str:
    """The signer of an envelope (shape-checked only), for the metagraph check."""
    return check_shape(raw).signer


# --- common steps --------------------------------------------------------------------------------


def _verify(raw: object, type_name: str, run_id: str, now: int) -> Verified:
    if check_shape(raw).type != type_name:
        raise Malformed(f"expected a signed {type_name} envelope")
    return verify(raw, expected_run_id=run_id, now_round=now)


def _open_round(conn: sqlite3.Connection, run_id: str, w: int) -> RoundRow:
    get_run(conn, run_id)
    row = get_round_row(conn, run_id, w)
    if row is None:
        raise NotFound(f"round {w} of run {run_id} is not open")
    return row


def _rostered(conn: sqlite3.Connection, run_id: str, w: int, hotkey: str) -> MinerRow:
    miner = get_miner(conn, run_id, w, hotkey)
    if miner is None:
        raise UnauthorizedSigner(f"{hotkey} is not in the roster of round {w}")
    if not is_active_member(conn, run_id, hotkey):
        raise UnauthorizedSigner(f"{hotkey} is removed or blacklisted from run {run_id}")
    return miner


def _committed(miner: MinerRow, w: int, *allowed: str) -> Commit:
    if miner.status not in allowed:
        raise Conflict(f"{miner.hotkey} is {miner.status} in round {w}, not {' or '.join(allowed)}")
    return structure(Commit, miner.commit_body())


def _upload_window(row: RoundRow, now: int) -> None:
    if not row.deadlines.upload_open(now):
        raise Conflict(f"round {row.w}: uploads closed at d_upload = {row.deadlines.d_upload}")


# --- accept --------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=16)
def _assignment(
    manifest_text: str, run_id: str, w: int, signature: str, base: int, round_open: str
) -> dict[str, Assignment]:
    """The round's assignment by hotkey (memoised: Accepts of one round share it)."""
    rnd = json.loads(round_open)["body"]
    roster = [(entry["hotkey"], entry["slot"]) for entry in rnd["roster"]]
    slots = assign(
        parse_manifest(manifest_text), run_id, w, bytes.fromhex(signature), roster, base=base
    )
    return {a.hotkey: a for a in slots}


def post_accept(conn: sqlite3.Connection, raw: object, run_id: str) -> Accepted:
    """``POST .../accept`` (module doc)."""
    now = latest_round(conn)
    verified = _verify(raw, "Accept", run_id, now)
    body = verified.message
    assert isinstance(body, Accept)
    row = _open_round(conn, run_id, body.w)
    miner = _rostered(conn, run_id, body.w, body.hotkey)
    record_seen(conn, verified.replay_key, now)
    d = row.deadlines
    if not d.accept_open(now):
        raise Conflict(
            f"round {body.w}: Accept is taken while {d.d_assign} <= D < {d.d_commit} (D = {now})"
        )
    if miner.status != "ASSIGNED":
        raise Conflict(f"{body.hotkey} is {miner.status} in round {body.w}, not ASSIGNED")
    beacon = get_round(conn, d.d_assign)
    if beacon is None:
        raise Conflict(f"beacon round d_assign = {d.d_assign} is not stored: cannot assign yet")
    run = get_run(conn, run_id)
    mine = _assignment(
        run.manifest_envelope, run_id, body.w, beacon.signature, row.base, row.round_open
    )[body.hotkey]
    if body.assignment_hash != mine.assignment_hash:
        raise ContractMismatch(
            f"assignment_hash {body.assignment_hash} is not slot {mine.slot}'s"
            f" {mine.assignment_hash}"
        )
    spec = parse_manifest(run.manifest_envelope).reference_spec
    if body.image_digest != spec.image_digest:
        raise ContractMismatch(f"image_digest is not the manifest's {spec.image_digest}")
    if spec.driver_allowlist and body.driver_version not in spec.driver_allowlist:
        raise ContractMismatch(f"driver {body.driver_version!r} is not in the driver_allowlist")
    set_accepted(conn, run_id, body.w, body.hotkey, verified.envelope.encode().decode())
    return Accepted(body.w, body.hotkey, "ACCEPTED", miner.slot)


# --- commit --------------------------------------------------------------------------------------


def post_commit(conn: sqlite3.Connection, raw: object, run_id: str, coord: Keypair) -> Committed:
    """``POST .../commit`` -> ``{status, receipt}`` (module doc)."""
    now = latest_round(conn)
    verified = _verify(raw, "Commit", run_id, now)
    body = verified.message
    assert isinstance(body, Commit)
    row = _open_round(conn, run_id, body.w)
    miner = _rostered(conn, run_id, body.w, body.hotkey)
    text = verified.envelope.encode().decode()
    if miner.commit_envelope is not None:
        detail = f"{body.hotkey} already committed round {body.w}"
        if miner.commit_envelope == text and miner.receipt is not None:
            raise DuplicateCommit(
                detail + " (this commit; its receipt attached)", json.loads(miner.receipt)
            )
        raise ReplayError(detail)
    record_seen(conn, verified.replay_key, now)
    if miner.status != "ACCEPTED":
        raise Conflict(f"{body.hotkey} is {miner.status} in round {body.w}, not ACCEPTED")
    inner = parse_manifest(get_run(conn, run_id).manifest_envelope).inner
    n_leaves = inner.H // inner.J + 1
    if body.n_leaves != n_leaves:
        raise ContractMismatch(f"n_leaves must be H/J + 1 = {n_leaves}, got {body.n_leaves}")
    status: Literal["COMMITTED", "EXCLUDED"] = (
        "EXCLUDED" if row.deadlines.commit_excluded(now) else "COMMITTED"
    )
    receipt = seal(
        coord,
        "Receipt",
        run_id,
        Receipt(w=body.w, commit_hash=verified.body_digest, received_round=now),
        NEVER,
    )
    set_committed(
        conn,
        run_id,
        body.w,
        body.hotkey,
        status=status,
        commit=text,
        receipt=receipt.encode().decode(),
        received_round=now,
    )
    return Committed(status, receipt)


# --- leaves --------------------------------------------------------------------------------------


def _check_preimages(run_id: str, w: int, J: int, commit: Commit, req: LeavesRequest) -> None:  # noqa: N803
    if len(req.preimages) != commit.n_leaves:
        raise ContractMismatch(
            f"expected {commit.n_leaves} preimages (n_leaves), got {len(req.preimages)}"
        )
    for index, p in enumerate(req.preimages):
        if (p.run_id, p.w, p.t) != (run_id, w, index * J):
            raise ContractMismatch(
                f"preimages[{index}]: must be run {run_id}, w {w}, t {index * J};"
                f" got run {p.run_id}, w {p.w}, t {p.t}"
            )
    root = merkle_root_hex([preimage_digest(p) for p in req.preimages])
    if root != commit.leaves_root:
        raise ContractMismatch(
            f"the preimages' leaf digests Merkle to {root}, not the committed leaves_root"
            f" {commit.leaves_root}"
        )


def post_leaves(conn: sqlite3.Connection, run_id: str, req: LeavesRequest) -> LeavesTaken:
    """``POST .../leaves`` -> ``{w, hotkey, leaves_root}`` (module doc)."""
    now = latest_round(conn)
    row = _open_round(conn, run_id, req.w)
    miner = _rostered(conn, run_id, req.w, req.hotkey)
    commit = _committed(miner, req.w, "COMMITTED", "UPLOADED", *AUDITED)
    _upload_window(row, now)
    J = parse_manifest(get_run(conn, run_id).manifest_envelope).inner.J  # noqa: N806
    _check_preimages(run_id, req.w, J, commit, req)
    if get_leaves_root(conn, run_id, req.w, req.hotkey) is None:
        insert_leaves(
            conn,
            run_id,
            req.w,
            req.hotkey,
            preimages=dumps([unstructure(p) for p in req.preimages]),
            leaves_root=commit.leaves_root,
            ef_in_sha256=req.ef_in_sha256,
            now=now,
        )
    return LeavesTaken(req.w, req.hotkey, commit.leaves_root)


# --- uploads -------------------------------------------------------------------------------------


def grant_upload(
    conn: sqlite3.Connection, run_id: str, req: UploadRequest, grant_id: str
) -> UploadGrant:
    """``POST .../uploads`` -> ``{method: "PUT", sha256, url}`` (module doc)."""
    now = latest_round(conn)
    row = _open_round(conn, run_id, req.w)
    miner = _rostered(conn, run_id, req.w, req.hotkey)
    commit = _committed(miner, req.w, "COMMITTED", "MATCH")
    _upload_window(row, now)
    if req.sha256 != commit.delta_hash:
        raise ContractMismatch(f"sha256 is not the committed delta_hash {commit.delta_hash}")
    if commit.delta_bytes > MAX_UPLOAD_BYTES:
        raise PayloadTooLarge(f"delta of {commit.delta_bytes} bytes is over {MAX_UPLOAD_BYTES}")
    grant = GrantRow(
        grant_id=grant_id,
        run_id=run_id,
        w=req.w,
        hotkey=req.hotkey,
        sha256=req.sha256,
        size=commit.delta_bytes,
        expires_round=row.deadlines.d_upload,
    )
    insert_grant(conn, grant, now)
    return UploadGrant("PUT", req.sha256, f"/v1/uploads/{grant_id}")


# --- delta manifest ------------------------------------------------------------------------------


def post_delta(
    conn: sqlite3.Connection, raw: object, run_id: str, stored: Callable[[str], bool]
) -> Uploaded:
    """``POST .../delta`` -> ``{w, hotkey, status: "UPLOADED"}``; ``stored(sha)`` says whether
    the object store holds ``sha`` (module doc)."""
    now = latest_round(conn)
    verified = _verify(raw, "DeltaManifest", run_id, now)
    body = verified.message
    assert isinstance(body, DeltaManifest)
    row = _open_round(conn, run_id, body.w)
    miner = _rostered(conn, run_id, body.w, body.hotkey)
    answer = Uploaded(body.w, body.hotkey, "UPLOADED")
    text = verified.envelope.encode().decode()
    if miner.delta_manifest == text:
        return answer
    record_seen(conn, verified.replay_key, now)
    commit = _committed(miner, body.w, "COMMITTED", "MATCH")
    _upload_window(row, now)
    if (body.delta_hash, body.size) != (commit.delta_hash, commit.delta_bytes):
        raise ContractMismatch(
            f"delta_hash/size must be the committed {commit.delta_hash}/{commit.delta_bytes}"
        )
    if not stored(body.delta_hash):
        raise Conflict(f"object {body.delta_hash} is not stored: upload first")
    set_uploaded(conn, run_id, body.w, body.hotkey, env=text, delta_hash=body.delta_hash)
    queue_upload(conn, Upload(run_id, body.w, body.hotkey, body.delta_hash), now)
    return answer


_GRANT_LEN: Final = 32


def upload_grant(conn: sqlite3.Connection, grant_id: str) -> GrantRow:
    """The usable grant ``grant_id``: 404 unknown, 409 expired at ``d_upload``."""
    grant = None
    if len(grant_id) == _GRANT_LEN and all(c in "0123456789abcdef" for c in grant_id):
        grant = get_grant(conn, grant_id)
    if grant is None:
        raise NotFound(f"unknown upload grant {grant_id!r}")
    now = latest_round(conn)
    if now >= grant.expires_round:
        raise Conflict(f"upload grant expired at d_upload = {grant.expires_round} (D = {now})")
    return grant
