"""Private objects (``private_objects``): stored, but served to the admin token only.

A hidden scoring trace is one: nodes get it through a compute lease, anyone else's ``GET
/v1/objects/{sha256}`` answers 404 as if it did not exist.
"""

from __future__ import annotations

import sqlite3

__all__ = ["is_private", "mark_private"]


def mark_private(conn: sqlite3.Connection, sha256: str, reason: str) -> None:
    """Serve ``sha256`` to the admin only from now on (idempotent; the first reason stays)."""
    conn.execute(
        "INSERT INTO private_objects (sha256, reason) VALUES (?, ?) ON CONFLICT DO NOTHING",
        (sha256, reason),
    )


def is_private(conn: sqlite3.Connection, sha256: str) -> bool:
    """Whether the object route serves ``sha256`` to the admin only."""
    return (
        conn.execute("SELECT 1 FROM private_objects WHERE sha256 = ?", (sha256,)).fetchone()
        is not None
    )
