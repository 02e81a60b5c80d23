"""The miner's round routes (spec 9): accept, commit, leaves, uploads, delta, state.

=====================================  ====================================================
``POST /v1/runs/{id}/accept``          Accept envelope -> ``{w, hotkey, status, slot}``
``POST /v1/runs/{id}/commit``          Commit envelope -> ``{status, receipt}``
``POST /v1/runs/{id}/leaves``          ``{w, hotkey, preimages, ef_in_sha256?}``
``POST /v1/runs/{id}/uploads``         ``{w, hotkey, sha256, challenge_hash?}`` -> ``{method,
                                       sha256, url}`` (with ``challenge_hash``: a state blob)
``POST /v1/runs/{id}/delta``           DeltaManifest envelope -> ``{w, hotkey, status}``
``POST /v1/runs/{id}/state``           StateServe envelope -> ``{challenge_hash, t, stored}``
``POST /v1/runs/{id}/rerun``           ``{w, hotkey, leaves_root, sig}`` -> ``{w, hotkey,
                                       classification}`` (after a MISMATCH)
=====================================  ====================================================

The decisions and statuses are :mod:`hypertrain.coordinator.flows.miner`'s (state serves:
:mod:`hypertrain.coordinator.flows.serves`'); each request is one read of its body and one write
transaction (a StateServe first hashes its stored blob in a worker thread). A Commit re-posted
byte for byte answers 409
``{"detail": ..., "receipt": <stored Receipt envelope>}``, so a client that lost the first
answer recovers its receipt.

Metagraph (spec 9, "(M)"): before the write, the signer (envelopes) or body hotkey (unsigned
routes) goes through ``ctx.metagraph`` (:mod:`hypertrain.coordinator.metagraph`): the roster
alone by default, and also the master's metagraph when ``CHALLENGE_MASTER_URL`` is set (403
unregistered, 503 metagraph down). Every route refuses hotkeys not rostered in the round (403).
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from quart import Response
from quart_trio import QuartTrio

from hypertrain.coordinator.context import Coordinator
from hypertrain.coordinator.flows.auditstats import EpochClock
from hypertrain.coordinator.flows.miner import (
    DuplicateCommit,
    LeavesRequest,
    UploadRequest,
    grant_upload,
    post_accept,
    post_commit,
    post_delta,
    post_leaves,
    signer_of,
)
from hypertrain.coordinator.flows.replies import (
    Accepted,
    CommitRefused,
    Committed,
    LeavesTaken,
    Reran,
    StateStored,
    Uploaded,
    UploadGrant,
)
from hypertrain.coordinator.flows.rerun import RerunRequest, post_rerun
from hypertrain.coordinator.flows.serves import (
    blob_facts,
    check_serve_target,
    grant_state_upload,
    record_serve,
    serve_blob_sha,
    state_blob_size,
)
from hypertrain.coordinator.web.http import json_response, read_json
from hypertrain.coordinator.web.routedoc import Doc, add_route, errors
from hypertrain.protocol.converter import structure, unstructure
from hypertrain.protocol.envelope import Envelope, verify
from hypertrain.protocol.errors import ContractMismatch, ErrorBody

if TYPE_CHECKING:
    from hypertrain.coordinator.web.app import AppParts

__all__ = ["register"]


def register(app: QuartTrio, ctx: Coordinator, parts: AppParts) -> None:
    """Add the miner routes to ``app``."""

    async def accept(run_id: str) -> Response:
        raw = await read_json(ctx)
        await ctx.metagraph.check(signer_of(raw))
        return json_response(unstructure(await ctx.db.write(post_accept, raw, run_id)))

    async def commit(run_id: str) -> Response:
        raw = await read_json(ctx)
        await ctx.metagraph.check(signer_of(raw))
        coord = ctx.coord_keypair()
        try:
            answer = await ctx.db.write(post_commit, raw, run_id, coord)
        except DuplicateCommit as e:
            refused = CommitRefused(e.detail, structure(Envelope, e.receipt))
            return json_response(unstructure(refused), e.status)
        return json_response(unstructure(answer))

    async def leaves(run_id: str) -> Response:
        req = structure(LeavesRequest, await read_json(ctx))
        await ctx.metagraph.check(req.hotkey)
        return json_response(unstructure(await ctx.db.write(post_leaves, run_id, req)))

    async def uploads(run_id: str) -> Response:
        req = structure(UploadRequest, await read_json(ctx))
        await ctx.metagraph.check(req.hotkey)
        grant_id = secrets.token_hex(16)
        if req.challenge_hash is not None:
            grant = await ctx.db.write(
                grant_state_upload,
                run_id,
                req.w,
                req.hotkey,
                req.sha256,
                req.challenge_hash,
                grant_id,
            )
        else:
            grant = await ctx.db.write(grant_upload, run_id, req, grant_id)
        return json_response(unstructure(grant))

    async def state(run_id: str) -> Response:
        raw = await read_json(ctx)
        sha = serve_blob_sha(raw)
        verify(raw, expected_run_id=run_id)  # the signature, before any blob work
        await ctx.metagraph.check(signer_of(raw))
        manifest = await ctx.db.read(check_serve_target, raw, run_id)
        if not ctx.objects.exists(sha):
            raise ContractMismatch(f"blob {sha} is not stored: upload it first")
        if ctx.objects.size_of(sha) != state_blob_size(manifest.model):
            raise ContractMismatch(f"object {sha} is not a state blob of this run's model")
        blob = await ctx.objects.get(sha)
        facts = await parts.run_sync(blob_facts, blob, sha, manifest)
        return json_response(unstructure(await ctx.db.write(record_serve, raw, run_id, facts)))

    async def delta(run_id: str) -> Response:
        raw = await read_json(ctx)
        await ctx.metagraph.check(signer_of(raw))
        answer = await ctx.db.write(post_delta, raw, run_id, ctx.objects.exists)
        return json_response(unstructure(answer))

    async def rerun(run_id: str) -> Response:
        req = structure(RerunRequest, await read_json(ctx))
        await ctx.metagraph.check(req.hotkey)
        clock = EpochClock.of(ctx.settings, ctx.chain)
        answer = unstructure(await ctx.db.write(post_rerun, run_id, req, ctx.chain, clock))
        event = {"run_id": run_id, **answer, "target": req.hotkey, "change": "rerun"}
        ctx.events.publish("audit", event)
        return json_response(answer)

    runs = "/v1/runs/<run_id>"
    refusals = errors(401, 403, 409, 422, 503)

    def signed(summary: str, answer: object, **more: Any) -> Doc:
        return Doc(summary=summary, body=Envelope, answers={200: answer}, errors=refusals, **more)

    rules: list[tuple[str, str, Callable[..., Awaitable[Response]], Doc]] = [
        (
            f"{runs}/accept",
            "accept",
            accept,
            signed("accept the assignment (Accept)", Accepted),
        ),
        (
            f"{runs}/commit",
            "commit",
            commit,
            Doc(
                summary="commit to a delta (Commit); the answer holds the Receipt",
                body=Envelope,
                answers={200: Committed},
                errors={**refusals, 409: ErrorBody | CommitRefused},
                description="A Commit re-posted byte for byte answers 409 with its receipt.",
            ),
        ),
        (
            f"{runs}/leaves",
            "leaves",
            leaves,
            Doc(
                summary="the leaf preimages of the committed root",
                body=LeavesRequest,
                answers={200: LeavesTaken},
                errors=refusals,
            ),
        ),
        (
            f"{runs}/uploads",
            "uploads",
            uploads,
            Doc(
                summary="a grant to upload the delta (or a state blob)",
                body=UploadRequest,
                answers={200: UploadGrant},
                errors=refusals,
            ),
        ),
        (f"{runs}/delta", "delta", delta, signed("the uploaded delta's DeltaManifest", Uploaded)),
        (
            f"{runs}/state",
            "state",
            state,
            signed("a challenged state (StateServe)", StateStored),
        ),
        (
            f"{runs}/rerun",
            "rerun",
            rerun,
            Doc(
                summary="ask for a rerun after a MISMATCH (signed rerun message)",
                body=RerunRequest,
                answers={200: Reran},
                errors=refusals,
            ),
        ),
    ]
    for rule, name, view, doc in rules:
        add_route(app, rule, f"miner.{name}", view, "POST", doc)
