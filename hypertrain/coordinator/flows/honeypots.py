"""Honeypot commitments of a run: commit, then reveal (spec sections 2.5 and 6.5).

``PUT .../honeypot {commitment}`` makes a salted commitment the one every RoundOpen opened from
then on carries (``NO_HONEYPOT`` before any); ``POST .../honeypot/reveal {commitment, members,
salt}`` later publishes who the honeypots were. The reveal is checked with
:func:`hypertrain.protocol.hashes.honeypot_commit` (422 when it does not hash to the
commitment), must name a commitment made for this run (404) and happens once (409). Only
revealed commitments count in the auditor statistics.
"""

from __future__ import annotations

import sqlite3
from typing import Literal

from attrs import field, frozen

from hypertrain.coordinator.tables.runs import dumps, get_run
from hypertrain.protocol.errors import Conflict, ContractMismatch, NotFound
from hypertrain.protocol.hashes import honeypot_commit
from hypertrain.protocol.validators import (
    MAX_ITEMS,
    hex64,
    instance_of,
    list_of,
    one_of_literal,
    ss58,
)

__all__ = [
    "HoneypotCommitRequest",
    "HoneypotCommitted",
    "HoneypotMember",
    "HoneypotReveal",
    "HoneypotVerified",
    "commit_honeypot",
    "reveal_honeypot",
]

HoneypotMode = Literal["honest", "fabricate", "last_step", "noise"]


@frozen
class HoneypotCommitted:
    """``PUT .../honeypot``: the commitment stored for the run."""

    run_id: str
    honeypot_commit: str = field(validator=hex64)


@frozen
class HoneypotVerified:
    """``POST .../honeypot/reveal``: the revealed members match the commitment."""

    commitment: str = field(validator=hex64)
    verified: Literal[True]


@frozen
class HoneypotCommitRequest:
    """``PUT .../honeypot``: the salted commitment of this epoch's honeypot identities."""

    commitment: str = field(validator=hex64)


@frozen
class HoneypotMember:
    """One revealed honeypot: its hotkey and the way it misbehaves."""

    hotkey: str = field(validator=ss58)
    mode: HoneypotMode = field(validator=one_of_literal(HoneypotMode))


@frozen
class HoneypotReveal:
    """``POST .../honeypot/reveal``: members and the 32-byte salt (hex) behind a commitment."""

    commitment: str = field(validator=hex64)
    members: tuple[HoneypotMember, ...] = field(
        validator=list_of(instance_of(HoneypotMember), max_len=MAX_ITEMS)
    )
    salt: str = field(validator=hex64)


def commit_honeypot(conn: sqlite3.Connection, run_id: str, commitment: str, now: int) -> None:
    """Make ``commitment`` the one later RoundOpens carry and remember it for its reveal."""
    get_run(conn, run_id)
    conn.execute(
        "INSERT INTO honeypots (run_id, commitment, committed_round) VALUES (?, ?, ?)"
        " ON CONFLICT (run_id, commitment) DO NOTHING",
        (run_id, commitment, now),
    )
    conn.execute("UPDATE runs SET honeypot_commit = ? WHERE run_id = ?", (commitment, run_id))


def reveal_honeypot(
    conn: sqlite3.Connection, run_id: str, reveal: HoneypotReveal, now: int
) -> None:
    """Check and store the reveal of a committed honeypot set.

    :class:`ContractMismatch` (422) when members and salt do not hash to the commitment,
    :class:`NotFound` (404) for an unknown run or commitment, :class:`Conflict` (409) when it
    was revealed already.
    """
    get_run(conn, run_id)
    members = [(m.hotkey, m.mode) for m in reveal.members]
    if honeypot_commit(members, bytes.fromhex(reveal.salt)) != reveal.commitment:
        raise ContractMismatch("honeypot reveal: members and salt do not hash to the commitment")
    row = conn.execute(
        "SELECT reveal FROM honeypots WHERE run_id = ? AND commitment = ?",
        (run_id, reveal.commitment),
    ).fetchone()
    if row is None:
        raise NotFound(f"unknown honeypot commitment {reveal.commitment}")
    if row[0] is not None:
        raise Conflict(f"honeypot commitment {reveal.commitment} is already revealed")
    stored = {
        "members": [{"hotkey": h, "mode": m} for h, m in sorted(members)],
        "salt": reveal.salt,
    }
    conn.execute(
        "UPDATE honeypots SET reveal = ?, revealed_round = ? WHERE run_id = ? AND commitment = ?",
        (dumps(stored), now, run_id, reveal.commitment),
    )
