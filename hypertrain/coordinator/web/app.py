"""The coordinator's quart-trio application: ``create_app(ctx, parts)``.

Each route module exposes ``register(app, ctx, parts)``, which adds routes and nothing else,
and names its endpoints ``<module>.<name>`` (Quart refuses two views under one endpoint name).
A route is added with :func:`~hypertrain.coordinator.web.routedoc.add_route` and its
declaration (what it reads and answers), from which ``GET /openapi.json`` is built
(:mod:`~hypertrain.coordinator.web.openapi`, registered last); a route added otherwise shows
in that document as undocumented, which the tests refuse.
Adding a group of routes is one entry in :data:`ROUTE_MODULES`. What routes use besides the
:class:`~hypertrain.coordinator.context.Coordinator` is built by the composition root
(:func:`hypertrain.daemon.main.serve_daemon`, or a test) and handed in as :class:`AppParts`;
:meth:`AppParts.build` builds them without touching ``ctx``, so the caller decides what to
subscribe (``ctx.beacon_observers.extend(parts.beacon_observers())``). :func:`create_app` has no
side effects: two apps over one ``ctx`` serve the same state. The app's ASGI callable is
wrapped by :func:`~hypertrain.coordinator.web.front.serve_answers`, which answers a repeated
public view from ``parts.answers`` while the database is unchanged (one render at a time per
view) and hands everything else to Quart; outermost,
:func:`~hypertrain.coordinator.web.instrument.instrument` counts every request in
``parts.metrics``, writes access lines and serves ``GET /metrics`` (unless the daemon serves it
on a listener of its own). The app does no long-running work of its own (its nursery is
Quart's; STYLE: services live in the daemon's supervisor).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final, NoReturn

import attrs
from quart_trio import QuartTrio

from hypertrain.coordinator.context import BeaconObserver, Coordinator
from hypertrain.coordinator.events import EventObserver
from hypertrain.coordinator.metrics import Metrics
from hypertrain.coordinator.services.audits import AuditDraws
from hypertrain.coordinator.services.disputes import DisputeClock
from hypertrain.coordinator.services.finality import Finality
from hypertrain.coordinator.services.rescores import RescoreDraws
from hypertrain.coordinator.services.runs import RunsService
from hypertrain.coordinator.services.scorefeed import ScoreFeed
from hypertrain.coordinator.web import (
    aggregator,
    beacon,
    checkpoints,
    compute,
    dashboard,
    datasets,
    disputes,
    events,
    ledger,
    miner,
    objects,
    openapi,
    runs,
    system,
    worker,
)
from hypertrain.coordinator.web.answers import AnswerCache
from hypertrain.coordinator.web.front import serve_answers
from hypertrain.coordinator.web.http import (
    BODY_TIMEOUT,
    HEADERS_LIMIT,
    install_converters,
    install_error_handlers,
)
from hypertrain.coordinator.web.instrument import (
    METRICS_PATH,
    RouteTemplates,
    coordinator_metrics,
    instrument,
)
from hypertrain.coordinator.web.objects import UploadAwareRequest
from hypertrain.coordinator.web.routedoc import Doc, Media, add_route
from nurseries import RunSync, run_inline

__all__ = ["ROUTE_MODULES", "App", "AppParts", "Register", "create_app"]

App = QuartTrio
"""The ASGI app type, for code outside the web room (which does not import quart)."""


@attrs.frozen(eq=False)
class AppParts:
    """What the routes use besides ``ctx``; built once by the composition root."""

    runs: RunsService
    """Round views (with the assignment cache) and the ``run`` / ``round_state`` events."""
    inputs: ScoreFeed
    """The scoring inputs of a run (the benchmark's model, start state and trace)."""
    audits: AuditDraws
    """The audit draw after each new D (and round 0's published genesis state)."""
    disputes: DisputeClock
    """The dispute deadlines after each new D."""
    finality: Finality
    """Finalize records (the route's and the daemon's aggregator's) and the ledger feed."""
    rescores: RescoreDraws
    """The sampled trusted re-score draws after each new D."""
    answers: AnswerCache
    """The public read views' answers, served in front of Quart while the data is unchanged."""
    metrics: Metrics
    """The app's Prometheus metrics (:mod:`hypertrain.coordinator.metrics`)."""
    run_sync: RunSync = run_inline
    """Where routes run CPU work (hashing a served state blob): a worker thread in the daemon."""

    def beacon_observers(self) -> list[BeaconObserver]:
        """What the caller subscribes to new beacon rounds, in order: the round-state feed,
        the audit draw, the dispute deadlines, then the re-score draws."""
        return [
            self.runs.on_beacon,
            self.audits.on_beacon,
            self.disputes.on_beacon,
            self.rescores.on_beacon,
        ]

    def event_observers(self) -> list[EventObserver]:
        """What the caller adds to the event hub's observers: the metrics' event feed."""
        return [self.metrics.on_event]

    @classmethod
    def build(cls, ctx: Coordinator, *, run_sync: RunSync = run_inline) -> AppParts:
        """The parts over ``ctx`` (``run_sync`` runs the scoring-input builds that take CPU)."""
        return cls(
            runs=RunsService(ctx),
            inputs=ScoreFeed(ctx, ctx.settings.holdout_dir, run_sync),
            audits=AuditDraws(ctx, run_sync),
            disputes=DisputeClock(ctx),
            finality=Finality(ctx),
            rescores=RescoreDraws(ctx),
            answers=AnswerCache(ctx.db),
            metrics=coordinator_metrics(ctx),
            run_sync=run_sync,
        )


Register = Callable[[App, Coordinator, AppParts], None]

ROUTE_MODULES: Final[tuple[Register, ...]] = (
    system.register,
    beacon.register,
    events.register,
    runs.register,
    miner.register,
    objects.register,
    datasets.register,
    aggregator.register,
    compute.register,
    worker.register,
    disputes.register,
    ledger.register,
    checkpoints.register,
    dashboard.register,
    openapi.register,
)
"""The ``register`` functions ``create_app`` calls, in order."""


async def _served_in_front() -> NoReturn:
    """``GET /metrics``: answered by the instrument layer in front of Quart, never here."""
    raise RuntimeError("GET /metrics is answered in front of the app")


def create_app(
    ctx: Coordinator,
    parts: AppParts,
    *,
    serve_metrics: bool = True,
    access_log: logging.Logger | None = None,
) -> App:
    """A new app serving every route module over ``ctx`` (module doc); ``serve_metrics``:
    it answers ``GET /metrics`` itself; ``access_log``: one line per request there."""
    app = QuartTrio(__name__)
    app.request_class = UploadAwareRequest
    app.config.update(
        MAX_CONTENT_LENGTH=ctx.settings.body_limit,
        BODY_TIMEOUT=BODY_TIMEOUT,
        PROPAGATE_EXCEPTIONS=False,
    )
    install_error_handlers(app)
    install_converters(app)
    for register in ROUTE_MODULES:
        register(app, ctx, parts)
    if serve_metrics:  # listed for the URL map and the OpenAPI document; answered in front
        metrics_doc = Doc(
            summary="the daemon's Prometheus metrics", answers={200: Media("text/plain")}
        )
        add_route(app, METRICS_PATH, "metrics.text", _served_in_front, "GET", metrics_doc)
    app.asgi_app = serve_answers(  # type: ignore[method-assign,assignment]
        app.asgi_app, parts.answers, headers_limit=HEADERS_LIMIT
    )
    app.asgi_app = instrument(  # type: ignore[method-assign,assignment]
        app.asgi_app,
        parts.metrics,
        RouteTemplates(app.url_map),
        serve_metrics=serve_metrics,
        access_log=access_log,
    )
    return app
