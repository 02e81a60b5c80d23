"""The route guards: ``require_admin``, ``require_worker``, ``require_internal``.

Each checks the current request's ``Authorization: Bearer`` header against the coordinator's
:class:`~hypertrain.coordinator.tokens.TokenFiles` (the table of answers is in
:mod:`hypertrain.coordinator.tokens`) and raises; none of them waits, so they are plain
functions called before the body is read.

========================================  ===============================================
the route's token file unset/missing      :class:`NotConfigured` (503), naming the token
no, malformed or wrong bearer token       :class:`AuthError` (401)
internal: wrong ``X-Platform-Challenge-Slug``  :class:`Forbidden` (403)
========================================  ===============================================
"""

from __future__ import annotations

from typing import Final

from quart import request

from hypertrain.coordinator.context import Coordinator
from hypertrain.coordinator.tokens import TokenKind, bearer_token
from hypertrain.protocol.errors import Forbidden

__all__ = ["SLUG_HEADER", "request_bearer", "require_admin", "require_internal", "require_worker"]

SLUG_HEADER: Final = "X-Platform-Challenge-Slug"
"""The header the Cortex master sends with internal calls; must equal our slug."""


def request_bearer() -> str | None:
    """The bearer token of the current request, or None."""
    return bearer_token(request.headers.get("Authorization"))


def _require(ctx: Coordinator, kind: TokenKind) -> None:
    ctx.tokens.check(kind, request_bearer())


def require_admin(ctx: Coordinator) -> None:
    """The current request must carry the admin token (401/503 otherwise)."""
    _require(ctx, TokenKind.ADMIN)


def require_worker(ctx: Coordinator) -> None:
    """The current request must carry the worker token (401/503 otherwise)."""
    _require(ctx, TokenKind.WORKER)


def require_internal(ctx: Coordinator) -> None:
    """The internal token (401/503) and ``X-Platform-Challenge-Slug`` equal to our slug (403)."""
    _require(ctx, TokenKind.INTERNAL)
    slug = request.headers.get(SLUG_HEADER)
    if slug != ctx.settings.slug:
        raise Forbidden(f"{SLUG_HEADER} must be {ctx.settings.slug!r}, got {slug!r}")
