"""Three real miners and the real daemon, in virtual time, until round 0 is UPLOADED for all.

The daemon runs as operators start it (``serve_daemon`` with its own local chain), the run is
launched over its admin API, and each miner is the real client (``run_miner``) talking HTTP to the
daemon's app through the in-process streaming transport. Nothing is faked: the beacon, the
assignment, the Receipts and the uploads are the daemon's.
"""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import httpx
import trio
import trio.testing

from hypertrain.beacon import ChainInfo
from hypertrain.daemon.main import DaemonHandle
from hypertrain.daemon.services import SERVICES, ServiceSpec
from hypertrain.daemon.settings import DaemonSettings
from hypertrain.datasets.pin import pin_async
from hypertrain.miner.config import MinerConfig
from hypertrain.miner.journal import Journal
from hypertrain.miner.progress import Progress
from hypertrain.miner.session import Summary, run_miner
from hypertrain.protocol.envelope import NEVER, seal
from hypertrain.protocol.keys import Keypair, write_seed_file
from hypertrain.protocol.manifest import Beacon, RunManifest
from nurseries.testing import open_asgi_transport
from tests.coordinator.harness import COORD_SEED, admin_headers
from tests.daemon.support import daemon_settings, running_daemon

API = "http://127.0.0.1:8000"  # loopback: the miner refuses plain http elsewhere
OWNER = Keypair.from_seed(bytes([7]) * 32)
COORD = Keypair.from_seed(COORD_SEED)
MINERS = [Keypair.from_seed(bytes([0x51 + i]) * 32) for i in range(3)]
ROUND_TIMEOUT = 600.0  # virtual seconds: round 0 takes well under 100 rounds of 1 s


def _settings(tmp_path: Path) -> DaemonSettings:
    return daemon_settings(tmp_path, period=1.0, owner_hotkey=OWNER.ss58, state="state")


@asynccontextmanager
async def _daemon(
    tmp_path: Path, services: Sequence[ServiceSpec] = SERVICES
) -> AsyncIterator[tuple[DaemonHandle, httpx.AsyncBaseTransport]]:
    """The daemon and the in-process transport to its app for the block."""
    async with (
        running_daemon(_settings(tmp_path), services) as handle,
        open_asgi_transport(handle.app, lifespan=False) as transport,
    ):
        yield handle, transport


async def _launch(client: httpx.AsyncClient, run_manifest: RunManifest) -> str:
    info = ChainInfo.from_json((await client.get("/v1/beacon/info")).json())
    beacon = Beacon(
        chain_hash=info.hash, period=info.period_ms // 1000, genesis_time=info.genesis_ms // 1000
    )
    manifest = attrs.evolve(run_manifest, coord_pubkey=COORD.ss58, beacon=beacon)
    envelope = seal(OWNER, "RunManifest", manifest.run_id(), manifest, NEVER).to_json()
    admin = admin_headers()
    created = await client.post("/v1/admin/runs", json=envelope, headers=admin)
    assert created.status_code == 201, created.text
    run_id: str = created.json()["run_id"]
    base = f"/v1/admin/runs/{run_id}"
    steps: list[tuple[str, object]] = [
        (f"{base}/config", {"train_rounds": 20, "final_after_upload": 5}),
        *((f"{base}/roster/{key.ss58}", {}) for key in MINERS),
        (f"{base}/paused", {"paused": False}),
    ]
    for path, body in steps:
        r = await client.put(path, json=body, headers=admin)
        assert r.status_code == 200, r.text
    return run_id


def _config(tmp_path: Path, key: Keypair, data_dir: Path | None) -> MinerConfig:
    home = tmp_path / key.ss58[:8]
    home.mkdir()
    write_seed_file(home / "miner.key", key.seed)
    return MinerConfig(
        api=API,
        keyfile=home / "miner.key",
        workdir=home / "work",
        data_dir=data_dir,
        poll_seconds=1.0,
        chunk_bytes=4096,
    )


async def test_three_miners_upload_round_zero_and_the_view_matches_their_journals(
    tmp_path: Path,
    data_dir: Path,
    run_manifest: RunManifest,
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    summaries: dict[str, Summary] = {}
    async with (
        _daemon(tmp_path) as (handle, transport),
        httpx.AsyncClient(transport=transport, base_url=API) as client,
    ):
        run_id = await _launch(client, run_manifest)
        configs = {key.ss58: _config(tmp_path, key, data_dir) for key in MINERS}

        async def mine(key: Keypair) -> None:
            summaries[key.ss58] = await run_miner(
                configs[key.ss58],
                key,
                rounds=1,
                start=0,
                transport=transport,
                progress=Progress(io.StringIO()),
                configure=lambda env: None,
            )

        with trio.fail_after(ROUND_TIMEOUT):
            async with trio.open_nursery() as nursery:
                for key in MINERS:
                    nursery.start_soon(mine, key)
        view = (await client.get(f"/v1/runs/{run_id}/rounds/0", params={"full": "1"})).json()
        d_upload = view["round_open"]["body"]["d_upload"]
        assert handle.ctx.beacon.latest < d_upload  # all of it happened inside the window

    assert {hotkey: s.exit_code for hotkey, s in summaries.items()} == dict.fromkeys(
        (key.ss58 for key in MINERS), 0
    )
    rows = {row["hotkey"]: row for row in view["miners"]}
    assert set(rows) == {key.ss58 for key in MINERS}
    for key in MINERS:
        row = rows[key.ss58]
        assert row["status"] == "UPLOADED"
        phases = Journal.load(configs[key.ss58].workdir).phases(0)
        assert {"accepted", "committed", "uploaded"} <= set(phases)
        work = configs[key.ss58].workdir / "rounds" / "0"
        commit = json.loads((work / "commit.json").read_text())
        receipt = json.loads((work / "receipt.json").read_text())
        # The coordinator holds exactly what the miner signed and was given.
        assert row["commit"] == _envelope(commit)
        assert row["receipt"] == _envelope(receipt)
        assert row["delta_manifest"]["body"]["delta_hash"] == commit["body"]["delta_hash"]


def _envelope(stored: Any) -> Any:
    """An artifact stored either as the envelope itself or wrapped in a record."""
    if isinstance(stored, dict) and "envelope" in stored:
        return stored["envelope"]
    return stored


async def test_miners_without_a_local_copy_fetch_the_registered_dataset(
    tmp_path: Path,
    data_dir: Path,
    run_manifest: RunManifest,
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The operator pins the build into the daemon's object store before starting it.
    pinned = await pin_async(data_dir, tmp_path / "state" / "objects")
    async with (
        _daemon(tmp_path) as (_handle, transport),
        httpx.AsyncClient(transport=transport, base_url=API) as client,
    ):
        run_id = await _launch(client, run_manifest)
        registered = await client.put(
            f"/v1/admin/runs/{run_id}/dataset",
            json={"manifest_sha256": pinned.manifest_sha256},
            headers=admin_headers(),
        )
        assert registered.status_code == 200, registered.text
        key = MINERS[0]
        config = _config(tmp_path, key, None)
        with trio.fail_after(ROUND_TIMEOUT):
            summary = await run_miner(
                config,
                key,
                rounds=1,
                start=0,
                transport=transport,
                progress=Progress(io.StringIO()),
                configure=lambda env: None,
            )
        view = (await client.get(f"/v1/runs/{run_id}/rounds/0", params={"full": "1"})).json()
    assert summary.exit_code == 0
    row = {r["hotkey"]: r for r in view["miners"]}[key.ss58]
    assert row["status"] == "UPLOADED"
    # Only the shards holding this miner's samples were fetched, each byte-identical.
    fetched = sorted(config.workdir.rglob("shard-*.u16"))
    assert fetched
    for path in fetched:
        assert path.read_bytes() == (data_dir / path.name).read_bytes()
