"""Upload grants, PUT /v1/uploads/{grant}, POST .../delta and the view's status progression."""

from __future__ import annotations

import hashlib
from pathlib import Path

import trio.testing

from tests.coordinator.lifecycle_support import open_runs
from tests.coordinator.miner_support import DELTA, DELTA_SHA, KEYS, OUTSIDER, Flow, at_assign


def stored_files(flow: Flow) -> list[Path]:
    root = flow.h.ctx.objects.root
    return [p for p in root.rglob("*") if p.is_file()]


async def committed_flow(flow: Flow) -> None:
    await flow.accepted(KEYS[0])
    await flow.committed(KEYS[0])


async def test_grant_checks_status_hash_and_roster(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        flow = await at_assign(h)
        await flow.accepted(KEYS[0])
        assert (await flow.grant(KEYS[0])).status_code == 409  # ACCEPTED, not COMMITTED
        await flow.committed(KEYS[0])
        r = await flow.grant(KEYS[0], hashlib.sha256(b"x").hexdigest())
        assert r.status_code == 422, r.text
        assert "delta_hash" in r.json()["detail"]
        assert (await flow.grant(OUTSIDER)).status_code == 403
        r = await flow.grant(KEYS[0])
        assert r.status_code == 200, r.text
        answer = r.json()
        assert answer["method"] == "PUT"
        assert answer["sha256"] == DELTA_SHA
        assert answer["url"].startswith("/v1/uploads/")
        assert len(answer["url"]) == 12 + 32
        await flow.to(flow.d.d_upload)
        assert (await flow.grant(KEYS[0])).status_code == 409
        # The grant expired with the window.
        assert (await flow.put(answer["url"], DELTA)).status_code == 409


async def test_upload_refuses_wrong_bytes_and_stores_nothing(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        flow = await at_assign(h)
        await committed_flow(flow)
        url = (await flow.grant(KEYS[0])).json()["url"]
        for wrong in (b"\x00" * len(DELTA), DELTA[:-1], DELTA + b"!"):
            r = await flow.put(url, wrong)
            assert r.status_code == 422, r.text
            assert not h.ctx.objects.exists(DELTA_SHA)
            assert stored_files(flow) == []
        assert (await flow.put("/v1/uploads/" + "0" * 32, DELTA)).status_code == 404
        assert (await flow.put("/v1/uploads/nope", DELTA)).status_code == 404
        for _ in range(2):  # idempotent
            r = await flow.put(url, DELTA)
            assert r.status_code == 200, r.text
            assert r.json() == {"sha256": DELTA_SHA, "size": len(DELTA)}
        assert await h.ctx.objects.get(DELTA_SHA) == DELTA


async def test_delta_manifest_after_upload_and_status_progression(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        flow = await at_assign(h)
        assert await flow.status(KEYS[0]) == "ASSIGNED"
        await flow.accepted(KEYS[0])
        assert await flow.status(KEYS[0]) == "ACCEPTED"
        manifest = flow.delta(KEYS[0])
        assert (await flow.post("delta", manifest)).status_code == 409  # not committed
        await flow.committed(KEYS[0])
        assert await flow.status(KEYS[0]) == "COMMITTED"
        r = await flow.post("delta", manifest)
        assert r.status_code == 409, r.text
        assert "upload first" in r.json()["detail"]
        r = await flow.post("delta", flow.delta(KEYS[0], DELTA + b"x"))
        assert r.status_code == 422, r.text
        url = (await flow.grant(KEYS[0])).json()["url"]
        assert (await flow.put(url, DELTA)).status_code == 200
        for _ in range(2):  # the same manifest again is idempotent
            r = await flow.post("delta", manifest)
            assert r.status_code == 200, r.text
            assert r.json() == {"w": 0, "hotkey": KEYS[0].ss58, "status": "UPLOADED"}
        miner = {m["hotkey"]: m for m in (await flow.view())["miners"]}[KEYS[0].ss58]
        assert miner["status"] == "UPLOADED"
        assert miner["delta_manifest"] == manifest
        # Another manifest for the same round is a replay.
        other = flow.delta(KEYS[0], format="ht-sparse-v1")
        assert (await flow.post("delta", other)).status_code == 409
        # Uploads are granted only while COMMITTED.
        assert (await flow.grant(KEYS[0])).status_code == 409


async def test_uploads_larger_than_the_json_limit_stream_through(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    big = bytes(range(256)) * (3 * 4096)  # 3 MiB
    digest = hashlib.sha256(big).hexdigest()
    async with open_runs(tmp_path) as h:
        flow = await at_assign(h)
        await flow.accepted(KEYS[1])
        commit = flow.commit(KEYS[1], delta_hash=digest, delta_bytes=len(big))
        assert (await flow.post("commit", commit)).status_code == 200
        url = (await flow.grant(KEYS[1], digest)).json()["url"]
        r = await flow.put(url, big)
        assert r.status_code == 200, r.text
        assert h.ctx.objects.size_of(digest) == len(big)
        r = await flow.post("delta", flow.delta(KEYS[1], big))
        assert r.status_code == 200, r.text
        # The JSON routes keep their 1 MiB limit.
        r = await h.client.post(f"{flow.runs}/accept", content=b" " * (2 << 20))
        assert r.status_code == 413
