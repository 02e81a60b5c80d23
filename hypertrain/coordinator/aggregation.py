"""One aggregation step of the daemon: merge round ``w``, open round ``w + 1`` (spec 7, 9).

The step runs in three parts, so that a daemon stopped anywhere finishes it exactly once:

1. :func:`step_inputs` (one read): the run, round ``w``, D, the previous OuterState's object
   key (``None`` for ``w = 0``: the genesis state ``OuterState.genesis(init_params(model))``,
   whose ``TH(theta)`` must be round 0's ``theta_hash``) and every ``UPLOADED`` miner's
   ``delta_hash``.
2. :func:`compute_step`: decode each delta from the object store (a payload that does not
   decode or fit the model is *excluded*, never fatal), :func:`~hypertrain.aggregator.merge.
   aggregate_round` with the manifest's outer params, the new OuterState blob
   (:func:`~hypertrain.aggregator.outerstate.pack_outer`), the theta-only start state of round
   ``w + 1`` (:func:`~hypertrain.trainer.state.pack_state`) and the K_coord-signed tape. Every
   byte is a function of the stored inputs (ed25519 signatures are deterministic), so a
   recomputation after a crash gives the same objects under the same keys;
   :func:`store_objects` writes them (content addressed: idempotent).
3. :func:`commit_step` (one write, after the objects are stored): the ``aggregations`` row,
   RoundOpen(w + 1) built by :func:`~hypertrain.coordinator.roundopen.plan_round` from the
   current roster at ``d_open = max(D, d_upload(w))`` (spec 4.1's default) with
   ``prev_final_hash = theta_hash = TH(theta')`` and the outer/center hashes of the new state,
   and round ``w + 1``'s published start state. A round ``w + 1`` already open makes it a no-op.
"""

from __future__ import annotations

import json
import logging
import sqlite3

from attrs import frozen

from hypertrain.aggregator.merge import Params, aggregate_round, norm, validate_delta
from hypertrain.aggregator.outerstate import OuterState, pack_outer, state_key, unpack_outer
from hypertrain.aggregator.tape import build_tape_body, seal_tape, tape_bytes, tape_key
from hypertrain.beacon.ingest import latest_round
from hypertrain.coordinator.minerstore import StateRow, insert_round_state, miner_details
from hypertrain.coordinator.roundopen import (
    open_planned,
    parse_manifest,
    plan_round,
    seal_round_open,
)
from hypertrain.coordinator.roundstore import RoundRow, get_round_row
from hypertrain.coordinator.runs import RunRow, active_roster, get_run, next_round_w
from hypertrain.protocol.errors import Conflict, ContractMismatch, Malformed, NotFound
from hypertrain.protocol.keys import Keypair
from hypertrain.store import ObjectStore
from hypertrain.store.catalog import record_object
from hypertrain.store.objects import ObjectInfo
from hypertrain.trainer.codec import F32Array, decode_payload
from hypertrain.trainer.params import init_params
from hypertrain.trainer.state import pack_state

__all__ = [
    "AggregationRow",
    "Step",
    "StepInputs",
    "commit_step",
    "compute_step",
    "get_aggregation",
    "step_inputs",
    "store_objects",
]

log = logging.getLogger(__name__)


@frozen
class StepInputs:
    """What one step reads from the database (module doc, part 1)."""

    run: RunRow
    round: RoundRow
    D: int
    prev_state_key: str | None
    """The stored OuterState of round ``w - 1``; None for ``w = 0`` (genesis)."""
    uploads: tuple[tuple[str, str], ...]
    """``(hotkey, delta_hash)`` of every UPLOADED miner, by hotkey."""


@frozen
class AggregationRow:
    """One ``aggregations`` row."""

    tape_key: str
    out_state: str
    theta_start_sha256: str
    theta_hash: str
    update_norm: float
    clipped: int


def get_aggregation(conn: sqlite3.Connection, run_id: str, w: int) -> AggregationRow | None:
    """The daemon's aggregation of round ``w``, or None."""
    row = conn.execute(
        "SELECT tape_key, out_state, theta_start_sha256, theta_hash, update_norm, clipped"
        " FROM aggregations WHERE run_id = ? AND w = ?",
        (run_id, w),
    ).fetchone()
    return None if row is None else AggregationRow(*row)


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
    uploads = []
    for hotkey, miner in sorted(miner_details(conn, run_id, w).items()):
        if miner.status == "UPLOADED" and miner.delta_manifest is not None:
            uploads.append((hotkey, str(json.loads(miner.delta_manifest)["body"]["delta_hash"])))
    return StepInputs(run, row, latest_round(conn), prev_key, tuple(uploads))


@frozen(eq=False)
class Step:
    """A computed step: the objects to store and the facts the write records."""

    run_id: str
    w: int
    objects: tuple[bytes, ...]
    tape_key: str
    out_state: str
    theta_start_sha256: str
    theta_hash: str
    outer_state_hash: str
    center_hash: str
    update_norm: float
    clipped: int


async def _prev_state(objects: ObjectStore, inputs: StepInputs) -> tuple[OuterState, bytes]:
    if inputs.prev_state_key is not None:
        blob = await objects.get(inputs.prev_state_key)
        return unpack_outer(blob), blob
    manifest = parse_manifest(inputs.run.manifest_envelope)
    state = OuterState.genesis(init_params(manifest.model))
    if state.theta_hash() != inputs.round.body.theta_hash:
        raise ContractMismatch(
            f"genesis TH(theta) {state.theta_hash()} is not round 0's theta_hash"
            f" {inputs.round.body.theta_hash}"
        )
    return state, pack_outer(state)


async def compute_step(objects: ObjectStore, inputs: StepInputs, coord: Keypair) -> Step:
    """Merge round ``w`` from the stored inputs (module doc, part 2)."""
    run_id, w = inputs.run.run_id, inputs.round.w
    prev, prev_blob = await _prev_state(objects, inputs)
    shapes = prev.shapes()
    deltas: dict[str, dict[str, F32Array]] = {}
    excluded: list[str] = []
    for hotkey, delta_hash in inputs.uploads:
        try:
            delta = decode_payload(await objects.get(delta_hash))
            validate_delta(hotkey, delta, shapes)
        except (Malformed, NotFound) as e:
            log.warning("round %d: excluding %s: %s", w, hotkey, e)
            excluded.append(hotkey)
            continue
        deltas[hotkey] = delta
    params = Params.from_outer(parse_manifest(inputs.run.manifest_envelope).outer)
    result = aggregate_round(prev, deltas, params, excluded=excluded)
    out = result.state_out
    out_blob = pack_outer(out)
    theta_blob = pack_state(out.theta)
    body = build_tape_body(
        run_id,
        w,
        params,
        state_key(prev_blob),
        prev,
        result,
        state_key(out_blob),
        dict(inputs.uploads),
        excluded,
    )
    signed = seal_tape(coord, body)
    return Step(
        run_id=run_id,
        w=w,
        objects=(prev_blob, out_blob, theta_blob, tape_bytes(signed)),
        tape_key=tape_key(signed),
        out_state=state_key(out_blob),
        theta_start_sha256=state_key(theta_blob),
        theta_hash=out.theta_hash(),
        outer_state_hash=out.outer_state_hash(),
        center_hash=out.center_hash(),
        update_norm=norm(result.g),
        clipped=len(result.preclipped),
    )


async def store_objects(objects: ObjectStore, step: Step) -> tuple[ObjectInfo, ...]:
    """Store the step's objects (idempotent: content addressed)."""
    return tuple([await objects.put_bytes(blob) for blob in step.objects])


def commit_step(
    conn: sqlite3.Connection,
    step: Step,
    stored: tuple[ObjectInfo, ...],
    coord: Keypair,
    open_next: bool = True,
) -> RoundRow | None:
    """Record the step and, with ``open_next`` (False for a run's last round), open round
    ``w + 1`` (module doc, part 3). Returns the opened round; None when nothing was opened.
    A step already recorded is a no-op."""
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
    for info in stored:
        record_object(conn, info, d)
    conn.execute(
        "INSERT INTO aggregations (run_id, w, tape_key, out_state, theta_start_sha256,"
        " theta_hash, update_norm, clipped, applied_round) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            run_id,
            w,
            step.tape_key,
            step.out_state,
            step.theta_start_sha256,
            step.theta_hash,
            step.update_norm,
            step.clipped,
            d,
        ),
    )
    if not open_next:
        return None
    plan = plan_round(conn, run, active_roster(conn, run_id), w + 1, max(d, d_upload))
    body = plan.body(
        prev_final_hash=step.theta_hash,
        theta_hash=step.theta_hash,
        outer_state_hash=step.outer_state_hash,
        center_hash=step.center_hash,
    )
    opened = open_planned(conn, plan, seal_round_open(coord, run_id, body), body, now=d)
    insert_round_state(conn, run_id, w + 1, StateRow(step.theta_start_sha256, None), d)
    return opened
