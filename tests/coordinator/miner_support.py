"""Helpers of the miner-flow tests: a running round 0, miner keys, signed Accept/Commit/Delta.

Leaf digests are computed here from :mod:`hypertrain.protocol.hashes` (not with the server's
helper), over synthetic preimages; the delta is arbitrary bytes (the coordinator never decodes
it).
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import httpx

from hypertrain.protocol.converter import unstructure
from hypertrain.protocol.envelope import seal
from hypertrain.protocol.hashes import leaf_digest, stage_root
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.manifest import RunManifest
from hypertrain.protocol.merkle import merkle_root_hex
from hypertrain.protocol.messages import LeafPreimage, StageState
from hypertrain.rounds import Deadlines
from tests.coordinator.harness import Harness
from tests.coordinator.lifecycle_support import (
    CONFIG,
    EXP,
    MINERS,
    admin,
    create_run,
    manifest,
    push,
    unpause,
)

KEYS = [Keypair.from_seed(bytes([0x41 + i]) * 32) for i in range(4)]
"""The lifecycle MINERS' keypairs (``KEYS[i].ss58 == MINERS[i]``); 0 and 1 are rostered."""
OUTSIDER = KEYS[3]
H, J = 30, 5
N_LEAVES = H // J + 1
DELTA = bytes(range(256)) * 40
DELTA_SHA = hashlib.sha256(DELTA).hexdigest()

assert [k.ss58 for k in KEYS] == MINERS


def sha(label: str) -> str:
    return hashlib.sha256(label.encode()).hexdigest()


@attrs.frozen
class Flow:
    """A running run with round 0 open; ``d`` its deadlines."""

    h: Harness
    run_id: str
    d: Deadlines

    @property
    def runs(self) -> str:
        return f"/v1/runs/{self.run_id}"

    async def post(self, route: str, body: object) -> httpx.Response:
        return await self.h.client.post(f"{self.runs}/{route}", json=body)

    async def view(self) -> dict[str, Any]:
        """Round 0's view with the miners' envelopes (``full=1``)."""
        r = await self.h.client.get(f"{self.runs}/rounds/0", params={"full": "1"})
        assert r.status_code == 200, r.text
        view: dict[str, Any] = r.json()
        return view

    async def status(self, key: Keypair) -> str:
        miners = {m["hotkey"]: m for m in (await self.view())["miners"]}
        status: str = miners[key.ss58]["status"]
        return status

    async def assignment_hash(self, key: Keypair) -> str:
        for item in (await self.view())["assignment"]:
            if item["hotkey"] == key.ss58:
                value: str = item["assignment_hash"]
                return value
        raise AssertionError(f"{key.ss58} has no assignment")

    async def to(self, n: int) -> None:
        """Push beacon round ``n`` (D becomes n)."""
        await push(self.h, n)

    def accept(self, key: Keypair, ahash: str, **body: Any) -> dict[str, Any]:
        fields = {
            "w": 0,
            "hotkey": key.ss58,
            "assignment_hash": ahash,
            "image_digest": manifest().reference_spec.image_digest,
            "driver_version": "drv-1",
            "n_gpus": 1,
        }
        fields.update(body)
        return seal(key, "Accept", self.run_id, fields, EXP).to_json()

    async def accepted(self, key: Keypair) -> None:
        r = await self.post("accept", self.accept(key, await self.assignment_hash(key)))
        assert r.status_code == 200, r.text

    def preimages(self, key: Keypair, w: int = 0) -> list[LeafPreimage]:
        return [
            LeafPreimage(
                run_id=self.run_id,
                w=w,
                t=t,
                stages=(StageState(theta=sha(f"{key}{t}a"), m=sha(f"{t}m"), v=sha(f"{t}v")),),
                batch_ids_sha256=sha(f"ids{t}"),
                rng_ctr=t + 7,
                loss_f32="0000803f",
                norm_f32="00000000",
            )
            for t in range(0, H + 1, J)
        ]

    def commit(self, key: Keypair, *, exp: int = EXP, **body: Any) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "w": 0,
            "hotkey": key.ss58,
            "leaf_scheme": "ht-leaf-v1",
            "n_leaves": N_LEAVES,
            "leaves_root": leaves_root(self.preimages(key)),
            "metrics_root": sha("metrics"),
            "final_theta_hash": sha("final"),
            "ef_in_hash": sha("ef_in"),
            "ef_out_hash": sha("ef_out"),
            "delta_hash": DELTA_SHA,
            "delta_bytes": len(DELTA),
            "tokens": 240 * 256,
        }
        fields.update(body)
        return seal(key, "Commit", self.run_id, fields, exp).to_json()

    async def committed(self, key: Keypair) -> dict[str, Any]:
        r = await self.post("commit", self.commit(key))
        assert r.status_code == 200, r.text
        answer: dict[str, Any] = r.json()
        return answer

    def leaves_body(self, key: Keypair, preimages: list[LeafPreimage] | None = None) -> Any:
        items = self.preimages(key) if preimages is None else preimages
        return {"w": 0, "hotkey": key.ss58, "preimages": [unstructure(p) for p in items]}

    def delta(self, key: Keypair, data: bytes = DELTA, **body: Any) -> dict[str, Any]:
        digest = hashlib.sha256(data).hexdigest()
        fields: dict[str, Any] = {
            "w": 0,
            "hotkey": key.ss58,
            "delta_hash": digest,
            "uri": f"objects/{digest}",
            "size": len(data),
            "format": "ht-dense-int8-v1",
            "chunks": [{"off": 0, "len": len(data), "sha256": digest}],
        }
        fields.update(body)
        return seal(key, "DeltaManifest", self.run_id, fields, EXP).to_json()

    async def grant(self, key: Keypair, sha256: str = DELTA_SHA) -> httpx.Response:
        return await self.post("uploads", {"w": 0, "hotkey": key.ss58, "sha256": sha256})

    async def put(self, url: str, data: bytes) -> httpx.Response:
        headers = {"Content-Type": "application/octet-stream"}
        return await self.h.client.put(url, content=data, headers=headers)


def leaf_digest_of(p: LeafPreimage) -> bytes:
    stages = [(bytes.fromhex(s.theta), bytes.fromhex(s.m), bytes.fromhex(s.v)) for s in p.stages]
    return leaf_digest(
        run_id=bytes.fromhex(p.run_id),
        w=p.w,
        t=p.t,
        stage_root=stage_root(stages),
        batch_ids_sha256=bytes.fromhex(p.batch_ids_sha256),
        rng_ctr=p.rng_ctr,
        loss_f32=bytes.fromhex(p.loss_f32),
        norm_f32=bytes.fromhex(p.norm_f32),
    )


def leaves_root(preimages: list[LeafPreimage]) -> str:
    return merkle_root_hex([leaf_digest_of(p) for p in preimages])


async def open_flow(
    h: Harness,
    body: RunManifest | None = None,
    *,
    before_unpause: Callable[[str], Awaitable[None]] | None = None,
) -> Flow:
    """Create (with ``body``), configure, roster KEYS[0..1], (``before_unpause(run_id)``),
    unpause: round 0 is open."""
    run_id = await create_run(h, body)
    r = await admin(h, "PUT", f"/v1/admin/runs/{run_id}/config", dict(CONFIG))
    assert r.status_code == 200, r.text
    for key in KEYS[:2]:
        r = await admin(h, "PUT", f"/v1/admin/runs/{run_id}/roster/{key.ss58}", {})
        assert r.status_code == 200, r.text
    if before_unpause is not None:
        await before_unpause(run_id)
    assert (await unpause(h, run_id)).status_code == 200
    r = await h.client.get(f"/v1/runs/{run_id}/rounds/0")
    assert r.status_code == 200, r.text
    rnd = r.json()["round_open"]["body"]
    names = ("d_open", "d_assign", "d_commit", "d_audit", "d_upload", "d_final")
    return Flow(h, run_id, Deadlines(*(rnd[k] for k in names)))


async def at_assign(h: Harness, body: RunManifest | None = None) -> Flow:
    """:func:`open_flow`, then D = d_assign."""
    flow = await open_flow(h, body)
    await flow.to(flow.d.d_assign)
    return flow
