"""The DB runner: our "trio-sqlite" over the stdlib ``sqlite3`` (DESIGN.md sections 5, 6, 8).

``async with open_database(path) as db`` opens one SQLite file in WAL mode with
``synchronous=NORMAL``, ``foreign_keys=ON``, automatic checkpoints off and a busy timeout, and
applies the pending numbered migrations. Then:

- ``await db.read(fn, *args)`` returns ``fn(conn, *args)``, run inside one read transaction (one
  consistent snapshot). A read ``fn`` that changes rows is rolled back and refused.
- ``await db.write(fn, *args)`` runs ``fn(conn, *args)`` in ONE ``BEGIN IMMEDIATE`` transaction:
  committed when ``fn`` returns, rolled back on any exception, which propagates unchanged.
  Writes are serialized by a ``trio.Lock``; a write that has started is never torn by
  cancellation and a cancelled caller still gets its true outcome: inline the call cannot be
  interrupted; in thread mode the worker call runs in a shielded scope (trio never abandons the
  thread, so the lock stays held until the connection is idle). The wait is bounded by the busy
  timeout plus the run time of ``fn``, which must stay short (DESIGN.md section 5).

``fn`` is a plain function that must return materialized values (lists, tuples, attrs records),
never a cursor; an ``async def`` is refused with ``TypeError``.

Modes. ``"inline"`` (the default) calls SQLite on the Trio thread: a write costs tens of
microseconds while a hop to a worker thread costs far more, and inline is what virtual-time
tests need. ``"thread"`` runs each call via ``trio.to_thread.run_sync`` on a dedicated writer
connection (writes serialized by the lock) and a dedicated read-only reader connection (reads
serialized by their own lock, running beside a write thanks to WAL); use it for queries that must
be long. Thread mode, like the checkpointer, does not belong in autojump-clock tests.

Stamps. ``await db.stamp()`` returns a :data:`Stamp` that differs from every earlier one once the
data may have changed: a count of the write transactions this runner committed, and SQLite's
``PRAGMA data_version`` on the reader connection, which moves with every commit of another
connection (the writer in thread mode, another process on the same file). An answer computed
from a read started after taking a stamp is never older than that stamp says; a cache that
serves it only while the stamp is unchanged never serves stale data.

Checkpoints. ``run_checkpointer`` is a service the daemon starts in its nursery (inside the
``open_database`` block): every
``checkpoint_interval`` seconds, on absolute time, it runs ``PRAGMA wal_checkpoint(PASSIVE)`` on
its own connection in a worker thread. Never start it in a virtual-time test: a task waiting for
a worker thread looks idle to the autojump clock, which then leaps (it refuses such a clock).
"""

from __future__ import annotations

import logging
import math
import sqlite3
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager, closing
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, Literal, TypeVar, TypeVarTuple

import attrs
import trio

from hypertrain.store.errors import StoreError
from hypertrain.store.migrations import apply_migrations, default_migrations, load_migrations
from nurseries import SystemClock, WallClock, periodic

__all__ = [
    "DEFAULT_BUSY_TIMEOUT",
    "DEFAULT_CHECKPOINT_INTERVAL",
    "CheckpointResult",
    "Database",
    "DatabaseStatistics",
    "Mode",
    "Stamp",
    "open_database",
]

DEFAULT_BUSY_TIMEOUT = 5.0
"""Seconds a connection waits for another process's write lock before ``database is locked``."""

DEFAULT_CHECKPOINT_INTERVAL = 10.0
"""Seconds between passive WAL checkpoints of :meth:`Database.run_checkpointer`."""

Mode = Literal["inline", "thread"]
Stamp = tuple[int, int]
"""What :meth:`Database.stamp` returns: (writes committed here, the reader's data_version)."""
T = TypeVar("T")
Ts = TypeVarTuple("Ts")
Fn = Callable[[sqlite3.Connection, *Ts], T]

logger = logging.getLogger(__name__)


@attrs.frozen
class CheckpointResult:
    """What one ``PRAGMA wal_checkpoint(PASSIVE)`` reported, and when (injected wall clock)."""

    busy: bool
    wal_frames: int
    checkpointed_frames: int
    at: float


@attrs.frozen
class DatabaseStatistics:
    """A snapshot of a :class:`Database` for status pages."""

    path: str
    mode: Mode
    schema_version: int
    reads: int
    writes: int
    rollbacks: int
    checkpoints: int
    last_checkpoint: CheckpointResult | None


class Database:
    """One SQLite database behind the read/write runner; build it with :func:`open_database`."""

    def __init__(
        self,
        *,
        path: Path,
        mode: Mode,
        writer: sqlite3.Connection,
        reader: sqlite3.Connection,
        schema_version: int,
        busy_timeout: float,
        checkpoint_interval: float | None,
        wall_clock: WallClock,
    ) -> None:
        self._path = path
        self._mode: Mode = mode
        self._writer = writer
        self._reader = reader
        self._schema_version = schema_version
        self._busy_timeout = busy_timeout
        self._checkpoint_interval = checkpoint_interval
        self._wall_clock = wall_clock
        self._write_lock = trio.Lock()
        self._read_lock = trio.Lock()
        self._checkpoint_lock = trio.Lock()
        self._checkpoint_conn: sqlite3.Connection | None = None
        self._closed = False
        self._reads = 0
        self._writes = 0
        self._rollbacks = 0
        self._checkpoints = 0
        self._last_checkpoint: CheckpointResult | None = None

    @property
    def path(self) -> Path:
        """The database file."""
        return self._path

    @property
    def mode(self) -> Mode:
        """``"inline"`` or ``"thread"``."""
        return self._mode

    async def read(self, fn: Fn[*Ts, T], *args: *Ts) -> T:
        """Return ``fn(conn, *args)`` computed inside one read transaction (one snapshot)."""
        self._check_open()
        if self._mode == "inline":
            await trio.lowlevel.checkpoint()
            result = self._run_read(fn, args)
        else:
            async with self._read_lock:
                result = await trio.to_thread.run_sync(self._run_read, fn, args)
        self._reads += 1
        return result

    async def write(self, fn: Fn[*Ts, T], *args: *Ts) -> T:
        """Run ``fn(conn, *args)`` in one transaction: commit on return, roll back on raise."""
        self._check_open()
        async with self._write_lock:
            if self._mode == "inline":
                result = self._run_write(fn, args)
            else:
                # Shielded: a cancelled caller still waits for COMMIT/ROLLBACK (never torn) and
                # the lock is not released while the writer connection is still busy.
                with trio.CancelScope(shield=True):
                    result = await trio.to_thread.run_sync(self._run_write, fn, args)
        return result

    async def stamp(self) -> Stamp:
        """The data's stamp now (module doc): equal to an earlier stamp only if no write has
        committed since, here or on any other connection."""
        self._check_open()
        if self._mode == "inline":
            return self._writes, self._data_version()
        async with self._read_lock:
            version = await trio.to_thread.run_sync(self._data_version)
        return self._writes, version

    async def checkpoint(self) -> CheckpointResult:
        """Run one passive WAL checkpoint on the checkpoint connection, in a worker thread."""
        self._check_open()
        async with self._checkpoint_lock:
            result = await trio.to_thread.run_sync(self._run_checkpoint)
        self._checkpoints += 1
        self._last_checkpoint = result
        return result

    async def run_checkpointer(
        self, *, task_status: trio.TaskStatus[float | None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Service: a passive checkpoint every ``checkpoint_interval`` s, on absolute time.

        Reports the interval through ``task_status.started`` and ends only by cancellation; with
        ``checkpoint_interval=None`` it reports ``None`` and just waits. Refuses an autojump
        clock (worker threads break virtual time, DESIGN.md section 8).
        """
        interval = self._checkpoint_interval
        if interval is None:
            task_status.started(None)
            await trio.sleep_forever()
        _refuse_autojump_clock()
        task_status.started(interval)
        async for tick in periodic(interval, start=trio.current_time() + interval):
            if tick.missed:
                logger.info("checkpointer ran late: skipped %d tick(s)", tick.missed)
            await self.checkpoint()

    def statistics(self) -> DatabaseStatistics:
        """Counts since open, the schema version and the latest checkpoint result."""
        return DatabaseStatistics(
            path=str(self._path),
            mode=self._mode,
            schema_version=self._schema_version,
            reads=self._reads,
            writes=self._writes,
            rollbacks=self._rollbacks,
            checkpoints=self._checkpoints,
            last_checkpoint=self._last_checkpoint,
        )

    # -- synchronous parts: run on the Trio thread (inline) or in a worker thread ---------------

    def _run_read(self, fn: Fn[*Ts, T], args: tuple[*Ts]) -> T:
        conn = self._reader
        changes = conn.total_changes
        conn.execute("BEGIN")
        try:
            result = fn(conn, *args)
            _refuse_awaitable(fn, result)
            if conn.total_changes != changes:
                raise RuntimeError(f"read fn {_name(fn)} changed rows; use Database.write")
        except BaseException:
            _rollback(conn)
            raise
        conn.execute("COMMIT")
        return result

    def _run_write(self, fn: Fn[*Ts, T], args: tuple[*Ts]) -> T:
        conn = self._writer
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = fn(conn, *args)
            _refuse_awaitable(fn, result)
            if not conn.in_transaction:
                raise RuntimeError(f"write fn {_name(fn)} ended the transaction itself")
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            self._rollbacks += 1
            raise
        self._writes += 1
        return result

    def _data_version(self) -> int:
        (version,) = self._reader.execute("PRAGMA data_version").fetchone()
        return int(version)

    def _run_checkpoint(self) -> CheckpointResult:
        if self._checkpoint_conn is None:
            self._checkpoint_conn = _connect(self._path, self._busy_timeout, threaded=True)
        busy, log, done = self._checkpoint_conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        return CheckpointResult(
            busy=bool(busy), wal_frames=log, checkpointed_frames=done, at=self._wall_clock.now()
        )

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"database {self._path} is closed")

    def _close(self) -> None:
        self._closed = True
        for conn in (self._checkpoint_conn, self._reader, self._writer):
            if conn is not None:
                conn.close()


@asynccontextmanager
async def open_database(
    path: str | Path,
    *,
    mode: Mode = "inline",
    checkpoint_interval: float | None = DEFAULT_CHECKPOINT_INTERVAL,
    busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
    migrations: Traversable | None = None,
    wall_clock: WallClock | None = None,
) -> AsyncIterator[Database]:
    """Open (creating if needed) and migrate the database at ``path``; close it on exit.

    ``migrations`` is the folder of ``NNNN_name.sql`` files (default: the package's own);
    ``wall_clock`` (default: the system clock) gives unix seconds for ``applied_at`` and
    checkpoint records. Opening and migrating run on the calling thread in both modes (once, at
    start). Raises
    :class:`~hypertrain.store.errors.MigrationError` (or ``SchemaTooNew``) and
    :class:`~hypertrain.store.errors.StoreError` when the file cannot be put in WAL mode.
    """
    if mode not in ("inline", "thread"):
        raise ValueError(f"mode must be 'inline' or 'thread', not {mode!r}")
    if checkpoint_interval is not None and not checkpoint_interval > 0:
        raise ValueError(f"checkpoint_interval must be > 0 or None, not {checkpoint_interval!r}")
    await trio.lowlevel.checkpoint()
    clock = wall_clock if wall_clock is not None else SystemClock()
    path = Path(path)
    threaded = mode == "thread"
    with closing(_connect(path, busy_timeout, threaded=threaded)) as writer:
        version = apply_migrations(
            writer,
            load_migrations(migrations if migrations is not None else default_migrations()),
            now=int(clock.now()),
        )
        reader = writer
        if threaded:
            reader = _connect(path, busy_timeout, threaded=True)
            reader.execute("PRAGMA query_only = ON")
        db = Database(
            path=path,
            mode=mode,
            writer=writer,
            reader=reader,
            schema_version=version,
            busy_timeout=busy_timeout,
            checkpoint_interval=checkpoint_interval,
            wall_clock=clock,
        )
        try:
            yield db
        finally:
            db._close()


def _connect(path: Path, busy_timeout: float, *, threaded: bool) -> sqlite3.Connection:
    """A connection in autocommit mode (we issue BEGIN) with the house pragmas applied."""
    conn = sqlite3.connect(
        path, timeout=busy_timeout, isolation_level=None, check_same_thread=not threaded
    )
    try:
        (journal_mode,) = conn.execute("PRAGMA journal_mode = WAL").fetchone()
        if journal_mode != "wal":
            raise StoreError(f"cannot put {path} in WAL mode (journal_mode is {journal_mode!r})")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA wal_autocheckpoint = 0")
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
    except BaseException:
        conn.close()
        raise
    return conn


def _rollback(conn: sqlite3.Connection) -> None:
    """Roll back the open transaction, if sqlite has not already ended it."""
    if conn.in_transaction:
        conn.execute("ROLLBACK")


def _refuse_awaitable(fn: Callable[..., Any], result: object) -> None:
    """Refuse an ``async def`` fn: its coroutine never ran, so nothing happened in SQL."""
    if isinstance(result, Awaitable):
        if isinstance(result, Coroutine):
            result.close()
        raise TypeError(f"{_name(fn)} returned an awaitable; DB fns must be plain functions")


def _name(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__qualname__", repr(fn))


def _refuse_autojump_clock() -> None:
    """Worker threads make an autojump clock leap; refuse instead of silently skewing time."""
    testing = sys.modules.get("trio.testing")  # a MockClock exists only once it is imported:
    if testing is None:  # the daemon does not import it (it would import pytest when installed)
        return
    clock = trio.lowlevel.current_clock()
    if isinstance(clock, testing.MockClock) and clock.autojump_threshold != math.inf:
        raise RuntimeError(
            "the checkpointer uses worker threads and must not run under an autojump clock"
        )
