"""The checks of spec 6.3 that need no replay, in the spec's order (first failure decides).

Each returns what it found as a value (a reason string, a leaf index, the usable serves) and
never a verdict; :mod:`hypertrain.auditor.verdict` turns them into one. Pure: no trio, no
httpx, no torch.

1. **BAD_PROOF** (:func:`commitment_failure`, :func:`check_serves`, :func:`ef_in_state`):

   - ``commit.n_leaves == H/J + 1`` and the job carries that many leaves and preimages;
   - the leaf digests Merkle to ``commit.leaves_root``;
   - preimage ``i`` has the job's ``run_id`` and ``w``, ``t = i*J``, ``layout.pp`` stages, and
     hashes (``ht-leaf-v1``) to leaf ``i``;
   - *(ours)* ``commit.metrics_root`` is the Merkle root of the preimages' ``loss || norm``;
   - segments: every StateServe in the job is the target's for this challenge at the start
     ``t = a*J`` of a challenged window, its Merkle proof shows leaf ``a`` in ``leaves_root``,
     its blob decodes as a full state (theta, m, v, step) of the run's model, the blob's
     ``tensor_root`` is the serve's, and the blob's per-stage TH equal preimage ``a``'s stages;
     *(ours)* every serve's ``step - a*J`` is the same non-negative number (the optimizer step
     count at the round's start, which an honest carry state advances by one a step);
   - the ef_in blob (``ef_in_sha256``), when the job names one, decodes and its TH is
     ``commit.ef_in_hash``.

   A serve whose envelope does not verify, or that the target did not sign, is not the
   target's doing: :class:`~hypertrain.auditor.errors.BadJob`.
2. **ASSIGNMENT_VIOLATION** (:func:`assignment_violation`): preimage ``i``'s
   ``batch_ids_sha256`` is the hash of the assigned ids of steps ``t-J+1 .. t``.
3. **WITHHELD** (:func:`missing_starts`): the windows whose start has no usable serve.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from hypertrain.auditor.errors import BadJob
from hypertrain.auditor.job import AuditJob
from hypertrain.protocol.envelope import verify
from hypertrain.protocol.errors import HypertrainError, Malformed
from hypertrain.protocol.hashes import batch_ids_sha256, metrics_leaf, tensor_root
from hypertrain.protocol.merkle import merkle_root_hex, verify_proof
from hypertrain.protocol.messages import StateServe
from hypertrain.protocol.tensorhash import th_bytes, th_hex
from hypertrain.protocol.validators import is_hex64
from hypertrain.rounds.assignment import window_ids
from hypertrain.rounds.segments import Window
from hypertrain.trainer.leaves import preimage_digest, stage_states
from hypertrain.trainer.params import F32Array, param_shapes
from hypertrain.trainer.state import TrainState, unpack_state

__all__ = [
    "ServeCheck",
    "ServedState",
    "assignment_violation",
    "blob_sha_of",
    "check_serves",
    "commitment_failure",
    "ef_in_state",
    "missing_starts",
    "serve_blob_shas",
    "zeros_like_model",
]


@attrs.frozen(eq=False)
class ServedState:
    """A serve that passed every check: the full state at leaf ``a``."""

    a: int
    serve: StateServe
    state: TrainState


@attrs.frozen(eq=False)
class ServeCheck:
    """What :func:`check_serves` found: the first BAD_PROOF reason, else the usable serves."""

    failure: str | None
    served: Mapping[int, ServedState]


def commitment_failure(job: AuditJob) -> str | None:
    """The first broken commitment of BAD_PROOF (module docstring, first items), or None."""
    inner, commit = job.manifest.inner, job.commit
    n = inner.H // inner.J + 1
    if commit.n_leaves != n:
        return f"commit n_leaves {commit.n_leaves} != H/J + 1 = {n}"
    if len(job.leaves) != n or len(job.preimages) != n:
        return f"{len(job.leaves)} leaves and {len(job.preimages)} preimages, {n} committed"
    digests = [bytes.fromhex(leaf) for leaf in job.leaves]
    if merkle_root_hex(digests) != commit.leaves_root:
        return "the leaf digests do not Merkle to the committed leaves_root"
    pp = job.manifest.reference_spec.layout.pp
    for i, p in enumerate(job.preimages):
        if (p.run_id, p.w, p.t) != (job.run_id, job.w, i * inner.J):
            return f"preimage {i} is for run {p.run_id[:8]}.. w={p.w} t={p.t}"
        if len(p.stages) != pp:
            return f"preimage {i} has {len(p.stages)} stages, layout.pp is {pp}"
        if preimage_digest(p) != digests[i]:
            return f"preimage {i} does not hash to leaf {i}"
    metrics = merkle_root_hex(
        [metrics_leaf(bytes.fromhex(p.loss_f32), bytes.fromhex(p.norm_f32)) for p in job.preimages]
    )
    if metrics != commit.metrics_root:
        return "the preimages' loss and norm do not Merkle to the committed metrics_root"
    return None


def blob_sha_of(uri: object) -> str | None:
    """The sha256 a serve's ``uri`` ends with, or None."""
    if not isinstance(uri, str):
        return None
    sha = uri.rsplit("/", 1)[-1]
    return sha if is_hex64(sha) else None


def serve_blob_shas(serves: Iterable[Mapping[str, Any]]) -> list[str]:
    """The blob sha256s the serve envelopes name (what the adapter fetches), deduplicated."""
    out: list[str] = []
    for envelope in serves:
        body = envelope.get("body") if isinstance(envelope, Mapping) else None
        sha = blob_sha_of(body.get("uri")) if isinstance(body, Mapping) else None
        if sha is not None and sha not in out:
            out.append(sha)
    return out


def _verified_serve(job: AuditJob, envelope: Mapping[str, Any]) -> StateServe:
    try:
        checked = verify(envelope, expected_run_id=job.run_id)
    except HypertrainError as e:
        raise BadJob(f"a state serve does not verify: {e}") from e
    serve = checked.message
    if not isinstance(serve, StateServe) or checked.envelope.signer != job.target:
        raise BadJob("a state serve is not a StateServe signed by the target")
    return serve


def _full_state(blob: bytes, job: AuditJob) -> TrainState | str:
    try:
        state = unpack_state(blob)
    except Malformed as e:
        return f"the blob does not decode ({e.detail})"
    if state.m is None or state.v is None or state.step is None:
        return "the blob is not a full state (theta, m, v, step)"
    shapes = param_shapes(job.manifest.model)
    if {n: tuple(a.shape) for n, a in state.theta.items()} != shapes:
        return "the blob's tensors are not the run's model"
    return state


def _serve_failure(
    job: AuditJob, serve: StateServe, blobs: Mapping[str, bytes], starts: set[int]
) -> ServedState | str:
    J = job.manifest.inner.J  # noqa: N806 (spec name)
    if serve.hotkey != job.target or serve.challenge_hash != job.challenge_hash:
        return "it is not the target's serve for this challenge"
    a, rest = divmod(serve.t, J)
    if rest or a not in starts:
        return f"t={serve.t} is not the start of a challenged window"
    proof = [bytes.fromhex(h) for h in serve.merkle_proof_leaf_in_leaves_root]
    n = job.commit.n_leaves
    root = bytes.fromhex(job.commit.leaves_root)
    if not verify_proof(bytes.fromhex(job.leaves[a]), a, n, proof, root):
        return f"its proof does not show leaf {a} in leaves_root"
    sha = blob_sha_of(serve.uri)
    if sha is None or sha not in blobs:
        raise BadJob(f"the blob of the serve at t={serve.t} was not fetched")
    state = _full_state(blobs[sha], job)
    if isinstance(state, str):
        return state
    assert state.m is not None
    assert state.v is not None
    assert state.step is not None
    root_hex = tensor_root(th_bytes(state.theta), th_bytes(state.m), th_bytes(state.v), state.step)
    if root_hex != serve.tensor_root:
        return "the blob's tensor_root is not the serve's"
    model, layout = job.manifest.model, job.manifest.reference_spec.layout
    stages = stage_states(state.theta, state.m, state.v, model.n_layers, layout.pp)
    if tuple(stages) != tuple(job.preimages[a].stages):
        return f"the blob's stage hashes are not committed leaf {a}'s"
    return ServedState(a=a, serve=serve, state=state)


def check_serves(
    job: AuditJob,
    serves: Sequence[Mapping[str, Any]],
    blobs: Mapping[str, bytes],
    windows: Sequence[Window],
) -> ServeCheck:
    """Check every serve of ``serves`` (module docstring, BAD_PROOF segments items).

    ``blobs`` holds every blob the serves name (by sha256, already hash-checked); the first
    serve that fails gives the reason, else the usable serve of each window start.
    """
    starts = {a for a, _ in windows}
    served: dict[int, ServedState] = {}
    for envelope in serves:
        serve = _verified_serve(job, envelope)
        found = _serve_failure(job, serve, blobs, starts)
        if isinstance(found, str):
            return ServeCheck(f"state serve t={serve.t}: {found}", {})
        served.setdefault(found.a, found)
    J = job.manifest.inner.J  # noqa: N806
    offsets = {s.state.step - s.a * J for s in served.values() if s.state.step is not None}
    if len(offsets) > 1 or any(o < 0 for o in offsets):
        return ServeCheck("the served optimizer step counts do not advance one a step", {})
    return ServeCheck(None, served)


def zeros_like_model(job: AuditJob) -> dict[str, F32Array]:
    """Zeros of every parameter of the run's model (the default ef_in)."""
    return {
        n: np.zeros(shape, dtype=np.float32)
        for n, shape in param_shapes(job.manifest.model).items()
    }


def ef_in_state(job: AuditJob, blobs: Mapping[str, bytes]) -> dict[str, F32Array] | str | None:
    """The committed ef_in: the named blob's theta when its TH is ``commit.ef_in_hash`` (a
    reason string when not), zeros when no blob is named and the hash is TH(zeros), else None
    (the ef_in is not known to this auditor)."""
    sha = job.ef_in_sha256
    if sha is None:
        zeros = zeros_like_model(job)
        return zeros if th_hex(zeros) == job.commit.ef_in_hash else None
    if sha not in blobs:
        raise BadJob("the ef_in blob was not fetched")
    try:
        ef_in = unpack_state(blobs[sha]).theta
    except Malformed as e:
        return f"the ef_in blob does not decode ({e.detail})"
    if th_hex(ef_in) != job.commit.ef_in_hash:
        return "the ef_in blob does not hash to the committed ef_in_hash"
    return ef_in


def assignment_violation(job: AuditJob) -> int | None:
    """The first leaf whose ``batch_ids_sha256`` is not its assigned window's, or None."""
    inner = job.manifest.inner
    ids = list(job.assignment.sample_ids)
    per_step = inner.micro_batch * inner.grad_accum
    for i, p in enumerate(job.preimages):
        want = batch_ids_sha256(window_ids(ids, p.t, inner.J, per_step)).hex()
        if p.batch_ids_sha256 != want:
            return i
    return None


def missing_starts(windows: Sequence[Window], served: Mapping[int, ServedState]) -> list[int]:
    """The window starts (leaf indices) no usable serve covers, ascending."""
    return sorted({a for a, _ in windows} - set(served))
