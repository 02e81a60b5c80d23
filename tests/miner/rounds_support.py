"""Shared by the tests that run whole rounds against the in-process daemon with a dataset.

:func:`launch_with_dataset` creates and starts a run (``_launch``), pins the build's public
part into the daemon's store, registers it and sets ``total_rounds``; :func:`mine_rounds` runs
every miner of :data:`~tests.miner.test_against_the_daemon.MINERS` for ``rounds`` rounds
concurrently (real miners, in-process transport, no determinism reconfiguration).
"""

from __future__ import annotations

import io
from pathlib import Path

import httpx
import trio

from hypertrain.datasets.pin import pin_async
from hypertrain.miner.progress import Progress
from hypertrain.miner.session import Summary, run_miner
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.manifest import RunManifest
from tests.coordinator.harness import admin_headers
from tests.miner.test_against_the_daemon import MINERS, _config, _launch

__all__ = ["launch_with_dataset", "mine_rounds", "set_total_rounds"]


async def set_total_rounds(client: httpx.AsyncClient, run_id: str, total: int) -> None:
    """Configure the run to stop after ``total`` rounds (config changes need a paused run)."""
    base = f"/v1/admin/runs/{run_id}"
    for path, body in (
        (f"{base}/paused", {"paused": True}),
        (f"{base}/config", {"train_rounds": 20, "final_after_upload": 5, "total_rounds": total}),
        (f"{base}/paused", {"paused": False}),
    ):
        r = await client.put(path, json=body, headers=admin_headers())
        assert r.status_code == 200, r.text


async def launch_with_dataset(
    client: httpx.AsyncClient,
    run_manifest: RunManifest,
    data_dir: Path,
    objects_dir: Path,
    total_rounds: int,
) -> str:
    """A running run with ``data_dir``'s dataset registered; returns the run id."""
    pinned = await pin_async(data_dir, objects_dir)
    run_id = await _launch(client, run_manifest)
    r = await client.put(
        f"/v1/admin/runs/{run_id}/dataset",
        json={"manifest_sha256": pinned.manifest_sha256},
        headers=admin_headers(),
    )
    assert r.status_code == 200, r.text
    await set_total_rounds(client, run_id, total_rounds)
    return run_id


async def mine_rounds(
    tmp_path: Path, data_dir: Path, transport: httpx.AsyncBaseTransport, rounds: int
) -> dict[str, Summary]:
    """Every miner for ``rounds`` rounds from round 0; their summaries by hotkey."""
    summaries: dict[str, Summary] = {}

    async def mine(key: Keypair) -> None:
        summaries[key.ss58] = await run_miner(
            _config(tmp_path, key, data_dir),
            key,
            rounds=rounds,
            start=0,
            transport=transport,
            progress=Progress(io.StringIO()),
            configure=lambda env: None,
        )

    async with trio.open_nursery() as nursery:
        for key in MINERS:
            nursery.start_soon(mine, key)
    return summaries
