"""The coordinator's quart-trio application: ``create_app(ctx)``.

Each route module exposes ``register(app, ctx)`` and names its endpoints ``<module>.<name>``
(Quart refuses two views under one endpoint name). Adding a group of routes is one entry in
:data:`ROUTE_MODULES`. The app does no long-running work of its own (its nursery is Quart's;
STYLE: services live in the daemon's supervisor).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from quart_trio import QuartTrio

from hypertrain.coordinator import (
    routes_aggregator,
    routes_beacon,
    routes_compute,
    routes_datasets,
    routes_events,
    routes_miner,
    routes_objects,
    routes_runs,
    routes_system,
)
from hypertrain.coordinator.context import Coordinator
from hypertrain.coordinator.http import BODY_TIMEOUT, install_error_handlers

__all__ = ["ROUTE_MODULES", "create_app"]

Register = Callable[[QuartTrio, Coordinator], None]


ROUTE_MODULES: Final[tuple[Register, ...]] = (
    routes_system.register,
    routes_beacon.register,
    routes_events.register,
    routes_runs.register,
    routes_miner.register,
    routes_objects.register,
    routes_datasets.register,
    routes_aggregator.register,
    routes_compute.register,
)
"""The ``register`` functions ``create_app`` calls, in order."""


def create_app(ctx: Coordinator) -> QuartTrio:
    """A new app serving every route module over ``ctx``."""
    app = QuartTrio(__name__)
    app.config.update(
        MAX_CONTENT_LENGTH=ctx.settings.body_limit,
        BODY_TIMEOUT=BODY_TIMEOUT,
        PROPAGATE_EXCEPTIONS=False,
    )
    install_error_handlers(app)
    for register in ROUTE_MODULES:
        register(app, ctx)
    return app
