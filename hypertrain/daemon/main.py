"""hypertrain-daemon: the composition root (:func:`serve_daemon`) and its console entry.

::

    supervisor  (open_supervisor: SIGINT/SIGTERM/SIGHUP -> graceful shutdown within --grace)
    ├─ http      serve_asgi(create_app(ctx, parts))      started first; prints the URL
    ├─ metrics   serve_asgi(metrics_app(parts.metrics))  only with --metrics-bind
    └─ services  every entry of services.SERVICES under supervise(), in order

The services are the rows of :data:`hypertrain.daemon.services.SERVICES` (what each does is
its factory's docstring there); the routes are
:data:`hypertrain.coordinator.web.app.ROUTE_MODULES`.
The root builds the :class:`~hypertrain.coordinator.context.Coordinator`, the routes' parts
(:class:`~hypertrain.coordinator.web.app.AppParts`, shared with the scoring feed) and
subscribes the round-state feed to new beacon rounds and the metrics to the event hub. The app
serves ``GET /metrics`` itself unless ``--metrics-bind`` gives it a listener of its own, and
writes access lines (logger :data:`ACCESS_LOGGER`) with ``--access-log``.

Shutdown (a signal, or :meth:`DaemonHandle.request_shutdown` in tests) runs, in order:
``ctx.stopping.set()`` (long polls and SSE streams answer 503 / end), the event hub and the
compute hub's waiters are closed, the services are cancelled, then hypercorn's shutdown
trigger (listeners close, requests in flight get ``graceful_timeout``). Whatever still runs
after ``--grace`` seconds is cancelled.

Exit status of :func:`main`: 0 after a shutdown, 2 for a configuration error (one line on
stderr), 1 for anything else (logged with its traceback).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from functools import partial
from typing import Final

import attrs
import httpx
import trio

from hypertrain.beacon import QUICKNET, ChainInfo, LocalChain, LocalChainError
from hypertrain.coordinator.context import Coordinator
from hypertrain.coordinator.metagraph import MasterMetagraph, Metagraph
from hypertrain.coordinator.services.ledgerclock import LedgerClock
from hypertrain.coordinator.services.ledgerfeed import LedgerFeed
from hypertrain.coordinator.settings import CoordinatorSettings
from hypertrain.coordinator.web.app import App, AppParts, create_app
from hypertrain.coordinator.web.instrument import metrics_app
from hypertrain.daemon.logs import configure_logging
from hypertrain.daemon.services import SERVICES, DaemonParts, ServiceSpec
from hypertrain.daemon.settings import ConfigError, DaemonSettings, load_settings
from hypertrain.demo.main import main as demo_main
from hypertrain.ledger import Ledger, LedgerError
from hypertrain.protocol.errors import KeyfileError
from hypertrain.store import ObjectStore, open_database
from nurseries import (
    DEFAULT_GRACEFUL_TIMEOUT,
    DEFAULT_SHUTDOWN_SIGNALS,
    Supervisor,
    SystemClock,
    WallClock,
    lifeline_from_env,
    offload_for,
    open_supervisor,
    serve_asgi,
    supervise,
    tune_collector_for_serving,
)

__all__ = [
    "ACCESS_LOGGER",
    "EXIT_CONFIG",
    "EXIT_FAILURE",
    "EXIT_OK",
    "DaemonHandle",
    "main",
    "serve_daemon",
]

log = logging.getLogger(__name__)

EXIT_OK: Final = 0
DEMO_FLAG: Final = "--demo"
EXIT_FAILURE: Final = 1
EXIT_CONFIG: Final = 2
ACCESS_LOGGER: Final = "hypertrain.access"
"""The logger of the access lines (``--access-log``)."""
RELAY_CLIENT_TIMEOUT: Final = httpx.Timeout(connect=3.0, read=5.0, write=5.0, pool=5.0)
"""Default limits of the outbound client (the relay client passes its own per request)."""


@attrs.frozen(eq=False)
class DaemonHandle:
    """What :func:`serve_daemon` reports once it serves: its URL, context, app and supervisor.

    ``app`` is the app being served; tests drive it in-process.
    """

    url: str
    ctx: Coordinator
    app: App
    supervisor: Supervisor
    services: Mapping[str, object]
    """What each started service reported through ``task_status.started(...)``, by name (the
    beacon pusher, the aggregator and the held-out service the round D they
    started at, ...); a service that does not apply here is absent."""
    metrics_url: str | None = None
    """The URL of the listener that serves only ``/metrics`` (``--metrics-bind``); None: the
    API serves it at ``{url}/metrics``."""

    def request_shutdown(self, *, immediate: bool = False) -> None:
        """Shut down as SIGTERM would (``immediate``: as a second signal)."""
        self.supervisor.request_shutdown(immediate=immediate)


def _open_chain(settings: DaemonSettings, wall: WallClock) -> tuple[ChainInfo, LocalChain | None]:
    if settings.beacon == "relays":
        return QUICKNET, None
    try:
        chain = LocalChain.open(
            settings.coordinator.state_dir, clock=wall, period=settings.local_period
        )
    except (LocalChainError, KeyfileError) as e:
        raise ConfigError(f"local beacon: {e.detail}") from e
    return chain.info, chain


@asynccontextmanager
async def _open_http_client(
    settings: DaemonSettings, given: httpx.AsyncClient | None
) -> AsyncIterator[httpx.AsyncClient | None]:
    needed = settings.beacon == "relays" or settings.coordinator.master_url is not None
    if given is not None or not needed:
        yield given
        return
    async with httpx.AsyncClient(timeout=RELAY_CLIENT_TIMEOUT) as client:
        yield client


def _open_ledger(config: CoordinatorSettings, chain: ChainInfo) -> tuple[Ledger, LedgerClock]:
    """The ledger journal under the state dir (created on first use); a damaged, foreign or
    locked journal is a ConfigError naming the problem (the daemon refuses to start)."""
    clock = LedgerClock.of(config, chain)
    try:
        return Ledger.open(config.state_dir, clock.params), clock
    except LedgerError as e:
        raise ConfigError(f"ledger: {e}") from e


def _metagraph(
    config: CoordinatorSettings, client: httpx.AsyncClient | None, wall: WallClock
) -> Metagraph | None:
    """The master's metagraph when ``CHALLENGE_MASTER_URL`` is set; else the roster alone."""
    if config.master_url is None:
        return None
    if client is None:
        raise ConfigError("CHALLENGE_MASTER_URL is set but no HTTP client was opened")
    return MasterMetagraph(config.master_url, client=client, wall=wall)


async def _run_services(
    parts: DaemonParts,
    specs: Sequence[ServiceSpec],
    scope: trio.CancelScope,
    *,
    task_status: trio.TaskStatus[dict[str, object]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Start each applicable service in order under ``supervise``; reports what each one
    reported when it started, by name; ends when ``scope`` is."""
    started: dict[str, object] = {}
    with scope:
        async with trio.open_nursery() as nursery:
            for spec in specs:
                fn = spec.factory(parts)
                if fn is None:
                    log.info("service %s: not started (does not apply here)", spec.name)
                    continue
                started[spec.name] = await nursery.start(
                    partial(supervise, spec.name, fn, policy=spec.policy), name=spec.name
                )
                log.info("service %s: started (%r)", spec.name, started[spec.name])
            task_status.started(started)


async def _serve_metrics(
    supervisor: Supervisor,
    parts: AppParts,
    bind: tuple[str, int],
    stop: trio.Event,
    grace: float,
) -> str:
    """Start the listener that serves only ``/metrics`` (``--metrics-bind``); its URL. An
    address it cannot listen on is a :class:`ConfigError` naming it."""
    host, port = bind
    try:
        url: str = await supervisor.nursery.start(
            partial(
                serve_asgi,
                metrics_app(parts.metrics),
                host,
                port,
                shutdown_trigger=stop.wait,
                graceful_timeout=min(DEFAULT_GRACEFUL_TIMEOUT, grace),
            ),
            name="metrics",
        )
    except OSError as e:
        shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        raise ConfigError(f"--metrics-bind {shown}: cannot listen ({e.strerror})") from e
    log.info("metrics on %s/metrics", url)
    return url


async def serve_daemon(
    settings: DaemonSettings,
    *,
    wall: WallClock,
    task_status: trio.TaskStatus[DaemonHandle] = trio.TASK_STATUS_IGNORED,
    signals: Iterable[int] = (),
    lifeline: int | None = None,
    http_client: httpx.AsyncClient | None = None,
    services: Sequence[ServiceSpec] = SERVICES,
) -> None:
    """Run the daemon until shut down; reports a :class:`DaemonHandle` once everything runs.

    ``wall`` is the wall clock (``SystemClock()`` in production, a ``VirtualClock`` in tests);
    ``signals`` are the signals that shut it down (none by default: tests call
    ``handle.request_shutdown()``), ``lifeline`` the lifeline it was started with
    (:func:`nurseries.lifeline_from_env`; cut, it shuts down as on SIGHUP); ``http_client``
    replaces the outbound client (tests mount in-process relays on it). Raises
    :class:`ConfigError` for settings that only turn out wrong at start (a local chain with
    another period), and lets service failures propagate.
    """
    config = settings.coordinator
    config.state_dir.mkdir(parents=True, exist_ok=True)
    chain_info, local_chain = _open_chain(settings, wall)
    async with AsyncExitStack() as stack:
        db = await stack.enter_async_context(open_database(config.db_path, wall_clock=wall))
        client = await stack.enter_async_context(_open_http_client(settings, http_client))
        ctx = await Coordinator.create(
            config,
            db=db,
            objects=ObjectStore.open(config.objects_dir),
            chain=chain_info,
            wall=wall,
            metagraph=_metagraph(config, client, wall),
        )
        ledger, ledger_clock = _open_ledger(config, chain_info)
        stack.callback(ledger.close)
        ctx.ledger = LedgerFeed(ledger, ledger_clock)
        problems = await ctx.ledger.check(db)
        if problems:
            raise ConfigError(f"ledger: {problems[0]}")
        app_parts = AppParts.build(ctx, run_sync=offload_for(wall))
        ctx.beacon_observers.extend(app_parts.beacon_observers())
        ctx.events.observers.extend(app_parts.event_observers())
        app = create_app(
            ctx,
            app_parts,
            serve_metrics=settings.metrics_bind is None,
            access_log=logging.getLogger(ACCESS_LOGGER) if settings.access_log else None,
        )
        http_stop = trio.Event()
        services_scope = trio.CancelScope()

        def on_shutdown() -> None:
            ctx.stopping.set()
            ctx.events.close()
            ctx.compute.close()
            services_scope.cancel()
            http_stop.set()

        async with open_supervisor(
            grace=settings.grace, signals=signals, on_shutdown=on_shutdown, lifeline=lifeline
        ) as supervisor:
            url: str = await supervisor.nursery.start(
                partial(
                    serve_asgi,
                    app,
                    settings.host,
                    settings.port,
                    shutdown_trigger=http_stop.wait,
                    graceful_timeout=min(DEFAULT_GRACEFUL_TIMEOUT, settings.grace),
                    unread_body_limit=config.body_limit,
                ),
                name="http",
            )
            log.info("listening on %s (beacon: %s, D=%d)", url, settings.beacon, ctx.beacon.latest)
            metrics_url = None
            if settings.metrics_bind is not None:
                metrics_url = await _serve_metrics(
                    supervisor, app_parts, settings.metrics_bind, http_stop, settings.grace
                )
            parts = DaemonParts(settings, ctx, wall, client, local_chain, app_parts)
            started = await supervisor.nursery.start(_run_services, parts, services, services_scope)
            task_status.started(DaemonHandle(url, ctx, app, supervisor, started, metrics_url))
        if supervisor.shutdown_requested:
            log.info("shut down (signal: %s)", getattr(supervisor.shutdown_signal, "name", None))


def _config_error(exc: BaseException) -> ConfigError | None:
    """The ConfigError in ``exc`` (possibly nested in exception groups), if any."""
    if isinstance(exc, ConfigError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _config_error(inner)
            if found is not None:
                return found
    return None


async def _run(settings: DaemonSettings) -> None:
    async with trio.open_nursery() as nursery:
        handle: DaemonHandle = await nursery.start(
            partial(
                serve_daemon,
                settings,
                wall=SystemClock(),
                signals=DEFAULT_SHUTDOWN_SIGNALS,
                lifeline=lifeline_from_env(os.environ),
            )
        )
        tune_collector_for_serving()  # the process boundary: its collector is ours to set
        print(f"hypertrain-daemon listening on {handle.url}", flush=True)
        if handle.metrics_url is not None:
            print(f"hypertrain-daemon metrics on {handle.metrics_url}/metrics", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """The ``hypertrain-daemon`` console script; returns the exit status.

    ``--demo`` anywhere in ``argv`` runs the local demo network instead
    (:mod:`hypertrain.demo.main`, with the other arguments)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if DEMO_FLAG in args:
        return demo_main([a for a in args if a != DEMO_FLAG])
    try:
        settings = load_settings(args, os.environ)
    except ConfigError as e:
        print(f"hypertrain-daemon: error: {e.detail}", file=sys.stderr)
        return EXIT_CONFIG
    configure_logging(settings.log_format)
    try:
        trio.run(_run, settings)
    except BaseException as e:  # the process boundary: classify, log, exit
        found = _config_error(e)
        if found is not None:
            print(f"hypertrain-daemon: error: {found.detail}", file=sys.stderr)
            return EXIT_CONFIG
        if isinstance(e, KeyboardInterrupt):
            log.warning("interrupted before the shutdown handler was installed")
            return EXIT_FAILURE
        if not isinstance(e, Exception):
            raise
        log.critical("hypertrain-daemon failed", exc_info=e)
        return EXIT_FAILURE
    return EXIT_OK
