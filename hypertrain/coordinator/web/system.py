"""System routes: ``GET /version`` and ``GET /health`` (spec section 9, auth none).

``/health`` answers 200 ``{"ok": true}`` only when all of these hold, else 503 with
``{"detail": ..., "reasons": [...]}`` naming every one that failed:

- the database is writable: a real write in a transaction (``meta`` key ``health_checked_at``);
- the internal token file is readable (the Cortex master needs it for ``get_weights``), and so
  is each admin or worker token file that is configured: a token file that is not the daemon
  user's alone (owner, mode, symlink; :mod:`hypertrain.coordinator.tokens`) is refused, and the
  reason names the file and why;
- K_coord loads from ``HYPERTRAIN_COORD_KEY_FILE`` (safe mode and owner, 32-byte seed);
- the ledger journal is open (the daemon opens it at start, or refuses to start).

The 200 body also reports the ledger: ``{"ok": true, "ledger": {records, queued_events,
answers, minted, burned, paid, pending, debt, last_event_at, last_epoch, last_epoch_at}}``
(totals with every recorded event applied; ``minted = burned + paid + pending`` always).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from quart import Response
from quart_trio import QuartTrio

from hypertrain.coordinator.context import Coordinator
from hypertrain.coordinator.flows.system import Healthy, Unhealthy, VersionAnswer, touch_health
from hypertrain.coordinator.tokens import TokenKind
from hypertrain.coordinator.web.http import json_response
from hypertrain.coordinator.web.routedoc import Doc, add_route
from hypertrain.protocol.converter import unstructure
from hypertrain.protocol.errors import NotConfigured

if TYPE_CHECKING:
    from hypertrain.coordinator.web.app import AppParts

__all__ = ["CAPABILITIES", "CAPABILITY_ROUTES", "CONTRACT", "VERSION", "health_reasons", "register"]

VERSION: Final = "0.1.0"
CONTRACT: Final = 1
CAPABILITIES: Final = ("checkpoints", "get_weights", "proxy_routes")
"""What ``/version`` advertises: only what is built."""
CAPABILITY_ROUTES: Final = {"get_weights": "/internal/v1/get_weights"}
"""The route each capability promises, where it names one."""


async def health_reasons(ctx: Coordinator) -> list[str]:
    """Why the coordinator is not healthy; empty when it is."""
    reasons: list[str] = []
    try:
        await ctx.db.write(touch_health, int(ctx.wall.now()))
    except Exception as e:  # any failure to write is the answer, not a crash
        reasons.append(f"database not writable: {type(e).__name__}: {e}")
    for kind in TokenKind:
        if kind is TokenKind.INTERNAL or ctx.tokens.path(kind) is not None:
            problem = ctx.tokens.readable(kind)
            if problem is not None:
                reasons.append(problem)
    try:
        ctx.coord_keypair()
    except NotConfigured as e:
        reasons.append(e.detail)
    if ctx.ledger is None:
        reasons.append("the ledger is not open")
    return reasons


def register(app: QuartTrio, ctx: Coordinator, parts: AppParts) -> None:
    """Add ``/version`` and ``/health`` to ``app``."""
    version_body = unstructure(
        VersionAnswer(
            slug=ctx.settings.slug, version=VERSION, contract=CONTRACT, capabilities=CAPABILITIES
        )
    )

    async def version() -> Response:
        return json_response(version_body)

    async def health() -> Response:
        reasons = await health_reasons(ctx)
        if reasons:
            return json_response(unstructure(Unhealthy("; ".join(reasons), tuple(reasons))), 503)
        assert ctx.ledger is not None
        return json_response(unstructure(Healthy(True, ctx.ledger.ledger.statistics())))

    add_route(
        app,
        "/version",
        "system.version",
        version,
        "GET",
        Doc(
            summary="the daemon's slug, version, contract and capabilities",
            answers={200: VersionAnswer},
        ),
    )
    add_route(
        app,
        "/health",
        "system.health",
        health,
        "GET",
        Doc(summary="200 iff healthy (spec 9)", answers={200: Healthy, 503: Unhealthy}),
    )
