"""Run lifecycle routes (spec section 9): create, configure, roster, pause, honeypots, reads.

Admin (bearer admin token; 401/503 from :func:`require_admin`):

- ``POST /v1/admin/runs``: owner-signed RunManifest envelope -> 201 ``{run_id, status:
  "created"}`` (:func:`hypertrain.coordinator.flows.lifecycle.create_run`: 400/401/403 envelope,
  422 run_id / coord_pubkey / ledger mismatch, 409 no beacon or a run exists, 503 owner hotkey
  or K_coord not configured);
- ``PUT /v1/admin/runs/{id}/config`` -> ``{run_id, config}`` (400 bad body, 404, 409 running);
- ``PUT /v1/admin/runs/{id}/roster/{hotkey}`` -> the roster row (400 bad hotkey or body, 404);
  ``DELETE`` -> ``{hotkey, removed: true}`` (404 when never admitted);
- ``PUT /v1/admin/runs/{id}/paused`` -> ``{run_id, status}`` (409 naming what unpausing
  lacks; the first unpause opens round 0, 503 without K_coord);
- ``PUT /v1/admin/runs/{id}/honeypot`` -> ``{run_id, honeypot_commit}``;
  ``POST .../honeypot/reveal`` -> ``{commitment, verified: true}`` (422/404/409).

Public (no auth; each one read transaction): ``GET /v1/runs``, ``GET /v1/runs/{id}``,
``GET /v1/runs/{id}/roster``, ``GET /v1/runs/{id}/rounds/{w}``, ``GET /run/{id}/auditor-stats``
and its ``/v1/runs/{id}/`` alias. The run view pages its rounds, the roster view the roster and
the round view its miners: ``?offset=&limit=&full=`` (:mod:`hypertrain.coordinator.flows.pages`;
400 naming a bad parameter); the three answer through the answer cache. Bodies are read
with :func:`read_json` (413 over the body limit, 400 duplicate keys).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Final

import attrs
from quart import Response, request
from quart_trio import QuartTrio

from hypertrain.coordinator.context import Coordinator
from hypertrain.coordinator.flows.auditstats import AuditorStats, EpochClock, auditor_stats
from hypertrain.coordinator.flows.honeypots import (
    HoneypotCommitRequest,
    HoneypotCommitted,
    HoneypotReveal,
    HoneypotVerified,
    commit_honeypot,
    reveal_honeypot,
)
from hypertrain.coordinator.flows.lifecycle import (
    ConfigAnswer,
    LedgerParams,
    PausedAnswer,
    RosterRemoved,
    RunCreated,
    create_run,
    set_paused,
)
from hypertrain.coordinator.flows.pages import MAX_LIMIT, page_of
from hypertrain.coordinator.flows.runview import RunsList, roster_view, run_view, runs_list
from hypertrain.coordinator.flows.viewwire import RosterView, RoundView, RunView
from hypertrain.coordinator.tables.runs import (
    PausedRequest,
    RosterRequest,
    RosterRow,
    remove_roster,
    set_config,
    upsert_roster,
)
from hypertrain.coordinator.web.auth import require_admin
from hypertrain.coordinator.web.http import cached_json_response, json_response, read_json
from hypertrain.coordinator.web.routedoc import Doc, Param, add_route, errors
from hypertrain.protocol.converter import structure, unstructure
from hypertrain.protocol.envelope import Envelope
from hypertrain.protocol.errors import Malformed, NotConfigured
from hypertrain.protocol.ss58 import SS58_RE
from hypertrain.protocol.validators import U53_SCHEMA, is_ss58_address, pattern
from hypertrain.rounds.deadlines import RunConfig

if TYPE_CHECKING:
    from hypertrain.coordinator.web.app import AppParts

__all__ = ["PAGE_PARAMS", "register"]

PAGE_PARAMS: Final = (
    Param(name="offset", schema=U53_SCHEMA, description="items to skip (default 0)"),
    Param(
        name="limit",
        schema={"type": "integer", "minimum": 1, "maximum": MAX_LIMIT},
        description="items to answer at most",
    ),
    Param(name="full", schema={"enum": ["0", "1"]}, description="1: with the envelopes"),
)
"""The query of a paged view (:mod:`hypertrain.coordinator.flows.pages`)."""


def _check_hotkey(hotkey: str) -> None:
    if not is_ss58_address(hotkey):
        raise Malformed(f"hotkey {hotkey!r} is not an SS58 address (prefix 42, valid checksum)")


def register(app: QuartTrio, ctx: Coordinator, parts: AppParts) -> None:
    """Add the run lifecycle routes to ``app``."""
    service = parts.runs
    settings = ctx.settings
    ledger = LedgerParams(
        epochs_per_round=settings.epochs_per_round,
        vest_rounds=settings.vest_rounds,
        forgive_per_epoch=settings.forgive_per_epoch,
    )

    async def post_run() -> Response:
        require_admin(ctx)
        owner = settings.owner_hotkey
        if owner is None:
            raise NotConfigured("owner hotkey not configured (HYPERTRAIN_OWNER_HOTKEY is unset)")
        coord = ctx.coord_keypair().ss58
        raw = await read_json(ctx)
        now = int(ctx.wall.now())

        def create(conn: sqlite3.Connection) -> str:
            return create_run(
                conn, raw, owner=owner, coord=coord, ledger=ledger, chain=ctx.chain, now=now
            )

        run_id = await ctx.db.write(create)
        service.publish_run(run_id, "created")
        return json_response(unstructure(RunCreated(run_id, "created")), 201)

    async def put_config(run_id: str) -> Response:
        require_admin(ctx)
        config = structure(RunConfig, await read_json(ctx))
        await ctx.db.write(set_config, run_id, config)
        config_json = unstructure(config)
        service.publish_run(run_id, "configured", config=config_json)
        return json_response(unstructure(ConfigAnswer(run_id, config)))

    async def put_roster(run_id: str, hotkey: str) -> Response:
        require_admin(ctx)
        _check_hotkey(hotkey)
        entry = structure(RosterRequest, await read_json(ctx))
        row = await ctx.db.write(upsert_roster, run_id, hotkey, entry)
        service.publish_run(run_id, "roster", hotkey=hotkey, removed=False)
        return json_response(unstructure(row))

    async def delete_roster(run_id: str, hotkey: str) -> Response:
        require_admin(ctx)
        _check_hotkey(hotkey)
        await ctx.db.write(remove_roster, run_id, hotkey)
        service.publish_run(run_id, "roster", hotkey=hotkey, removed=True)
        return json_response(unstructure(RosterRemoved(hotkey, True)))

    async def put_paused(run_id: str) -> Response:
        require_admin(ctx)
        paused = structure(PausedRequest, await read_json(ctx)).paused
        status, opened = await ctx.db.write(set_paused, run_id, paused, ctx.coord_keypair)
        service.publish_run(run_id, "paused" if paused else "unpaused", status=status)
        if opened is not None:
            service.round_opened(opened, opened.opened_round)
        return json_response(unstructure(PausedAnswer(run_id, status)))

    async def put_honeypot(run_id: str) -> Response:
        require_admin(ctx)
        commitment = structure(HoneypotCommitRequest, await read_json(ctx)).commitment
        await ctx.db.write(commit_honeypot, run_id, commitment, ctx.beacon.latest)
        service.publish_run(run_id, "honeypot", honeypot_commit=commitment)
        return json_response(unstructure(HoneypotCommitted(run_id, commitment)))

    async def reveal(run_id: str) -> Response:
        require_admin(ctx)
        body = structure(HoneypotReveal, await read_json(ctx))
        await ctx.db.write(reveal_honeypot, run_id, body, ctx.beacon.latest)
        service.publish_run(run_id, "honeypot_revealed", commitment=body.commitment)
        return json_response(unstructure(HoneypotVerified(body.commitment, True)))

    async def get_runs() -> Response:
        return json_response(unstructure(await ctx.db.read(runs_list)))

    async def get_run(run_id: str) -> Response:
        page = page_of(request.args)
        return await cached_json_response(
            parts.answers, lambda: ctx.db.read(run_view, run_id, page)
        )

    async def get_roster(run_id: str) -> Response:
        page = page_of(request.args)
        return await cached_json_response(
            parts.answers, lambda: ctx.db.read(roster_view, run_id, page)
        )

    async def get_round(run_id: str, w: int) -> Response:
        page = page_of(request.args)
        return await cached_json_response(
            parts.answers, lambda: service.round_view(run_id, w, page)
        )

    async def get_auditor_stats(run_id: str) -> Response:
        clock = EpochClock.of(ctx.settings, ctx.chain)
        return json_response(
            unstructure(await ctx.db.read(auditor_stats, run_id, ctx.chain, clock))
        )

    admin = "/v1/admin/runs/<run_id>"
    hotkey = {"hotkey": pattern(SS58_RE)}
    paged = Doc(summary="", params=PAGE_PARAMS, answers={})
    rules: list[tuple[str, str, Callable[..., Awaitable[Response]], str, Doc]] = [
        (
            "/v1/admin/runs",
            "create",
            post_run,
            "POST",
            Doc(
                summary="create a run from its owner-signed RunManifest envelope",
                auth="admin",
                body=Envelope,
                answers={201: RunCreated},
                errors=errors(401, 403, 409, 422),
            ),
        ),
        (
            f"{admin}/config",
            "config",
            put_config,
            "PUT",
            Doc(
                summary="set the run's training window and finalize delay",
                auth="admin",
                body=RunConfig,
                answers={200: ConfigAnswer},
                errors=errors(409),
            ),
        ),
        (
            f"{admin}/roster/<hotkey>",
            "roster_put",
            put_roster,
            "PUT",
            Doc(
                summary="admit a miner (or change its flags)",
                auth="admin",
                path=hotkey,
                body=RosterRequest,
                answers={200: RosterRow},
            ),
        ),
        (
            f"{admin}/roster/<hotkey>",
            "roster_delete",
            delete_roster,
            "DELETE",
            Doc(
                summary="remove a miner from the next round on",
                auth="admin",
                path=hotkey,
                answers={200: RosterRemoved},
            ),
        ),
        (
            f"{admin}/paused",
            "paused",
            put_paused,
            "PUT",
            Doc(
                summary="pause or unpause the run (the first unpause opens round 0)",
                auth="admin",
                body=PausedRequest,
                answers={200: PausedAnswer},
                errors=errors(409),
            ),
        ),
        (
            f"{admin}/honeypot",
            "honeypot",
            put_honeypot,
            "PUT",
            Doc(
                summary="commit to the run's honeypot set",
                auth="admin",
                body=HoneypotCommitRequest,
                answers={200: HoneypotCommitted},
                errors=errors(409),
            ),
        ),
        (
            f"{admin}/honeypot/reveal",
            "honeypot_reveal",
            reveal,
            "POST",
            Doc(
                summary="reveal the honeypot set committed to",
                auth="admin",
                body=HoneypotReveal,
                answers={200: HoneypotVerified},
                errors=errors(409, 422),
            ),
        ),
        ("/v1/runs", "list", get_runs, "GET", Doc(summary="the runs", answers={200: RunsList})),
        (
            "/v1/runs/<run_id>",
            "view",
            get_run,
            "GET",
            attrs.evolve(paged, summary="one run", answers={200: RunView}),
        ),
        (
            "/v1/runs/<run_id>/roster",
            "roster_view",
            get_roster,
            "GET",
            attrs.evolve(paged, summary="a run's roster", answers={200: RosterView}),
        ),
        (
            "/v1/runs/<run_id>/rounds/<u53:w>",
            "round",
            get_round,
            "GET",
            attrs.evolve(paged, summary="one round of a run", answers={200: RoundView}),
        ),
        (
            "/run/<run_id>/auditor-stats",
            "auditor_stats",
            get_auditor_stats,
            "GET",
            Doc(summary="the auditors' epochs (spec 6.5)", answers={200: AuditorStats}),
        ),
        (
            "/v1/runs/<run_id>/auditor-stats",
            "auditor_stats_v1",
            get_auditor_stats,
            "GET",
            Doc(summary="the auditors' epochs (spec 6.5)", answers={200: AuditorStats}),
        ),
    ]
    for rule, name, view, method, doc in rules:
        add_route(app, rule, f"runs.{name}", view, method, doc)
