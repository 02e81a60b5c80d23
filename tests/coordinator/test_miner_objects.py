"""GET /v1/objects/{sha256} (worker token or signed headers) and the start-state publish."""

from __future__ import annotations

import hashlib
from pathlib import Path

import attrs
import numpy as np
import trio.testing

from hypertrain.protocol.object_auth import HEADER_EXP, HEADER_SIG, sign_headers
from hypertrain.protocol.tensorhash import th_hex
from hypertrain.trainer.state import pack_state
from tests.coordinator.harness import WORKER_TOKEN, admin_headers
from tests.coordinator.lifecycle_support import manifest, open_runs
from tests.coordinator.miner_support import KEYS, OUTSIDER, at_assign, open_flow, sha

BLOB = b"some object bytes" * 100
BLOB_SHA = hashlib.sha256(BLOB).hexdigest()
THETA = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.ones(4, dtype=np.float32)}


async def test_object_download_auth(tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    async with open_runs(tmp_path) as h:
        flow = await at_assign(h)
        await h.ctx.objects.put_bytes(BLOB)
        url = f"/v1/objects/{BLOB_SHA}"
        r = await h.client.get(url, headers={"Authorization": f"Bearer {WORKER_TOKEN}"})
        assert r.status_code == 200
        assert r.content == BLOB
        assert (
            await h.client.get(url, headers={"Authorization": "Bearer nope"})
        ).status_code == 401
        assert (await h.client.get(url)).status_code == 401
        d = flow.d.d_assign
        signed = sign_headers(KEYS[0], flow.run_id, BLOB_SHA, d + 10)
        r = await h.client.get(url, headers=signed)
        assert r.status_code == 200
        assert r.content == BLOB
        bad_sig = dict(signed, **{HEADER_SIG: "00" * 64})
        assert (await h.client.get(url, headers=bad_sig)).status_code == 401
        # The signature covers the exp: changing it breaks the signature.
        assert (
            await h.client.get(url, headers=dict(signed, **{HEADER_EXP: str(d + 11)}))
        ).status_code == 401
        # Signed for another object.
        other = sign_headers(KEYS[0], flow.run_id, sha("x"), d + 10)
        assert (await h.client.get(url, headers=other)).status_code == 401
        expired = sign_headers(KEYS[0], flow.run_id, BLOB_SHA, d - 1)
        assert (await h.client.get(url, headers=expired)).status_code == 400
        partial = {HEADER_SIG: signed[HEADER_SIG]}
        assert (await h.client.get(url, headers=partial)).status_code == 400
        outsider = sign_headers(OUTSIDER, flow.run_id, BLOB_SHA, d + 10)
        assert (await h.client.get(url, headers=outsider)).status_code == 403
        wrong_run = sign_headers(KEYS[0], sha("run"), BLOB_SHA, d + 10)
        assert (await h.client.get(url, headers=wrong_run)).status_code == 403
        worker = {"Authorization": f"Bearer {WORKER_TOKEN}"}
        assert (
            await h.client.get(f"/v1/objects/{sha('missing')}", headers=worker)
        ).status_code == 404
        assert (await h.client.get("/v1/objects/ABC", headers=worker)).status_code == 400


async def test_start_state_publish_is_write_once_and_checks_th(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    blob = pack_state(THETA)
    blob_sha = hashlib.sha256(blob).hexdigest()
    other = pack_state({"a": THETA["a"] * 2, "b": THETA["b"]})
    other_sha = hashlib.sha256(other).hexdigest()
    body = attrs.evolve(manifest(), init_state_hash=th_hex(THETA))
    async with open_runs(tmp_path) as h:
        flow = await open_flow(h, body)
        url = f"/v1/aggregator/runs/{flow.run_id}/rounds/0/state"

        async def put(payload: object, headers: dict[str, str] | None = None) -> int:
            r = await h.client.put(
                url, json=payload, headers=admin_headers() if headers is None else headers
            )
            return r.status_code

        assert (await put({"theta_start_sha256": blob_sha}, {})) == 401
        assert (await put({"theta_start_sha256": blob_sha})) == 409  # not in the store
        await h.ctx.objects.put_bytes(other)
        await h.ctx.objects.put_bytes(BLOB)
        assert (await put({"theta_start_sha256": other_sha})) == 422  # TH mismatch
        assert (await put({"theta_start_sha256": BLOB_SHA})) == 422  # not a state blob
        await h.ctx.objects.put_bytes(blob)
        assert (await put({"theta_start_sha256": blob_sha, "v0_sha256": sha("v0")})) == 409
        assert (await flow.view())["state_sha256"] is None
        assert (await put({"theta_start_sha256": blob_sha})) == 200
        assert (await flow.view())["state_sha256"] == blob_sha
        assert (await put({"theta_start_sha256": blob_sha})) == 200  # same: idempotent
        assert (await put({"theta_start_sha256": other_sha})) == 409  # write-once
        assert (await put({"theta_start_sha256": blob_sha, "v0_sha256": BLOB_SHA})) == 409
        bad_round = f"/v1/aggregator/runs/{flow.run_id}/rounds/1/state"
        r = await h.client.put(
            bad_round, json={"theta_start_sha256": blob_sha}, headers=admin_headers()
        )
        assert r.status_code == 404
