"""The leased audit job (spec 9.1 and the audit wire contract), typed and checked for coherence.

:func:`read_handle` reads the three fields every job has (``id``, ``lease``, ``run_id``) so a
job of another run can be handed back even when the rest would not parse. :func:`read_job`
reads the whole job through the one converter (:class:`~hypertrain.protocol.auditjob.AuditJob`,
the class the daemon documents its answer with): the signed bodies it carries (``challenge``,
``commit``, ``manifest``, ``preimages``) strictly, the top level and ``assignment`` keeping only
the keys named here (the job may grow). :func:`check_job` then checks that the job is one
coherent thing, before any verdict is considered; each failure is a
:class:`~hypertrain.auditor.errors.BadJob` (the job fails without retry), because none of them
is the target's doing:

1. ``manifest`` is the run's (``run_id = sha256(JCS(manifest))``); ``challenge_envelope`` is a
   valid AuditChallenge signed by ``manifest.coord_pubkey`` whose body is ``challenge`` and
   hashes to ``challenge_hash``; ``round_open`` is a valid RoundOpen of round ``w`` signed by
   K_coord; ``commit_envelope`` is a valid Commit signed by ``target`` whose body is ``commit``;
2. ``challenge.w``/``commit.w`` are ``w``, ``challenge.target``/``commit.hotkey`` are ``target``;
   ``challenge.beacon_round`` is the RoundOpen's ``d_audit`` and ``serve_deadline`` is
   ``d_audit + verify.T.serve_deadline``;
3. ``challenge.beacon_sig_sha256 == sha256(beacon_signature)``;
4. the assignment has ``micro_batch * grad_accum * H`` ids, each ``< dataset.n_samples``, and
   ``global_step0 = w * H``;
5. the challenge's mode is what ``state_policy`` implies (``segments`` iff ``carry``), and in
   segments mode its windows are exactly :func:`~hypertrain.rounds.segments.select_segments`
   of the committed preimages' ``norm_f32`` (``u = H / J``, ``k_segments``, ``Q_top``).

Pure: no trio, no httpx, no torch.
"""

from __future__ import annotations

import hashlib
from typing import Any

import attrs

from hypertrain.auditor.errors import BadJob
from hypertrain.protocol.auditjob import AuditJob, JobAssignment, JobHandle
from hypertrain.protocol.converter import structure, unstructure
from hypertrain.protocol.envelope import json_equal, verify
from hypertrain.protocol.errors import HypertrainError, SchemaError
from hypertrain.protocol.jcs import body_digest
from hypertrain.protocol.manifest import RunManifest
from hypertrain.protocol.messages import RoundOpen
from hypertrain.rounds.segments import Window, select_segments, window_count

__all__ = [
    "AuditJob",
    "JobAssignment",
    "JobHandle",
    "check_job",
    "expected_mode",
    "expected_windows",
    "read_handle",
    "read_job",
    "windows_of",
]


def _pick(cls: type, data: object) -> object:
    if not isinstance(data, dict):
        return data  # the converter names the wrong type
    return {f.name: data[f.name] for f in attrs.fields(cls) if f.name in data}


def read_handle(data: object) -> JobHandle:
    """The ``id``, ``lease`` and ``run_id`` of a lease answer; BadJob when they do not parse."""
    try:
        return structure(JobHandle, _pick(JobHandle, data))
    except SchemaError as e:
        raise BadJob(f"lease answer: {e.detail}") from e


def read_job(data: object, *, leased: bool = True) -> AuditJob:
    """The whole job (module docstring); BadJob naming the field that does not parse.
    ``leased``: a lease's answer, whose ``lease`` must be one; else a job read back by id,
    whose lease fields may be null or absent."""
    picked = _pick(AuditJob, data)
    if isinstance(picked, dict) and "assignment" in picked:
        picked["assignment"] = _pick(JobAssignment, picked["assignment"])
    if isinstance(picked, dict):
        if leased and picked.get("lease") is None:
            raise BadJob("job: $.lease: a leased job needs its lease")
        if not leased:
            picked.setdefault("lease", None)
            picked.setdefault("lease_expires_round", None)
    try:
        return structure(AuditJob, picked)
    except SchemaError as e:
        raise BadJob(f"job: {e.detail}") from e


def _verified(envelope: dict[str, Any], type_name: str, signer: str, run_id: str, what: str) -> Any:
    try:
        checked = verify(envelope, expected_run_id=run_id)
    except HypertrainError as e:
        raise BadJob(f"{what}: {e}") from e
    if checked.envelope.type != type_name:
        raise BadJob(f"{what}: a {checked.envelope.type} envelope, not a {type_name}")
    if checked.envelope.signer != signer:
        raise BadJob(f"{what}: signed by {checked.envelope.signer}, not {signer}")
    return checked.message


def expected_mode(manifest: RunManifest) -> str:
    """The challenge mode ``state_policy`` implies (spec 6.2): segments iff carry."""
    return "segments" if manifest.inner.state_policy == "carry" else "full"


def expected_windows(job: AuditJob) -> tuple[Window, ...]:
    """The segment windows this auditor derives for the job (DESIGN.md section 9)."""
    inner, verify_spec = job.manifest.inner, job.manifest.verify
    return select_segments(
        job.run_id,
        job.w,
        job.challenge.beacon_sig_sha256,
        job.target,
        u=window_count(inner.H, inner.J),
        k_segments=verify_spec.k_segments,
        q_top=verify_spec.Q_top,
        norms=[p.norm_f32 for p in job.preimages],
    )


def windows_of(job: AuditJob) -> tuple[Window, ...]:
    """The windows replayed: the challenge's (segments) or the whole round as one (full)."""
    if job.challenge.mode == "segments":
        return job.challenge.segments
    inner = job.manifest.inner
    return ((0, window_count(inner.H, inner.J)),)


def _check_envelopes(job: AuditJob) -> None:
    manifest = job.manifest
    if manifest.run_id() != job.run_id:
        raise BadJob("the job's manifest is not its run's (run_id != sha256(JCS(manifest)))")
    coord = manifest.coord_pubkey
    _verified(job.challenge_envelope, "AuditChallenge", coord, job.run_id, "challenge_envelope")
    if not json_equal(unstructure(job.challenge), job.challenge_envelope["body"]):
        raise BadJob("challenge is not the body of challenge_envelope")
    if body_digest(unstructure(job.challenge)) != job.challenge_hash:
        raise BadJob("challenge_hash is not the challenge body's digest")
    round_open = _verified(job.round_open, "RoundOpen", coord, job.run_id, "round_open")
    if not isinstance(round_open, RoundOpen) or round_open.w != job.w:
        raise BadJob(f"round_open is not round {job.w}'s")
    _verified(job.commit_envelope, "Commit", job.target, job.run_id, "commit_envelope")
    if not json_equal(unstructure(job.commit), job.commit_envelope["body"]):
        raise BadJob("commit is not the body of commit_envelope")
    challenge = job.challenge
    if (challenge.w, job.commit.w) != (job.w, job.w):
        raise BadJob(f"challenge or commit is not of round {job.w}")
    if (challenge.target, job.commit.hotkey) != (job.target, job.target):
        raise BadJob(f"challenge or commit is not of target {job.target}")
    if challenge.beacon_round != round_open.d_audit:
        raise BadJob(f"challenge beacon_round {challenge.beacon_round} != d_audit")
    deadline = round_open.d_audit + manifest.verify.T.serve_deadline
    if challenge.serve_deadline != deadline:
        raise BadJob(f"challenge serve_deadline {challenge.serve_deadline} != {deadline}")


def _check_beacon(job: AuditJob) -> None:
    sig = job.beacon_signature
    try:
        raw = bytes.fromhex(sig)
    except ValueError as e:
        raise BadJob("beacon_signature is not hex") from e
    if sig != raw.hex() or hashlib.sha256(raw).hexdigest() != job.challenge.beacon_sig_sha256:
        raise BadJob("challenge beacon_sig_sha256 != sha256(beacon_signature)")


def _check_assignment(job: AuditJob) -> None:
    inner = job.manifest.inner
    need = inner.micro_batch * inner.grad_accum * inner.H
    ids = job.assignment.sample_ids
    if len(ids) != need:
        raise BadJob(f"assignment has {len(ids)} sample ids, a round needs {need}")
    if any(i >= job.manifest.dataset.n_samples for i in ids):
        raise BadJob("assignment has a sample id past the dataset")
    if job.assignment.global_step0 != job.w * inner.H:
        raise BadJob(f"assignment global_step0 {job.assignment.global_step0} != w*H")


def check_job(job: AuditJob) -> None:
    """The job's coherence (module docstring, in that order); BadJob names the first failure."""
    _check_envelopes(job)
    _check_beacon(job)
    _check_assignment(job)
    mode = expected_mode(job.manifest)
    if job.challenge.mode != mode:
        policy = job.manifest.inner.state_policy
        raise BadJob(f"challenge mode {job.challenge.mode!r}, state_policy {policy} implies {mode}")
    if mode == "segments":
        want = expected_windows(job)
        if tuple(job.challenge.segments) != want:
            raise BadJob(
                f"challenge segments {list(job.challenge.segments)} differ from the derived"
                f" {list(want)}"
            )
