"""The daemon's held-out loss service in virtual time: it evaluates the genesis of a run with a
registered dataset and publishes it, and a holdout it cannot trust leaves the losses null with
one warning while the daemon keeps serving."""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import httpx
import pytest
import trio
import trio.testing

from hypertrain.coordinator.flows.heldout import get_loss_row
from hypertrain.coordinator.tables.rounds import get_round_row
from hypertrain.daemon.main import DaemonHandle
from hypertrain.datasets.pin import pin_async
from hypertrain.protocol.manifest import RunManifest
from nurseries.testing import open_asgi_transport
from tests.coordinator.harness import admin_headers
from tests.daemon.support import running_daemon
from tests.miner.test_against_the_daemon import API, _launch, _settings

TIMEOUT = 300.0  # virtual seconds


@asynccontextmanager
async def _daemon(
    tmp_path: Path, holdout_dir: Path
) -> AsyncIterator[tuple[DaemonHandle, httpx.AsyncClient]]:
    settings = _settings(tmp_path)
    settings = attrs.evolve(
        settings, coordinator=attrs.evolve(settings.coordinator, holdout_dir=holdout_dir)
    )
    async with (
        running_daemon(settings) as handle,
        open_asgi_transport(handle.app, lifespan=False) as transport,
        httpx.AsyncClient(transport=transport, base_url=API) as client,
    ):
        yield handle, client


async def _register(client: httpx.AsyncClient, run_id: str, sha: str) -> None:
    r = await client.put(
        f"/v1/admin/runs/{run_id}/dataset", json={"manifest_sha256": sha}, headers=admin_headers()
    )
    assert r.status_code == 200, r.text


async def test_the_genesis_loss_is_computed_stored_and_published(
    tmp_path: Path,
    data_dir: Path,
    run_manifest: RunManifest,
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    pinned = await pin_async(data_dir, tmp_path / "state" / "objects")
    async with _daemon(tmp_path, data_dir) as (handle, client):
        run_id = await _launch(client, run_manifest)
        async with handle.ctx.events.subscribe(kinds={"heldout"}) as events:
            await _register(client, run_id, pinned.manifest_sha256)
            with trio.fail_after(TIMEOUT):
                event = await events.__anext__()
        row = await handle.ctx.db.read(get_loss_row, run_id, 0)
        round0 = await handle.ctx.db.read(get_round_row, run_id, 0)
        view = (await client.get(f"/v1/runs/{run_id}/rounds/0")).json()
    assert row is not None
    assert round0 is not None
    assert json.loads(event.json) == {
        "run_id": run_id,
        "w": 0,
        "loss": row.loss,
        "theta_hash": round0.body.theta_hash,
    }
    assert row.theta_hash == round0.body.theta_hash
    assert 5.0 < row.loss < 6.0  # near ln(259): the init is near uniform
    assert view["heldout_loss"] == row.loss


async def test_a_tampered_holdout_is_refused_once_and_the_daemon_keeps_serving(
    tmp_path: Path,
    data_dir: Path,
    run_manifest: RunManifest,
    configured: None,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    copy = tmp_path / "holdout-copy"
    shutil.copytree(data_dir, copy)
    shard = sorted(copy.glob("holdout-*.u16"))[0]
    data = bytearray(shard.read_bytes())
    data[0] ^= 1
    shard.write_bytes(bytes(data))
    pinned = await pin_async(data_dir, tmp_path / "state" / "objects")
    caplog.set_level(logging.WARNING, logger="hypertrain.coordinator.services.heldout")
    async with _daemon(tmp_path, copy) as (handle, client):
        run_id = await _launch(client, run_manifest)
        await _register(client, run_id, pinned.manifest_sha256)
        await trio.sleep(120.0)  # many passes of the service
        row = await handle.ctx.db.read(get_loss_row, run_id, 0)
        view = await client.get(f"/v1/runs/{run_id}/rounds/0")
    assert row is None
    assert view.status_code == 200
    assert view.json()["heldout_loss"] is None
    refused = [r for r in caplog.records if "refused" in r.getMessage()]
    assert len(refused) == 1
    assert run_id in refused[0].getMessage()
    assert "holdout" in refused[0].getMessage()
