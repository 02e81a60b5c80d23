"""One aggregation step of the daemon: merge round ``w``, open round ``w + 1`` (spec 7, 9).

The step runs in three parts, so that a daemon stopped anywhere finishes it exactly once:

1. :func:`step_inputs` (one read): the run, round ``w``, D, the previous OuterState's object
   key (``None`` for ``w = 0``: the genesis state ``OuterState.genesis(init_params(model))``,
   whose ``TH(theta)`` must be round 0's ``theta_hash``) and every ``UPLOADED`` miner's
   ``delta_hash``; :meth:`StepInputs.merge_inputs` is what the merge needs of them.
2. :func:`~hypertrain.aggregator.step.compute_step`, the one merge
   implementation, shared with ``hypertrain aggregate`` on another machine: the daemon passes
   its object store's ``get`` as ``fetch``. Each delta is decoded (one that does not decode or
   fit the model is *excluded*, never fatal), merged with the manifest's outer params, and the
   new OuterState blob, the theta-only start state of round ``w + 1`` and the K_coord-signed
   tape are packed. Every byte is a function of the stored inputs (ed25519 signatures are
   deterministic), so a recomputation after a crash gives the same objects under the same keys;
   the service stores them (content addressed: idempotent).
3. :func:`commit_step` (one write, after the objects are stored): the ``aggregations`` row,
   RoundOpen(w + 1) built by :func:`~hypertrain.coordinator.flows.roundopen.plan_round` from the
   current roster at ``d_open = max(D, d_upload(w))`` (spec 4.1's default) with
   ``prev_final_hash = theta_hash = TH(theta')`` and the outer/center hashes of the new state,
   and round ``w + 1``'s published start state. A round ``w + 1`` already open makes it a no-op.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable

import attrs
from attrs import frozen

from hypertrain.aggregator.step import MergeInputs, Step
from hypertrain.aggregator.tape import parse_signed_tape
from hypertrain.beacon.ingest import latest_round
from hypertrain.coordinator.flows.roundopen import (
    parse_manifest,
    plan_round,
    seal_round_open,
    store_round_open,
)
from hypertrain.coordinator.tables.audits import draw_of, jobs_of_round
from hypertrain.coordinator.tables.miners import StateRow, insert_round_state, miner_details
from hypertrain.coordinator.tables.rounds import RoundRow, get_round_row
from hypertrain.coordinator.tables.runs import (
    RunRow,
    active_roster,
    get_run,
    list_runs,
    next_round_w,
)
from hypertrain.protocol.errors import Conflict, NotFound
from hypertrain.protocol.keys import Keypair
from hypertrain.rounds.states import FAULT_STATUSES
from hypertrain.store.catalog import record_object
from hypertrain.store.keys import ObjectInfo

__all__ = [
    "AggregationRow",
    "Due",
    "MergeInputs",
    "Step",
    "StepInputs",
    "audits_settled",
    "commit_step",
    "due_rounds",
    "get_aggregation",
    "insert_aggregation",
    "step_inputs",
]


@frozen
class StepInputs:
    """What one step reads from the database (module doc, part 1)."""

    run: RunRow
    round: RoundRow
    D: int
    prev_state_key: str | None
    """The stored OuterState of round ``w - 1``; None for ``w = 0`` (genesis)."""
    uploads: tuple[tuple[str, str], ...]
    """``(hotkey, delta_hash)`` of every miner that uploaded and holds no fault verdict (a
    verdict known before the merge keeps a faulted delta out), by hotkey."""

    def merge_inputs(self) -> MergeInputs:
        """What :func:`compute_step` needs of these inputs."""
        return MergeInputs(
            run_id=self.run.run_id,
            w=self.round.w,
            manifest=parse_manifest(self.run.manifest_envelope),
            theta_hash=self.round.body.theta_hash,
            prev_state_key=self.prev_state_key,
            uploads=self.uploads,
        )


@frozen
class AggregationRow:
    """One ``aggregations`` row."""

    tape_key: str
    out_state: str
    theta_start_sha256: str
    theta_hash: str
    update_norm: float
    clipped: int
    inputs: tuple[str, ...] | None
    """The hotkeys the applied tape merged, sorted; None for a row from before migration 0014."""

    @classmethod
    def of(cls, step: Step) -> AggregationRow:
        """The row of a computed step."""
        return cls(
            step.tape_key,
            step.out_state,
            step.theta_start_sha256,
            step.theta_hash,
            step.update_norm,
            step.clipped,
            step.inputs,
        )


def get_aggregation(conn: sqlite3.Connection, run_id: str, w: int) -> AggregationRow | None:
    """The daemon's aggregation of round ``w``, or None."""
    row = conn.execute(
        "SELECT tape_key, out_state, theta_start_sha256, theta_hash, update_norm, clipped,"
        " inputs FROM aggregations WHERE run_id = ? AND w = ?",
        (run_id, w),
    ).fetchone()
    if row is None:
        return None
    inputs = None if row[6] is None else tuple(json.loads(row[6]))
    tape_key, out_state, theta_start, theta_hash, update_norm, clipped = row[:6]
    return AggregationRow(
        tape_key, out_state, theta_start, theta_hash, update_norm, clipped, inputs
    )


def insert_aggregation(
    conn: sqlite3.Connection, run_id: str, w: int, row: AggregationRow, applied_round: int
) -> None:
    """Write round ``w``'s ``aggregations`` row (the daemon's merge or a recorded tape)."""
    conn.execute(
        "INSERT INTO aggregations (run_id, w, tape_key, out_state, theta_start_sha256,"
        " theta_hash, update_norm, clipped, inputs, applied_round)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            run_id,
            w,
            row.tape_key,
            row.out_state,
            row.theta_start_sha256,
            row.theta_hash,
            row.update_norm,
            row.clipped,
            None if row.inputs is None else json.dumps(list(row.inputs)),
            applied_round,
        ),
    )


def step_inputs(conn: sqlite3.Connection, run_id: str, w: int) -> StepInputs:
    """Read the inputs of round ``w``'s step (404 unknown round; 409 when round ``w - 1`` was
    not merged by this daemon, so its OuterState is unknown)."""
    run = get_run(conn, run_id)
    row = get_round_row(conn, run_id, w)
    if row is None:
        raise NotFound(f"round {w} of run {run_id} is not open")
    prev_key = None
    if w > 0:
        prev = get_aggregation(conn, run_id, w - 1)
        if prev is None:
            raise Conflict(f"round {w - 1} of run {run_id} was not aggregated by this daemon")
        prev_key = prev.out_state
    uploads = tuple(
        (hotkey, miner.delta_hash)
        for hotkey, miner in sorted(miner_details(conn, run_id, w).items())
        if miner.delta_hash is not None and miner.status not in FAULT_STATUSES
    )
    return StepInputs(run, row, latest_round(conn), prev_key, uploads)


def commit_step(
    conn: sqlite3.Connection,
    step: Step,
    stored: tuple[ObjectInfo, ...],
    coord: Keypair,
    open_next: bool,
    now: int,
    rewrite: Callable[[sqlite3.Connection], Step] | None = None,
) -> RoundRow | None:
    """Record the step and, with ``open_next`` (False for a run's last round), open round
    ``w + 1`` (module doc, part 3). Returns the opened round; None when nothing was opened.
    A step already recorded is a no-op. ``now`` (unix seconds) dates the stored objects in the
    catalog. ``rewrite`` (a rollback, :mod:`.rollback`) runs after the round's row is inserted
    and returns the step whose state round ``w + 1`` opens from instead."""
    run_id, w = step.run_id, step.w
    if get_aggregation(conn, run_id, w) is not None or get_round_row(conn, run_id, w + 1):
        return None
    if next_round_w(conn, run_id) != w + 1:
        raise Conflict(f"round {w} is not the newest round of run {run_id}")
    run = get_run(conn, run_id)
    row = get_round_row(conn, run_id, w)
    assert row is not None
    d = latest_round(conn)
    d_upload = row.deadlines.d_upload
    if d < d_upload:
        raise Conflict(f"round {w} cannot be aggregated before d_upload = {d_upload} (D = {d})")
    if w > 0:
        previous = get_aggregation(conn, run_id, w - 1)
        prev_state = parse_signed_tape(step.objects[-1]).body.prev_state
        if previous is None or previous.out_state != prev_state:
            # round w - 1 was rolled back meanwhile (POST .../rollback): merge again from it
            raise Conflict(f"round {w}'s merge does not start from round {w - 1}'s applied state")
    for info in stored:
        record_object(conn, info, now)
    insert_aggregation(conn, run_id, w, AggregationRow.of(step), d)
    opener = step if rewrite is None else rewrite(conn)
    if not open_next:
        return None
    plan = plan_round(
        conn, run, active_roster(conn, run_id), w + 1, max(d, d_upload), frozenset(opener.raise_q)
    )
    body = plan.body(
        prev_final_hash=opener.theta_hash,
        theta_hash=opener.theta_hash,
        outer_state_hash=opener.outer_state_hash,
        center_hash=opener.center_hash,
    )
    opened = store_round_open(conn, plan, seal_round_open(coord, run_id, body), body, now=d)
    insert_round_state(conn, run_id, w + 1, StateRow(opener.theta_start_sha256, None), d)
    return opened


@attrs.frozen
class Due:
    """A round the service will merge once D >= ``d_upload``."""

    run_id: str
    w: int
    d_upload: int
    open_next: bool


def audits_settled(conn: sqlite3.Connection, run_id: str, w: int) -> bool:
    """Whether every audit of round ``w`` is settled: the draw ran and each selected miner's
    job has a verdict, was failed for good, or its serve deadline passed. Always true for a run
    whose manifest names no auditor (nobody could ever deliver a verdict)."""
    if not parse_manifest(get_run(conn, run_id).manifest_envelope).auditors:
        return True  # never audited: no draw runs
    if draw_of(conn, run_id, w) is None:
        return False
    d = latest_round(conn)
    return all(
        job.state in ("done", "failed") or d > job.serve_deadline
        for job in jobs_of_round(conn, run_id, w)
    )


def due_rounds(conn: sqlite3.Connection) -> list[Due]:
    """Every running run's newest round that the service merges (module doc). Round ``w`` (which
    opens ``w + 1``) waits until the audits of round ``w - 1`` are settled
    (:func:`audits_settled`), so a round never starts from a theta built on a round whose audit
    is still out (DESIGN.md section 9, the ``w + 2`` rule)."""
    due = []
    for run_id, status in list_runs(conn):
        w = next_round_w(conn, run_id) - 1
        if status != "running" or w < 0 or get_aggregation(conn, run_id, w) is not None:
            continue
        if w > 0 and get_aggregation(conn, run_id, w - 1) is None:
            continue
        if w > 0 and not audits_settled(conn, run_id, w - 1):
            continue
        row = get_round_row(conn, run_id, w)
        assert row is not None
        config = get_run(conn, run_id).config
        total = None if config is None else config.total_rounds
        due.append(Due(run_id, w, row.deadlines.d_upload, total is None or w + 1 < total))
    return due
