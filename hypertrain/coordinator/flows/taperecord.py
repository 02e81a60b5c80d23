"""Recording an external aggregator's merge: ``PUT /v1/aggregator/runs/{id}/rounds/{w}/tape``.

The daemon's own aggregator writes an ``aggregations`` row with every merge. An aggregator on
another machine (``hypertrain aggregate``) uploads its objects, posts RoundOpen(w + 1) and
publishes the start state; then it records its tape here, so that the round view shows the
merge's facts (tape, update norm, clipped count), the daemon evaluates the held-out loss of
the merged theta, and the daemon's aggregator can take over from the next round.

Body ``{tape_key}`` (admin). Promises, in order:

- 404 unknown run or round ``w``; 409 the tape or its ``out_state`` is not in the object store;
- the tape must parse (400 naming the field) and be signed by K_coord (403 another signer,
  401 a bad signature), for this run and round (422);
- 409 while round ``w + 1`` should be open but is not (the run goes on and RoundOpen(w + 1) was
  not posted yet): record after opening;
- 422 unless ``TH(out_state.theta)`` is the tape's ``theta_hash``, the tape's
  ``prev_theta_hash`` is round ``w``'s start theta (its RoundOpen's ``theta_hash``, or the
  corrected theta once round ``w - 1`` was rolled back) and, when round ``w + 1`` is open, its
  RoundOpen carries the tape's ``theta_hash``, ``outer_state_hash`` and ``center_hash``;
- write-once: the same tape again answers 200, another one 409.

The recorded facts: ``update_norm`` = the L2 norm of the merged update ``g`` (the new state's
``center``, spec 7), ``clipped`` = the tape's preclipped count, and the theta-only start-state
blob of theta(w + 1) (``pack_state``, stored here so the row always names one).
"""

from __future__ import annotations

import sqlite3

from attrs import field, frozen

from hypertrain.aggregator.merge import norm
from hypertrain.aggregator.outerstate import OuterState
from hypertrain.aggregator.tape import SignedTape
from hypertrain.beacon.ingest import latest_round
from hypertrain.coordinator.flows.aggregation import (
    AggregationRow,
    get_aggregation,
    insert_aggregation,
)
from hypertrain.coordinator.tables.finality import get_rollback
from hypertrain.coordinator.tables.rounds import get_round_row
from hypertrain.coordinator.tables.runs import get_run
from hypertrain.protocol.errors import Conflict, ContractMismatch, NotFound
from hypertrain.protocol.validators import hex64
from hypertrain.store.catalog import record_object
from hypertrain.store.keys import ObjectInfo

__all__ = ["TapeRequest", "check_tape_facts", "record_tape", "tape_record"]


@frozen
class TapeRequest:
    """The admin body: ``{tape_key}``."""

    tape_key: str = field(validator=hex64)


def check_tape_facts(
    conn: sqlite3.Connection, run_id: str, w: int, tape: SignedTape, out: OuterState
) -> None:
    """The checks of the module doc that need the database (one read)."""
    get_run(conn, run_id)
    row = get_round_row(conn, run_id, w)
    if row is None:
        raise NotFound(f"round {w} of run {run_id} is not open")
    body = tape.body
    if body.run_id != run_id or body.w != w:
        raise ContractMismatch(f"the tape is for run {body.run_id} round {body.w}")
    if out.theta_hash() != body.theta_hash:
        raise ContractMismatch(
            f"TH(theta) of out_state is {out.theta_hash()}, the tape says {body.theta_hash}"
        )
    start = row.body.theta_hash
    if w > 0 and get_rollback(conn, run_id, w - 1) is not None:
        previous = get_aggregation(conn, run_id, w - 1)
        assert previous is not None, "a rolled-back round was merged"
        start = previous.theta_hash  # round w is merged onto the corrected theta
    if body.prev_theta_hash != start:
        raise ContractMismatch(
            f"the tape's prev_theta_hash {body.prev_theta_hash} is not round {w}'s start theta"
            f" {start}"
        )
    following = get_round_row(conn, run_id, w + 1)
    if following is None:
        config = get_run(conn, run_id).config
        total = None if config is None else config.total_rounds
        if total is None or w + 1 < total:
            raise Conflict(f"round {w + 1} is not open: post RoundOpen({w + 1}) first")
        return
    opened = following.body
    for name in ("theta_hash", "outer_state_hash", "center_hash"):
        if getattr(opened, name) != getattr(body, name):
            raise ContractMismatch(
                f"RoundOpen({w + 1}).{name} is {getattr(opened, name)}, the tape says"
                f" {getattr(body, name)}"
            )


def tape_record(tape_key: str, tape: SignedTape, out: OuterState, theta_sha: str) -> AggregationRow:
    """The row's facts from a checked tape and its out_state (module doc)."""
    body = tape.body
    return AggregationRow(
        tape_key=tape_key,
        out_state=body.out_state,
        theta_start_sha256=theta_sha,
        theta_hash=body.theta_hash,
        update_norm=norm(out.center),
        clipped=len(body.screens.preclipped),
        inputs=tuple(item.id for item in body.inputs),
    )


def record_tape(
    conn: sqlite3.Connection,
    run_id: str,
    w: int,
    record: AggregationRow,
    theta: ObjectInfo,
    now: int,
) -> bool:
    """Catalog the start-state blob ``theta`` and write the ``aggregations`` row (one write);
    False when this tape was recorded already, 409 when another one was."""
    record_object(conn, theta, now)
    existing = get_aggregation(conn, run_id, w)
    if existing is not None:
        if existing.tape_key == record.tape_key:
            return False
        raise Conflict(f"round {w} of run {run_id} already has tape {existing.tape_key}")
    insert_aggregation(conn, run_id, w, record, latest_round(conn))
    return True
