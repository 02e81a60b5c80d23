"""The auditors' routes (spec 9, worker bearer token on each): the audit job queue.

=============================================  ================================================
``POST /v1/worker/lease``                       optional ``{run_id}`` -> job JSON, or 204 idle
``GET /v1/worker/jobs/{id}``                    the job JSON (no lease needed; disputes)
``GET /v1/worker/jobs/{id}/serves?lease=``      ``{now_round, serves: [{serve, blob_sha256}]}``
``POST /v1/worker/jobs/{id}/heartbeat``         ``{lease}`` -> ``{id, lease_expires_round}``
``POST /v1/worker/jobs/{id}/complete``          ``{lease, verdict}`` -> ``{id, state, result,
                                                forfeit?}``
``POST /v1/worker/jobs/{id}/fail``              ``{lease, reason, retry}`` -> ``{id, state}``
=============================================  ================================================

The token is checked before the body is read (401/503). The decisions are
:mod:`hypertrain.coordinator.flows.worker`'s, one write each; leases, verdicts and hand-backs are
published as ``audit`` events after the write committed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from quart import Response, request
from quart_trio import QuartTrio

from hypertrain.coordinator.context import Coordinator
from hypertrain.coordinator.flows.replies import HandedBack, LeaseExtended
from hypertrain.coordinator.flows.worker import (
    CompleteRequest,
    FailRequest,
    LeaseFilter,
    LeaseRequest,
    check_lease_token,
    complete_job,
    fail_job,
    heartbeat,
    job_serves,
    lease_job,
    lease_token,
    stored_job,
)
from hypertrain.coordinator.web.auth import require_worker
from hypertrain.coordinator.web.http import json_response, read_body, read_json
from hypertrain.coordinator.web.routedoc import Doc, Param, add_route, errors
from hypertrain.protocol.auditjob import AuditJob, JobServes, StoredJob, VerdictRecorded
from hypertrain.protocol.converter import structure, unstructure
from hypertrain.protocol.errors import Malformed
from hypertrain.protocol.jcs import parse_json

if TYPE_CHECKING:
    from hypertrain.coordinator.web.app import AppParts

__all__ = ["register"]


def register(app: QuartTrio, ctx: Coordinator, parts: AppParts) -> None:
    """Add the worker routes to ``app``."""

    async def lease() -> Response:
        require_worker(ctx)
        body = await read_body(ctx.settings.body_limit)
        wanted = structure(LeaseFilter, parse_json(body)) if body.strip() else LeaseFilter()
        leased = await ctx.db.write(lease_job, wanted.run_id)
        if leased is None:
            return Response(b"", status=204)
        job, event = leased
        ctx.events.publish("audit", event)
        return json_response(job)

    async def job(job_id: str) -> Response:
        require_worker(ctx)
        return json_response(await ctx.db.read(stored_job, job_id))

    async def serves(job_id: str) -> Response:
        require_worker(ctx)
        token = request.args.get("lease")
        if token is None:
            raise Malformed("lease: the query parameter is required")
        check_lease_token(token)
        return json_response(await ctx.db.read(job_serves, job_id, token))

    async def beat(job_id: str) -> Response:
        require_worker(ctx)
        req = structure(LeaseRequest, await read_json(ctx))
        return json_response(unstructure(await ctx.db.write(heartbeat, job_id, req)))

    async def complete(job_id: str) -> Response:
        require_worker(ctx)
        req = structure(CompleteRequest, await read_json(ctx))
        coord = ctx.coord_keypair()
        answer, event = await ctx.db.write(complete_job, job_id, req, coord)
        ctx.events.publish("audit", event)
        return json_response(answer)

    async def fail(job_id: str) -> Response:
        require_worker(ctx)
        req = structure(FailRequest, await read_json(ctx))
        handed_back, event = await ctx.db.write(fail_job, job_id, req)
        ctx.events.publish("audit", event)
        return json_response(unstructure(handed_back))

    jobs = "/v1/worker/jobs/<job_id>"
    lease_param = Param(name="lease", schema=lease_token.schema, required=True)
    rules: list[tuple[str, str, Callable[..., Awaitable[Response]], str, Doc]] = [
        (
            "/v1/worker/lease",
            "lease",
            lease,
            "POST",
            Doc(
                summary="lease the next audit job (spec 9.1), or 204 when idle",
                auth="worker",
                body=LeaseFilter,
                body_required=False,
                answers={200: AuditJob, 204: None},
            ),
        ),
        (
            jobs,
            "job",
            job,
            "GET",
            Doc(summary="a job's JSON", auth="worker", answers={200: StoredJob}),
        ),
        (
            f"{jobs}/serves",
            "serves",
            serves,
            "GET",
            Doc(
                summary="the state serves of a leased job",
                auth="worker",
                params=(lease_param,),
                answers={200: JobServes},
                errors=errors(409),
            ),
        ),
        (
            f"{jobs}/heartbeat",
            "heartbeat",
            beat,
            "POST",
            Doc(
                summary="extend a lease",
                auth="worker",
                body=LeaseRequest,
                answers={200: LeaseExtended},
                errors=errors(409),
            ),
        ),
        (
            f"{jobs}/complete",
            "complete",
            complete,
            "POST",
            Doc(
                summary="hand in a signed ReplayVerdict",
                auth="worker",
                body=CompleteRequest,
                answers={200: VerdictRecorded},
                errors=errors(403, 409, 422),
            ),
        ),
        (
            f"{jobs}/fail",
            "fail",
            fail,
            "POST",
            Doc(
                summary="give a job back (requeued or failed)",
                auth="worker",
                body=FailRequest,
                answers={200: HandedBack},
                errors=errors(409),
            ),
        ),
    ]
    for rule, name, view, method, doc in rules:
        add_route(app, rule, f"worker.{name}", view, method, doc)
