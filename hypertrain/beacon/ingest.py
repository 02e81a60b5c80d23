"""Ingesting beacon rounds into the store: verify, store once, never overwrite.

The one path by which a round enters a state directory, shared by the daemon's admin route
(``POST /v1/admin/beacon``) and the in-process pusher (``StoreSink``)::

    result = await ingest_round(db, info, rnd, now=wall.now())   # -> {round, latest}

1. ``check_round(info, rnd)``: not a genuine round of the chain -> :class:`InvalidRound` (400),
   and nothing is written.
2. One ``db.write``: a new round is inserted; a known round with the same signature is an
   idempotent success; a known round with a *different* signature is :class:`Conflict` (409)
   and the stored row stays as it was (:func:`decide`, a pure function).
3. The answer carries the round and D, the latest stored round (``max(round)``).

The table is ``beacon`` of migration ``0002_beacon.sql``. :func:`store_round`,
:func:`latest_round` and :func:`get_round` are plain functions of a ``sqlite3.Connection`` for
the DB runner (``await db.read(latest_round)``). Callers that keep a
:class:`~hypertrain.beacon.clock.BeaconClock` call ``clock.observe(result.latest)`` afterwards.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Any, Literal

import attrs

from hypertrain.beacon.bls import check_round
from hypertrain.beacon.chain import BeaconRound, ChainInfo
from hypertrain.protocol.converter import unstructure
from hypertrain.protocol.errors import Conflict
from hypertrain.protocol.validators import u_int

if TYPE_CHECKING:
    from hypertrain.store.db import Database

__all__ = [
    "IngestAnswer",
    "IngestResult",
    "NoRound",
    "decide",
    "get_round",
    "ingest_round",
    "latest_round",
    "store_round",
]


@attrs.frozen
class IngestResult:
    """The outcome of one ingest: the round, D after it, and whether the row is new."""

    round: int
    latest: int
    """D: the latest stored round after this ingest."""
    created: bool
    """False for an idempotent repeat of a stored round."""

    def to_json(self) -> dict[str, Any]:
        """The admin route's answer, ``{"round": r, "latest": D}``."""
        return unstructure(IngestAnswer(self.round, self.latest))


@attrs.frozen
class IngestAnswer:
    """``POST /v1/admin/beacon``: the round posted and D after it."""

    round: int = attrs.field(validator=u_int)
    latest: int = attrs.field(validator=u_int)


@attrs.frozen
class NoRound:
    """``GET /v1/beacon/latest`` before the first round: ``{"round": 0}``."""

    round: Literal[0]


def decide(stored: BeaconRound | None, rnd: BeaconRound) -> bool:
    """Whether ``rnd`` must be inserted (True) or is already stored (False).

    ``stored`` is the row held for ``rnd.round``, if any. Raises :class:`Conflict` when it holds
    another signature: a stored round is never replaced.
    """
    if stored is None:
        return True
    if stored.signature != rnd.signature or stored.randomness != rnd.randomness:
        raise Conflict(
            f"round {rnd.round} is already stored with another signature "
            f"({stored.signature[:16]}..., not {rnd.signature[:16]}...); not overwritten"
        )
    return False


def get_round(conn: sqlite3.Connection, round_: int) -> BeaconRound | None:
    """The stored round ``round_``, or None."""
    row = conn.execute(
        "SELECT round, signature, randomness FROM beacon WHERE round = ?", (round_,)
    ).fetchone()
    return None if row is None else BeaconRound(round=row[0], signature=row[1], randomness=row[2])


def latest_round(conn: sqlite3.Connection) -> int:
    """D: the latest stored round, 0 when none is stored."""
    (latest,) = conn.execute("SELECT coalesce(max(round), 0) FROM beacon").fetchone()
    return int(latest)


def store_round(conn: sqlite3.Connection, rnd: BeaconRound, received_at: int) -> IngestResult:
    """Store ``rnd`` (already verified!) unless present; :class:`Conflict` on another signature.

    For ``db.write``: a conflict raises, so the transaction rolls back having changed nothing.
    """
    created = decide(get_round(conn, rnd.round), rnd)
    if created:
        conn.execute(
            "INSERT INTO beacon (round, signature, randomness, received_at) VALUES (?, ?, ?, ?)",
            (rnd.round, rnd.signature, rnd.randomness, received_at),
        )
    return IngestResult(round=rnd.round, latest=latest_round(conn), created=created)


async def ingest_round(
    db: Database, info: ChainInfo, rnd: BeaconRound, *, now: float
) -> IngestResult:
    """Verify ``rnd`` against ``info`` then store it in one write (see the module docstring).

    Raises :class:`InvalidRound` (400) or :class:`Conflict` (409); ``now`` is unix seconds.
    """
    check_round(info, rnd)
    return await db.write(store_round, rnd, int(now))
