"""Aggregator routes (spec 9): what an aggregator reads for round ``w`` and how it opens ``w + 1``.

``GET /v1/aggregator/runs/{id}/rounds/{w}/inputs[?d_open=]`` (admin): ``{run_id, w, state,
now_round, round_open, base, miners[{hotkey, slot, status, delta_manifest}], selected,
rollback, next_round_template}``; the template (RoundOpen minus the four state hashes, from
:func:`~hypertrain.coordinator.roundopen.plan_round`, the builder the daemon's aggregator uses)
is null once round ``w + 1`` is open. ``d_open`` defaults to ``max(D, d_upload(w))`` (spec 4.1).

``POST /v1/aggregator/runs/{id}/rounds/{w}/aggregate`` (admin + K_coord RoundOpen(w + 1)
envelope): 400 not a RoundOpen envelope / wrong run, 401 bad signature, 403 signer is not
K_coord, 404 unknown run or round, 409 run not running, round ``w + 1`` already open (or ``w``
not the newest round), ``D < d_upload(w)`` or ``d_open < D``, 422 naming the first template field
that differs from the server's template. The four state hashes are the aggregator's. Answers
``{w, state: "APPLIED", opened}``; the start state is published separately (PUT .../state).

``PUT /v1/aggregator/runs/{id}/rounds/{w}/tape`` (admin, ``{tape_key}``): an external
aggregator records its merge of round ``w`` (:mod:`hypertrain.coordinator.taperecord`).
"""

from __future__ import annotations

import sqlite3
from typing import Any

from quart import Response, request
from quart_trio import QuartTrio

from hypertrain.aggregator.outerstate import unpack_outer
from hypertrain.aggregator.tape import parse_signed_tape, verify_tape
from hypertrain.beacon.ingest import latest_round
from hypertrain.coordinator.auth import require_admin
from hypertrain.coordinator.context import Coordinator
from hypertrain.coordinator.http import json_response, read_json
from hypertrain.coordinator.roundopen import TEMPLATE_FIELDS, open_planned, plan_round
from hypertrain.coordinator.roundstore import RoundRow, get_round_row
from hypertrain.coordinator.roundview import round_facts
from hypertrain.coordinator.runs import active_roster, get_run, next_round_w
from hypertrain.coordinator.taperecord import (
    TapeRequest,
    check_tape_facts,
    record_tape,
    tape_record,
)
from hypertrain.protocol.converter import structure, unstructure
from hypertrain.protocol.envelope import Verified, check_shape, verify
from hypertrain.protocol.errors import Conflict, ContractMismatch, Malformed, NotFound
from hypertrain.protocol.messages import RoundOpen
from hypertrain.store.catalog import record_object
from hypertrain.trainer.state import pack_state

__all__ = ["apply_aggregate", "inputs_view", "register"]


def inputs_view(
    conn: sqlite3.Connection, run_id: str, w: int, d_open: int | None
) -> dict[str, Any]:
    """The ``/inputs`` answer (module doc); 404 for an unknown run or round."""
    facts = round_facts(conn, run_id, w)
    template = None
    if get_round_row(conn, run_id, w + 1) is None and facts.run.config is not None:
        default = max(facts.D, facts.round.deadlines.d_upload)
        members = active_roster(conn, run_id)
        plan = plan_round(conn, facts.run, members, w + 1, default if d_open is None else d_open)
        template = plan.template_json()
    miners = []
    for hotkey, slot, status in facts.miners:
        row = facts.details.get(hotkey)
        posted = None if row is None else row.view_json()["delta_manifest"]
        miners.append({"hotkey": hotkey, "slot": slot, "status": status, "delta_manifest": posted})
    return {
        "run_id": run_id,
        "w": w,
        "state": facts.state.value,
        "now_round": facts.D,
        "round_open": facts.round.envelope_json(),
        "base": facts.round.base,
        "miners": miners,
        "selected": None,
        "rollback": None,
        "next_round_template": template,
    }


def apply_aggregate(conn: sqlite3.Connection, run_id: str, w: int, verified: Verified) -> RoundRow:
    """Check the posted RoundOpen(w + 1) against the server's template and open it (one
    write; module doc)."""
    run = get_run(conn, run_id)
    row = get_round_row(conn, run_id, w)
    if row is None:
        raise NotFound(f"round {w} of run {run_id} is not open")
    if not run.running:
        raise Conflict(f"run {run_id} is {run.status}, not running")
    if next_round_w(conn, run_id) != w + 1:
        raise Conflict(f"round {w} of run {run_id} is already aggregated (round {w + 1} is open)")
    d = latest_round(conn)
    if d < row.deadlines.d_upload:
        raise Conflict(f"round {w} cannot be aggregated before d_upload {row.deadlines.d_upload}")
    body = verified.message
    assert isinstance(body, RoundOpen)
    if body.d_open < d:
        raise Conflict(f"d_open {body.d_open} is before D = {d}")
    plan = plan_round(conn, run, active_roster(conn, run_id), w + 1, body.d_open)
    wanted = plan.template_json()
    got = unstructure(body)
    for name in TEMPLATE_FIELDS:
        if got[name] != wanted[name]:
            raise ContractMismatch(
                f"RoundOpen.{name} is {got[name]!r:.200}, the server's template has"
                f" {wanted[name]!r:.200}"
            )
    return open_planned(conn, plan, verified.envelope, body, now=d)


def _d_open_arg() -> int | None:
    raw = request.args.get("d_open")
    if raw is None:
        return None
    if not raw.isdigit() or int(raw) < 1:
        raise Malformed(f"d_open must be a positive integer, got {raw!r:.40}")
    return int(raw)


def register(app: QuartTrio, ctx: Coordinator) -> None:
    """Add the aggregator routes to ``app``."""

    async def get_inputs(run_id: str, w: int) -> Response:
        await require_admin(ctx)
        return json_response(await ctx.db.read(inputs_view, run_id, w, _d_open_arg()))

    async def post_aggregate(run_id: str, w: int) -> Response:
        await require_admin(ctx)
        coord = ctx.coord_keypair().ss58
        raw = await read_json(ctx)
        if check_shape(raw).type != "RoundOpen":
            raise Malformed("expected a K_coord RoundOpen envelope")
        verified = verify(
            raw,
            expected_run_id=run_id,
            now_round=ctx.beacon.latest,
            signer_allowed=lambda _type, signer: signer == coord,
        )
        opened = await ctx.db.write(apply_aggregate, run_id, w, verified)
        ctx.events.publish(
            "round_state",
            {
                "run_id": run_id,
                "w": w,
                "state": "aggregated",
                "D": ctx.beacon.latest,
                "opened": opened.w,
            },
        )
        return json_response({"w": w, "state": "APPLIED", "opened": opened.w})

    async def put_tape(run_id: str, w: int) -> Response:
        await require_admin(ctx)
        wanted = structure(TapeRequest, await read_json(ctx))
        tape = parse_signed_tape(await _stored(wanted.tape_key, "tape"))
        verify_tape(tape, coord_ss58=ctx.coord_keypair().ss58)
        out = unpack_outer(await _stored(tape.body.out_state, "out_state"))
        await ctx.db.read(check_tape_facts, run_id, w, tape, out)
        theta = await ctx.objects.put_bytes(pack_state(out.theta))
        await ctx.db.write(record_object, theta, int(ctx.wall.now()))
        record = tape_record(wanted.tape_key, tape, out, theta.sha256)
        if await ctx.db.write(record_tape, run_id, w, record):
            ctx.events.publish(
                "round_state",
                {
                    "run_id": run_id,
                    "w": w,
                    "state": "aggregated",
                    "D": ctx.beacon.latest,
                    "tape_key": record.tape_key,
                    "theta_hash": record.theta_hash,
                },
            )
        return json_response(
            {
                "run_id": run_id,
                "w": w,
                "tape_key": record.tape_key,
                "theta_hash": record.theta_hash,
                "update_norm": record.update_norm,
                "clipped": record.clipped,
            }
        )

    async def _stored(sha256: str, what: str) -> bytes:
        if not ctx.objects.exists(sha256):
            raise Conflict(f"{what} object {sha256} is not in the object store")
        return await ctx.objects.get(sha256)

    app.add_url_rule(
        "/v1/aggregator/runs/<run_id>/rounds/<int:w>/tape",
        "aggregator.tape",
        put_tape,
        methods=["PUT"],
    )
    app.add_url_rule(
        "/v1/aggregator/runs/<run_id>/rounds/<int:w>/inputs",
        "aggregator.inputs",
        get_inputs,
        methods=["GET"],
    )
    app.add_url_rule(
        "/v1/aggregator/runs/<run_id>/rounds/<int:w>/aggregate",
        "aggregator.aggregate",
        post_aggregate,
        methods=["POST"],
    )
