"""What miners posted in a round, in the store (tables and columns of ``0004_miner_flow.sql``;
``miners.delta_hash`` of ``0010_scoring_outbox.sql``).

Plain functions of a ``sqlite3.Connection`` for the DB runner, used by
:mod:`hypertrain.coordinator.flows.miner` (the decisions) and by the round view:

- :class:`MinerRow` / :func:`get_miner` / :func:`miner_details` (a page of them, by hotkey) /
  :func:`uploaded_hotkeys`: a miner's row of one round with
  its stored Accept, Commit, Receipt and DeltaManifest envelopes (canonical JSON text) and its
  uploaded delta's hash (:attr:`MinerRow.delta_hash`, a column: the one way to read it);
- :func:`set_accepted`, :func:`set_committed`, :func:`set_uploaded`: the status changes;
- :func:`get_leaves_root` / :func:`insert_leaves`: posted leaf preimages;
- :class:`GrantRow` / :func:`insert_grant` / :func:`get_grant`: upload grants;
- :class:`StateRow` / :func:`get_round_state` / :func:`insert_round_state`: published round
  start states;
- :func:`is_active_member`: a hotkey on the run's roster, neither removed nor blacklisted.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any, Final

from attrs import frozen

from hypertrain.rounds.states import FAULT_STATUSES

__all__ = [
    "GrantRow",
    "LeavesRow",
    "MinerRow",
    "StateRow",
    "get_grant",
    "get_leaves",
    "get_leaves_root",
    "get_miner",
    "get_round_state",
    "insert_grant",
    "insert_leaves",
    "insert_round_state",
    "is_active_member",
    "lift_blacklist_unless_faulted",
    "miner_details",
    "set_accepted",
    "set_blacklisted",
    "set_committed",
    "set_uploaded",
    "set_verdict_status",
    "uploaded_hotkeys",
]

_MINER_COLUMNS: Final = (
    "hotkey, slot, status, accept_envelope, commit_envelope, receipt, received_round,"
    " delta_manifest, delta_hash"
)
_FACT_COLUMNS: Final = "hotkey, slot, status, NULL, NULL, NULL, received_round, NULL, delta_hash"
""":data:`_MINER_COLUMNS` without the envelopes: read from the ``miners_facts`` index alone."""


def _json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


@frozen
class MinerRow:
    """One ``miners`` row; the envelopes are canonical JSON text (None until posted)."""

    hotkey: str
    slot: int
    status: str
    accept_envelope: str | None
    commit_envelope: str | None
    receipt: str | None
    received_round: int | None
    delta_manifest: str | None
    delta_hash: str | None
    """The uploaded delta's sha256 (the DeltaManifest's ``delta_hash``, stored in its own column
    with the manifest): set exactly when the status is UPLOADED, None before."""

    def commit_body(self) -> dict[str, Any]:
        """The stored Commit body (call only once committed)."""
        assert self.commit_envelope is not None
        body: dict[str, Any] = json.loads(self.commit_envelope)["body"]
        return body

    def view_json(self, *, full: bool = True) -> dict[str, Any]:
        """The round view's per-miner facts: ``received_round`` and ``delta_hash``, and with
        ``full`` ``commit`` (the Commit envelope), ``receipt`` and ``delta_manifest``
        (envelopes); each null until posted."""
        facts: dict[str, Any] = {
            "received_round": self.received_round,
            "delta_hash": self.delta_hash,
        }
        if full:
            facts["commit"] = _json(self.commit_envelope)
            facts["receipt"] = _json(self.receipt)
            facts["delta_manifest"] = _json(self.delta_manifest)
        return facts


def _miner(row: Sequence[Any]) -> MinerRow:
    return MinerRow(*row)


def get_miner(conn: sqlite3.Connection, run_id: str, w: int, hotkey: str) -> MinerRow | None:
    """``hotkey``'s row of round ``w`` (None when it is not in that round's roster)."""
    row = conn.execute(
        f"SELECT {_MINER_COLUMNS} FROM miners WHERE run_id = ? AND w = ? AND hotkey = ?",
        (run_id, w, hotkey),
    ).fetchone()
    return None if row is None else _miner(row)


def miner_details(
    conn: sqlite3.Connection,
    run_id: str,
    w: int,
    offset: int = 0,
    count: int = -1,
    *,
    envelopes: bool = True,
) -> dict[str, MinerRow]:
    """The miner rows of round ``w`` by hotkey, in hotkey order: from the ``offset``-th on, at
    most ``count`` of them (-1: all), read along the primary key; without ``envelopes`` the
    rows' envelopes are None and the read touches the ``miners_facts`` index only."""
    columns = _MINER_COLUMNS if envelopes else _FACT_COLUMNS
    rows = conn.execute(
        f"SELECT {columns} FROM miners WHERE run_id = ? AND w = ? ORDER BY hotkey LIMIT ? OFFSET ?",
        (run_id, w, count, offset),
    )
    return {row[0]: _miner(row) for row in rows}


def uploaded_hotkeys(conn: sqlite3.Connection, run_id: str, w: int) -> list[str]:
    """The hotkeys of round ``w``'s miners with an uploaded delta, by hotkey."""
    rows = conn.execute(
        "SELECT hotkey FROM miners WHERE run_id = ? AND w = ? AND delta_hash IS NOT NULL"
        " ORDER BY hotkey",
        (run_id, w),
    )
    return [row[0] for row in rows]


def _update(conn: sqlite3.Connection, sql: str, args: tuple[Any, ...]) -> None:
    cursor = conn.execute(sql, args)
    assert cursor.rowcount == 1, "miner row vanished inside its transaction"


def set_accepted(conn: sqlite3.Connection, run_id: str, w: int, hotkey: str, env: str) -> None:
    """ASSIGNED -> ACCEPTED with the Accept envelope."""
    _update(
        conn,
        "UPDATE miners SET status = 'ACCEPTED', accept_envelope = ?"
        " WHERE run_id = ? AND w = ? AND hotkey = ?",
        (env, run_id, w, hotkey),
    )


def set_committed(
    conn: sqlite3.Connection,
    run_id: str,
    w: int,
    hotkey: str,
    *,
    status: str,
    commit: str,
    receipt: str,
    received_round: int,
) -> None:
    """ACCEPTED -> ``status`` (COMMITTED or EXCLUDED) with the Commit and its Receipt."""
    _update(
        conn,
        "UPDATE miners SET status = ?, commit_envelope = ?, receipt = ?, received_round = ?"
        " WHERE run_id = ? AND w = ? AND hotkey = ?",
        (status, commit, receipt, received_round, run_id, w, hotkey),
    )


def set_uploaded(
    conn: sqlite3.Connection, run_id: str, w: int, hotkey: str, *, env: str, delta_hash: str
) -> None:
    """COMMITTED -> UPLOADED with the DeltaManifest envelope and its ``delta_hash`` (a MATCH
    verdict that came first stays the status)."""
    _update(
        conn,
        "UPDATE miners SET status = CASE status WHEN 'COMMITTED' THEN 'UPLOADED' ELSE status END,"
        " delta_manifest = ?, delta_hash = ?"
        " WHERE run_id = ? AND w = ? AND hotkey = ?",
        (env, delta_hash, run_id, w, hotkey),
    )


# --- leaves --------------------------------------------------------------------------------------


def get_leaves_root(conn: sqlite3.Connection, run_id: str, w: int, hotkey: str) -> str | None:
    """The ``leaves_root`` of the stored preimages, or None when none were posted."""
    row = conn.execute(
        "SELECT leaves_root FROM leaves WHERE run_id = ? AND w = ? AND hotkey = ?",
        (run_id, w, hotkey),
    ).fetchone()
    return None if row is None else str(row[0])


def insert_leaves(
    conn: sqlite3.Connection,
    run_id: str,
    w: int,
    hotkey: str,
    *,
    preimages: str,
    leaves_root: str,
    ef_in_sha256: str | None,
    now: int,
) -> None:
    """Store checked preimages (canonical JSON array text)."""
    conn.execute(
        "INSERT INTO leaves (run_id, w, hotkey, preimages, leaves_root, ef_in_sha256,"
        " stored_round) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (run_id, w, hotkey, preimages, leaves_root, ef_in_sha256, now),
    )


# --- upload grants -------------------------------------------------------------------------------


@frozen
class GrantRow:
    """One ``upload_grants`` row."""

    grant_id: str
    run_id: str
    w: int
    hotkey: str
    sha256: str
    size: int
    expires_round: int


def insert_grant(conn: sqlite3.Connection, grant: GrantRow, now: int) -> None:
    """Store a new upload grant."""
    conn.execute(
        "INSERT INTO upload_grants (grant_id, run_id, w, hotkey, sha256, size, expires_round,"
        " granted_round) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (
            grant.grant_id,
            grant.run_id,
            grant.w,
            grant.hotkey,
            grant.sha256,
            grant.size,
            grant.expires_round,
            now,
        ),
    )


def get_grant(conn: sqlite3.Connection, grant_id: str) -> GrantRow | None:
    """The grant ``grant_id``, or None."""
    row = conn.execute(
        "SELECT grant_id, run_id, w, hotkey, sha256, size, expires_round FROM upload_grants"
        " WHERE grant_id = ?",
        (grant_id,),
    ).fetchone()
    return None if row is None else GrantRow(*row)


# --- round start states --------------------------------------------------------------------------


@frozen
class StateRow:
    """A published round start state."""

    theta_start_sha256: str
    v0_sha256: str | None


def get_round_state(conn: sqlite3.Connection, run_id: str, w: int) -> StateRow | None:
    """The published start state of round ``w``, or None."""
    row = conn.execute(
        "SELECT theta_start_sha256, v0_sha256 FROM round_states WHERE run_id = ? AND w = ?",
        (run_id, w),
    ).fetchone()
    return None if row is None else StateRow(row[0], row[1])


def insert_round_state(
    conn: sqlite3.Connection, run_id: str, w: int, state: StateRow, now: int
) -> None:
    """Publish round ``w``'s start state (the caller checked it is not published yet)."""
    conn.execute(
        "INSERT INTO round_states (run_id, w, theta_start_sha256, v0_sha256, published_round)"
        " VALUES (?, ?, ?, ?, ?)",
        (run_id, w, state.theta_start_sha256, state.v0_sha256, now),
    )


# --- roster --------------------------------------------------------------------------------------


def is_active_member(conn: sqlite3.Connection, run_id: str, hotkey: str) -> bool:
    """Whether ``hotkey`` is on the run's roster, neither removed nor blacklisted."""
    row = conn.execute(
        "SELECT 1 FROM roster WHERE run_id = ? AND hotkey = ? AND removed = 0 AND blacklisted = 0",
        (run_id, hotkey),
    ).fetchone()
    return row is not None


# --- audits --------------------------------------------------------------------------------------


@frozen
class LeavesRow:
    """A miner's stored preimages (JSON list, t order) and its optional ef_in object."""

    preimages: list[dict[str, Any]]
    leaves_root: str
    ef_in_sha256: str | None


def get_leaves(conn: sqlite3.Connection, run_id: str, w: int, hotkey: str) -> LeavesRow | None:
    """The posted preimages of ``hotkey`` in round ``w``, or None."""
    row = conn.execute(
        "SELECT preimages, leaves_root, ef_in_sha256 FROM leaves"
        " WHERE run_id = ? AND w = ? AND hotkey = ?",
        (run_id, w, hotkey),
    ).fetchone()
    return None if row is None else LeavesRow(json.loads(row[0]), row[1], row[2])


def set_verdict_status(
    conn: sqlite3.Connection, run_id: str, w: int, hotkey: str, status: str
) -> None:
    """The audit verdict becomes the miner's status in round ``w`` (MATCH or a fault)."""
    _update(
        conn,
        "UPDATE miners SET status = ? WHERE run_id = ? AND w = ? AND hotkey = ?",
        (status, run_id, w, hotkey),
    )


def lift_blacklist_unless_faulted(conn: sqlite3.Connection, run_id: str, hotkey: str) -> None:
    """Lift ``hotkey``'s blacklist unless one of its rounds of the run still holds a fault
    status (a TRANSIENT rerun or a won dispute cleared only its own round)."""
    statuses = conn.execute(
        "SELECT status FROM miners WHERE run_id = ? AND hotkey = ?", (run_id, hotkey)
    )
    if any(status in FAULT_STATUSES for (status,) in statuses):
        return
    conn.execute(
        "UPDATE roster SET blacklisted = 0 WHERE run_id = ? AND hotkey = ?", (run_id, hotkey)
    )


def set_blacklisted(conn: sqlite3.Connection, run_id: str, hotkey: str) -> None:
    """Blacklist ``hotkey``: it is off every roster from the next RoundOpen on."""
    conn.execute(
        "UPDATE roster SET blacklisted = 1 WHERE run_id = ? AND hotkey = ?", (run_id, hotkey)
    )
