"""Dispute routes (spec 9, 6.4; issue 14): the miner's Dispute, the parties' Bisects, the
referee's Resolution and the public dispute views.

==============================================  ===============================================
``POST /v1/runs/{id}/dispute``                  Dispute envelope (M) -> ``{dispute_id, state}``
``POST /v1/runs/{id}/bisect``                   Bisect envelope -> ``{dispute_id, seq, state,
                                                stage, referee}``
``POST /v1/runs/{id}/resolution``               worker token + Resolution envelope ->
                                                ``{dispute_id, loser, state}``
``GET /v1/runs/{id}/disputes``                  ``?state=&party=&referee=1`` -> ``{run_id,
                                                disputes: [view]}``
``GET /v1/runs/{id}/disputes/{dispute_id}``     the dispute's view
==============================================  ===============================================

The decisions are :mod:`hypertrain.coordinator.flows.disputes`'s, one write each; every change
is published as a ``dispute`` event after the write committed. A Bisect needs no metagraph
check (spec 9): its signer must be a party of the dispute, which the flow checks.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Final

from quart import Response, request
from quart_trio import QuartTrio

from hypertrain.coordinator.context import Coordinator
from hypertrain.coordinator.flows.disputes import (
    disputes_list,
    get_dispute_view,
    post_bisect,
    post_dispute,
    post_resolution,
)
from hypertrain.coordinator.flows.disputewire import (
    BisectTaken,
    DisputeOpened,
    DisputeResolved,
    DisputesList,
    DisputeView,
)
from hypertrain.coordinator.flows.miner import signer_of
from hypertrain.coordinator.web.auth import require_worker
from hypertrain.coordinator.web.http import json_response, read_json
from hypertrain.coordinator.web.routedoc import Doc, Param, add_route, errors
from hypertrain.protocol.envelope import Envelope
from hypertrain.protocol.errors import Malformed
from hypertrain.protocol.ss58 import SS58_RE
from hypertrain.protocol.validators import HEX64_RE, hex64, is_ss58_address, pattern

if TYPE_CHECKING:
    from hypertrain.coordinator.web.app import AppParts

__all__ = ["register"]

_STATES: Final = frozenset({"open", "accepted", "resolved"})
_FLAGS: Final = {"1": True, "true": True, "0": False, "false": False}


def _filters() -> tuple[str | None, str | None, bool]:
    state = request.args.get("state")
    if state is not None and state not in _STATES:
        raise Malformed(f"state: expected one of {sorted(_STATES)}, got {state!r}")
    party = request.args.get("party")
    if party is not None and not is_ss58_address(party):
        raise Malformed(f"party: {party!r} is not an SS58 address")
    flag = request.args.get("referee", "0")
    if flag not in _FLAGS:
        raise Malformed(f"referee: expected 1 or 0, got {flag!r}")
    return state, party, _FLAGS[flag]


def register(app: QuartTrio, ctx: Coordinator, parts: AppParts) -> None:
    """Add the dispute routes to ``app``."""

    async def dispute(run_id: str) -> Response:
        raw = await read_json(ctx)
        await ctx.metagraph.check(signer_of(raw))
        answer, event = await ctx.db.write(post_dispute, run_id, raw)
        ctx.events.publish("dispute", event)
        return json_response(answer)

    async def bisect(run_id: str) -> Response:
        raw = await read_json(ctx)
        answer, events = await ctx.db.write(post_bisect, run_id, raw)
        for event in events:
            ctx.events.publish("dispute", event)
        return json_response(answer)

    async def resolution(run_id: str) -> Response:
        require_worker(ctx)
        raw = await read_json(ctx)
        coord = ctx.coord_keypair()
        answer, event = await ctx.db.write(post_resolution, run_id, raw, coord)
        ctx.events.publish("dispute", event)
        return json_response(answer)

    async def listing(run_id: str) -> Response:
        state, party, referee = _filters()
        listed = functools.partial(disputes_list, state=state, party=party, referee=referee)
        return json_response(await ctx.db.read(listed, run_id))

    async def one(run_id: str, dispute_id: str) -> Response:
        hex64.check_param("dispute_id", dispute_id)
        return json_response(await ctx.db.read(get_dispute_view, run_id, dispute_id))

    runs = "/v1/runs/<run_id>"
    refusals = errors(401, 403, 409, 422)
    filters = (
        Param(name="state", schema={"enum": sorted(_STATES)}),
        Param(name="party", schema=pattern(SS58_RE)),
        Param(name="referee", schema={"enum": sorted(_FLAGS)}),
    )
    rules: list[tuple[str, str, Callable[..., Awaitable[Response]], str, Doc]] = [
        (
            f"{runs}/dispute",
            "dispute",
            dispute,
            "POST",
            Doc(
                summary="dispute a verdict (Dispute envelope)",
                body=Envelope,
                answers={200: DisputeOpened},
                errors=errors(401, 403, 409, 422, 503),
            ),
        ),
        (
            f"{runs}/bisect",
            "bisect",
            bisect,
            "POST",
            Doc(
                summary="a party's bisection step (Bisect envelope)",
                body=Envelope,
                answers={200: BisectTaken},
                errors=refusals,
            ),
        ),
        (
            f"{runs}/resolution",
            "resolution",
            resolution,
            "POST",
            Doc(
                summary="the referee's Resolution envelope",
                auth="worker",
                body=Envelope,
                answers={200: DisputeResolved},
                errors=refusals,
            ),
        ),
        (
            f"{runs}/disputes",
            "list",
            listing,
            "GET",
            Doc(summary="a run's disputes", params=filters, answers={200: DisputesList}),
        ),
        (
            f"{runs}/disputes/<dispute_id>",
            "one",
            one,
            "GET",
            Doc(
                summary="one dispute",
                path={"dispute_id": pattern(HEX64_RE)},
                answers={200: DisputeView},
            ),
        ),
    ]
    for rule, name, view, method, doc in rules:
        add_route(app, rule, f"disputes.{name}", view, method, doc)
