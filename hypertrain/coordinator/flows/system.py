"""The system routes' one write: ``/health`` proves the database takes writes."""

from __future__ import annotations

import sqlite3
from typing import Final, Literal

import attrs

from hypertrain.ledger.ledger import LedgerStatistics
from hypertrain.store.catalog import set_meta

__all__ = ["HEALTH_META_KEY", "Healthy", "Unhealthy", "VersionAnswer", "touch_health"]


@attrs.frozen(kw_only=True)
class VersionAnswer:
    """``GET /version``: who answers, and what it offers (only what is built)."""

    slug: str
    version: str
    contract: int
    capabilities: tuple[str, ...]


@attrs.frozen
class Healthy:
    """``GET /health`` 200: healthy, and the ledger's totals."""

    ok: Literal[True]
    ledger: LedgerStatistics


@attrs.frozen
class Unhealthy:
    """``GET /health`` 503: every reason it is not healthy, and them joined as the detail."""

    detail: str
    reasons: tuple[str, ...]


HEALTH_META_KEY: Final = "health_checked_at"
"""The ``meta`` row ``/health`` writes to prove the database takes writes."""


def touch_health(conn: sqlite3.Connection, now: int) -> None:
    """Write ``now`` under :data:`HEALTH_META_KEY`."""
    set_meta(conn, HEALTH_META_KEY, str(now))
