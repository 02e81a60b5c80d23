"""Queries on the tables of ``0001_init.sql``: the ``meta`` settings and the ``objects`` rows.

Plain functions of a ``sqlite3.Connection``, meant to be handed to the runner:
``await db.write(record_object, info, now)``, ``await db.read(object_row, sha)``.

Order of operations for uploads: first :meth:`ObjectStore.put_stream` (the file is durable when it
returns), then ``record_object`` in the request's transaction. A crash in between leaves an
object without a row (an orphan, harmless); never a row naming an object that is not there.
"""

from __future__ import annotations

import sqlite3

import attrs

from hypertrain.store.errors import StoreError
from hypertrain.store.keys import ObjectInfo, check_key

__all__ = ["ObjectRow", "get_meta", "object_row", "record_object", "set_meta"]


@attrs.frozen
class ObjectRow:
    """An ``objects`` row: the object and when it was first recorded (unix seconds)."""

    sha256: str
    size: int
    created_at: int

    @property
    def info(self) -> ObjectInfo:
        """The object part of the row."""
        return ObjectInfo(sha256=self.sha256, size=self.size)


def record_object(conn: sqlite3.Connection, info: ObjectInfo, created_at: int) -> bool:
    """Record ``info``; True if the row is new, False if it was already there.

    Raises ``StoreError`` if the key is recorded with another size (content addressing broken).
    """
    check_key(info.sha256)
    cursor = conn.execute(
        "INSERT INTO objects (sha256, size, created_at) VALUES (?, ?, ?) "
        "ON CONFLICT (sha256) DO NOTHING",
        (info.sha256, info.size, created_at),
    )
    if cursor.rowcount == 1:
        return True
    (size,) = conn.execute("SELECT size FROM objects WHERE sha256 = ?", (info.sha256,)).fetchone()
    if size != info.size:
        raise StoreError(f"object {info.sha256} is recorded with {size} bytes, not {info.size}")
    return False


def object_row(conn: sqlite3.Connection, sha256: str) -> ObjectRow | None:
    """The ``objects`` row of ``sha256``, or None."""
    row = conn.execute(
        "SELECT sha256, size, created_at FROM objects WHERE sha256 = ?", (check_key(sha256),)
    ).fetchone()
    return None if row is None else ObjectRow(*row)


def get_meta(conn: sqlite3.Connection, key: str) -> str | None:
    """The ``meta`` value of ``key``, or None."""
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return None if row is None else str(row[0])


def set_meta(conn: sqlite3.Connection, key: str, value: str) -> None:
    """Set (insert or replace) the ``meta`` value of ``key``."""
    conn.execute(
        "INSERT INTO meta (key, value) VALUES (?, ?) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        (key, value),
    )
