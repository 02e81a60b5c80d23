"""The servers the HTTP benches measure: the real daemon in a fresh state dir, the bare hello
app beside it, and a created run for the benches that read one.

``bench/compute.py``, ``serving.py`` and ``views.py`` each serve both in one nursery of the
bench's (pinned) server process: the daemon is ``serve_daemon`` with its local-chain beacon,
fresh secrets and every background service; the hello app (``_hello.hello_app``) runs on
``serve_asgi`` too, so the two share the hypercorn trio worker and its backlog.
"""

from __future__ import annotations

import secrets
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any, Final

import attrs
import httpx
import trio
from _hello import hello_app

from hypertrain.beacon import ChainInfo
from hypertrain.coordinator.settings import CoordinatorSettings
from hypertrain.daemon.main import DaemonHandle, serve_daemon
from hypertrain.daemon.settings import DaemonSettings
from hypertrain.protocol.envelope import seal
from hypertrain.protocol.example import example_manifest
from hypertrain.protocol.keys import Keypair, write_seed_file
from hypertrain.protocol.manifest import Beacon
from nurseries import SystemClock, serve_asgi

SETUP_TIMEOUT: Final = 60.0
"""Seconds the daemon and the hello app may take to serve, and a run to be created."""
OWNER: Final = Keypair.from_seed(bytes([7]) * 32)
"""The daemon's owner hotkey: it seals the runs' manifests."""
COORD: Final = Keypair.from_seed(bytes(range(32)))
"""The daemon's K_coord."""
MINER: Final = Keypair.from_seed(bytes([0x41]) * 32)
"""The one miner on the roster of :func:`create_run`'s run."""


@attrs.frozen
class Servers:
    """The served daemon and hello app; ``nursery`` serves them (and may serve more)."""

    daemon: DaemonHandle
    hello_url: str
    admin_token: str
    nursery: trio.Nursery


def daemon_settings(state: Path, **coordinator: Any) -> tuple[DaemonSettings, str]:
    """The daemon's settings with fresh secrets under ``state`` (``coordinator``: more
    coordinator settings) and its admin token."""
    secret_dir = state / "secrets"
    secret_dir.mkdir(mode=0o700)
    token = secrets.token_hex(32)
    (secret_dir / "admin").write_text(token)
    (secret_dir / "internal").write_text(secrets.token_hex(32))
    for name in ("admin", "internal"):
        (secret_dir / name).chmod(0o600)
    write_seed_file(secret_dir / "coord.key", COORD.seed)
    settings = CoordinatorSettings(
        state_dir=state / "data",
        admin_token_file=secret_dir / "admin",
        internal_token_file=secret_dir / "internal",
        coord_key_file=secret_dir / "coord.key",
        owner_hotkey=OWNER.ss58,
        # the bench's nodes are all on 127.0.0.1 with new keys: the demo's test mode pairs them
        **({"compute_networks": "per-key", "compute_pair_min_age_s": 0} | coordinator),
    )
    return DaemonSettings(coordinator=settings, port=0, beacon="local", grace=2.0), token


@asynccontextmanager
async def open_servers(prefix: str, **coordinator: Any) -> AsyncIterator[Servers]:
    """Serve the daemon (state in a temporary dir named ``prefix...``; ``coordinator``: more
    coordinator settings) and the hello app until the block ends, then shut both down."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        settings, token = daemon_settings(Path(tmp), **coordinator)
        async with trio.open_nursery() as nursery:
            with trio.fail_after(SETUP_TIMEOUT):
                handle: DaemonHandle = await nursery.start(
                    partial(serve_daemon, settings, wall=SystemClock())
                )
                hello_url: str = await nursery.start(partial(serve_asgi, hello_app, "127.0.0.1", 0))
            yield Servers(handle, hello_url, token, nursery)
            handle.request_shutdown()
            nursery.cancel_scope.cancel()


async def create_run(servers: Servers) -> str | None:
    """A created, configured, unpaused run with :data:`MINER` on its roster; None (with a
    note) on failure."""
    auth = {"Authorization": f"Bearer {servers.admin_token}"}
    with trio.fail_after(SETUP_TIMEOUT):
        async with httpx.AsyncClient(base_url=servers.daemon.url) as client:
            info = ChainInfo.from_json((await client.get("/v1/beacon/info")).json())
            beacon = Beacon(
                chain_hash=info.hash,
                period=info.period_ms // 1000,
                genesis_time=info.genesis_ms // 1000,
            )
            manifest = example_manifest(coord_pubkey=COORD.ss58, beacon=beacon)
            run_id = manifest.run_id()
            sealed = seal(OWNER, "RunManifest", run_id, manifest, 2**40).to_json()
            steps: list[tuple[str, str, object]] = [
                ("POST", "/v1/admin/runs", sealed),
                (
                    "PUT",
                    f"/v1/admin/runs/{run_id}/config",
                    {"train_rounds": 10, "final_after_upload": 5},
                ),
                ("PUT", f"/v1/admin/runs/{run_id}/roster/{MINER.ss58}", {}),
                ("PUT", f"/v1/admin/runs/{run_id}/paused", {"paused": False}),
            ]
            for method, path, body in steps:
                response = await client.request(method, path, json=body, headers=auth)
                if response.status_code >= 300:
                    print(f"note: {method} {path} -> {response.status_code} {response.text[:120]}")
                    return None
    return run_id
