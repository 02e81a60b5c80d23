"""The audit job on the wire (spec 9.1): what ``POST /v1/worker/lease`` answers and the worker's
other answers, one class for the daemon and the auditor.

The daemon (:mod:`hypertrain.coordinator.flows.worker`) builds the job JSON from its tables and
declares :class:`AuditJob` for ``GET /openapi.json``; the auditor reads it back through the same
class (:func:`hypertrain.auditor.job.read_job`, which keeps only the keys named here, so the job
may grow). ``GET /v1/worker/jobs/{id}`` answers a :class:`StoredJob` (the job, then where it
stands); ``GET .../serves`` a :class:`JobServes`; ``POST .../complete`` a
:class:`VerdictRecorded`, written through the one converter.
"""

from __future__ import annotations

from typing import Any, Literal

import attrs
from attrs import field, frozen

from hypertrain.protocol.envelope import Envelope
from hypertrain.protocol.manifest import RunManifest
from hypertrain.protocol.messages import AuditChallenge, Commit, LeafPreimage
from hypertrain.protocol.validators import Check, hex64, optional, ss58, text, u_int

__all__ = [
    "AuditJob",
    "JobAssignment",
    "JobHandle",
    "JobServes",
    "ServedState",
    "StoredJob",
    "VerdictRecorded",
]

_lease_hex = Check(
    lambda v: isinstance(v, str) and len(v) == 32 and all(c in "0123456789abcdef" for c in v),
    "must be 32 lowercase hex chars",
)


@frozen
class JobHandle:
    """What identifies a lease: enough to hand a job back."""

    id: str = field(validator=text(64))
    lease: str = field(validator=_lease_hex)
    run_id: str = field(validator=hex64)


@frozen
class JobAssignment:
    """The target's assigned sample ids (assignment order) and the round's first global step."""

    sample_ids: tuple[int, ...] = field(validator=attrs.validators.deep_iterable(u_int))
    global_step0: int = field(validator=u_int)


@frozen
class AuditJob:
    """An audit job (spec 9.1 plus ``beacon_signature`` and ``dataset_sha256``): leased, or
    read back by id (``GET /v1/worker/jobs/{id}``, for a dispute), then ``lease`` and
    ``lease_expires_round`` are None."""

    id: str = field(validator=text(64))
    lease: str | None = field(validator=optional(_lease_hex))
    lease_expires_round: int | None = field(validator=optional(u_int))
    run_id: str = field(validator=hex64)
    w: int = field(validator=u_int)
    target: str = field(validator=ss58)
    challenge: AuditChallenge
    challenge_hash: str = field(validator=hex64)
    challenge_envelope: dict[str, Any]
    round_open: dict[str, Any]
    commit: Commit
    commit_envelope: dict[str, Any]
    delta_manifest: dict[str, Any] | None
    state_serves: tuple[dict[str, Any], ...]
    manifest: RunManifest
    leaves: tuple[str, ...] = field(validator=attrs.validators.deep_iterable(hex64))
    preimages: tuple[LeafPreimage, ...]
    assignment: JobAssignment
    theta_start_sha256: str = field(validator=hex64)
    ef_in_sha256: str | None = field(validator=optional(hex64))
    v0_sha256: str | None = field(validator=optional(hex64))
    beacon_signature: str
    dataset_sha256: str | None = field(validator=optional(hex64))


@frozen
class StoredJob(AuditJob):
    """``GET /v1/worker/jobs/{id}``: the job (its lease fields null unless leased), its state,
    result and ReplayVerdict envelope (null until done)."""

    state: str
    result: str | None
    verdict: Envelope | None


@frozen
class ServedState:
    """A StateServe envelope stored for the job and its blob."""

    serve: Envelope
    blob_sha256: str


@frozen
class JobServes:
    """``GET /v1/worker/jobs/{id}/serves?lease=``: D and the job's stored serves."""

    now_round: int
    serves: tuple[ServedState, ...]


@frozen(kw_only=True)
class VerdictRecorded:
    """``POST /v1/worker/jobs/{id}/complete``: the verdict recorded; ``forfeit``, the sealed
    Forfeit envelope, only for a fault verdict."""

    id: str
    state: Literal["done"]
    result: str
    forfeit: Envelope | None = None
