"""Rollback before finality: when the daemon's aggregator recomputes a round (spec 7, issue 15).

**The rule.** Round ``w + 1`` is merged only once every audit of round ``w`` is settled (the
``w + 2`` rule of :func:`~hypertrain.coordinator.flows.aggregation.due_rounds`: RoundOpen(w + 2)
waits for round ``w``'s verdicts). So when the daemon merges round ``w + 1``, it knows every
fault a verdict found in round ``w``. If a miner whose delta round ``w``'s applied tape merged
now holds a fault status (MISMATCH, WITHHELD, BAD_PROOF, ASSIGNMENT_VIOLATION, DISPUTE_LOST;
a contested MISMATCH too: its dispute is still open), the step does not open round ``w + 2``
from the merge it just computed: it recomputes round ``w`` without those miners and round
``w + 1`` from the new output (:mod:`hypertrain.aggregator.rollback`), rewrites both rounds'
``aggregations`` rows with the new tapes, records a K_coord Rollback, and opens round ``w + 2``
from the corrected theta, all in the one write of the step. A fault known before round ``w``'s
own merge never needs this: that merge leaves the faulted delta out.

What stays outside the rule, handled with money only (the ledger's FAULT verdict or a
post-final ``fault``): a verdict that arrives after its serve deadline once round ``w + 2`` is
open, and a fault in a run's last round (no round ``w + 1`` follows it to recompute with).

- :func:`rollback_causes`: ``(hotkey, verdict hash)`` of every merged miner of round ``w``
  holding a fault status (what the step rolls back);
- :func:`record_rollback`: the rows of a rollback, inside the step's write
  (:func:`rollback_rewrite` hands it to ``commit_step``);
- :func:`record_external_rollback`: an external aggregator's rollback
  (``POST .../rounds/{w}/rollback``, verified by :func:`~hypertrain.aggregator.rollback.
  verify_rollback` before this write), under the same rule: before RoundOpen(w + 2).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from typing import Any

from attrs import field, frozen

from hypertrain.aggregator.rollback import RollbackStep
from hypertrain.aggregator.step import Step
from hypertrain.beacon.ingest import latest_round
from hypertrain.coordinator.flows.aggregation import AggregationRow, get_aggregation
from hypertrain.coordinator.flows.roundopen import parse_manifest
from hypertrain.coordinator.tables.audits import jobs_of_round
from hypertrain.coordinator.tables.finality import (
    RollbackRow,
    get_final,
    get_rollback,
    insert_rollback,
)
from hypertrain.coordinator.tables.miners import miner_details
from hypertrain.coordinator.tables.rounds import get_round_row
from hypertrain.coordinator.tables.runs import get_run
from hypertrain.protocol.envelope import Envelope
from hypertrain.protocol.errors import Conflict, ContractMismatch, NotFound
from hypertrain.protocol.jcs import body_digest
from hypertrain.protocol.manifest import RunManifest
from hypertrain.protocol.validators import hex64, list_of
from hypertrain.rounds.states import FAULT_STATUSES
from hypertrain.store.catalog import record_object
from hypertrain.store.keys import ObjectInfo

__all__ = [
    "RollbackRequest",
    "record_external_rollback",
    "record_rollback",
    "rollback_causes",
    "rollback_facts",
    "rollback_rewrite",
]


def rollback_causes(conn: sqlite3.Connection, run_id: str, w: int) -> list[tuple[str, str]]:
    """``(hotkey, verdict_hash)`` of each miner merged into round ``w``'s applied tape that now
    holds a fault status, by hotkey; empty when round ``w`` is clean, not merged, or already
    rolled back."""
    aggregation = get_aggregation(conn, run_id, w)
    if aggregation is None or aggregation.inputs is None or get_rollback(conn, run_id, w):
        return []
    verdicts = {job.target: job.verdict for job in jobs_of_round(conn, run_id, w)}
    causes = []
    details = miner_details(conn, run_id, w)
    for hotkey in aggregation.inputs:
        row = details.get(hotkey)
        if row is None or row.status not in FAULT_STATUSES:
            continue
        verdict = verdicts.get(hotkey)
        assert verdict is not None, "a fault status comes with a verdict"
        causes.append((hotkey, body_digest(json.loads(verdict)["body"])))
    return causes


def _rewrite(conn: sqlite3.Connection, run_id: str, w: int, row: AggregationRow) -> None:
    """Round ``w``'s ``aggregations`` row now names ``row``'s merge."""
    conn.execute(
        "UPDATE aggregations SET tape_key = ?, out_state = ?, theta_start_sha256 = ?,"
        " theta_hash = ?, update_norm = ?, clipped = ?, inputs = ? WHERE run_id = ? AND w = ?",
        (
            row.tape_key,
            row.out_state,
            row.theta_start_sha256,
            row.theta_hash,
            row.update_norm,
            row.clipped,
            json.dumps(list(row.inputs or ())),
            run_id,
            w,
        ),
    )


def record_rollback(
    conn: sqlite3.Connection,
    rollback: RollbackStep,
    envelope: Envelope,
    old_tapes: tuple[str, str],
    causes: list[tuple[str, str]],
    now: int,
) -> None:
    """Rewrite rounds ``w`` and ``w + 1``'s rows with the recomputed tapes and store the
    Rollback (in the step's write, after round ``w + 1``'s row was inserted). 409 when the
    causes changed since the rollback was computed (a verdict arrived meanwhile: the service
    computes again)."""
    run_id, w = rollback.run_id, rollback.w
    if rollback_causes(conn, run_id, w) != causes:
        raise Conflict(f"the faults of round {w} changed while its rollback was computed")
    for step in rollback.steps:
        _rewrite(conn, run_id, step.w, AggregationRow.of(step))
    insert_rollback(
        conn,
        RollbackRow(
            run_id=run_id,
            w=w,
            envelope=envelope.encode().decode(),
            excluded=rollback.body.excluded,
            old_tapes=old_tapes,
            new_tapes=rollback.tape_keys,
            recorded_round=now,
        ),
    )


def rollback_rewrite(
    rollback: RollbackStep,
    envelope: Envelope,
    old_tapes: tuple[str, str],
    causes: list[tuple[str, str]],
    now: int,
) -> Callable[[sqlite3.Connection], Step]:
    """The ``rewrite`` of :func:`~hypertrain.coordinator.flows.aggregation.commit_step` for a
    rolled-back step: record the rollback, open round ``w + 2`` from the recomputed ``w + 1``."""

    def rewrite(conn: sqlite3.Connection) -> Step:
        record_rollback(conn, rollback, envelope, old_tapes, causes, now)
        return rollback.steps[1]

    return rewrite


@frozen
class RollbackRequest:
    """``POST /v1/aggregator/runs/{id}/rounds/{w}/rollback``: the K_coord Rollback envelope, the
    key of the old tape of round ``w + 1`` (the merge it replaces) and the new tapes of rounds
    ``w`` and ``w + 1`` (every object already uploaded)."""

    rollback: dict[str, Any]
    old_tape_w1: str = field(validator=hex64)
    new_tapes: tuple[str, ...] = field(validator=list_of(hex64, min_len=2, max_len=2))


def rollback_facts(conn: sqlite3.Connection, run_id: str, w: int) -> tuple[RunManifest, str]:
    """The run's manifest and the tape key round ``w``'s applied merge has now, once round ``w``
    may be rolled back: 404 unknown run or round; 409 not merged, final, rolled back already,
    round ``w + 1`` not open or ``w + 2`` open (the rule of the module doc)."""
    run = get_run(conn, run_id)
    if get_round_row(conn, run_id, w) is None:
        raise NotFound(f"round {w} of run {run_id} is not open")
    applied = get_aggregation(conn, run_id, w)
    if applied is None:
        raise Conflict(f"round {w} of run {run_id} was not merged: nothing to roll back")
    if get_final(conn, run_id, w) is not None:
        raise Conflict(f"round {w} of run {run_id} is final: a fault is handled with money only")
    if get_rollback(conn, run_id, w) is not None:
        raise Conflict(f"round {w} of run {run_id} was rolled back already")
    if get_round_row(conn, run_id, w + 1) is None:
        raise Conflict(f"round {w + 1} is not open: roll back once it is merged")
    if get_round_row(conn, run_id, w + 2) is not None:
        raise Conflict(
            f"round {w + 2} already opened from the old theta: a rollback of round {w} comes"
            f" before RoundOpen({w + 2})"
        )
    return parse_manifest(run.manifest_envelope), applied.tape_key


def record_external_rollback(
    conn: sqlite3.Connection,
    envelope: Envelope,
    w: int,
    old_tapes: tuple[str, str],
    rows: tuple[AggregationRow, AggregationRow],
    excluded: tuple[str, ...],
    stored: tuple[ObjectInfo, ...],
    now: int,
) -> None:
    """Record an external aggregator's verified rollback of round ``w`` (one write): 409 when
    round ``w`` is final, round ``w + 1`` is not open or ``w + 2`` already is (it opened from
    the old theta: too late), round ``w``'s merge is no longer ``old_tapes[0]``, round
    ``w + 1``'s recorded merge (if any) is not ``old_tapes[1]``, or round ``w`` was rolled back
    already; 422 when an excluded miner holds no fault status in round ``w`` or ``w + 1``.
    Rewrites round ``w``'s merge, and ``w + 1``'s when its tape was recorded already (else the
    aggregator records the new one: ``PUT .../rounds/{w + 1}/tape`` then expects it)."""
    run_id = envelope.run_id
    _, applied = rollback_facts(conn, run_id, w)
    if applied != old_tapes[0]:
        raise Conflict(f"round {w}'s merge is not the rollback's old tape {old_tapes[0]}")
    following = get_aggregation(conn, run_id, w + 1)
    if following is not None and following.tape_key != old_tapes[1]:
        raise Conflict(f"round {w + 1}'s merge is not the rollback's old tape {old_tapes[1]}")
    faulted = {
        hotkey
        for r in (w, w + 1)
        for hotkey, row in miner_details(conn, run_id, r).items()
        if row.status in FAULT_STATUSES
    }
    for hotkey in excluded:
        if hotkey not in faulted:
            raise ContractMismatch(
                f"{hotkey} holds no fault verdict in round {w} or {w + 1}: it cannot be excluded"
            )
    d = latest_round(conn)
    for info in stored:
        record_object(conn, info, now)
    _rewrite(conn, run_id, w, rows[0])
    if following is not None:
        _rewrite(conn, run_id, w + 1, rows[1])
    insert_rollback(
        conn,
        RollbackRow(
            run_id=run_id,
            w=w,
            envelope=envelope.encode().decode(),
            excluded=excluded,
            old_tapes=old_tapes,
            new_tapes=(rows[0].tape_key, rows[1].tape_key),
            recorded_round=d,
        ),
    )
