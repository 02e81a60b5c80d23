"""A run in the whole daemon, in virtual time: its own local chain drives round 0 to its end.

The daemon runs as operators start it (``serve_daemon`` with ``--beacon local``), the run is
launched over its HTTP API with a test-mode manifest naming the daemon's chain, and the only
thing that moves round 0 along is the in-process pusher ingesting one round per period.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import trio
import trio.testing

from hypertrain.beacon import ChainInfo
from hypertrain.daemon.main import DaemonHandle
from hypertrain.daemon.settings import DaemonSettings
from hypertrain.protocol.converter import structure
from hypertrain.protocol.envelope import NEVER, seal, verify
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.manifest import Beacon
from hypertrain.protocol.messages import RoundOpen
from hypertrain.protocol.testmode import build_test_mode_manifest
from hypertrain.rounds import Deadlines, transitions
from nurseries.testing import open_mounted_client
from tests.coordinator.harness import COORD_SEED, admin_headers, roster_of
from tests.daemon.support import EPOCH, daemon_settings, running_daemon

PERIOD = 1.0
API = "http://daemon"
OWNER = Keypair.from_seed(bytes([7]) * 32)
COORD = Keypair.from_seed(COORD_SEED)
MINERS = [Keypair.from_seed(bytes([0x41 + i]) * 32).ss58 for i in range(3)]


def _settings(tmp_path: Path) -> DaemonSettings:
    return daemon_settings(tmp_path, period=PERIOD, owner_hotkey=OWNER.ss58)


@asynccontextmanager
async def _daemon(
    settings: DaemonSettings,
) -> AsyncIterator[tuple[DaemonHandle, httpx.AsyncClient]]:
    """The daemon and a client of its app for the block."""
    async with running_daemon(settings) as handle, open_mounted_client({API: handle.app}) as client:
        yield handle, client


async def _ok(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json()


async def _launch(client: httpx.AsyncClient) -> str:
    """The operator guide's steps over HTTP: manifest, config, roster, unpause."""
    info = ChainInfo.from_json(await _ok(await client.get(f"{API}/v1/beacon/info")))
    beacon = Beacon(
        chain_hash=info.hash, period=info.period_ms // 1000, genesis_time=info.genesis_ms // 1000
    )
    manifest, _ = build_test_mode_manifest(coord_pubkey=COORD.ss58, beacon=beacon)
    envelope = seal(OWNER, "RunManifest", manifest.run_id(), manifest, NEVER).to_json()
    admin = admin_headers()
    created = await _ok(
        await client.post(f"{API}/v1/admin/runs", json=envelope, headers=admin), 201
    )
    run_id: str = created["run_id"]
    base = f"{API}/v1/admin/runs/{run_id}"
    config = {"train_rounds": 10, "final_after_upload": 5}
    await _ok(await client.put(f"{base}/config", json=config, headers=admin))
    for hotkey in MINERS:
        await _ok(await client.put(f"{base}/roster/{hotkey}", json={}, headers=admin))
    await _ok(await client.put(f"{base}/paused", json={"paused": False}, headers=admin))
    return run_id


async def _round_zero(client: httpx.AsyncClient, run_id: str) -> dict[str, Any]:
    view: dict[str, Any] = await _ok(await client.get(f"{API}/v1/runs/{run_id}/rounds/0"))
    return view


async def test_two_hundred_rounds_every_state_change_at_its_deadline(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with _daemon(_settings(tmp_path)) as (handle, client):
        ctx = handle.ctx
        seen: list[tuple[float, dict[str, Any]]] = []
        async with ctx.events.subscribe(kinds={"round_state"}) as sub:

            async def record() -> None:
                while (event := await sub.receive()) is not None:
                    seen.append((trio.current_time(), json.loads(event.json)))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(record)
                run_id = await _launch(client)
                opened_at = ctx.beacon.latest
                await trio.sleep_until(ctx.beacon.deadline_of(200) + PERIOD / 2)
                nursery.cancel_scope.cancel()

        assert ctx.beacon.latest == 200
        view = await _round_zero(client, run_id)
        round_open = verify(
            view["round_open"], expected_run_id=run_id, signer_allowed=lambda _t, s: s == COORD.ss58
        ).message
        assert isinstance(round_open, RoundOpen)
        deadlines = Deadlines.of(round_open)
        assert deadlines.d_open == opened_at + 1
        assert deadlines.d_upload < 200  # the whole life of an un-aggregated round fits
        # Round 0 is published OPEN when it opens, then each change at the round that makes it,
        # at the virtual time that round is due: round r is due at (r - 1) * PERIOD here.
        assert seen[0][1]["state"] == "OPEN"
        changes = [(event["D"], event["state"], t) for t, event in seen[1:]]
        expected = [
            (d, state.value, ctx.chain.time_of(d) - EPOCH)
            for d, state in transitions(deadlines)[1:]
        ]
        assert changes == expected
        assert [state for _, state, _ in expected] == [
            "ASSIGNED",
            "TRAINING",
            "COMMIT_CLOSED",
            "UPLOAD_CLOSED",
        ]
        assert all(event["run_id"] == run_id and event["w"] == 0 for _, event in seen)
        assert view["state"] == "UPLOAD_CLOSED"
        assert [a["hotkey"] for a in view["assignment"]] == sorted(MINERS)


async def test_a_restart_mid_run_keeps_run_round_roster_and_beacon(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    settings = _settings(tmp_path)
    async with _daemon(settings) as (handle, client):
        run_id = await _launch(client)
        deadlines = Deadlines.of(
            structure(RoundOpen, (await _round_zero(client, run_id))["round_open"]["body"])
        )
        await trio.sleep_until(handle.ctx.beacon.deadline_of(deadlines.d_assign + 1))
        run_before = await _ok(await client.get(f"{API}/v1/runs/{run_id}"))
        roster_before = await roster_of(client, run_id, prefix=API)
        round_before = await _round_zero(client, run_id)
        d_before = handle.ctx.beacon.latest
    assert round_before["state"] == "TRAINING"
    await trio.sleep(3 * PERIOD)  # down for three rounds

    async with _daemon(settings) as (handle, client):
        ctx = handle.ctx
        # The pusher's first tick catches up on the rounds due while the daemon was down.
        assert ctx.beacon.latest == ctx.beacon.now_round() > d_before
        run_after = await _ok(await client.get(f"{API}/v1/runs/{run_id}"))
        round_after = await _round_zero(client, run_id)
        for key in ("run_id", "status", "config", "manifest_envelope", "roster_counts"):
            assert run_after[key] == run_before[key], key
        assert await roster_of(client, run_id, prefix=API) == roster_before
        for key in ("round_open", "assignment", "assignment_beacon_signature"):
            assert round_after[key] == round_before[key], key
        assert (await _ok(await client.get(f"{API}/v1/runs")))["runs"] == [
            {"run_id": run_id, "status": "running"}
        ]
        # And the run goes on: the next deadline still turns the round over exactly on time.
        async with ctx.events.subscribe(kinds={"round_state"}) as sub:
            await trio.sleep_until(ctx.beacon.deadline_of(deadlines.d_commit))
            event = await sub.receive()
        assert event is not None
        assert json.loads(event.json)["state"] == "COMMIT_CLOSED"
        assert json.loads(event.json)["D"] == deadlines.d_commit
        assert (await _round_zero(client, run_id))["state"] == "COMMIT_CLOSED"
