"""The system routes' one write: ``/health`` proves the database takes writes."""

from __future__ import annotations

import sqlite3
from typing import Final

from hypertrain.store.catalog import set_meta

__all__ = ["HEALTH_META_KEY", "touch_health"]


HEALTH_META_KEY: Final = "health_checked_at"
"""The ``meta`` row ``/health`` writes to prove the database takes writes."""


def touch_health(conn: sqlite3.Connection, now: int) -> None:
    """Write ``now`` under :data:`HEALTH_META_KEY`."""
    set_meta(conn, HEALTH_META_KEY, str(now))
