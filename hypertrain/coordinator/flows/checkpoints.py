"""The transactions of published checkpoints (issue 16; spec 7 "Checkpoints").

:func:`checkpoints_due` (read) lists what the checkpoint service owes: for every run, each
checkpoint round ``w`` (:func:`~hypertrain.rounds.checkpoints.checkpoint_rounds` over the
merged rounds) whose row is missing, is provisional while round ``w`` is now final, or was built
from another tape of round ``w`` than the applied one. Comparing round ``w``'s tape is enough:
a rollback (``coordinator/flows/rollback.py``) rewrites rounds ``r`` and ``r + 1`` only when
``r + 1`` is the newest merged round, so any rollback inside ``0..w`` rewrites round ``w``'s
tape too. A final row is never looked at again. A run whose rounds ``0..w`` do not all have an
applied tape (rounds merged by an external aggregator that did not record its tape) gets no
checkpoint for ``w``, and :attr:`Due.missing` says which round is missing.

:func:`record_checkpoint` (write) stores the row the service built, once its files are in the
object store: it records the objects in the catalog, refuses (:class:`Conflict`) when round
``w``'s applied tape changed meanwhile (the next pass rebuilds it) and never replaces a final
row. :func:`checkpoint_listing`, :func:`checkpoint_file_key` and :func:`checkpoint_object` are
the reads of the public routes.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from attrs import frozen

from hypertrain.aggregator.checkpoint import FILES
from hypertrain.coordinator.flows.aggregation import get_aggregation
from hypertrain.coordinator.flows.lifecycle import parse_manifest
from hypertrain.coordinator.tables.checkpoints import (
    CheckpointRow,
    add_checkpoint_objects,
    final_checkpoints,
    get_checkpoint,
    list_checkpoints,
    serves_object,
    upsert_checkpoint,
)
from hypertrain.coordinator.tables.finality import last_final_w
from hypertrain.coordinator.tables.runs import get_run, list_runs
from hypertrain.protocol.errors import Conflict, NotFound
from hypertrain.protocol.manifest import RunManifest
from hypertrain.rounds.checkpoints import CheckpointStatus, checkpoint_rounds, status_of
from hypertrain.store.catalog import record_object
from hypertrain.store.keys import ObjectInfo

__all__ = [
    "Due",
    "checkpoint_file_key",
    "checkpoint_listing",
    "checkpoint_object",
    "checkpoints_due",
    "record_checkpoint",
]


@frozen
class Due:
    """A checkpoint to (re)build: rounds ``0..w`` of ``run_id`` with ``status``."""

    run_id: str
    w: int
    status: CheckpointStatus
    manifest: RunManifest
    tapes: tuple[str, ...]
    """The applied tape keys of rounds ``0..w``, in order (empty when one is missing)."""
    out_state: str
    """The stored OuterState after round ``w`` (theta is the checkpoint's model)."""
    missing: int | None = None
    """The first round in ``0..w`` without an applied tape; None when every round has one."""


def _applied_through(conn: sqlite3.Connection, run_id: str) -> int:
    row = conn.execute("SELECT MAX(w) FROM aggregations WHERE run_id = ?", (run_id,)).fetchone()
    return -1 if row[0] is None else int(row[0])


def _tapes(conn: sqlite3.Connection, run_id: str, w: int) -> tuple[tuple[str, ...], int | None]:
    rows = conn.execute(
        "SELECT w, tape_key FROM aggregations WHERE run_id = ? AND w <= ? ORDER BY w",
        (run_id, w),
    ).fetchall()
    for expected, (got, _key) in enumerate(rows):
        if got != expected:
            return (), expected
    if len(rows) != w + 1:
        return (), len(rows)
    return tuple(key for _w, key in rows), None


def checkpoints_due(conn: sqlite3.Connection, every: int) -> list[Due]:
    """What the checkpoint service owes, every run's oldest first (module doc)."""
    due = []
    for run_id, _status in list_runs(conn):
        applied = _applied_through(conn, run_id)
        if applied < 0:
            continue
        run = get_run(conn, run_id)
        total = None if run.config is None else run.config.total_rounds
        finals = final_checkpoints(conn, run_id)
        last_final = last_final_w(conn, run_id)
        manifest: RunManifest | None = None
        for w in checkpoint_rounds(applied, every, total):
            if w in finals:
                continue
            status = status_of(w, last_final)
            row = get_checkpoint(conn, run_id, w)
            applied_w = get_aggregation(conn, run_id, w)
            assert applied_w is not None, "w <= the newest merged round"
            if row is not None and row.status == status and row.tapes[-1] == applied_w.tape_key:
                continue
            manifest = manifest or parse_manifest(run.manifest_envelope)
            tapes, missing = _tapes(conn, run_id, w)
            due.append(Due(run_id, w, status, manifest, tapes, applied_w.out_state, missing))
    return due


def record_checkpoint(
    conn: sqlite3.Connection,
    row: CheckpointRow,
    stored: Sequence[ObjectInfo],
    replay_objects: Sequence[str],
    created_at: int,
) -> bool:
    """Store a built checkpoint (module doc); False when a final row is already there."""
    existing = get_checkpoint(conn, row.run_id, row.w)
    if existing is not None and existing.status == "final":
        return False
    applied = get_aggregation(conn, row.run_id, row.w)
    if applied is None or applied.tape_key != row.tapes[-1]:
        raise Conflict(f"round {row.w} of run {row.run_id} was rewritten while checkpointing it")
    for info in stored:
        record_object(conn, info, created_at)
    upsert_checkpoint(conn, row)
    add_checkpoint_objects(conn, row.run_id, row.w, replay_objects)
    return True


def checkpoint_listing(conn: sqlite3.Connection, run_id: str) -> list[CheckpointRow]:
    """Every checkpoint of the run (404 unknown run)."""
    get_run(conn, run_id)
    return list_checkpoints(conn, run_id)


def _checkpoint(conn: sqlite3.Connection, run_id: str, w: int) -> CheckpointRow:
    get_run(conn, run_id)
    row = get_checkpoint(conn, run_id, w)
    if row is None:
        raise NotFound(f"run {run_id} has no checkpoint at round {w}")
    return row


def checkpoint_file_key(conn: sqlite3.Connection, run_id: str, w: int, name: str) -> str:
    """The store key of file ``name`` of checkpoint ``w`` (404 unknown run, checkpoint or
    file name)."""
    row = _checkpoint(conn, run_id, w)
    if name not in FILES:
        raise NotFound(f"a checkpoint has no file {name!r} (its files: {', '.join(FILES)})")
    return row.files()[name]


def checkpoint_object(conn: sqlite3.Connection, run_id: str, w: int, sha256: str) -> str:
    """``sha256`` when checkpoint ``w``'s replay reads it (404 otherwise)."""
    _checkpoint(conn, run_id, w)
    if not serves_object(conn, run_id, w, sha256):
        raise NotFound(f"object {sha256} is not part of checkpoint {w} of run {run_id}")
    return sha256
