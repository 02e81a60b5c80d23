"""A run's scoring inputs (``scoring_inputs``): the objects every scoring step of it shares.

One row per run and :data:`Kind`: ``model`` (the manifest's model section), ``public`` (the
public trace) and ``hidden`` (the hidden trace, also marked private). Written once, the first
time a step needs it (:mod:`hypertrain.coordinator.services.scorefeed`).
"""

from __future__ import annotations

import sqlite3
from typing import Literal

from hypertrain.coordinator.tables.private import mark_private
from hypertrain.store.catalog import record_object
from hypertrain.store.keys import ObjectInfo

__all__ = ["Kind", "get_input", "put_input"]


Kind = Literal["model", "public", "hidden"]
"""The shared inputs of a run's scoring steps."""


def get_input(conn: sqlite3.Connection, run_id: str, kind: Kind) -> tuple[str, int] | None:
    """``(sha256, size)`` of the run's ``kind`` input, or None before it was built."""
    row = conn.execute(
        "SELECT sha256, size FROM scoring_inputs WHERE run_id = ? AND kind = ?", (run_id, kind)
    ).fetchone()
    return None if row is None else (str(row[0]), int(row[1]))


def put_input(
    conn: sqlite3.Connection, run_id: str, kind: Kind, info: ObjectInfo, now: int
) -> None:
    """Record the run's ``kind`` input (and the object in the catalog); the first one stays."""
    record_object(conn, info, now)
    if kind == "hidden":
        mark_private(conn, info.sha256, f"hidden trace of run {run_id}")
    conn.execute(
        "INSERT INTO scoring_inputs (run_id, kind, sha256, size) VALUES (?, ?, ?, ?)"
        " ON CONFLICT DO NOTHING",
        (run_id, kind, info.sha256, info.size),
    )
