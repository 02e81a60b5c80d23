"""Final rounds and rollbacks in the store (``0014_finality.sql``).

- :class:`FinalRow`: one ``finalizations`` row (the Finalize envelope, the ledger entries,
  when it was recorded and in which ledger round); :func:`insert_final`, :func:`get_final`,
  :func:`final_marks` (``(run_id, w) -> (vesting_round, released_round)`` of many rounds at
  once, for the round states), :func:`unsynced_finals` / :func:`mark_synced` (what the ledger
  feed still owes), :func:`last_final_w`.
- the ledger outbox (:func:`queue_outcome`, :func:`unsynced_outcomes`, :func:`mark_outcome_synced`):
  disputes of final rounds decided after finality, for the ledger feed;
- :class:`RollbackRow`: one ``rollbacks`` row; :func:`insert_rollback`, :func:`get_rollback`.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any, Final, Literal

from attrs import frozen

from hypertrain.rounds.finality import Entry, Verdict

__all__ = [
    "FinalRow",
    "PostFinal",
    "RollbackRow",
    "final_marks",
    "get_final",
    "get_rollback",
    "insert_final",
    "insert_rollback",
    "last_final_w",
    "last_synced",
    "mark_outcome_synced",
    "mark_synced",
    "queue_outcome",
    "unsynced_finals",
    "unsynced_outcomes",
]

_FINAL_COLUMNS: Final = (
    "run_id, w, envelope, entries, final_round, at, ledger_round, vesting_round, released_round,"
    " ledger_synced"
)
_ROLLBACK_COLUMNS: Final = "run_id, w, envelope, excluded, old_tapes, new_tapes, recorded_round"


@frozen
class FinalRow:
    """One final round."""

    run_id: str
    w: int
    envelope: str
    """The K_coord Finalize envelope, canonical JSON text."""
    entries: tuple[Entry, ...]
    """The ledger's inputs, by hotkey (what ``entitlements_root`` commits to)."""
    final_round: int
    """D when it was recorded."""
    at: int
    """The ledger event time (unix seconds)."""
    ledger_round: int
    """``round_of(at)``: the ledger round the round was finalised in."""
    vesting_round: int
    """The first drand round of ledger round ``ledger_round + 1`` (the state turns VESTING)."""
    released_round: int
    """The first drand round of ledger round ``ledger_round + E_vest_rounds`` (RELEASED)."""
    ledger_synced: bool

    def envelope_json(self) -> dict[str, Any]:
        """The Finalize envelope as JSON."""
        value: dict[str, Any] = json.loads(self.envelope)
        return value

    def verdict_of(self, hotkey: str) -> str | None:
        """The ledger verdict of ``hotkey`` in this round (None: not a committed miner)."""
        found = [e.verdict.value for e in self.entries if e.hotkey == hotkey]
        return found[0] if found else None


def _entries_json(entries: Sequence[Entry]) -> str:
    return json.dumps([e.to_json() for e in entries], sort_keys=True, separators=(",", ":"))


def _entries(text: str) -> tuple[Entry, ...]:
    return tuple(
        Entry(e["hotkey"], Verdict(e["verdict"]), int(e["tokens"]), int(e["soft_score_ppm"]))
        for e in json.loads(text)
    )


def _final(row: Sequence[Any]) -> FinalRow:
    return FinalRow(
        run_id=row[0],
        w=row[1],
        envelope=row[2],
        entries=_entries(row[3]),
        final_round=row[4],
        at=row[5],
        ledger_round=row[6],
        vesting_round=row[7],
        released_round=row[8],
        ledger_synced=bool(row[9]),
    )


def insert_final(conn: sqlite3.Connection, row: FinalRow) -> None:
    """Store a final round (the caller checked it is not final yet)."""
    conn.execute(
        f"INSERT INTO finalizations ({_FINAL_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            row.run_id,
            row.w,
            row.envelope,
            _entries_json(row.entries),
            row.final_round,
            row.at,
            row.ledger_round,
            row.vesting_round,
            row.released_round,
            int(row.ledger_synced),
        ),
    )


def get_final(conn: sqlite3.Connection, run_id: str, w: int) -> FinalRow | None:
    """Round ``w``'s finalisation, or None while it is not final."""
    row = conn.execute(
        f"SELECT {_FINAL_COLUMNS} FROM finalizations WHERE run_id = ? AND w = ?", (run_id, w)
    ).fetchone()
    return None if row is None else _final(row)


def last_final_w(conn: sqlite3.Connection, run_id: str) -> int:
    """The newest final round of the run, -1 when none is (rounds are final in order)."""
    row = conn.execute("SELECT MAX(w) FROM finalizations WHERE run_id = ?", (run_id,)).fetchone()
    return -1 if row[0] is None else int(row[0])


def final_marks(
    conn: sqlite3.Connection, rounds: Sequence[tuple[str, int]]
) -> dict[tuple[str, int], tuple[int, int]]:
    """``(run_id, w) -> (vesting_round, released_round)`` of those of ``rounds`` that are final
    (read per run between the lowest and highest ``w`` asked, along the primary key)."""
    spans: dict[str, tuple[int, int]] = {}
    for run_id, w in rounds:
        low, high = spans.get(run_id, (w, w))
        spans[run_id] = (min(low, w), max(high, w))
    wanted = set(rounds)
    out: dict[tuple[str, int], tuple[int, int]] = {}
    for run_id, (low, high) in sorted(spans.items()):
        rows = conn.execute(
            "SELECT w, vesting_round, released_round FROM finalizations"
            " WHERE run_id = ? AND w BETWEEN ? AND ?",
            (run_id, low, high),
        )
        out |= {
            (run_id, int(w)): (int(v), int(r)) for w, v, r in rows if (run_id, int(w)) in wanted
        }
    return out


def unsynced_finals(conn: sqlite3.Connection) -> list[FinalRow]:
    """Final rounds the ledger journal does not hold yet, by run and round."""
    rows = conn.execute(
        f"SELECT {_FINAL_COLUMNS} FROM finalizations WHERE ledger_synced = 0 ORDER BY run_id, w"
    )
    return [_final(row) for row in rows]


def last_synced(conn: sqlite3.Connection) -> dict[str, int]:
    """``run_id -> w`` of each run's newest final round the ledger was fed."""
    rows = conn.execute(
        "SELECT run_id, MAX(w) FROM finalizations WHERE ledger_synced = 1 GROUP BY run_id"
    )
    return {str(run_id): int(w) for run_id, w in rows}


def mark_synced(
    conn: sqlite3.Connection, run_id: str, w: int, at: int, marks: tuple[int, int, int]
) -> None:
    """Record that the ledger holds round ``w``, finalised at ``at``; ``marks`` is
    ``(ledger_round, vesting_round, released_round)`` of the time the ledger recorded."""
    conn.execute(
        "UPDATE finalizations SET ledger_synced = 1, at = ?, ledger_round = ?,"
        " vesting_round = ?, released_round = ? WHERE run_id = ? AND w = ?",
        (at, *marks, run_id, w),
    )


PostFinal = Literal["vindicate", "fault"]
"""What a dispute decided after finality does in the ledger."""


def queue_outcome(
    conn: sqlite3.Connection, run_id: str, w: int, hotkey: str, action: PostFinal, d: int
) -> None:
    """Queue a post-final outcome for the ledger feed (once per miner and round)."""
    conn.execute(
        "INSERT OR IGNORE INTO ledger_outbox (run_id, w, hotkey, action, recorded_round)"
        " VALUES (?, ?, ?, ?, ?)",
        (run_id, w, hotkey, action, d),
    )


def unsynced_outcomes(conn: sqlite3.Connection) -> list[tuple[str, int, str, PostFinal, int]]:
    """``(run_id, w, hotkey, action, recorded_round)`` the ledger does not hold yet, in order."""
    rows = conn.execute(
        "SELECT run_id, w, hotkey, action, recorded_round FROM ledger_outbox WHERE synced = 0"
        " ORDER BY recorded_round, run_id, w, hotkey"
    )
    return [(r[0], int(r[1]), r[2], r[3], int(r[4])) for r in rows]


def mark_outcome_synced(conn: sqlite3.Connection, run_id: str, w: int, hotkey: str) -> None:
    """The ledger holds this outcome."""
    conn.execute(
        "UPDATE ledger_outbox SET synced = 1 WHERE run_id = ? AND w = ? AND hotkey = ?",
        (run_id, w, hotkey),
    )


@frozen
class RollbackRow:
    """One rolled-back round ``w`` (rounds ``w`` and ``w + 1`` recomputed)."""

    run_id: str
    w: int
    envelope: str
    """The K_coord Rollback envelope, canonical JSON text."""
    excluded: tuple[str, ...]
    old_tapes: tuple[str, str]
    new_tapes: tuple[str, str]
    recorded_round: int

    def view_json(self) -> dict[str, Any]:
        """The round view's ``rollback``."""
        return {
            "envelope": json.loads(self.envelope),
            "excluded": list(self.excluded),
            "old_tapes": list(self.old_tapes),
            "new_tapes": list(self.new_tapes),
            "recorded_round": self.recorded_round,
        }


def _rollback(row: Sequence[Any]) -> RollbackRow:
    old = json.loads(row[4])
    new = json.loads(row[5])
    return RollbackRow(
        run_id=row[0],
        w=row[1],
        envelope=row[2],
        excluded=tuple(json.loads(row[3])),
        old_tapes=(old[0], old[1]),
        new_tapes=(new[0], new[1]),
        recorded_round=row[6],
    )


def insert_rollback(conn: sqlite3.Connection, row: RollbackRow) -> None:
    """Store a rollback of round ``w`` (the caller checked there is none)."""
    conn.execute(
        f"INSERT INTO rollbacks ({_ROLLBACK_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            row.run_id,
            row.w,
            row.envelope,
            json.dumps(list(row.excluded)),
            json.dumps(list(row.old_tapes)),
            json.dumps(list(row.new_tapes)),
            row.recorded_round,
        ),
    )


def get_rollback(conn: sqlite3.Connection, run_id: str, w: int) -> RollbackRow | None:
    """The rollback of round ``w``, or None."""
    row = conn.execute(
        f"SELECT {_ROLLBACK_COLUMNS} FROM rollbacks WHERE run_id = ? AND w = ?", (run_id, w)
    ).fetchone()
    return None if row is None else _rollback(row)
