"""Aggregator routes (spec 9): what an aggregator reads for round ``w`` and how it opens ``w + 1``.

``GET /v1/aggregator/runs/{id}/rounds/{w}/inputs[?d_open=]`` (admin): ``{run_id, w, state,
now_round, round_open, base, miners[{hotkey, slot, status, delta_manifest}], selected,
rollback, next_round_template, final, finalize_template, finalize_blocked}``; the template
(RoundOpen minus the four state hashes, from
:func:`~hypertrain.coordinator.flows.roundopen.plan_round`, the builder the daemon's aggregator
uses) is null once round ``w + 1`` is open. ``d_open`` defaults to ``max(D, d_upload(w))``
(spec 4.1). ``finalize_template`` is the Finalize body the server accepts for round ``w`` now
(null while ``finalize_blocked`` says why not, or once ``final``). ``rollback_causes`` lists
``{hotkey, verdict_hash}`` of each miner round ``w``'s merge used that now holds a fault verdict
(empty once rolled back): an external aggregator merging round ``w + 1`` rolls ``w`` back
before it opens round ``w + 2`` (:mod:`hypertrain.coordinator.flows.rollback`).

``POST /v1/aggregator/runs/{id}/rounds/{w}/aggregate`` (admin + K_coord RoundOpen(w + 1)
envelope): 400 not a RoundOpen envelope / wrong run, 401 bad signature, 403 signer is not
K_coord, 404 unknown run or round, 409 run not running, round ``w + 1`` already open (or ``w``
not the newest round), ``D < d_upload(w)`` or ``d_open < D``, 422 naming the first template field
that differs from the server's template. The four state hashes are the aggregator's. Answers
``{w, state: "APPLIED", opened}``; the start state is published separately (PUT .../state).

``PUT /v1/aggregator/runs/{id}/rounds/{w}/tape`` (admin, ``{tape_key}``): an external
aggregator records its merge of round ``w`` (:mod:`hypertrain.coordinator.flows.taperecord`).

``POST /v1/aggregator/runs/{id}/rounds/{w}/finalize`` (admin + K_coord Finalize envelope):
400 not a Finalize envelope / wrong run / body ``w`` not the path's, 401 bad signature, 403
signer is not K_coord, 404 unknown run or round, 409 already final or not finalisable yet (the
detail names every blocker: ``D < d_final``, previous round not final, not merged, draw not
run, an unresolved audit or open dispute of a merged miner), 422 naming the first field that
differs from the server's plan (``final_theta_hash_w1``, ``included``, ``entitlements_root``:
:mod:`hypertrain.rounds.finality`). Answers ``{w, state: "FINAL", verdicts}`` and feeds the
ledger (:mod:`hypertrain.coordinator.services.finality`).

``POST /v1/aggregator/runs/{id}/rounds/{w}/rollback`` (admin) ``{rollback, old_tape_w1,
new_tapes: [w, w + 1]}``: an external aggregator's K_coord Rollback of rounds ``w`` and
``w + 1`` (every tape and object uploaded first). The daemon replays both new tapes
(:func:`~hypertrain.aggregator.rollback.verify_rollback`: 422 naming the first item that is not
what the rollback computes), then records it (:func:`~hypertrain.coordinator.flows.rollback.
record_external_rollback`: 409 final, too late (round ``w + 2`` open) or stale; 422 an excluded
miner without a fault verdict). RoundOpen(w + 2) then carries the corrected theta and
``PUT .../rounds/{w + 1}/tape`` the new tape of ``w + 1``. Answers ``{w, excluded}``; 400/401/403
for a bad envelope, signature or signer, 409 a tape or object not in the store.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING

from quart import Response, request
from quart_trio import QuartTrio

from hypertrain.aggregator.outerstate import unpack_outer
from hypertrain.aggregator.rollback import verify_rollback
from hypertrain.aggregator.tape import parse_signed_tape, verify_tape
from hypertrain.coordinator.context import Coordinator
from hypertrain.coordinator.flows.aggregator import (
    RolledBack,
    RoundApplied,
    RoundFinalized,
    RoundInputs,
    TapeRecorded,
    apply_aggregate,
    inputs_view,
)
from hypertrain.coordinator.flows.rollback import (
    RollbackRequest,
    record_external_rollback,
    rollback_facts,
)
from hypertrain.coordinator.flows.taperecord import (
    TapeRequest,
    check_tape_facts,
    record_tape,
    tape_record,
)
from hypertrain.coordinator.web.auth import require_admin
from hypertrain.coordinator.web.http import json_response, read_json
from hypertrain.coordinator.web.routedoc import Doc, Param, add_route, errors
from hypertrain.protocol.converter import structure, unstructure
from hypertrain.protocol.envelope import Envelope, Verified, check_shape, verify
from hypertrain.protocol.errors import Conflict, Malformed
from hypertrain.protocol.messages import Finalize, Rollback
from hypertrain.protocol.validators import int_param, pos_int
from hypertrain.trainer.state import pack_state

if TYPE_CHECKING:
    from hypertrain.coordinator.web.app import AppParts

__all__ = ["register"]


def _d_open_arg() -> int | None:
    raw = request.args.get("d_open")
    return None if raw is None else int_param("d_open", raw, pos_int)


def register(app: QuartTrio, ctx: Coordinator, parts: AppParts) -> None:
    """Add the aggregator routes to ``app``."""

    async def get_inputs(run_id: str, w: int) -> Response:
        require_admin(ctx)
        return json_response(await ctx.db.read(inputs_view, run_id, w, _d_open_arg()))

    def coord_verified(raw: object, run_id: str, kind: str, what: str = "") -> Verified:
        """``raw`` as a K_coord envelope of type ``kind`` for the run (400/401/403 else)."""
        if check_shape(raw).type != kind:
            raise Malformed(f"{what}expected a K_coord {kind} envelope")
        coord = ctx.coord_keypair().ss58
        return verify(
            raw,
            expected_run_id=run_id,
            now_round=ctx.beacon.latest,
            signer_allowed=lambda _type, signer: signer == coord,
        )

    async def post_aggregate(run_id: str, w: int) -> Response:
        require_admin(ctx)
        verified = coord_verified(await read_json(ctx), run_id, "RoundOpen")
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
        return json_response(unstructure(RoundApplied(w, "APPLIED", opened.w)))

    async def put_tape(run_id: str, w: int) -> Response:
        require_admin(ctx)
        wanted = structure(TapeRequest, await read_json(ctx))
        tape = parse_signed_tape(await _stored(wanted.tape_key, "tape"))
        verify_tape(tape, coord_ss58=ctx.coord_keypair().ss58)
        out = unpack_outer(await _stored(tape.body.out_state, "out_state"))
        await ctx.db.read(check_tape_facts, run_id, w, tape, out)
        theta = await ctx.objects.put_bytes(pack_state(out.theta))
        record = tape_record(wanted.tape_key, tape, out, theta.sha256)
        if await ctx.db.write(record_tape, run_id, w, record, theta, int(ctx.wall.now())):
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
        recorded = TapeRecorded(
            run_id=run_id,
            w=w,
            tape_key=record.tape_key,
            theta_hash=record.theta_hash,
            update_norm=record.update_norm,
            clipped=record.clipped,
        )
        return json_response(unstructure(recorded))

    async def post_finalize(run_id: str, w: int) -> Response:
        require_admin(ctx)
        verified = coord_verified(await read_json(ctx), run_id, "Finalize")
        body = verified.message
        assert isinstance(body, Finalize)
        if body.w != w:
            raise Malformed(f"Finalize.w is {body.w}, the path names round {w}")
        plan = await parts.finality.record(verified.envelope, body)
        return json_response(unstructure(RoundFinalized(w, "FINAL", plan.verdicts_json())))

    async def post_rollback(run_id: str, w: int) -> Response:
        require_admin(ctx)
        wanted = structure(RollbackRequest, await read_json(ctx))
        verified = coord_verified(wanted.rollback, run_id, "Rollback", "rollback: ")
        body = verified.message
        assert isinstance(body, Rollback)
        if body.w != w:
            raise Malformed(f"Rollback.w is {body.w}, the path names round {w}")
        manifest, old_w = await ctx.db.read(rollback_facts, run_id, w)
        old = (old_w, wanted.old_tape_w1)
        keys = (*old, *wanted.new_tapes)
        tapes = [parse_signed_tape(await _stored(key, "tape")) for key in keys]
        await parts.run_sync(
            partial(
                verify_rollback,
                body,
                (tapes[0], tapes[1]),
                (tapes[2], tapes[3]),
                run_id=run_id,
                manifest=manifest,
                load_object=_load_stored,
            )
        )
        rows = []
        stored = []
        for key, tape in zip(wanted.new_tapes, tapes[2:], strict=True):
            out = unpack_outer(await _stored(tape.body.out_state, "out_state"))
            theta = await ctx.objects.put_bytes(pack_state(out.theta))
            stored.append(theta)
            rows.append(tape_record(key, tape, out, theta.sha256))
        await ctx.db.write(
            record_external_rollback,
            verified.envelope,
            w,
            old,
            (rows[0], rows[1]),
            body.excluded,
            tuple(stored),
            int(ctx.wall.now()),
        )
        ctx.events.publish(
            "round_state",
            {
                "run_id": run_id,
                "w": w,
                "state": "rolled_back",
                "D": ctx.beacon.latest,
                "excluded": list(body.excluded),
                "theta_hash": body.new_theta_hash_w2,
            },
        )
        return json_response(unstructure(RolledBack(w, body.excluded)))

    def _load_stored(sha256: str) -> bytes:
        if not ctx.objects.exists(sha256):
            raise Conflict(f"object {sha256} is not in the object store")
        return ctx.objects.path_of(sha256).read_bytes()

    async def _stored(sha256: str, what: str) -> bytes:
        if not ctx.objects.exists(sha256):
            raise Conflict(f"{what} object {sha256} is not in the object store")
        return await ctx.objects.get(sha256)

    rounds = "/v1/aggregator/runs/<run_id>/rounds/<u53:w>"
    refusals = errors(401, 403, 409, 422)
    rules: list[tuple[str, str, Callable[..., Awaitable[Response]], str, Doc]] = [
        (
            "tape",
            "tape",
            put_tape,
            "PUT",
            Doc(
                summary="record an external merge's signed tape",
                auth="admin",
                body=TapeRequest,
                answers={200: TapeRecorded},
                errors=refusals,
            ),
        ),
        (
            "inputs",
            "inputs",
            get_inputs,
            "GET",
            Doc(
                summary="what the aggregator merges for round w",
                auth="admin",
                params=(Param(name="d_open", schema=pos_int.schema),),
                answers={200: RoundInputs},
                errors=errors(409),
            ),
        ),
        (
            "rollback",
            "rollback",
            post_rollback,
            "POST",
            Doc(
                summary="roll back round w (K_coord Rollback and the new tapes)",
                auth="admin",
                body=RollbackRequest,
                answers={200: RolledBack},
                errors=refusals,
            ),
        ),
        (
            "finalize",
            "finalize",
            post_finalize,
            "POST",
            Doc(
                summary="finalize round w (K_coord Finalize envelope)",
                auth="admin",
                body=Envelope,
                answers={200: RoundFinalized},
                errors=refusals,
            ),
        ),
        (
            "aggregate",
            "aggregate",
            post_aggregate,
            "POST",
            Doc(
                summary="apply round w and open w+1 (K_coord RoundOpen envelope)",
                auth="admin",
                body=Envelope,
                answers={200: RoundApplied},
                errors=refusals,
            ),
        ),
    ]
    for tail, name, view, method, doc in rules:
        add_route(app, f"{rounds}/{tail}", f"aggregator.{name}", view, method, doc)
