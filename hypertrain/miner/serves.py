"""What the miner serves to a segment audit, built from its round artifacts (spec 3, 6.2).

A segments-mode AuditChallenge names windows ``[a, b]`` in leaf units; for each window the
miner serves the state at leaf ``a`` (inner step ``t = a * J``), one serve per distinct ``a``:

- the blob: ``leaf_state_{a}.bin`` as written after training, ``pack_state(theta, m, v, step)``;
- ``tensor_root = sha256(TH(theta) || TH(m) || TH(v) || u64le(step))`` of that state;
- ``merkle_proof_leaf_in_leaves_root``: the proof of leaf digest ``a`` among the round's leaf
  digests (``preimages.json``), whose root is the Commit's ``leaves_root``;
- ``uri = "objects/<sha256 of the blob>"``.

Before anything goes out, the kept state is checked against the committed preimage of leaf
``a`` (its per-stage TH of theta, m, v): a state that does not hash to what was committed
(a damaged disk) would only earn a 422, so it is refused here as a :class:`ServeError`.
Pure: reads the round directory, imports neither trio nor httpx nor torch.
"""

from __future__ import annotations

import hashlib

import attrs

from hypertrain.miner.artifacts import RoundDir, leaf_state_file
from hypertrain.miner.errors import ServeError
from hypertrain.protocol.converter import structure
from hypertrain.protocol.errors import HypertrainError
from hypertrain.protocol.hashes import tensor_root
from hypertrain.protocol.manifest import RunManifest
from hypertrain.protocol.merkle import MerkleTree
from hypertrain.protocol.messages import AuditChallenge, LeafPreimage, StateServe
from hypertrain.protocol.tensorhash import th_bytes
from hypertrain.trainer.leaves import preimage_digest, stage_states

__all__ = ["PreparedServe", "prepare_serve", "serve_points"]


@attrs.frozen
class PreparedServe:
    """One serve, ready to upload and post: leaf ``a`` at step ``t``, its blob and body."""

    a: int
    t: int
    blob: bytes
    blob_sha256: str
    body: StateServe


def serve_points(challenge: AuditChallenge, J: int) -> tuple[tuple[int, int], ...]:  # noqa: N803
    """``(a, t = a * J)`` for each distinct window start of the challenge, ascending."""
    return tuple((a, a * J) for a in sorted({a for a, _ in challenge.segments}))


def prepare_serve(
    rd: RoundDir, manifest: RunManifest, hotkey: str, challenge_hash: str, a: int
) -> PreparedServe:
    """The serve of leaf ``a`` of round ``rd.w`` (module docstring); ServeError if it cannot be."""
    name = leaf_state_file(a)
    try:
        blob = rd.read_bytes(name)
        preimages = [structure(LeafPreimage, p) for p in rd.read_json("preimages.json")]
    except OSError as e:
        raise ServeError(f"round {rd.w}: cannot read the kept state of leaf {a}: {e}") from e
    except (ValueError, HypertrainError) as e:
        raise ServeError(f"round {rd.w}: preimages.json is damaged: {e}") from e
    if not 0 <= a < len(preimages):
        raise ServeError(f"round {rd.w}: leaf {a} is outside the {len(preimages)} committed")
    try:
        state = rd.read_state(name)
    except HypertrainError as e:
        raise ServeError(f"round {rd.w}: {name} is damaged: {e}") from e
    theta, m, v, step = state.theta, state.m, state.v, state.step
    if m is None or v is None or step is None:
        raise ServeError(f"round {rd.w}: {name} holds no optimizer state")
    stages = stage_states(theta, m, v, manifest.model.n_layers, manifest.reference_spec.layout.pp)
    if stages != preimages[a].stages:
        raise ServeError(f"round {rd.w}: {name} does not hash to the committed leaf {a}")
    proof = MerkleTree.from_leaves([preimage_digest(p) for p in preimages]).proof(a)
    sha = hashlib.sha256(blob).hexdigest()
    t = a * manifest.inner.J
    body = StateServe(
        hotkey=hotkey,
        challenge_hash=challenge_hash,
        t=t,
        uri=f"objects/{sha}",
        tensor_root=tensor_root(th_bytes(theta), th_bytes(m), th_bytes(v), step),
        merkle_proof_leaf_in_leaves_root=tuple(p.hex() for p in proof),
    )
    return PreparedServe(a=a, t=t, blob=blob, blob_sha256=sha, body=body)
