"""Runs, roster and replay keys in the store (tables of ``0003_runs.sql``).

Plain functions of a ``sqlite3.Connection`` for the DB runner (``await db.write(fn, ...)``);
each raises a :class:`~hypertrain.protocol.errors.ProtocolError` (and so rolls its transaction
back) when the request cannot be honoured:

- :func:`insert_run` (409 when this state directory already holds a run), :func:`get_run`
  (404), :func:`list_runs`;
- :func:`set_config` (409 while the run is running), :func:`set_status`;
- :func:`upsert_roster` / :func:`remove_roster` (404 when never admitted), :func:`roster_rows`,
  :func:`active_roster`, :func:`roster_page` (a page along the primary key) and
  :func:`roster_counts` (counted without building a row);
- :func:`record_seen` (409 :class:`~hypertrain.protocol.errors.ReplayError`).

The request bodies of the admin routes are frozen attrs classes read with the one converter
(:func:`~hypertrain.protocol.converter.structure`), so a bad body is a 400 naming the field.

Status. A run is ``created`` until its first ``PUT .../paused``, then ``running`` or
``paused``; only ``running`` counts as unpaused (a created run is paused).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any, Final, Literal

from attrs import field, frozen

from hypertrain.protocol.converter import structure, unstructure
from hypertrain.protocol.errors import Conflict, NotFound, ReplayError
from hypertrain.protocol.jcs import canonical_json
from hypertrain.protocol.validators import list_of, optional, strict_bool, text
from hypertrain.rounds.deadlines import RunConfig

__all__ = [
    "MAX_FLAGS",
    "MAX_LABEL",
    "PausedRequest",
    "RosterCounts",
    "RosterRequest",
    "RosterRow",
    "RunRow",
    "RunStatus",
    "active_roster",
    "dumps",
    "get_run",
    "insert_run",
    "list_runs",
    "next_round_w",
    "record_seen",
    "remove_roster",
    "roster_counts",
    "roster_page",
    "roster_rows",
    "set_config",
    "set_status",
    "upsert_roster",
]

RunStatus = Literal["created", "paused", "running"]

MAX_LABEL: Final = 64
"""Longest ``cluster`` / ``region`` / flag string of a roster row."""
MAX_FLAGS: Final = 8
"""Most flags on one roster row."""


def dumps(value: object) -> str:
    """Canonical JSON text (RFC 8785) of ``value``, the form every JSON column stores."""
    return canonical_json(value).decode()


# --- request bodies ----------------------------------------------------------------------------


@frozen
class RosterRequest:
    """``PUT .../roster/{hotkey}``: the operator's flags for one miner (spec 6.1)."""

    bond: bool = field(default=False, validator=strict_bool)
    probation: bool = field(default=False, validator=strict_bool)
    cluster: str | None = field(default=None, validator=optional(text(MAX_LABEL)))
    region: str | None = field(default=None, validator=optional(text(MAX_LABEL)))
    flags: tuple[str, ...] = field(
        default=(), validator=list_of(text(MAX_LABEL), max_len=MAX_FLAGS, unique=True)
    )


@frozen
class PausedRequest:
    """``PUT .../paused``."""

    paused: bool = field(validator=strict_bool)


# --- rows ----------------------------------------------------------------------------------------


@frozen
class RunRow:
    """One ``runs`` row."""

    run_id: str
    manifest_envelope: str
    """The owner-signed RunManifest envelope, canonical JSON text."""
    status: RunStatus
    config: RunConfig | None
    honeypot_commit: str | None
    created_round: int

    @property
    def running(self) -> bool:
        """Whether the run is unpaused."""
        return self.status == "running"


@frozen
class RosterRow:
    """One ``roster`` row; ``unstructure(row)`` is the roster view's ``roster[]`` item and the
    admin roster routes' answer."""

    hotkey: str
    bond: bool
    probation: bool
    cluster: str | None
    region: str | None
    flags: tuple[str, ...]
    admitted_w: int
    removed: bool
    blacklisted: bool


@frozen
class RosterCounts:
    """The run view's ``roster_counts``: every row, those neither removed nor blacklisted (the
    next RoundOpen's), the removed ones and the blacklisted ones (a row may be both)."""

    total: int
    active: int
    removed: int
    blacklisted: int


_RUN_COLUMNS = "run_id, manifest_envelope, status, config, honeypot_commit, created_round"
_ROSTER_COLUMNS = (
    "hotkey, bond, probation, cluster, region, flags, admitted_w, removed, blacklisted"
)


def _run_row(row: Sequence[Any]) -> RunRow:
    config = None if row[3] is None else structure(RunConfig, json.loads(row[3]))
    return RunRow(row[0], row[1], row[2], config, row[4], row[5])


def _roster_row(row: Sequence[Any]) -> RosterRow:
    return RosterRow(
        hotkey=row[0],
        bond=bool(row[1]),
        probation=bool(row[2]),
        cluster=row[3],
        region=row[4],
        flags=tuple(json.loads(row[5])),
        admitted_w=row[6],
        removed=bool(row[7]),
        blacklisted=bool(row[8]),
    )


# --- runs ----------------------------------------------------------------------------------------


def get_run(conn: sqlite3.Connection, run_id: str) -> RunRow:
    """The run ``run_id``; :class:`NotFound` (404) when there is none."""
    row = conn.execute(f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = ?", (run_id,)).fetchone()
    if row is None:
        raise NotFound(f"unknown run {run_id}")
    return _run_row(row)


def list_runs(conn: sqlite3.Connection) -> list[tuple[str, RunStatus]]:
    """``(run_id, status)`` of every run, oldest first."""
    rows = conn.execute("SELECT run_id, status FROM runs ORDER BY created_round, run_id")
    return [(row[0], row[1]) for row in rows]


def insert_run(
    conn: sqlite3.Connection, run_id: str, envelope: str, created_round: int, created_at: int
) -> None:
    """Store a new run (status ``created``); :class:`Conflict` when any run exists (v1: one
    run per state directory, even an identical one)."""
    existing = conn.execute("SELECT run_id FROM runs LIMIT 1").fetchone()
    if existing is not None:
        same = " (this one)" if existing[0] == run_id else ""
        raise Conflict(f"this state directory already holds run {existing[0]}{same}")
    conn.execute(
        "INSERT INTO runs (run_id, manifest_envelope, status, config, honeypot_commit,"
        " created_round, created_at) VALUES (?, ?, 'created', NULL, NULL, ?, ?)",
        (run_id, envelope, created_round, created_at),
    )


def set_config(conn: sqlite3.Connection, run_id: str, config: RunConfig) -> RunConfig:
    """Replace the run's config; :class:`Conflict` while it is running (pause it first)."""
    run = get_run(conn, run_id)
    if run.running:
        raise Conflict("the run is running: pause it before changing its config")
    conn.execute(
        "UPDATE runs SET config = ? WHERE run_id = ?", (dumps(unstructure(config)), run_id)
    )
    return config


def set_status(conn: sqlite3.Connection, run_id: str, status: RunStatus) -> None:
    """Set the run's status (no checks: see :mod:`hypertrain.coordinator.flows.lifecycle`)."""
    conn.execute("UPDATE runs SET status = ? WHERE run_id = ?", (status, run_id))


def next_round_w(conn: sqlite3.Connection, run_id: str) -> int:
    """The number of the next round to open (0 before round 0)."""
    (top,) = conn.execute("SELECT max(w) FROM rounds WHERE run_id = ?", (run_id,)).fetchone()
    return 0 if top is None else int(top) + 1


# --- roster --------------------------------------------------------------------------------------


def roster_rows(conn: sqlite3.Connection, run_id: str) -> list[RosterRow]:
    """Every roster row of the run (removed and blacklisted too), by hotkey."""
    rows = conn.execute(
        f"SELECT {_ROSTER_COLUMNS} FROM roster WHERE run_id = ? ORDER BY hotkey", (run_id,)
    )
    return [_roster_row(row) for row in rows]


def roster_page(conn: sqlite3.Connection, run_id: str, offset: int, count: int) -> list[RosterRow]:
    """:func:`roster_rows` from the ``offset``-th on, at most ``count`` of them (along the
    primary key: no sort, no row before ``offset`` built)."""
    rows = conn.execute(
        f"SELECT {_ROSTER_COLUMNS} FROM roster WHERE run_id = ? ORDER BY hotkey LIMIT ? OFFSET ?",
        (run_id, count, offset),
    )
    return [_roster_row(row) for row in rows]


def roster_counts(conn: sqlite3.Connection, run_id: str) -> RosterCounts:
    """The run's :class:`RosterCounts` (zeros for a run without a roster)."""
    total, removed, blacklisted, active = conn.execute(
        "SELECT count(*), total(removed), total(blacklisted),"
        " total(removed = 0 AND blacklisted = 0) FROM roster WHERE run_id = ?",
        (run_id,),
    ).fetchone()
    return RosterCounts(total, int(active), int(removed), int(blacklisted))


def active_roster(conn: sqlite3.Connection, run_id: str) -> list[RosterRow]:
    """The miners the next RoundOpen rosters: neither removed nor blacklisted, by hotkey."""
    rows = conn.execute(
        f"SELECT {_ROSTER_COLUMNS} FROM roster WHERE run_id = ? AND removed = 0"
        " AND blacklisted = 0 ORDER BY hotkey",
        (run_id,),
    )
    return [_roster_row(row) for row in rows]


def _roster_row_of(conn: sqlite3.Connection, run_id: str, hotkey: str) -> RosterRow | None:
    row = conn.execute(
        f"SELECT {_ROSTER_COLUMNS} FROM roster WHERE run_id = ? AND hotkey = ?", (run_id, hotkey)
    ).fetchone()
    return None if row is None else _roster_row(row)


def upsert_roster(
    conn: sqlite3.Connection, run_id: str, hotkey: str, request: RosterRequest
) -> RosterRow:
    """Admit ``hotkey`` or update its flags; re-admits a removed miner.

    ``admitted_w`` is the next round to open for a new miner and for a re-admitted (removed)
    one, whose probation so starts again; an update of a rostered miner keeps it. A blacklist
    is not lifted. Raises :class:`NotFound` for an unknown run.
    """
    get_run(conn, run_id)
    old = _roster_row_of(conn, run_id, hotkey)
    admitted_w = next_round_w(conn, run_id)
    if old is not None and not old.removed:
        admitted_w = old.admitted_w
    conn.execute(
        "INSERT INTO roster (run_id, hotkey, bond, probation, cluster, region, flags,"
        " admitted_w, removed, blacklisted) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, 0)"
        " ON CONFLICT (run_id, hotkey) DO UPDATE SET bond = excluded.bond,"
        " probation = excluded.probation, cluster = excluded.cluster,"
        " region = excluded.region, flags = excluded.flags,"
        " admitted_w = excluded.admitted_w, removed = 0",
        (
            run_id,
            hotkey,
            int(request.bond),
            int(request.probation),
            request.cluster,
            request.region,
            dumps(list(request.flags)),
            admitted_w,
        ),
    )
    row = _roster_row_of(conn, run_id, hotkey)
    assert row is not None
    return row


def remove_roster(conn: sqlite3.Connection, run_id: str, hotkey: str) -> RosterRow:
    """Mark ``hotkey`` removed (left out of the next RoundOpen); idempotent.

    :class:`NotFound` for an unknown run or a hotkey that was never admitted.
    """
    get_run(conn, run_id)
    if _roster_row_of(conn, run_id, hotkey) is None:
        raise NotFound(f"{hotkey} is not on the roster of run {run_id}")
    conn.execute("UPDATE roster SET removed = 1 WHERE run_id = ? AND hotkey = ?", (run_id, hotkey))
    row = _roster_row_of(conn, run_id, hotkey)
    assert row is not None
    return row


# --- replay keys ---------------------------------------------------------------------------------


def record_seen(conn: sqlite3.Connection, key: Sequence[str], now: int) -> None:
    """Record an accepted envelope's replay key (spec 2.3); :class:`ReplayError` if seen.

    Call it in the transaction that stores what the envelope did: a rollback releases the key,
    so a corrected resend is accepted.
    """
    text_key = dumps(list(key))
    try:
        conn.execute(
            "INSERT INTO seen (key, run_id, type, accepted_round) VALUES (?, ?, ?, ?)",
            (text_key, key[0], key[2], now),
        )
    except sqlite3.IntegrityError:
        raise ReplayError(f"{key[2]} already accepted (replay key {text_key})") from None
