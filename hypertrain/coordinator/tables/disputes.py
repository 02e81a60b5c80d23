"""Disputes in the store (tables of ``0013_disputes.sql``): disputes and their Bisects.

Plain functions of a ``sqlite3.Connection`` for the DB runner, used by
:mod:`hypertrain.coordinator.flows.disputes` and the round view. ``stage`` and ``referee`` are
stored as canonical JSON of :class:`~hypertrain.rounds.bisection.Stage` and
:class:`~hypertrain.rounds.bisection.RefereeCase` through the one converter.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any, Final, Literal

from attrs import frozen

from hypertrain.coordinator.tables.runs import dumps
from hypertrain.protocol.converter import structure, unstructure
from hypertrain.rounds.bisection import Party, RefereeCase, Stage

__all__ = [
    "BisectRow",
    "DisputeRow",
    "DisputeState",
    "bisects_of",
    "dispute_by_verdict",
    "disputes_of_round",
    "disputes_of_run",
    "get_dispute",
    "insert_bisect",
    "insert_dispute",
    "overdue_disputes",
    "update_dispute",
]

DisputeState = Literal["open", "accepted", "resolved"]

_COLUMNS: Final = (
    "dispute_id, run_id, w, hotkey, auditor, job_id, verdict_hash, first_bad_leaf, action,"
    " state, stage, level_deadline, referee, agreed_step, outcome, envelope, opened_round,"
    " resolved_round"
)


@frozen
class DisputeRow:
    """One ``disputes`` row (migration comment), JSON columns decoded."""

    dispute_id: str
    run_id: str
    w: int
    hotkey: str
    auditor: str
    job_id: str
    verdict_hash: str
    first_bad_leaf: int | None
    action: str
    state: DisputeState
    stage: Stage | None
    level_deadline: int | None
    referee: RefereeCase | None
    agreed_step: str | None
    outcome: dict[str, Any] | None
    envelope: str
    opened_round: int
    resolved_round: int | None

    def party(self, role: Party) -> str:
        """The ss58 of ``role``."""
        return self.hotkey if role == "miner" else self.auditor

    def role_of(self, ss58: str) -> Party | None:
        """The role of ``ss58`` in this dispute (None: not a party)."""
        if ss58 == self.hotkey:
            return "miner"
        if ss58 == self.auditor:
            return "auditor"
        return None


def _row(row: Sequence[Any]) -> DisputeRow:
    values = list(row)
    values[10] = None if values[10] is None else structure(Stage, json.loads(values[10]))
    values[12] = None if values[12] is None else structure(RefereeCase, json.loads(values[12]))
    values[14] = None if values[14] is None else json.loads(values[14])
    return DisputeRow(*values)


def _encode(column: str, value: Any) -> Any:
    if column in ("stage", "referee"):
        return None if value is None else dumps(unstructure(value))
    if column == "outcome":
        return None if value is None else dumps(value)
    return value


def insert_dispute(conn: sqlite3.Connection, row: DisputeRow) -> None:
    names = _COLUMNS.split(", ")
    values = [_encode(n, getattr(row, n)) for n in names]
    conn.execute(
        f"INSERT INTO disputes ({_COLUMNS}) VALUES ({', '.join('?' * len(names))})", values
    )


def update_dispute(conn: sqlite3.Connection, dispute_id: str, **columns: Any) -> None:
    """Set ``columns`` of one dispute (``stage``/``referee``/``outcome`` as values)."""
    names = list(columns)
    sets = ", ".join(f"{n} = ?" for n in names)
    args = [_encode(n, columns[n]) for n in names]
    conn.execute(f"UPDATE disputes SET {sets} WHERE dispute_id = ?", (*args, dispute_id))


def get_dispute(conn: sqlite3.Connection, dispute_id: str) -> DisputeRow | None:
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM disputes WHERE dispute_id = ?", (dispute_id,)
    ).fetchone()
    return None if row is None else _row(row)


def dispute_by_verdict(conn: sqlite3.Connection, verdict_hash: str) -> DisputeRow | None:
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM disputes WHERE verdict_hash = ?", (verdict_hash,)
    ).fetchone()
    return None if row is None else _row(row)


def disputes_of_round(conn: sqlite3.Connection, run_id: str, w: int) -> list[DisputeRow]:
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM disputes WHERE run_id = ? AND w = ? ORDER BY opened_round,"
        " dispute_id",
        (run_id, w),
    )
    return [_row(r) for r in rows]


def disputes_of_run(conn: sqlite3.Connection, run_id: str) -> list[DisputeRow]:
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM disputes WHERE run_id = ? ORDER BY w, opened_round, dispute_id",
        (run_id,),
    )
    return [_row(r) for r in rows]


def overdue_disputes(conn: sqlite3.Connection, D: int) -> list[DisputeRow]:  # noqa: N803
    """Open disputes at a bisection stage whose deadline passed (``level_deadline < D``)."""
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM disputes WHERE state = 'open' AND stage IS NOT NULL"
        " AND level_deadline < ? ORDER BY dispute_id",
        (D,),
    )
    return [_row(r) for r in rows]


@frozen
class BisectRow:
    """One stored Bisect: its order, party, the stage it answered and its hashes."""

    dispute_id: str
    seq: int
    party: str
    role: Party
    stage: Stage
    hashes: tuple[str, ...]
    envelope: str
    received_round: int

    def view_json(self) -> dict[str, Any]:
        stage = self.stage
        return {
            "seq": self.seq,
            "party": self.party,
            "role": self.role,
            "level": stage.level,
            "t": stage.t,
            "layer": stage.layer,
            "interval": [stage.a, stage.b],
            "N": stage.n,
            "hashes": list(self.hashes),
            "received_round": self.received_round,
        }


def insert_bisect(conn: sqlite3.Connection, row: BisectRow) -> None:
    conn.execute(
        "INSERT INTO bisects (dispute_id, seq, party, role, stage, hashes, envelope,"
        " received_round) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (
            row.dispute_id,
            row.seq,
            row.party,
            row.role,
            dumps(unstructure(row.stage)),
            dumps(list(row.hashes)),
            row.envelope,
            row.received_round,
        ),
    )


def bisects_of(conn: sqlite3.Connection, dispute_id: str) -> list[BisectRow]:
    rows = conn.execute(
        "SELECT dispute_id, seq, party, role, stage, hashes, envelope, received_round"
        " FROM bisects WHERE dispute_id = ? ORDER BY seq",
        (dispute_id,),
    )
    return [
        BisectRow(
            r[0],
            r[1],
            r[2],
            r[3],
            structure(Stage, json.loads(r[4])),
            tuple(json.loads(r[5])),
            r[6],
            r[7],
        )
        for r in rows
    ]
