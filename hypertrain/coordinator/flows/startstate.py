"""Publishing a round's start state (``PUT /v1/aggregator/runs/{id}/rounds/{w}/state``, spec 9).

The aggregator (or, for round 0, the operator) stores a theta-only state blob in the object
store, then publishes its sha256 for round ``w``. Promises:

- the round must be open (404);
- the blob must be in the object store (409), and so must ``v0_sha256`` when given;
- the blob must parse as a state blob (:func:`hypertrain.trainer.state.unpack_state`, numpy
  only) whose ``TH(theta)`` equals the round's ``RoundOpen.theta_hash`` (422 otherwise);
- write-once: publishing the same value again answers 200, a different one 409.

The round view then shows ``state_sha256`` (and ``v0_sha256``); miners fetch the blob with
``GET /v1/objects/{sha}``. For round 0 they may instead derive the init state themselves
(``theta_hash = manifest.init_state_hash``).
"""

from __future__ import annotations

import sqlite3

from attrs import field, frozen

from hypertrain.beacon.ingest import latest_round
from hypertrain.coordinator.tables.miners import StateRow, get_round_state, insert_round_state
from hypertrain.coordinator.tables.rounds import get_round_row
from hypertrain.coordinator.tables.runs import get_run
from hypertrain.protocol.errors import Conflict, ContractMismatch, Malformed, NotFound
from hypertrain.protocol.validators import hex64, optional, u_int
from hypertrain.trainer.state import unpack_state

__all__ = ["StatePublished", "StateRequest", "check_state_blob", "publish_state", "state_target"]


@frozen
class StatePublished:
    """``PUT .../rounds/{w}/state``: the start state the round's published with."""

    run_id: str
    w: int = field(validator=u_int)
    theta_start_sha256: str = field(validator=hex64)
    v0_sha256: str | None = field(validator=optional(hex64))


@frozen
class StateRequest:
    """The admin body: ``{theta_start_sha256, v0_sha256?}``."""

    theta_start_sha256: str = field(validator=hex64)
    v0_sha256: str | None = field(default=None, validator=optional(hex64))

    @property
    def row(self) -> StateRow:
        """As a ``round_states`` row."""
        return StateRow(self.theta_start_sha256, self.v0_sha256)


def _check_once(existing: StateRow | None, wanted: StateRow, w: int) -> bool:
    """True when ``wanted`` is already published; :class:`Conflict` when another one is."""
    if existing is None:
        return False
    if existing != wanted:
        raise Conflict(
            f"round {w}'s start state is already published as {existing.theta_start_sha256}"
            f" (v0 {existing.v0_sha256}); it is write-once"
        )
    return True


def state_target(
    conn: sqlite3.Connection, run_id: str, w: int, wanted: StateRow
) -> tuple[str, bool]:
    """``(RoundOpen.theta_hash, already published)`` of round ``w`` (404 unknown, 409 when a
    different state is published)."""
    get_run(conn, run_id)
    row = get_round_row(conn, run_id, w)
    if row is None:
        raise NotFound(f"round {w} of run {run_id} is not open")
    return row.body.theta_hash, _check_once(get_round_state(conn, run_id, w), wanted, w)


def check_state_blob(blob: bytes, theta_hash: str) -> None:
    """422 unless ``blob`` is a state blob whose ``TH(theta)`` is ``theta_hash``."""
    try:
        state = unpack_state(blob)
    except Malformed as e:
        raise ContractMismatch(f"theta_start is not a state blob: {e.detail}") from None
    got = state.theta_hash()
    if got != theta_hash:
        raise ContractMismatch(
            f"theta_start has TH(theta) {got}, the round's RoundOpen.theta_hash is {theta_hash}"
        )


def publish_state(conn: sqlite3.Connection, run_id: str, w: int, wanted: StateRow) -> bool:
    """Store the start state of round ``w``; True if it is new (write-once as above)."""
    _, published = state_target(conn, run_id, w, wanted)
    if published:
        return False
    insert_round_state(conn, run_id, w, wanted, latest_round(conn))
    return True
