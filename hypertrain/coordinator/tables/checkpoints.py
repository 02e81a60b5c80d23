"""Published checkpoints in the store (``0015_checkpoints.sql``).

- :class:`CheckpointRow`: one ``checkpoints`` row (status, TH of the model, the store keys of
  its three files, the tapes it was built from); :func:`upsert_checkpoint`,
  :func:`get_checkpoint`, :func:`list_checkpoints`, :func:`final_checkpoints`;
- ``checkpoint_objects``: :func:`add_checkpoint_objects`, :func:`serves_object` (is an object
  part of what a checkpoint's replay reads).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any, Final

from attrs import frozen

from hypertrain.aggregator.checkpoint import LINEAGE_FILE, MANIFEST_FILE, MODEL_FILE
from hypertrain.aggregator.checkpoint_listing import Entry
from hypertrain.protocol.converter import unstructure
from hypertrain.rounds.checkpoints import CheckpointStatus

__all__ = [
    "CheckpointRow",
    "add_checkpoint_objects",
    "final_checkpoints",
    "get_checkpoint",
    "list_checkpoints",
    "serves_object",
    "upsert_checkpoint",
]

_COLUMNS: Final = (
    "run_id, w, status, theta_hash, manifest_key, lineage_key, model_key, tapes, written_round"
)


@frozen
class CheckpointRow:
    """One ``checkpoints`` row: the checkpoint over rounds ``0..w`` of ``run_id``."""

    run_id: str
    w: int
    status: CheckpointStatus
    theta_hash: str
    manifest_key: str
    lineage_key: str
    model_key: str
    tapes: tuple[str, ...]
    """The applied tapes of rounds ``0..w`` it was built from, in order."""
    written_round: int

    def files(self) -> dict[str, str]:
        """``{file name: store key}`` of the three files."""
        return {
            MANIFEST_FILE: self.manifest_key,
            LINEAGE_FILE: self.lineage_key,
            MODEL_FILE: self.model_key,
        }

    def listing(self) -> dict[str, Any]:
        """The JSON of :meth:`entry` (the checkpoint event's fields)."""
        listed: dict[str, Any] = unstructure(self.entry())
        return listed

    def entry(self) -> Entry:
        """The entry of ``GET /v1/runs/{id}/checkpoints``."""
        return Entry(
            w=self.w,
            rounds=(0, self.w),
            status=self.status,
            theta_hash=self.theta_hash,
            files=self.files(),
            written_round=self.written_round,
        )


def _row(row: Sequence[Any]) -> CheckpointRow:
    run_id, w, status, theta_hash, manifest_key, lineage_key, model_key, tapes, written = row
    return CheckpointRow(
        run_id,
        w,
        status,
        theta_hash,
        manifest_key,
        lineage_key,
        model_key,
        tuple(json.loads(tapes)),
        written,
    )


def upsert_checkpoint(conn: sqlite3.Connection, row: CheckpointRow) -> None:
    """Write (or rewrite) the row of ``(row.run_id, row.w)``."""
    conn.execute(
        f"INSERT INTO checkpoints ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (run_id, w) DO UPDATE SET status = excluded.status,"
        " theta_hash = excluded.theta_hash, manifest_key = excluded.manifest_key,"
        " lineage_key = excluded.lineage_key, model_key = excluded.model_key,"
        " tapes = excluded.tapes, written_round = excluded.written_round",
        (
            row.run_id,
            row.w,
            row.status,
            row.theta_hash,
            row.manifest_key,
            row.lineage_key,
            row.model_key,
            json.dumps(list(row.tapes)),
            row.written_round,
        ),
    )


def get_checkpoint(conn: sqlite3.Connection, run_id: str, w: int) -> CheckpointRow | None:
    """The checkpoint over rounds ``0..w``, or None."""
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM checkpoints WHERE run_id = ? AND w = ?", (run_id, w)
    ).fetchone()
    return None if row is None else _row(row)


def list_checkpoints(conn: sqlite3.Connection, run_id: str) -> list[CheckpointRow]:
    """Every checkpoint of the run, by ``w``."""
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM checkpoints WHERE run_id = ? ORDER BY w", (run_id,)
    )
    return [_row(row) for row in rows]


def final_checkpoints(conn: sqlite3.Connection, run_id: str) -> set[int]:
    """The ``w`` of every final checkpoint of the run."""
    rows = conn.execute(
        "SELECT w FROM checkpoints WHERE run_id = ? AND status = 'final'", (run_id,)
    )
    return {row[0] for row in rows}


def add_checkpoint_objects(
    conn: sqlite3.Connection, run_id: str, w: int, keys: Iterable[str]
) -> None:
    """Record that the checkpoint ``w`` reads ``keys`` (an earlier one keeps its ``w``)."""
    conn.executemany(
        "INSERT INTO checkpoint_objects (run_id, sha256, w) VALUES (?, ?, ?)"
        " ON CONFLICT (run_id, sha256) DO UPDATE SET w = MIN(w, excluded.w)",
        [(run_id, key, w) for key in keys],
    )


def serves_object(conn: sqlite3.Connection, run_id: str, w: int, sha256: str) -> bool:
    """Whether the checkpoint over rounds ``0..w`` names object ``sha256`` (module doc)."""
    row = conn.execute(
        "SELECT w FROM checkpoint_objects WHERE run_id = ? AND sha256 = ?", (run_id, sha256)
    ).fetchone()
    return row is not None and row[0] <= w
