"""A coordinator over a real store and a local chain, with an in-process client, for tests.

``async with open_harness(tmp_path) as h:`` gives ``h.client`` (httpx, mounted on
``http://coord``), ``h.ctx`` (the :class:`Coordinator`), ``h.chain`` (a local chain whose
genesis is the virtual epoch) and the secrets' paths. Fresh secrets are written into
``tmp_path/secrets`` (mode 0600): admin, worker and internal tokens and K_coord.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import httpx
from quart_trio import QuartTrio

from hypertrain.beacon import BeaconRound, LocalChain
from hypertrain.coordinator import Coordinator, CoordinatorSettings
from hypertrain.coordinator.services.ledgerclock import LedgerClock
from hypertrain.coordinator.services.ledgerfeed import LedgerFeed
from hypertrain.coordinator.web.app import AppParts, create_app
from hypertrain.ledger import Ledger
from hypertrain.protocol.converter import unstructure
from hypertrain.protocol.keys import write_seed_file
from hypertrain.protocol.pages import ROSTER_LISTS, read_all_pages
from hypertrain.store import ObjectStore, open_database
from nurseries import VirtualClock, WallClock
from nurseries.testing import open_mounted_client

GENESIS = 1_700_000_000.0
CHAIN_SEED = bytes(range(32))
COORD_SEED = bytes(range(32, 64))
API = "http://coord"
ADMIN_TOKEN = "admin-token.1"
WORKER_TOKEN = "worker-token.1"
INTERNAL_TOKEN = "internal-token.1"
PERIOD_MS = 3000


def write_secret(path: Path, text: str) -> Path:
    path.write_text(text + "\n")
    path.chmod(0o600)
    return path


@attrs.define
class Secrets:
    admin: Path
    worker: Path
    internal: Path
    coord_key: Path

    @classmethod
    def create(cls, root: Path, *, exist_ok: bool = False) -> Secrets:
        """Fresh secrets in ``root``; with ``exist_ok`` an existing K_coord file is kept."""
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        coord_key = root / "coord.key"
        if not (exist_ok and coord_key.exists()):
            write_seed_file(coord_key, COORD_SEED)
        return cls(
            admin=write_secret(root / "admin_token", ADMIN_TOKEN),
            worker=write_secret(root / "worker_token", WORKER_TOKEN),
            internal=write_secret(root / "internal_token", INTERNAL_TOKEN),
            coord_key=coord_key,
        )


@attrs.define
class Harness:
    ctx: Coordinator
    client: httpx.AsyncClient
    chain: LocalChain
    secrets: Secrets
    wall: VirtualClock
    parts: AppParts | None = None
    """What the app's routes were built with (its answer cache, ...)."""

    def round(self, number: int) -> BeaconRound:
        """Round ``number`` of the local chain, signed."""
        return self.chain.round(number)

    async def post_round(self, rnd: BeaconRound | dict[str, Any], token: str = ADMIN_TOKEN) -> Any:
        body = unstructure(rnd) if isinstance(rnd, BeaconRound) else rnd
        return await self.client.post(
            "/v1/admin/beacon", json=body, headers={"Authorization": f"Bearer {token}"}
        )


def admin_headers(token: str = ADMIN_TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def roster_of(
    client: httpx.AsyncClient, run_id: str, *, prefix: str = ""
) -> dict[str, dict[str, Any]]:
    """The run's roster rows by hotkey: every page of ``GET {prefix}/v1/runs/{id}/roster``."""

    async def page(offset: int) -> dict[str, Any]:
        r = await client.get(f"{prefix}/v1/runs/{run_id}/roster", params={"offset": offset})
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        return body

    view = await read_all_pages(page, ROSTER_LISTS)
    return {row["hotkey"]: row for row in view["roster"]}


def harness_chain(clock: WallClock) -> LocalChain:
    """The harness's local beacon chain (genesis :data:`GENESIS`, period 3 s) on ``clock``."""
    return LocalChain.from_seed(
        CHAIN_SEED, clock=clock, period_ms=PERIOD_MS, genesis_ms=int(GENESIS * 1000)
    )


@asynccontextmanager
async def open_harness(
    tmp_path: Path,
    *,
    extra_routes: Callable[[QuartTrio, Coordinator], None] | None = None,
    **settings: Any,
) -> AsyncIterator[Harness]:
    """See the module docstring; ``settings`` override :class:`CoordinatorSettings` fields and
    ``extra_routes(app, ctx)`` adds test-only routes."""
    wall = VirtualClock(epoch=GENESIS)
    secrets = Secrets.create(tmp_path / "secrets")
    chain = harness_chain(wall)
    fields: dict[str, Any] = {
        "state_dir": tmp_path / "data",
        "admin_token_file": secrets.admin,
        "worker_token_file": secrets.worker,
        "internal_token_file": secrets.internal,
        "coord_key_file": secrets.coord_key,
        # every test client is 127.0.0.1 and every node key new: the demo's test mode pairs
        # them (the pairing tests ask for address networks and key ages themselves)
        "compute_networks": "per-key",
        "compute_pair_min_age_s": 0,
    }
    fields.update(settings)
    config = CoordinatorSettings(**fields)
    config.state_dir.mkdir(parents=True, exist_ok=True)
    async with open_database(config.db_path, wall_clock=wall) as db:
        ctx = await Coordinator.create(
            config,
            db=db,
            objects=ObjectStore.open(config.objects_dir),
            chain=chain.info,
            wall=wall,
        )
        clock = LedgerClock.of(config, chain.info)
        ledger = Ledger.open(config.state_dir, clock.params)
        ctx.ledger = LedgerFeed(ledger, clock)
        parts = AppParts.build(ctx)
        ctx.beacon_observers.extend(parts.beacon_observers())
        ctx.events.observers.extend(parts.event_observers())
        app = create_app(ctx, parts)
        if extra_routes is not None:
            extra_routes(app, ctx)
        with ledger:
            async with open_mounted_client({API: app}, base_url=API) as client:
                yield Harness(ctx, client, chain, secrets, wall, parts)


class CapturedApp:
    """An ``extra_routes`` hook that adds no route but keeps the app it was given (``.app``):
    tests that read the app's URL map pass one."""

    app: QuartTrio | None = None

    def __call__(self, app: QuartTrio, _ctx: Coordinator) -> None:
        self.app = app
