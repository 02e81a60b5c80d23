"""A target serves its training state to a segment audit (spec 3 StateServe, 6.3, 9).

Two steps for the miner, each one write:

1. :func:`grant_state_upload` (``POST /v1/runs/{id}/uploads`` with ``challenge_hash``): the
   challenge must target the hotkey in round ``w`` of this run (404), be a segments challenge
   and ``D <= serve_deadline`` (409). The grant names the blob's sha256 and the exact size of a
   full state blob (``pack_state(theta, m, v, step)``) of the run's model, usable until the
   serve deadline.
2. :func:`record_serve` (``POST /v1/runs/{id}/state``): a StateServe envelope signed by the
   target. The route first reads the named blob from the object store (422 when not stored)
   and computes its :class:`BlobFacts` off the event loop (:func:`blob_facts`: decodes as a full
   state of the model's shapes, its ``tensor_root`` and per-stage TH digests); then, in one
   write: verify at D; the challenge as in step 1; ``t = a*J`` for a challenged window ``[a,
   b]`` (422); ``tensor_root`` equals the blob's and the blob's stage digests equal the committed
   preimage of leaf ``a`` (422); the proof shows leaf ``a``'s digest in the committed
   ``leaves_root`` (422); one serve per ``(challenge, t)``: the identical envelope again answers
   the same 200, a different one is 409.
"""

from __future__ import annotations

import functools
import sqlite3

from attrs import frozen

from hypertrain.beacon.ingest import latest_round
from hypertrain.coordinator.flows.lifecycle import parse_manifest
from hypertrain.coordinator.flows.replies import StateStored, UploadGrant
from hypertrain.coordinator.tables.audits import (
    JobRow,
    ServeRow,
    insert_serve,
    job_by_challenge,
    serves_of,
)
from hypertrain.coordinator.tables.miners import (
    GrantRow,
    get_leaves,
    get_miner,
    insert_grant,
)
from hypertrain.coordinator.tables.runs import get_run, record_seen
from hypertrain.protocol.converter import structure
from hypertrain.protocol.envelope import check_shape, verify
from hypertrain.protocol.errors import Conflict, ContractMismatch, Malformed, NotFound
from hypertrain.protocol.hashes import tensor_root
from hypertrain.protocol.manifest import ModelSpec, RunManifest
from hypertrain.protocol.merkle import verify_proof
from hypertrain.protocol.messages import (
    AuditChallenge,
    Commit,
    LeafPreimage,
    StageState,
    StateServe,
)
from hypertrain.protocol.tensorhash import th_bytes
from hypertrain.trainer.leaves import preimage_digest, stage_states
from hypertrain.trainer.params import param_shapes
from hypertrain.trainer.state import pack_state, unpack_state

__all__ = [
    "BlobFacts",
    "blob_facts",
    "check_serve_target",
    "grant_state_upload",
    "record_serve",
    "serve_blob_sha",
    "state_blob_size",
]


@functools.lru_cache(maxsize=8)
def state_blob_size(model: ModelSpec) -> int:
    """The size of a full state blob (theta, m, v, step) of ``model``."""
    import numpy as np

    zeros = {n: np.zeros(s, dtype=np.float32) for n, s in param_shapes(model).items()}
    return len(pack_state(zeros, zeros, zeros, 0))


@frozen
class BlobFacts:
    """What a served blob is: its tensor_root and its per-stage TH digests."""

    sha256: str
    tensor_root: str
    stages: tuple[StageState, ...]


def blob_facts(blob: bytes, sha256: str, manifest: RunManifest) -> BlobFacts:
    """Decode a served state blob and hash it (CPU work: run it off the event loop). A blob
    that is not a full state of the model's shapes is 422."""
    try:
        state = unpack_state(blob)
    except Malformed as e:
        raise ContractMismatch(f"served blob {sha256} is not a state blob: {e.detail}") from e
    if state.m is None or state.v is None or state.step is None:
        raise ContractMismatch(f"served blob {sha256} lacks m, v or step")
    shapes = {n: tuple(a.shape) for n, a in state.theta.items()}
    if shapes != param_shapes(manifest.model):
        raise ContractMismatch(f"served blob {sha256} does not hold the model's tensors")
    root = tensor_root(th_bytes(state.theta), th_bytes(state.m), th_bytes(state.v), state.step)
    stages = stage_states(
        state.theta,
        state.m,
        state.v,
        manifest.model.n_layers,
        manifest.reference_spec.layout.pp,
    )
    return BlobFacts(sha256=sha256, tensor_root=root, stages=stages)


def serve_blob_sha(raw: object) -> str:
    """The blob sha256 a StateServe envelope names (the last part of its ``uri``), checked for
    shape only; 400 for anything but a StateServe."""
    envelope = check_shape(raw)
    if envelope.type != "StateServe":
        raise Malformed("expected a signed StateServe envelope")
    uri = envelope.body.get("uri")
    sha = uri.rsplit("/", 1)[-1] if isinstance(uri, str) else ""
    if len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
        raise Malformed("StateServe uri: must end with the blob's sha256 hex")
    return sha


def _target_job(
    conn: sqlite3.Connection, run_id: str, challenge_hash: str, hotkey: str, w: int | None
) -> tuple[JobRow, AuditChallenge, int]:
    job = job_by_challenge(conn, challenge_hash)
    if job is None or job.run_id != run_id or job.target != hotkey or w not in (None, job.w):
        raise NotFound(f"no audit challenge {challenge_hash} targets {hotkey} in this run")
    challenge = structure(AuditChallenge, job.challenge_json()["body"])
    d = latest_round(conn)
    if challenge.mode != "segments":
        raise Conflict(f"challenge {challenge_hash} is a full replay: nothing is served")
    if d > challenge.serve_deadline:
        raise Conflict(
            f"challenge {challenge_hash}: serve_deadline {challenge.serve_deadline} passed"
            f" (D = {d})"
        )
    return job, challenge, d


def check_serve_target(conn: sqlite3.Connection, raw: object, run_id: str) -> RunManifest:
    """The read before a StateServe's blob work: the envelope's challenge must target its
    hotkey in this run and still take serves (404/409 as in :func:`record_serve`); returns the
    run's manifest."""
    envelope = check_shape(raw)
    challenge_hash, hotkey = envelope.body.get("challenge_hash"), envelope.body.get("hotkey")
    if not isinstance(challenge_hash, str) or not isinstance(hotkey, str):
        raise Malformed("StateServe body: challenge_hash and hotkey must be strings")
    _target_job(conn, run_id, challenge_hash, hotkey, None)
    return parse_manifest(get_run(conn, run_id).manifest_envelope)


def grant_state_upload(
    conn: sqlite3.Connection,
    run_id: str,
    w: int,
    hotkey: str,
    sha256: str,
    challenge_hash: str,
    grant_id: str,
) -> UploadGrant:
    """Step 1 of the module doc: ``{method: "PUT", sha256, url}``."""
    job, challenge, d = _target_job(conn, run_id, challenge_hash, hotkey, w)
    manifest = parse_manifest(get_run(conn, run_id).manifest_envelope)
    grant = GrantRow(
        grant_id=grant_id,
        run_id=run_id,
        w=job.w,
        hotkey=hotkey,
        sha256=sha256,
        size=state_blob_size(manifest.model),
        expires_round=challenge.serve_deadline + 1,
    )
    insert_grant(conn, grant, d)
    return UploadGrant("PUT", sha256, f"/v1/uploads/{grant_id}")


def record_serve(
    conn: sqlite3.Connection, raw: object, run_id: str, facts: BlobFacts
) -> StateStored:
    """Step 2 of the module doc: ``{challenge_hash, t, stored: true}``."""
    d = latest_round(conn)
    verified = verify(raw, expected_run_id=run_id, now_round=d)
    serve = verified.message
    if not isinstance(serve, StateServe):
        raise Malformed("expected a signed StateServe envelope")
    job, challenge, _ = _target_job(conn, run_id, serve.challenge_hash, serve.hotkey, None)
    answer = StateStored(serve.challenge_hash, serve.t, True)
    text = verified.envelope.encode().decode()
    existing = {row.t: row for row in serves_of(conn, job.challenge_hash)}
    if serve.t in existing:
        if existing[serve.t].envelope == text:
            return answer
        raise Conflict(f"a different state is already served for t = {serve.t}")
    manifest = parse_manifest(get_run(conn, run_id).manifest_envelope)
    J = manifest.inner.J  # noqa: N806
    starts = {a for a, _ in challenge.segments}
    if serve.t % J or serve.t // J not in starts:
        raise ContractMismatch(
            f"t = {serve.t} is not the start of a challenged window"
            f" (t in {sorted(a * J for a in starts)})"
        )
    if facts.sha256 != serve.uri.rsplit("/", 1)[-1]:
        raise ContractMismatch("the served blob is not the one the uri names")
    if serve.tensor_root != facts.tensor_root:
        raise ContractMismatch(
            f"tensor_root {serve.tensor_root} is not the served blob's {facts.tensor_root}"
        )
    leaves = get_leaves(conn, run_id, job.w, job.target)
    miner = get_miner(conn, run_id, job.w, job.target)
    if leaves is None or miner is None or miner.commit_envelope is None:
        raise Conflict("the target's preimages are not stored")
    a = serve.t // J
    preimages = [structure(LeafPreimage, p) for p in leaves.preimages]
    if tuple(preimages[a].stages) != facts.stages:
        raise ContractMismatch(f"the served state is not the committed state of leaf {a}")
    commit = structure(Commit, miner.commit_body())
    proof = [bytes.fromhex(h) for h in serve.merkle_proof_leaf_in_leaves_root]
    if not verify_proof(
        preimage_digest(preimages[a]),
        a,
        len(preimages),
        proof,
        bytes.fromhex(commit.leaves_root),
    ):
        raise ContractMismatch(f"the Merkle proof of leaf {a} does not reach leaves_root")
    record_seen(conn, verified.replay_key, d)
    insert_serve(conn, ServeRow(serve.challenge_hash, serve.t, text, facts.sha256), d)
    return answer
