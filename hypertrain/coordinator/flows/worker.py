"""The auditors' job queue (spec 6.3, 9, 9.1): lease, serves, heartbeat, complete, fail.

Each function is one transaction of the DB runner; refusals raise a
:class:`~hypertrain.protocol.errors.ProtocolError` and change nothing.

- :func:`lease_job`: the first queued job (``ORDER BY w, rowid``; of one run when asked) that is
  *ready*: the round's start state is published, the target's preimages are stored and, in
  segments mode, a serve is stored for every window start or ``D > serve_deadline`` (so an
  auditor never leases a job it can only hand back). It becomes ``leased`` with a fresh 32-hex
  token expiring at ``D + LEASE_ROUNDS``; the answer is the job JSON of spec 9.1 plus
  ``beacon_signature`` and ``dataset_sha256``. None when nothing is ready (the route answers
  204).
- :func:`job_serves`, :func:`heartbeat`, :func:`complete_job`, :func:`fail_job` need the job's
  current lease: another token, or one that expired (``lease_expires_round < D``), is 409.
- :func:`complete_job`: the ReplayVerdict envelope must verify for the job's run at D, be signed
  by a key in ``manifest.auditors`` (403), name the job's challenge and no leaf past the
  round's last (422) and not be a replay (409). The job is ``done``; the verdict's result
  becomes the miner's status in round ``w``. A fault (MISMATCH, WITHHELD, BAD_PROOF,
  ASSIGNMENT_VIOLATION) blacklists the hotkey (off the next roster; its cluster goes to
  ``q = 1`` through the roster's faulted clusters) and seals a provisional K_coord Forfeit
  ``{w, hotkey, cause (BAD_PROOF -> MISMATCH), evidence: [challenge_hash, verdict
  body_digest], 0, 0, blacklist: true, 0}``.
- :func:`fail_job`: ``retry`` requeues it (no lease), else it is ``failed`` with the reason.
- :func:`expire_leases`: leased jobs whose lease expired are requeued (the lease reaper).
"""

from __future__ import annotations

import json
import re
import secrets
import sqlite3
from typing import Any, Final, Literal

from attrs import field, frozen

from hypertrain.beacon.ingest import get_round, latest_round
from hypertrain.coordinator.flows.lifecycle import parse_manifest
from hypertrain.coordinator.flows.replies import HandedBack, LeaseExtended
from hypertrain.coordinator.flows.scoring import run_scoring_facts
from hypertrain.coordinator.tables.audits import (
    JobRow,
    get_job,
    insert_forfeit,
    leased_expired,
    queued_jobs,
    serves_of,
    update_job,
)
from hypertrain.coordinator.tables.miners import (
    get_leaves,
    get_miner,
    get_round_state,
    set_blacklisted,
    set_verdict_status,
)
from hypertrain.coordinator.tables.rounds import get_round_row
from hypertrain.coordinator.tables.runs import get_run, record_seen
from hypertrain.protocol.auditjob import VerdictRecorded
from hypertrain.protocol.converter import structure, unstructure
from hypertrain.protocol.envelope import NEVER, check_shape, seal, verify
from hypertrain.protocol.errors import (
    Conflict,
    ContractMismatch,
    Malformed,
    NotFound,
    UnauthorizedSigner,
)
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.messages import AuditChallenge, Forfeit, LeafPreimage, ReplayVerdict
from hypertrain.protocol.validators import Check, hex64, optional, pattern, strict_bool, text
from hypertrain.rounds.assignment import assign
from hypertrain.rounds.states import FAULT_STATUSES
from hypertrain.trainer.leaves import preimage_digest

__all__ = [
    "LEASE_ROUNDS",
    "CompleteRequest",
    "FailRequest",
    "LeaseFilter",
    "LeaseRequest",
    "complete_job",
    "expire_leases",
    "fail_job",
    "heartbeat",
    "is_ready",
    "job_serves",
    "lease_job",
    "stored_job",
]

LEASE_ROUNDS: Final = 600
"""How many drand rounds a lease lasts (spec 4.1: 30 min of quicknet), renewed by heartbeat."""
VERDICT_WINDOW: Final = 1200
"""A verdict is sealed to expire at ``serve_deadline + VERDICT_WINDOW`` (spec 4.1): past it no
verdict can be accepted, so a job still open then is failed instead of handed out forever."""
MAX_ATTEMPTS: Final = 8
"""Leases of one job before it is failed for good (a job that always comes back with
``retry`` would otherwise hold the front of the queue)."""
MAX_REASON: Final = 500


def _lease_token(value: object) -> bool:
    return (
        isinstance(value, str) and len(value) == 32 and all(c in "0123456789abcdef" for c in value)
    )


lease_token = Check(
    _lease_token,
    "must be a lease token: 32 lowercase hex characters",
    schema=pattern(re.compile("[0-9a-f]{32}")),
)


@frozen
class LeaseFilter:
    """``POST /v1/worker/lease``'s optional body: only jobs of ``run_id``."""

    run_id: str | None = field(default=None, validator=optional(hex64))


@frozen
class LeaseRequest:
    """A body naming the caller's lease (serves, heartbeat)."""

    lease: str = field(validator=lease_token)


@frozen
class CompleteRequest:
    """``POST .../complete``: the lease and a ReplayVerdict envelope."""

    lease: str = field(validator=lease_token)
    verdict: dict[str, Any]


@frozen
class FailRequest:
    """``POST .../fail``."""

    lease: str = field(validator=lease_token)
    reason: str = field(validator=text(MAX_REASON))
    retry: bool = field(default=True, validator=strict_bool)


# --- readiness and the job JSON ------------------------------------------------------------------


def _windows(job: JobRow) -> list[tuple[int, int]]:
    challenge = structure(AuditChallenge, job.challenge_json()["body"])
    return [tuple(s) for s in challenge.segments]  # type: ignore[misc]


def _uploads_closed(conn: sqlite3.Connection, job: JobRow, D: int) -> bool:  # noqa: N803
    row = get_round_row(conn, job.run_id, job.w)
    return row is not None and row.deadlines.d_upload <= D


def is_ready(conn: sqlite3.Connection, job: JobRow, D: int) -> bool:  # noqa: N803
    """Whether ``job`` can be replayed now (module doc). A target that never posted its
    preimages cannot hide behind that: from ``d_upload`` on (no leaves are taken after it) its
    job is handed out without them, and the auditor's first check (the preimages must Merkle to
    the committed root) makes it BAD_PROOF."""
    if get_round_state(conn, job.run_id, job.w) is None:
        return False
    if get_leaves(conn, job.run_id, job.w, job.target) is None:
        return _uploads_closed(conn, job, D)
    if job.mode != "segments" or job.serve_deadline < D:
        return True
    J = parse_manifest(get_run(conn, job.run_id).manifest_envelope).inner.J  # noqa: N806
    served = {serve.t for serve in serves_of(conn, job.challenge_hash)}
    return all(a * J in served for a, _ in _windows(job))


def _serves_json(conn: sqlite3.Connection, job: JobRow) -> list[dict[str, Any]]:
    return [
        {"serve": json.loads(s.envelope), "blob_sha256": s.blob_sha256}
        for s in serves_of(conn, job.challenge_hash)
    ]


def job_json(conn: sqlite3.Connection, job: JobRow) -> dict[str, Any]:
    """The job as an auditor receives it (spec 9.1 plus ``beacon_signature``,
    ``dataset_sha256``)."""
    run = get_run(conn, job.run_id)
    manifest, dataset_sha = run_scoring_facts(conn, job.run_id)
    row = get_round_row(conn, job.run_id, job.w)
    miner = get_miner(conn, job.run_id, job.w, job.target)
    leaves = get_leaves(conn, job.run_id, job.w, job.target)
    state = get_round_state(conn, job.run_id, job.w)
    assert row is not None
    assert miner is not None
    assert state is not None
    assign_beacon = get_round(conn, row.deadlines.d_assign)
    audit_beacon = get_round(conn, row.deadlines.d_audit)
    assert assign_beacon is not None
    assert audit_beacon is not None
    slots = assign(
        manifest,
        job.run_id,
        job.w,
        bytes.fromhex(assign_beacon.signature),
        row.body.roster,
        base=row.base,
    )
    (mine,) = [a for a in slots if a.hotkey == job.target]
    stored = [] if leaves is None else leaves.preimages
    preimages = [structure(LeafPreimage, p) for p in stored]
    challenge = job.challenge_json()
    commit = None if miner.commit_envelope is None else json.loads(miner.commit_envelope)
    return {
        "id": job.job_id,
        "lease": job.lease,
        "lease_expires_round": job.lease_expires_round,
        "run_id": job.run_id,
        "w": job.w,
        "target": job.target,
        "challenge": challenge["body"],
        "challenge_hash": job.challenge_hash,
        "challenge_envelope": challenge,
        "round_open": row.envelope_json(),
        "commit": None if commit is None else commit["body"],
        "commit_envelope": commit,
        "delta_manifest": None
        if miner.delta_manifest is None
        else json.loads(miner.delta_manifest),
        "state_serves": [s["serve"] for s in _serves_json(conn, job)],
        "manifest": json.loads(run.manifest_envelope)["body"],
        "leaves": [preimage_digest(p).hex() for p in preimages],
        "preimages": [unstructure(p) for p in preimages],
        "assignment": {"sample_ids": list(mine.samples), "global_step0": job.w * manifest.inner.H},
        "theta_start_sha256": state.theta_start_sha256,
        "ef_in_sha256": None if leaves is None else leaves.ef_in_sha256,
        "v0_sha256": state.v0_sha256,
        "beacon_signature": audit_beacon.signature,
        "dataset_sha256": dataset_sha,
    }


def stored_job(conn: sqlite3.Connection, job_id: str) -> dict[str, Any]:
    """``GET /v1/worker/jobs/{id}``: the job JSON of any job that could be leased (404 for an
    unknown one, 409 for one not ready yet): what the disputed auditor and a referee rebuild
    their recomputation from. ``lease`` and ``lease_expires_round`` are null unless leased;
    ``state``, ``result`` and ``verdict`` say where the job stands."""
    job = get_job(conn, job_id)
    if job is None:
        raise NotFound(f"unknown audit job {job_id!r}")
    if job.state == "queued" and not is_ready(conn, job, latest_round(conn)):
        raise Conflict(f"job {job_id} is not ready to be replayed yet")
    return {
        **job_json(conn, job),
        "state": job.state,
        "result": job.result,
        "verdict": job.verdict_json(),
    }


# --- lease ---------------------------------------------------------------------------------------


def lease_job(
    conn: sqlite3.Connection, run_id: str | None
) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """Lease the first ready job (module doc): ``(job JSON, audit event)``, or None."""
    d = latest_round(conn)
    for job in queued_jobs(conn, run_id):
        if d > job.serve_deadline + VERDICT_WINDOW or job.attempts >= MAX_ATTEMPTS:
            why = "verdict window closed" if job.attempts < MAX_ATTEMPTS else "too many attempts"
            update_job(conn, job.job_id, state="failed", fail_reason=why)
            continue
        if not is_ready(conn, job, d):
            continue
        lease = secrets.token_hex(16)
        update_job(
            conn,
            job.job_id,
            state="leased",
            lease=lease,
            lease_expires_round=d + LEASE_ROUNDS,
            attempts=job.attempts + 1,
        )
        leased = get_job(conn, job.job_id)
        assert leased is not None
        event = _event(leased, "leased")
        return job_json(conn, leased), event
    return None


def _event(job: JobRow, change: str, **extra: Any) -> dict[str, Any]:
    return {
        "run_id": job.run_id,
        "w": job.w,
        "target": job.target,
        "job_id": job.job_id,
        "change": change,
        **extra,
    }


def _leased(conn: sqlite3.Connection, job_id: str, lease: str) -> tuple[JobRow, int]:
    job = get_job(conn, job_id)
    if job is None:
        raise NotFound(f"unknown audit job {job_id!r}")
    d = latest_round(conn)
    if job.state != "leased" or job.lease != lease:
        raise Conflict(f"job {job_id}: lease is not current (job is {job.state})")
    assert job.lease_expires_round is not None
    if job.lease_expires_round < d:
        raise Conflict(f"job {job_id}: lease expired at round {job.lease_expires_round} (D = {d})")
    return job, d


def job_serves(conn: sqlite3.Connection, job_id: str, lease: str) -> dict[str, Any]:
    """``GET .../serves?lease=``: ``{now_round, serves: [{serve, blob_sha256}]}``."""
    job, d = _leased(conn, job_id, lease)
    return {"now_round": d, "serves": _serves_json(conn, job)}


def heartbeat(conn: sqlite3.Connection, job_id: str, req: LeaseRequest) -> LeaseExtended:
    """Renew the lease to ``D + LEASE_ROUNDS``."""
    job, d = _leased(conn, job_id, req.lease)
    update_job(conn, job.job_id, lease_expires_round=d + LEASE_ROUNDS)
    return LeaseExtended(job.job_id, d + LEASE_ROUNDS)


def fail_job(
    conn: sqlite3.Connection, job_id: str, req: FailRequest
) -> tuple[HandedBack, dict[str, Any]]:
    """Hand the job back (``retry``) or fail it for good."""
    job, _ = _leased(conn, job_id, req.lease)
    state: Literal["queued", "failed"] = "queued" if req.retry else "failed"
    update_job(
        conn, job.job_id, state=state, lease=None, lease_expires_round=None, fail_reason=req.reason
    )
    return HandedBack(job.job_id, state), _event(job, state, reason=req.reason)


# --- complete ------------------------------------------------------------------------------------

_CAUSE: Final = {
    "MISMATCH": "MISMATCH",
    "BAD_PROOF": "MISMATCH",
    "WITHHELD": "WITHHELD",
    "ASSIGNMENT_VIOLATION": "ASSIGNMENT_VIOLATION",
}
"""Forfeit cause of each fault verdict (spec 6.3: ``forfeit_for``)."""


def complete_job(
    conn: sqlite3.Connection, job_id: str, req: CompleteRequest, coord: Keypair
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Record the verdict and its consequences (module doc); ``(answer, audit event)``."""
    job, d = _leased(conn, job_id, req.lease)
    if check_shape(req.verdict).type != "ReplayVerdict":
        raise Malformed("verdict: expected a signed ReplayVerdict envelope")
    auditors = set(parse_manifest(get_run(conn, job.run_id).manifest_envelope).auditors)
    verified = verify(
        req.verdict,
        expected_run_id=job.run_id,
        now_round=d,
        signer_allowed=lambda _t, signer: signer in auditors,
    )
    verdict = verified.message
    assert isinstance(verdict, ReplayVerdict)
    if verdict.challenge_hash != job.challenge_hash:
        raise ContractMismatch(
            f"verdict challenge_hash {verdict.challenge_hash} is not job {job_id}'s"
            f" {job.challenge_hash}"
        )
    if verified.envelope.signer == job.target:
        raise UnauthorizedSigner("an auditor may not judge its own round")
    inner = parse_manifest(get_run(conn, job.run_id).manifest_envelope).inner
    if verdict.first_bad_leaf is not None and verdict.first_bad_leaf > inner.H // inner.J:
        raise ContractMismatch(
            f"first_bad_leaf {verdict.first_bad_leaf} is past the round's last leaf"
            f" {inner.H // inner.J}"
        )
    if verdict.result == "WITHHELD":
        _check_withheld(conn, job, d)
    record_seen(conn, verified.replay_key, d)
    result = verdict.result
    update_job(
        conn,
        job.job_id,
        state="done",
        lease=None,
        lease_expires_round=None,
        verdict=verified.envelope.encode().decode(),
        result=result,
        auditor=verified.envelope.signer,
        verdict_round=d,
    )
    set_verdict_status(conn, job.run_id, job.w, job.target, result)
    forfeited = None
    if result in FAULT_STATUSES:
        set_blacklisted(conn, job.run_id, job.target)
        cause = _CAUSE[result]
        forfeit = Forfeit(
            w=job.w,
            hotkey=job.target,
            cause=cause,  # type: ignore[arg-type]
            evidence=(job.challenge_hash, verified.body_digest),
            round_reward_burned=0,
            escrow_burned_units=0,
            blacklist=True,
            debt_units=0,
        )
        envelope = seal(coord, "Forfeit", job.run_id, forfeit, NEVER)
        insert_forfeit(conn, job.run_id, job.w, job.target, cause, envelope.encode().decode(), d)
        forfeited = envelope
    answer = VerdictRecorded(id=job.job_id, state="done", result=result, forfeit=forfeited)
    return unstructure(answer), _event(
        job, "verdict", result=result, auditor=verified.envelope.signer
    )


def _check_withheld(conn: sqlite3.Connection, job: JobRow, D: int) -> None:  # noqa: N803
    """WITHHELD is a fact the coordinator can check: a segments job past its serve deadline with
    a window start that has no stored serve (422 otherwise)."""
    if job.mode != "segments" or job.serve_deadline >= D:
        raise ContractMismatch("WITHHELD needs a segments audit past its serve_deadline")
    J = parse_manifest(get_run(conn, job.run_id).manifest_envelope).inner.J  # noqa: N806
    served = {serve.t for serve in serves_of(conn, job.challenge_hash)}
    if all(a * J in served for a, _ in _windows(job)):
        raise ContractMismatch("WITHHELD, but every challenged window's state was served")


def expire_leases(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    """Requeue every leased job whose lease expired at the stored D; their events."""
    d = latest_round(conn)
    events = []
    for job in leased_expired(conn, d):
        update_job(conn, job.job_id, state="queued", lease=None, lease_expires_round=None)
        events.append(_event(job, "expired"))
    return events


def check_lease_token(value: str) -> None:
    """400 unless ``value`` (the ``lease`` query parameter) is a lease token."""
    lease_token.check_param("lease", value)
