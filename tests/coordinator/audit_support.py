"""Helpers of the audit route tests: a round whose two miners committed real-looking leaves.

The run uses the CPU test-mode model and inner loop (H = 6, J = 2: windows [0,1], [1,2], [2,3],
all drawn) under ``carry``, so audits are segment audits. Each miner's leaf ``k`` commits the
stage digests of a random full state blob (:func:`leaf_blob`), so a served blob can be checked
against the committed leaf exactly as the coordinator does; nothing is trained.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import numpy as np

from hypertrain.protocol.converter import unstructure
from hypertrain.protocol.envelope import seal
from hypertrain.protocol.hashes import tensor_root
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.manifest import RunManifest
from hypertrain.protocol.merkle import merkle_proof, merkle_root_hex
from hypertrain.protocol.messages import LeafPreimage
from hypertrain.protocol.tensorhash import th_bytes
from hypertrain.protocol.testmode import build_test_mode_manifest
from hypertrain.trainer.leaves import preimage_digest, stage_states
from hypertrain.trainer.params import param_shapes
from hypertrain.trainer.state import pack_state
from tests.coordinator.harness import Harness
from tests.coordinator.lifecycle_support import COORD, EXP, manifest
from tests.coordinator.miner_support import KEYS, Flow, open_flow

AUDITOR = Keypair.from_seed(bytes([0x61]) * 32)
STRANGER = Keypair.from_seed(bytes([0x62]) * 32)
_TM, _ = build_test_mode_manifest(coord_pubkey=COORD.ss58)
BODY = attrs.evolve(manifest(), model=_TM.model, inner=_TM.inner, auditors=(AUDITOR.ss58,))
H, J = BODY.inner.H, BODY.inner.J
N_LEAVES = H // J + 1
DELTA = b"delta bytes " * 10


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def leaf_blob(key: Keypair, k: int) -> bytes:
    """The full state blob a miner ``key`` serves for leaf ``k`` (random, reproducible)."""
    rng = np.random.default_rng([k, *key.public_key[:4]])
    shapes = param_shapes(BODY.model)

    def draw() -> dict[str, Any]:
        return {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}

    return pack_state(draw(), draw(), draw(), k * J)


def blob_parts(blob: bytes) -> tuple[Any, ...]:
    from hypertrain.trainer.state import unpack_state

    state = unpack_state(blob)
    assert state.m is not None
    assert state.v is not None
    assert state.step is not None
    return state.theta, state.m, state.v, state.step


def preimages(run_id: str, key: Keypair) -> list[LeafPreimage]:
    out = []
    for k in range(N_LEAVES):
        theta, m, v, _ = blob_parts(leaf_blob(key, k))
        stages = stage_states(theta, m, v, BODY.model.n_layers, BODY.reference_spec.layout.pp)
        out.append(
            LeafPreimage(
                run_id=run_id,
                w=0,
                t=k * J,
                stages=stages,
                batch_ids_sha256=sha(f"ids{k}".encode()),
                rng_ctr=k,
                loss_f32="0000803f",
                norm_f32="00000000",
            )
        )
    return out


def digests(run_id: str, key: Keypair) -> list[bytes]:
    return [preimage_digest(p) for p in preimages(run_id, key)]


@attrs.frozen
class AuditFlow:
    """Round 0 of an audited run, both miners UPLOADED, D = d_audit (drawn)."""

    flow: Flow

    @property
    def h(self) -> Harness:
        return self.flow.h

    @property
    def run_id(self) -> str:
        return self.flow.run_id

    async def view(self) -> dict[str, Any]:
        return await self.flow.view()

    async def job_of(self, key: Keypair) -> dict[str, Any]:
        for job in (await self.view())["jobs"]:
            if job["target"] == key.ss58:
                value: dict[str, Any] = job
                return value
        raise AssertionError(f"no audit job targets {key.ss58}")

    def serve_body(self, key: Keypair, challenge_hash: str, k: int, **over: Any) -> dict[str, Any]:
        blob = leaf_blob(key, k)
        theta, m, v, step = blob_parts(blob)
        fields: dict[str, Any] = {
            "hotkey": key.ss58,
            "challenge_hash": challenge_hash,
            "t": k * J,
            "uri": f"objects/{sha(blob)}",
            "tensor_root": tensor_root(th_bytes(theta), th_bytes(m), th_bytes(v), step),
            "merkle_proof_leaf_in_leaves_root": [
                p.hex() for p in merkle_proof(digests(self.run_id, key), k)
            ],
        }
        fields.update(over)
        return seal(key, "StateServe", self.run_id, fields, EXP).to_json()

    async def upload_blob(self, key: Keypair, challenge_hash: str, blob: bytes) -> None:
        body = {"w": 0, "hotkey": key.ss58, "sha256": sha(blob), "challenge_hash": challenge_hash}
        r = await self.flow.post("uploads", body)
        assert r.status_code == 200, r.text
        r = await self.flow.put(r.json()["url"], blob)
        assert r.status_code == 200, r.text

    async def serve(self, key: Keypair, k: int) -> Any:
        job = await self.job_of(key)
        await self.upload_blob(key, job["challenge_hash"], leaf_blob(key, k))
        return await self.flow.post("state", self.serve_body(key, job["challenge_hash"], k))

    async def serve_all(self, key: Keypair) -> None:
        job = await self.job_of(key)
        for a, _ in job["challenge"]["body"]["segments"]:
            r = await self.serve(key, a)
            assert r.status_code == 200, r.text

    def verdict(
        self,
        job: dict[str, Any],
        result: str,
        *,
        signer: Keypair = AUDITOR,
        challenge_hash: str | None = None,
        recomputed: str = "0" * 64,
    ) -> dict[str, Any]:
        body = {
            "challenge_hash": challenge_hash or job["challenge_hash"],
            "first_bad_leaf": 1 if result == "MISMATCH" else None,
            "result": result,
            "recomputed_leaves_root": recomputed,
            "replay_env": {
                "image_digest": BODY.reference_spec.image_digest,
                "driver": "cpu",
                "gpu_uuid_sha256": sha(b"cpu"),
                "sm_count": 1,
            },
        }
        challenge = job["challenge"] if "challenge_envelope" in job else job["challenge"]["body"]
        exp = challenge["serve_deadline"] + 1200  # a leased job's challenge is the body
        return seal(signer, "ReplayVerdict", self.run_id, body, exp).to_json()


async def uploaded_round(
    h: Harness,
    before_unpause: Callable[[str], Awaitable[None]] | None = None,
    body: RunManifest = BODY,
    *,
    leaves: tuple[Keypair, ...] = tuple(KEYS[:2]),
    upload: bool = True,
) -> AuditFlow:
    """Both miners accept and commit real-looking leaves; those in ``leaves`` post them and
    (with ``upload``) every miner uploads its delta; D = d_audit."""
    flow = await open_flow(h, body, before_unpause=before_unpause)
    await flow.to(flow.d.d_assign)
    for key in KEYS[:2]:
        await flow.accepted(key)
        mine = preimages(flow.run_id, key)
        commit = flow.commit(
            key,
            n_leaves=N_LEAVES,
            leaves_root=merkle_root_hex([preimage_digest(p) for p in mine]),
            delta_hash=sha(DELTA),
            delta_bytes=len(DELTA),
        )
        r = await flow.post("commit", commit)
        assert r.status_code == 200, r.text
        if key in leaves:
            posted = {"w": 0, "hotkey": key.ss58, "preimages": [unstructure(p) for p in mine]}
            r = await flow.post("leaves", posted)
            assert r.status_code == 200, r.text
        if upload:
            await upload_delta(flow, key)
    await flow.to(flow.d.d_audit)
    return AuditFlow(flow)


async def upload_delta(flow: Flow, key: Keypair) -> None:
    """Grant, PUT and DeltaManifest of ``key``'s delta (each answered 200)."""
    r = await flow.grant(key, sha(DELTA))
    assert r.status_code == 200, r.text
    assert (await flow.put(r.json()["url"], DELTA)).status_code == 200
    r = await flow.post("delta", flow.delta(key, DELTA))
    assert r.status_code == 200, r.text
