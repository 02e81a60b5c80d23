"""Opened rounds in the store: the ``rounds`` and ``miners`` tables and derived round states.

- :func:`insert_round` stores a sealed RoundOpen with its base and audit reasons and one
  ``ASSIGNED`` miner row per rostered hotkey; :func:`get_round_row`, :func:`round_rows`.
- :func:`round_page` / :func:`miner_page`: a page of a run's rounds (newest first, their
  deadlines only) and of a round's miners (by hotkey), each read along its primary key from
  ``offset`` for ``count`` rows and no further (``LIMIT ? OFFSET ?``, no sort): the run view
  costs the same at round 10 and round 10,000.
- :func:`round_states` derives the state of any rounds (:class:`RoundDates`) at D (spec 1.3, via
  :func:`hypertrain.rounds.states.round_state`): the one place that knows which stored facts
  feed the derivation, used by the run view and by the round-state event feed.
- :func:`pending_state_changes` / :func:`mark_published`: the feed's bookkeeping. The last
  state published per round is stored (``published_state``), so after a restart the feed
  publishes exactly the states that changed while it was down.

Stored RoundOpens are parsed once per distinct envelope text (:func:`parse_round_open`).
"""

from __future__ import annotations

import functools
import json
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Protocol

from attrs import frozen

from hypertrain.coordinator.tables.finality import final_marks
from hypertrain.coordinator.tables.runs import dumps
from hypertrain.protocol.converter import structure
from hypertrain.protocol.envelope import Envelope
from hypertrain.protocol.messages import RoundOpen
from hypertrain.rounds.deadlines import Deadlines
from hypertrain.rounds.states import RoundState, round_state

__all__ = [
    "RoundDates",
    "RoundKey",
    "RoundRow",
    "StateChange",
    "get_round_row",
    "insert_round",
    "mark_published",
    "miner_page",
    "miner_rows",
    "parse_round_open",
    "pending_state_changes",
    "round_page",
    "round_rows",
    "round_states",
]

_TERMINAL: Final = RoundState.RELEASED.value
_COLUMNS: Final = (
    "run_id, w, round_open, d_open, d_assign, d_commit, d_audit, d_upload, d_final, base,"
    " reasons, opened_round, published_state"
)


@functools.lru_cache(maxsize=64)
def parse_round_open(envelope_text: str) -> RoundOpen:
    """The RoundOpen body of a stored envelope (canonical JSON text), memoised."""
    return structure(RoundOpen, json.loads(envelope_text)["body"])


class RoundDates(Protocol):
    """What :func:`round_states` reads of a round: which one it is and its deadlines."""

    @property
    def run_id(self) -> str: ...

    @property
    def w(self) -> int: ...

    @property
    def deadlines(self) -> Deadlines: ...


@frozen
class RoundKey:
    """A round and its deadlines, without its RoundOpen text (:func:`round_page`)."""

    run_id: str
    w: int
    deadlines: Deadlines


@frozen
class RoundRow:
    """One ``rounds`` row; ``round_open`` is the envelope's canonical JSON text."""

    run_id: str
    w: int
    round_open: str
    deadlines: Deadlines
    base: int
    reasons: str
    opened_round: int
    published_state: str | None

    @property
    def body(self) -> RoundOpen:
        """The RoundOpen body (parsed once per envelope)."""
        return parse_round_open(self.round_open)

    def envelope_json(self) -> dict[str, Any]:
        """The RoundOpen envelope as JSON."""
        value: dict[str, Any] = json.loads(self.round_open)
        return value


@frozen
class StateChange:
    """A round whose derived state differs from the last one published for it."""

    run_id: str
    w: int
    old: str | None
    new: RoundState

    def event(self, D: int) -> dict[str, Any]:  # noqa: N803 (spec name)
        """The ``round_state`` event data."""
        return {"run_id": self.run_id, "w": self.w, "state": self.new.value, "D": D}


def _row(row: Sequence[Any]) -> RoundRow:
    return RoundRow(
        run_id=row[0],
        w=row[1],
        round_open=row[2],
        deadlines=Deadlines(*row[3:9]),
        base=row[9],
        reasons=row[10],
        opened_round=row[11],
        published_state=row[12],
    )


def insert_round(
    conn: sqlite3.Connection,
    envelope: Envelope,
    body: RoundOpen,
    *,
    base: int,
    reasons: Mapping[str, Iterable[str]],
    now: int,
    published_state: RoundState | None = None,
) -> RoundRow:
    """Store an opened round and its ``ASSIGNED`` miner rows; returns the stored row."""
    d = Deadlines.of(body)
    conn.execute(
        f"INSERT INTO rounds ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            envelope.run_id,
            body.w,
            envelope.encode().decode(),
            d.d_open,
            d.d_assign,
            d.d_commit,
            d.d_audit,
            d.d_upload,
            d.d_final,
            base,
            dumps({hotkey: list(why) for hotkey, why in reasons.items()}),
            now,
            None if published_state is None else published_state.value,
        ),
    )
    conn.executemany(
        "INSERT INTO miners (run_id, w, hotkey, slot, status) VALUES (?, ?, ?, ?, 'ASSIGNED')",
        [(envelope.run_id, body.w, entry.hotkey, entry.slot) for entry in body.roster],
    )
    row = get_round_row(conn, envelope.run_id, body.w)
    assert row is not None
    return row


def get_round_row(conn: sqlite3.Connection, run_id: str, w: int) -> RoundRow | None:
    """Round ``w`` of the run, or None when it was not opened."""
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM rounds WHERE run_id = ? AND w = ?", (run_id, w)
    ).fetchone()
    return None if row is None else _row(row)


def round_rows(conn: sqlite3.Connection, run_id: str) -> list[RoundRow]:
    """Every opened round of the run, by ``w``."""
    rows = conn.execute(f"SELECT {_COLUMNS} FROM rounds WHERE run_id = ? ORDER BY w", (run_id,))
    return [_row(row) for row in rows]


def round_page(conn: sqlite3.Connection, run_id: str, offset: int, count: int) -> list[RoundKey]:
    """Up to ``count`` of the run's rounds, newest first, from the ``offset``-th newest on."""
    rows = conn.execute(
        "SELECT w, d_open, d_assign, d_commit, d_audit, d_upload, d_final FROM rounds"
        " WHERE run_id = ? ORDER BY w DESC LIMIT ? OFFSET ?",
        (run_id, count, offset),
    )
    return [RoundKey(run_id, row[0], Deadlines(*row[1:])) for row in rows]


def miner_page(
    conn: sqlite3.Connection, run_id: str, w: int, offset: int, count: int
) -> list[tuple[str, int, str]]:
    """:func:`miner_rows` from the ``offset``-th on, at most ``count`` of them."""
    rows = conn.execute(
        "SELECT hotkey, slot, status FROM miners WHERE run_id = ? AND w = ?"
        " ORDER BY hotkey LIMIT ? OFFSET ?",
        (run_id, w, count, offset),
    )
    return [(row[0], row[1], row[2]) for row in rows]


def miner_rows(conn: sqlite3.Connection, run_id: str, w: int) -> list[tuple[str, int, str]]:
    """``(hotkey, slot, status)`` of round ``w``'s miners, by hotkey."""
    rows = conn.execute(
        "SELECT hotkey, slot, status FROM miners WHERE run_id = ? AND w = ? ORDER BY hotkey",
        (run_id, w),
    )
    return [(row[0], row[1], row[2]) for row in rows]


def _d_assign_of(conn: sqlite3.Connection, run_id: str, w: int) -> int | None:
    row = conn.execute(
        "SELECT d_assign FROM rounds WHERE run_id = ? AND w = ?", (run_id, w)
    ).fetchone()
    return None if row is None else int(row[0])


def _merged(conn: sqlite3.Connection, run_id: str, w: int) -> bool:
    row = conn.execute(
        "SELECT 1 FROM aggregations WHERE run_id = ? AND w = ?", (run_id, w)
    ).fetchone()
    return row is not None


def _disputed_rounds(conn: sqlite3.Connection) -> set[tuple[str, int]]:
    """``(run_id, w)`` of every round with an open dispute (one query for all the rows)."""
    rows = conn.execute("SELECT DISTINCT run_id, w FROM disputes WHERE state = 'open'")
    return {(run_id, w) for run_id, w in rows}


def _final_state(D: int, vesting_round: int, released_round: int) -> RoundState:  # noqa: N803
    """Spec 1.3's finalize-based states (``round_state``'s first branch), from the drand
    rounds where the ledger round passes ``final + 1`` and ``final + vest_rounds``."""
    if released_round <= D:
        return RoundState.RELEASED
    if vesting_round <= D:
        return RoundState.VESTING
    return RoundState.FINAL


def round_states(
    conn: sqlite3.Connection,
    D: int,  # noqa: N803 (spec name)
    rows: Sequence[RoundDates],
) -> list[RoundState]:
    """The derived state at D of each of ``rows`` (rounds of one or more runs); the reads are
    bounded by ``rows`` (their finalizations, one successor each), not by the runs' history.

    Feeds :func:`~hypertrain.rounds.states.round_state` with the facts stored so far: the
    next round's ``d_assign`` once it is opened (taken from ``rows`` when present, else read),
    and, for a round without a successor, whether it was merged (a run's last round).
    An open dispute of the round makes it DISPUTE; a stored Finalize makes it FINAL, then
    VESTING and RELEASED from the drand rounds where its ledger round's successors begin
    (``finalizations.vesting_round`` / ``released_round``).
    """
    known = {(row.run_id, row.w): row.deadlines.d_assign for row in rows}
    disputed = _disputed_rounds(conn)
    finals = final_marks(conn, [(row.run_id, row.w) for row in rows])
    states = []
    for row in rows:
        marks = finals.get((row.run_id, row.w))
        if marks is not None:
            states.append(_final_state(D, *marks))
            continue
        key = (row.run_id, row.w + 1)
        next_d_assign = known[key] if key in known else _d_assign_of(conn, *key)
        merged_last = next_d_assign is None and _merged(conn, row.run_id, row.w)
        states.append(
            round_state(
                D,
                row.deadlines,
                next_round_d_assign=next_d_assign,
                merged_last=merged_last,
                has_open_dispute=(row.run_id, row.w) in disputed,
            )
        )
    return states


def pending_state_changes(
    conn: sqlite3.Connection,
    D: int,  # noqa: N803 (spec name)
) -> list[StateChange]:
    """Rounds (of every run) whose state at D is not the last one published, by run and w.

    Reads only the rounds not yet RELEASED (the last state a round reaches), along the
    ``rounds_unreleased`` index: bounded by the rounds still in flight, not by history."""
    rows = conn.execute(
        "SELECT run_id, w, published_state, d_open, d_assign, d_commit, d_audit, d_upload,"
        f" d_final FROM rounds WHERE published_state IS NOT '{_TERMINAL}' ORDER BY run_id, w"
    ).fetchall()
    keys = [RoundKey(row[0], row[1], Deadlines(*row[3:])) for row in rows]
    return [
        StateChange(key.run_id, key.w, row[2], state)
        for key, row, state in zip(keys, rows, round_states(conn, D, keys), strict=True)
        if state.value != row[2]
    ]


def mark_published(conn: sqlite3.Connection, changes: Sequence[StateChange]) -> list[StateChange]:
    """Record ``changes`` as published; returns those still current (compare-and-set on the
    old state, so a change another task already recorded is not published twice)."""
    done = []
    for change in changes:
        cursor = conn.execute(
            "UPDATE rounds SET published_state = ? WHERE run_id = ? AND w = ?"
            " AND published_state IS ?",
            (change.new.value, change.run_id, change.w, change.old),
        )
        if cursor.rowcount == 1:
            done.append(change)
    return done
