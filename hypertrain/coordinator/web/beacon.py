"""Beacon routes (spec section 9).

- ``POST /v1/admin/beacon`` (admin): the relay's round JSON ``{round, signature, randomness}``
  -> :meth:`Coordinator.ingest_beacon` -> ``{"round", "latest"}``; 400 for a malformed or
  unverifiable round, 409 for another signature of a stored round. Idempotent for a repeat.
- ``GET /v1/beacon/latest`` (none): ``{round, signature, randomness}`` of D, or ``{"round": 0}``
  before the first round.
- ``GET /v1/beacon/info`` (none): the drand ``/info`` JSON of the chain this daemon follows
  (quicknet, or its local chain), what a run manifest's ``beacon`` section must name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from quart import Response
from quart_trio import QuartTrio

from hypertrain.beacon import BeaconRound, get_round
from hypertrain.beacon.chain import DrandInfo
from hypertrain.beacon.ingest import IngestAnswer, NoRound
from hypertrain.coordinator.context import Coordinator
from hypertrain.coordinator.web.auth import require_admin
from hypertrain.coordinator.web.http import json_response, read_json
from hypertrain.coordinator.web.routedoc import Doc, add_route, errors
from hypertrain.protocol.converter import unstructure

if TYPE_CHECKING:
    from hypertrain.coordinator.web.app import AppParts

__all__ = ["register"]


def register(app: QuartTrio, ctx: Coordinator, parts: AppParts) -> None:
    """Add the beacon routes to ``app``."""

    async def post_beacon() -> Response:
        require_admin(ctx)
        rnd = BeaconRound.from_json(await read_json(ctx))
        result = await ctx.ingest_beacon(rnd)
        return json_response(result.to_json())

    async def latest() -> Response:
        d = ctx.beacon.latest
        rnd = await ctx.db.read(get_round, d) if d > 0 else None
        return json_response(unstructure(NoRound(0) if rnd is None else rnd))

    info_json = ctx.chain.to_json()

    async def info() -> Response:
        return json_response(info_json)

    add_route(
        app,
        "/v1/admin/beacon",
        "beacon.post",
        post_beacon,
        "POST",
        Doc(
            summary="store a drand round (the relay's JSON)",
            auth="admin",
            body=BeaconRound,
            answers={200: IngestAnswer},
            errors=errors(409),
        ),
    )
    add_route(
        app,
        "/v1/beacon/info",
        "beacon.info",
        info,
        "GET",
        Doc(summary="the drand /info JSON of the chain followed", answers={200: DrandInfo}),
    )
    add_route(
        app,
        "/v1/beacon/latest",
        "beacon.latest",
        latest,
        "GET",
        Doc(
            summary="D's round, or {round: 0} before the first",
            answers={200: BeaconRound | NoRound},
        ),
    )
