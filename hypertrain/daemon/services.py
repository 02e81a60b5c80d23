"""The daemon's background services, declared as a table: adding one is one line in
:data:`SERVICES`.

Each :class:`ServiceSpec` names a service, a factory and a restart policy. The factory gets
the built :class:`DaemonParts` and returns the service function (``run(*, task_status)``, house
style) or ``None`` when the service does not apply (the WAL checkpointer needs a real clock:
it uses a worker thread, which breaks virtual time). The composition root starts each one in
order under :func:`nurseries.supervise`, after the HTTP server.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Final

import attrs
import httpx
import trio

from hypertrain.beacon import (
    QUICKNET,
    BeaconSource,
    LocalChain,
    LocalChainSource,
    Pusher,
    RelayClient,
    TickRecord,
)
from hypertrain.coordinator.context import Coordinator, CoordinatorSink
from hypertrain.coordinator.services.aggregator import AggregatorService
from hypertrain.coordinator.services.checkpoints import CheckpointService, CheckpointTerms
from hypertrain.coordinator.services.fallback import FallbackPool
from hypertrain.coordinator.services.heldout import HeldoutService
from hypertrain.coordinator.services.reaper import LeaseReaper
from hypertrain.coordinator.web.app import AppParts
from hypertrain.daemon.settings import DaemonSettings
from hypertrain.protocol.converter import unstructure
from hypertrain.scoring.outcome import ScoreOutcome
from hypertrain.scoring.registry import Challenge
from hypertrain.scoring.sandbox import run_scorer, score_inline
from hypertrain.scoring.warm import open_warm_scorer
from nurseries import RestartPolicy, SystemClock, WallClock, offload_for

__all__ = [
    "BEACON_POLICY",
    "DEFAULT_POLICY",
    "SERVICES",
    "DaemonParts",
    "ServiceFactory",
    "ServiceFn",
    "ServiceSpec",
    "aggregator_service",
    "beacon_service",
    "checkpointer_service",
    "checkpoints_service",
    "fallback_service",
    "heldout_service",
    "reaper_service",
    "scorefeed_service",
]

log = logging.getLogger(__name__)

ServiceFn = Callable[..., Awaitable[object]]
"""``async def run(*, task_status=trio.TASK_STATUS_IGNORED)``."""

DEFAULT_POLICY: Final = RestartPolicy(initial_backoff=1.0, max_backoff=60.0, reset_after=300.0)
"""Restart on failure forever, backing off from 1 s to at most 60 s."""
BEACON_POLICY: Final = RestartPolicy(initial_backoff=3.0, max_backoff=60.0, reset_after=300.0)
"""The pusher already retries ticks itself; a restart means it gave up or was refused."""


@attrs.frozen
class DaemonParts:
    """What service factories may use; built once by the composition root."""

    settings: DaemonSettings
    ctx: Coordinator
    wall: WallClock
    http_client: httpx.AsyncClient | None
    """The client for outbound HTTP (relays); None when nothing needs one."""
    local_chain: LocalChain | None
    """The daemon's own chain in ``--beacon local`` mode."""
    app: AppParts
    """What the routes share with the services (the scoring feed)."""


ServiceFactory = Callable[[DaemonParts], ServiceFn | None]


@attrs.frozen
class ServiceSpec:
    """One background service of the daemon."""

    name: str
    factory: ServiceFactory
    policy: RestartPolicy = DEFAULT_POLICY


def _report_tick(record: TickRecord) -> None:
    if record.ok:
        log.debug("beacon tick: %s", unstructure(record))
    else:
        log.warning("beacon tick failed: %s", unstructure(record))


def beacon_service(parts: DaemonParts) -> ServiceFn:
    """The pusher: relays (or the local chain) -> verify -> ``ctx.ingest_beacon``, each period."""
    source: BeaconSource
    if parts.local_chain is not None:
        source = LocalChainSource(parts.local_chain)
    else:
        if parts.http_client is None:
            raise ValueError("the relays beacon needs an HTTP client")
        source = RelayClient(parts.settings.relays, QUICKNET, client=parts.http_client)
    pusher = Pusher(
        source,
        CoordinatorSink(parts.ctx),
        interval=parts.ctx.chain.period,
        report=_report_tick,
    )
    return pusher.run


def checkpointer_service(parts: DaemonParts) -> ServiceFn | None:
    """The database's passive WAL checkpoints; only with the real clock (it uses a thread)."""
    if not isinstance(parts.wall, SystemClock):
        return None
    return parts.ctx.db.run_checkpointer


def aggregator_service(parts: DaemonParts) -> ServiceFn | None:
    """Merge each round at d_upload and open the next; only with K_coord configured and the
    ``aggregator`` setting ``internal`` (``external``: ``hypertrain aggregate`` merges)."""
    if parts.settings.coordinator.coord_key_file is None or parts.settings.aggregator != "internal":
        return None
    return AggregatorService(
        parts.ctx, run_sync=offload_for(parts.wall), finality=parts.app.finality
    ).run


def checkpoints_service(parts: DaemonParts) -> ServiceFn | None:
    """Publish a checkpoint every ``checkpoint_every`` rounds and at a run's last round; only
    with K_coord configured (it signs them). Builds run in worker threads with the real clock."""
    settings = parts.settings.coordinator
    if settings.coord_key_file is None:
        return None
    terms = CheckpointTerms(
        license=settings.checkpoint_license,
        dataset_name=settings.dataset_name,
        dataset_license=settings.dataset_license,
        dataset_attribution=settings.dataset_attribution,
    )
    return CheckpointService(
        parts.ctx, settings.checkpoint_every, terms, run_sync=offload_for(parts.wall)
    ).run


def heldout_service(parts: DaemonParts) -> ServiceFn | None:
    """The held-out loss of every theta; only with ``holdout_dir`` configured. Its work runs in
    worker threads with the real clock, inline in virtual time."""
    settings = parts.settings.coordinator
    if settings.holdout_dir is None:
        return None
    return HeldoutService(
        parts.ctx,
        settings.holdout_dir,
        settings.heldout_samples,
        run_sync=offload_for(parts.wall),
    ).run


def reaper_service(parts: DaemonParts) -> ServiceFn:
    """Lease expiry and the end of fallback windows, at their stored deadlines."""
    return LeaseReaper(parts.ctx).run


async def _score_inline(challenge: Challenge, inputs: Mapping[str, Path]) -> ScoreOutcome:
    await trio.lowlevel.checkpoint()
    return score_inline(challenge, inputs)


def fallback_service(parts: DaemonParts) -> ServiceFn:
    """The fallback evaluator pool: the sandboxed scorer with the real clock (warm: each job
    forked from one warm scorer process, unless ``scorer = "cold"``); in virtual time the same
    scorer inline (a child process would let the autojump clock leap)."""
    concurrency = parts.settings.coordinator.compute_pool
    if not isinstance(parts.wall, SystemClock):
        return FallbackPool(parts.ctx, _score_inline, concurrency).run
    if parts.settings.scorer == "cold":
        return FallbackPool(parts.ctx, run_scorer, concurrency).run

    async def run(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with open_warm_scorer() as scorer:
            pool = FallbackPool(parts.ctx, scorer.score, concurrency)
            await pool.run(task_status=task_status)

    return run


def scorefeed_service(parts: DaemonParts) -> ServiceFn:
    """Every uploaded delta becomes delta-loss scoring steps for the compute network."""
    return parts.app.inputs.run


SERVICES: Final[tuple[ServiceSpec, ...]] = (
    ServiceSpec("beacon", beacon_service, BEACON_POLICY),
    ServiceSpec("checkpointer", checkpointer_service),
    ServiceSpec("aggregator", aggregator_service),
    ServiceSpec("checkpoints", checkpoints_service),
    ServiceSpec("heldout", heldout_service),
    ServiceSpec("scorefeed", scorefeed_service),
    ServiceSpec("reaper", reaper_service),
    ServiceSpec("fallback", fallback_service),
)
"""Started in this order, after the HTTP server."""
