"""Storage of hypertrain: the SQLite DB runner, its migrations and the object store.

- :func:`open_database` / :class:`Database`: ``await db.read(fn, *args)``,
  ``await db.write(fn, *args)`` (one transaction each), ``await db.stamp()`` (changes with
  every commit), the checkpointer service.
- :class:`ObjectStore`: content-addressed files ``<root>/<sha[:2]>/<sha>``, hash-checked.
- :mod:`hypertrain.store.catalog`: queries on the ``meta`` and ``objects`` tables.
- :mod:`hypertrain.store.errors`: the store's errors (see its docstring for the tree).
"""

from hypertrain.store.catalog import ObjectRow, get_meta, object_row, record_object, set_meta
from hypertrain.store.db import (
    DEFAULT_BUSY_TIMEOUT,
    DEFAULT_CHECKPOINT_INTERVAL,
    CheckpointResult,
    Database,
    DatabaseStatistics,
    Mode,
    Stamp,
    open_database,
)
from hypertrain.store.errors import (
    ContentMismatch,
    CorruptObject,
    MigrationError,
    SchemaTooNew,
    StoreError,
)
from hypertrain.store.migrations import Migration, default_migrations, load_migrations
from hypertrain.store.objects import (
    READ_CHUNK_SIZE,
    ObjectInfo,
    ObjectReader,
    ObjectStore,
    ObjectStoreStatistics,
    check_key,
)

__all__ = [
    "DEFAULT_BUSY_TIMEOUT",
    "DEFAULT_CHECKPOINT_INTERVAL",
    "READ_CHUNK_SIZE",
    "CheckpointResult",
    "ContentMismatch",
    "CorruptObject",
    "Database",
    "DatabaseStatistics",
    "Migration",
    "MigrationError",
    "Mode",
    "ObjectInfo",
    "ObjectReader",
    "ObjectRow",
    "ObjectStore",
    "ObjectStoreStatistics",
    "SchemaTooNew",
    "Stamp",
    "StoreError",
    "check_key",
    "default_migrations",
    "get_meta",
    "load_migrations",
    "object_row",
    "open_database",
    "record_object",
    "set_meta",
]
