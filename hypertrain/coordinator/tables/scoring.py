"""What scoring needs from the store: a run's shared inputs and the scoring outbox.

- ``scoring_inputs`` (:func:`get_input` / :func:`put_input`): the objects every scoring step of a
  run shares, one row per run and :data:`Kind`: ``model`` (the manifest's model section),
  ``public`` (the public trace) and ``hidden`` (the hidden trace, also marked private). Written
  once, the first time a step needs it (:mod:`hypertrain.coordinator.services.scorefeed`).
- :func:`scoring_subject`: the subject of miner ``hotkey``'s scoring jobs of round ``w`` (the
  feed enqueues them under it, the round view and the soft scores read them back by it).
- ``scoring_outbox`` (``0010_scoring_outbox.sql``): one :class:`Upload` per recorded
  DeltaManifest whose scoring steps are not enqueued yet. :func:`queue_upload` is called by the
  transaction that records the manifest, :func:`drop_upload` by the one that enqueues the steps;
  :func:`queued_uploads` reads the rows of running runs in key order, a page at a time.
"""

from __future__ import annotations

import sqlite3
from typing import Any, Final, Literal

from attrs import frozen

from hypertrain.coordinator.tables.private import mark_private
from hypertrain.store.catalog import record_object
from hypertrain.store.keys import ObjectInfo

__all__ = [
    "PRIVATE_KINDS",
    "Kind",
    "Upload",
    "UploadKey",
    "drop_upload",
    "get_input",
    "put_input",
    "queue_upload",
    "queued_uploads",
    "scoring_subject",
]


Kind = Literal["model", "public", "hidden"]
"""The shared inputs of a run's scoring steps."""
PRIVATE_KINDS: Final[frozenset[Kind]] = frozenset({"hidden"})
"""The inputs that are private objects: served to the admin and leasing nodes only, stored 0600."""

UploadKey = tuple[str, int, str]
"""``(run_id, w, hotkey)``: the outbox's order."""

_BEFORE_ALL: Final[UploadKey] = ("", -1, "")
"""A key below every row's (run ids are 64 hex digits, ``w >= 0``)."""


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
    if kind in PRIVATE_KINDS:
        mark_private(conn, info.sha256, f"hidden trace of run {run_id}")
    conn.execute(
        "INSERT INTO scoring_inputs (run_id, kind, sha256, size) VALUES (?, ?, ?, ?)"
        " ON CONFLICT DO NOTHING",
        (run_id, kind, info.sha256, info.size),
    )


def scoring_subject(run_id: str, w: int, hotkey: str) -> dict[str, Any]:
    """The subject of miner ``hotkey``'s scoring jobs of round ``w`` of the run."""
    return {"run_id": run_id, "w": w, "hotkey": hotkey}


# --- the scoring outbox --------------------------------------------------------------------------


@frozen
class Upload:
    """One outbox row: miner ``hotkey``'s uploaded delta of round ``w``, not enqueued yet."""

    run_id: str
    w: int
    hotkey: str
    delta_hash: str

    @property
    def key(self) -> UploadKey:
        return (self.run_id, self.w, self.hotkey)

    @property
    def subject(self) -> dict[str, Any]:
        """The scoring jobs' subject."""
        return scoring_subject(self.run_id, self.w, self.hotkey)


def queue_upload(conn: sqlite3.Connection, upload: Upload, now: int) -> None:
    """Put ``upload`` in the outbox (``now``: D); the miner row's transaction calls it once."""
    conn.execute(
        "INSERT INTO scoring_outbox (run_id, w, hotkey, delta_hash, queued_round)"
        " VALUES (?, ?, ?, ?, ?)",
        (*upload.key, upload.delta_hash, now),
    )


def queued_uploads(conn: sqlite3.Connection, after: UploadKey | None, limit: int) -> list[Upload]:
    """Up to ``limit`` outbox rows of running runs whose key is greater than ``after`` (None:
    from the first), in key order: a run's oldest rounds first."""
    start = _BEFORE_ALL if after is None else after
    rows = conn.execute(
        "SELECT o.run_id, o.w, o.hotkey, o.delta_hash FROM scoring_outbox o"
        " JOIN runs r ON r.run_id = o.run_id"
        " WHERE r.status = 'running' AND (o.run_id, o.w, o.hotkey) > (?, ?, ?)"
        " ORDER BY o.run_id, o.w, o.hotkey LIMIT ?",
        (*start, limit),
    ).fetchall()
    return [Upload(*row) for row in rows]


def drop_upload(conn: sqlite3.Connection, upload: Upload) -> None:
    """Take ``upload`` out of the outbox (its scoring steps were enqueued)."""
    conn.execute("DELETE FROM scoring_outbox WHERE run_id = ? AND w = ? AND hotkey = ?", upload.key)
