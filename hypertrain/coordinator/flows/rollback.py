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
  (:func:`rollback_rewrite` hands it to ``commit_step``).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable

from hypertrain.aggregator.rollback import RollbackStep
from hypertrain.aggregator.step import Step
from hypertrain.coordinator.flows.aggregation import AggregationRow, get_aggregation
from hypertrain.coordinator.tables.audits import jobs_of_round
from hypertrain.coordinator.tables.finality import RollbackRow, get_rollback, insert_rollback
from hypertrain.coordinator.tables.miners import miner_details
from hypertrain.protocol.envelope import Envelope
from hypertrain.protocol.errors import Conflict
from hypertrain.protocol.jcs import body_digest
from hypertrain.rounds.states import FAULT_STATUSES

__all__ = ["aggregation_row", "record_rollback", "rollback_causes", "rollback_rewrite"]


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


def aggregation_row(step: Step) -> AggregationRow:
    """The ``aggregations`` row of a computed step."""
    return AggregationRow(
        step.tape_key,
        step.out_state,
        step.theta_start_sha256,
        step.theta_hash,
        step.update_norm,
        step.clipped,
        step.inputs,
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
        row = aggregation_row(step)
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
                json.dumps(list(step.inputs)),
                run_id,
                step.w,
            ),
        )
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
