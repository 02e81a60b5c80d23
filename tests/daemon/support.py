"""Shared by the tests that run the whole daemon in virtual time: its settings and its lifetime."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import trio

from hypertrain.coordinator.settings import CoordinatorSettings
from hypertrain.daemon.main import DaemonHandle, serve_daemon
from hypertrain.daemon.services import SERVICES, ServiceSpec
from hypertrain.daemon.settings import DaemonSettings
from nurseries import VirtualClock
from tests.coordinator.harness import Secrets

EPOCH = 1_700_000_000.0
"""Unix time at the start of each test (a whole second, so a new local chain starts there)."""
STARTUP_TIMEOUT = 60.0
"""Virtual seconds the daemon may take to report it serves."""


def daemon_settings(
    tmp_path: Path,
    *,
    period: float | None,
    owner_hotkey: str | None = None,
    state: str = "data",
    **coordinator: Any,
) -> DaemonSettings:
    """A daemon with its own local chain of ``period`` and fresh secrets under ``tmp_path``
    (an existing K_coord is kept, so a restarted daemon is the same coordinator);
    ``coordinator`` overrides :class:`CoordinatorSettings` fields. Its compute nodes, all on
    127.0.0.1 with new keys, are paired as in the demo's test mode (each key its own network,
    any key age) unless those fields say otherwise."""
    secrets = Secrets.create(tmp_path / "secrets", exist_ok=True)
    fields: dict[str, Any] = {"compute_networks": "per-key", "compute_pair_min_age_s": 0}
    return DaemonSettings(
        coordinator=CoordinatorSettings(
            state_dir=tmp_path / state,
            admin_token_file=secrets.admin,
            internal_token_file=secrets.internal,
            coord_key_file=secrets.coord_key,
            owner_hotkey=owner_hotkey,
            **(fields | coordinator),
        ),
        host="127.0.0.1",
        port=0,
        beacon="local",
        local_period=period,
        grace=2.0,
    )


@asynccontextmanager
async def running_daemon(
    settings: DaemonSettings, services: Sequence[ServiceSpec] = SERVICES
) -> AsyncIterator[DaemonHandle]:
    """The daemon for the block's duration (virtual time from :data:`EPOCH`); shut down as by
    SIGTERM afterwards."""
    async with trio.open_nursery() as nursery:
        with trio.fail_after(STARTUP_TIMEOUT):
            handle: DaemonHandle = await nursery.start(
                partial(serve_daemon, settings, wall=VirtualClock(EPOCH), services=services)
            )
        try:
            yield handle
        finally:
            handle.request_shutdown()
