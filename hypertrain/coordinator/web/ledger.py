"""The ledger's routes (spec 8, 9): ``get_weights`` for the Cortex master, admin clawback.

``GET /internal/v1/get_weights?epoch=E[&epoch_at=T]`` (internal: bearer internal token, 401
without or wrong, 503 when its file is missing; ``X-Platform-Challenge-Slug`` must equal the
slug, else 403): the ledger's canonical answer bytes for chain epoch ``E``, always 200 once
authorised (empty weights while nothing vested; an out-of-order request answers with reason
``out_of_order`` and pays nothing). ``epoch_at`` defaults to ``genesis + (E + 1) *
epoch_seconds``, the epoch's end. Both are integers in ``[0, 2^53-1]``, and at most
:data:`FUTURE_EPOCHS` ahead of the chain's current epoch (400 naming the parameter
otherwise). A repeated request for an answered epoch returns the stored bytes. 503 when the
coordinator has no ledger; 409 if the ledger refuses. Final rounds not yet in the ledger are fed
to it first.

``POST /v1/admin/runs/{id}/clawback`` (admin) ``{hotkey, units}``: burn up to ``units`` of the
hotkey's outstanding escrow, the rest becomes debt repaid from its later grants (spec 8; paid
units are never recalled). 404 unknown run, 400 a bad hotkey or ``units`` not in ``[1,
2^53-1]``, 503 no ledger. Answers ``{run_id, hotkey, units, burned, debt}``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final

from attrs import field, frozen
from quart import Response, request
from quart_trio import QuartTrio

from hypertrain.coordinator.context import Coordinator
from hypertrain.coordinator.tables.runs import get_run
from hypertrain.coordinator.web.auth import require_admin, require_internal
from hypertrain.coordinator.web.http import json_response, read_json
from hypertrain.coordinator.web.routedoc import Doc, Param, add_route, errors
from hypertrain.ledger import LedgerRefused
from hypertrain.ledger.answers import WeightsAnswer
from hypertrain.protocol.converter import structure, unstructure
from hypertrain.protocol.errors import Conflict, Malformed, NotConfigured
from hypertrain.protocol.validators import int_param, pos_int, ss58, u_int

if TYPE_CHECKING:
    from hypertrain.coordinator.web.app import AppParts

log = logging.getLogger(__name__)

__all__ = ["WEIGHTS_ROUTE", "ClawbackAnswer", "ClawbackRequest", "int_arg", "register"]

WEIGHTS_ROUTE: Final = "/internal/v1/get_weights"
FUTURE_EPOCHS: Final = 1
"""How far ahead of the chain's current epoch (by D's chain time) an answer may be asked for:
the Cortex master asks for the epoch that is ending, so one epoch of slack covers a beacon
behind the wall clock. Further ahead is a 400: an answer once given is final, and a far-future
``epoch_at`` would make every later event wait for it."""


@frozen
class ClawbackRequest:
    """The clawback body."""

    hotkey: str = field(validator=ss58)
    units: int = field(validator=pos_int)


@frozen(kw_only=True)
class ClawbackAnswer:
    """The clawback's split: ``burned`` from the miner's pending units, the rest ``debt``."""

    run_id: str
    hotkey: str = field(validator=ss58)
    units: int = field(validator=pos_int)
    burned: int = field(validator=u_int)
    debt: int = field(validator=u_int)


def int_arg(name: str) -> int | None:
    """Query parameter ``name`` as an int in ``[0, 2^53-1]``; None when absent; 400 else."""
    raw = request.args.get(name)
    return None if raw is None else int_param(name, raw, u_int)


def register(app: QuartTrio, ctx: Coordinator, parts: AppParts) -> None:
    """Add the internal routes to ``app``."""

    async def get_weights() -> Response:
        require_internal(ctx)
        epoch = int_arg("epoch")
        if epoch is None:
            raise Malformed("epoch: the query parameter is required")
        epoch_at = int_arg("epoch_at")
        feed = ctx.ledger
        if feed is None:
            raise NotConfigured("the ledger is not open on this coordinator")
        clock = feed.clock
        now = clock.time_of_drand(ctx.beacon.latest)
        current = clock.params.epoch_of(now)
        if epoch > current + FUTURE_EPOCHS:
            raise Malformed(
                f"epoch: {epoch} is in the future (the chain is in epoch {current}, D ="
                f" {ctx.beacon.latest})"
            )
        if epoch_at is None:
            epoch_at = clock.start_of_epoch(epoch + 1)
        latest_at = clock.start_of_epoch(current + FUTURE_EPOCHS + 1)
        if epoch_at > latest_at:
            raise Malformed(
                f"epoch_at: {epoch_at} is in the future (the chain's time is {now}; at most"
                f" {latest_at})"
            )
        await feed.sync(ctx.db)
        try:
            answer = feed.ledger.get_weights(epoch, epoch_at, int(ctx.wall.now()))
        except LedgerRefused as e:
            raise Conflict(f"get_weights refused: {e}") from e
        return Response(answer, status=200, content_type="application/json")

    async def post_clawback(run_id: str) -> Response:
        require_admin(ctx)
        wanted = structure(ClawbackRequest, await read_json(ctx))
        await ctx.db.read(get_run, run_id)
        feed = ctx.ledger
        if feed is None:
            raise NotConfigured("the ledger is not open on this coordinator")
        try:
            split = feed.ledger.clawback(
                wanted.hotkey, wanted.units, feed.event_time(ctx.beacon.latest)
            )
        except LedgerRefused as e:
            raise Conflict(f"clawback refused: {e}") from e
        log.warning(
            "clawback of %d units from %s (run %s): %d burned, %d debt",
            wanted.units,
            wanted.hotkey,
            run_id,
            split.burned,
            split.debt,
        )
        answer = ClawbackAnswer(
            run_id=run_id,
            hotkey=wanted.hotkey,
            units=wanted.units,
            burned=split.burned,
            debt=split.debt,
        )
        return json_response(unstructure(answer))

    add_route(
        app,
        WEIGHTS_ROUTE,
        "ledger.get_weights",
        get_weights,
        "GET",
        Doc(
            summary="the canonical weights answer of an epoch (spec 8)",
            auth="internal",
            params=(
                Param(name="epoch", schema=u_int.schema, required=True),
                Param(name="epoch_at", schema=u_int.schema),
            ),
            answers={200: WeightsAnswer},
            errors=errors(409),
        ),
    )
    add_route(
        app,
        "/v1/admin/runs/<run_id>/clawback",
        "ledger.clawback",
        post_clawback,
        "POST",
        Doc(
            summary="claw units back from a miner (burned, the rest as debt)",
            auth="admin",
            body=ClawbackRequest,
            answers={200: ClawbackAnswer},
            errors=errors(409),
        ),
    )
