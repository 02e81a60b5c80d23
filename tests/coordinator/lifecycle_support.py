"""Helpers of the run lifecycle tests: an owner key, sealed manifests, pushing beacon rounds."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import trio

from hypertrain.coordinator.events import HubEvent, Subscription
from hypertrain.protocol.envelope import seal
from hypertrain.protocol.example import example_manifest
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.manifest import Beacon, RunManifest
from nurseries import FixedClock
from tests.coordinator.harness import (
    COORD_SEED,
    GENESIS,
    Harness,
    admin_headers,
    harness_chain,
    open_harness,
)

OWNER = Keypair.from_seed(bytes([7]) * 32)
COORD = Keypair.from_seed(COORD_SEED)
STRANGER = Keypair.from_seed(bytes([9]) * 32)
MINERS = [Keypair.from_seed(bytes([0x41 + i]) * 32).ss58 for i in range(4)]
EXP = 2**40
_CHAIN = harness_chain(FixedClock(GENESIS)).info
CHAIN_BEACON = Beacon(
    chain_hash=_CHAIN.hash,
    period=_CHAIN.period_ms // 1000,
    genesis_time=_CHAIN.genesis_ms // 1000,
)
"""The ``beacon`` section naming the harness's local chain."""
CONFIG = {"train_rounds": 10, "final_after_upload": 5}


def manifest(**overrides: Any) -> RunManifest:
    """The example manifest naming this harness's K_coord and chain (each overridable)."""
    overrides.setdefault("coord_pubkey", COORD.ss58)
    overrides.setdefault("beacon", CHAIN_BEACON)
    return example_manifest(**overrides)


def sealed(
    body: RunManifest | None = None,
    *,
    signer: Keypair = OWNER,
    run_id: str | None = None,
    exp: int = EXP,
) -> dict[str, Any]:
    """A RunManifest envelope as JSON (signed by the owner for its own run id by default)."""
    m = manifest() if body is None else body
    return seal(signer, "RunManifest", run_id or m.run_id(), m, exp).to_json()


@asynccontextmanager
async def open_runs(tmp_path: Path, **settings: Any) -> AsyncIterator[Harness]:
    """The coordinator harness with the owner hotkey configured (overridable)."""
    settings.setdefault("owner_hotkey", OWNER.ss58)
    async with open_harness(tmp_path, **settings) as h:
        yield h


async def push(h: Harness, *numbers: int) -> None:
    """Ingest the local chain's rounds ``numbers`` (waiting, in virtual time, until due)."""
    for n in numbers:
        delay = h.chain.info.time_of(n) - h.wall.now()
        if delay > 0:
            await trio.sleep(delay)
        await h.ctx.ingest_beacon(h.round(n))


async def admin(
    h: Harness, method: str, path: str, body: object = None, **kw: Any
) -> httpx.Response:
    """An admin request (JSON body unless ``content=`` is given)."""
    if body is not None:
        kw["json"] = body
    return await h.client.request(method, path, headers=admin_headers(), **kw)


async def create_run(h: Harness, body: RunManifest | None = None) -> str:
    """Push round 1 if no round is stored, create the run and return its id."""
    if h.ctx.beacon.latest == 0:
        await push(h, 1)
    r = await admin(h, "POST", "/v1/admin/runs", sealed(body))
    assert r.status_code == 201, r.text
    run_id: str = r.json()["run_id"]
    return run_id


async def ready_run(
    h: Harness, miners: list[str] | None = None, config: Mapping[str, Any] = CONFIG
) -> str:
    """A created, configured run with ``miners`` (default: the first two) on its roster."""
    run_id = await create_run(h)
    r = await admin(h, "PUT", f"/v1/admin/runs/{run_id}/config", dict(config))
    assert r.status_code == 200, r.text
    for hotkey in MINERS[:2] if miners is None else miners:
        r = await admin(h, "PUT", f"/v1/admin/runs/{run_id}/roster/{hotkey}", {})
        assert r.status_code == 200, r.text
    return run_id


async def unpause(h: Harness, run_id: str) -> httpx.Response:
    """``PUT .../paused {"paused": false}``."""
    return await admin(h, "PUT", f"/v1/admin/runs/{run_id}/paused", {"paused": False})


async def drain(sub: Subscription) -> list[HubEvent]:
    """Every event buffered for ``sub`` right now (published events are buffered at once).

    Takes what is there without a timer: a real-time wait here lost events whenever a busy
    machine held the checkpoint past it.
    """
    await trio.lowlevel.checkpoint()
    events = []
    while True:
        try:
            events.append(sub.receive_nowait())
        except trio.WouldBlock:
            return events
