"""Queries on the 0001 tables: meta settings and object rows recorded after a durable put."""

from __future__ import annotations

import sqlite3

import pytest

from hypertrain.protocol.errors import Malformed
from hypertrain.store import (
    Database,
    ObjectInfo,
    ObjectStore,
    StoreError,
    get_meta,
    object_row,
    record_object,
    set_meta,
)


async def test_meta_values_are_set_and_replaced(db: Database) -> None:
    assert await db.read(get_meta, "run_id") is None
    await db.write(set_meta, "run_id", "a")
    await db.write(set_meta, "run_id", "b")
    assert await db.read(get_meta, "run_id") == "b"


async def test_objects_are_recorded_once_after_a_put(db: Database, objects: ObjectStore) -> None:
    info = await objects.put_bytes(b"delta bytes")
    assert await db.write(record_object, info, 100) is True
    assert await db.write(record_object, info, 200) is False
    row = await db.read(object_row, info.sha256)
    assert row is not None
    assert (row.info, row.created_at) == (info, 100)
    assert await db.read(object_row, "0" * 64) is None


async def test_a_key_recorded_with_another_size_is_an_inconsistency(db: Database) -> None:
    await db.write(record_object, ObjectInfo("a" * 64, 10), 1)
    with pytest.raises(StoreError, match="recorded with 10 bytes"):
        await db.write(record_object, ObjectInfo("a" * 64, 11), 1)


async def test_the_objects_table_refuses_bad_keys(db: Database) -> None:
    with pytest.raises(Malformed):
        await db.write(record_object, ObjectInfo("A" * 64, 1), 1)

    def raw(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO objects VALUES (?, 1, 1)", ("g" * 64,))

    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
        await db.write(raw)
