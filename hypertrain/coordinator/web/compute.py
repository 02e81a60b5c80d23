"""Compute-node routes (seed 000, spec/compute-network.md section 3, DESIGN.md section 6).

=============================================  ==============================================
``POST /v1/compute/register``                  mint a node key (keyless) or attach one
``POST /v1/compute/jobs/lease``                node key; long poll (<= 25 s) for one copy
``GET /v1/compute/jobs/{id}/inputs/{name}``    node key + ``X-HT-Lease``; one input's bytes
``POST /v1/compute/jobs/{id}/result``          node key; the copy's answer (<= 64 KiB)
``GET /v1/compute/status``                     public live view (``?limit=&after=``, paged)
``GET /v1/compute/leaderboard``                public: nodes by compute credits (paged)
``GET /v1/compute/leaderboard/{node}``         public: one node's row and rank
``GET /v1/compute/steps/{job}``                public: one scoring step's state and result
``GET /compute``                               the live view as an HTML page
``POST /v1/admin/compute/benchmark``           admin: measure the nodes' hardware
=============================================  ==============================================

Node keys travel as ``Authorization: Bearer ht_...``: missing, malformed or unknown -> 401
(compared as sha256 digests in constant time by the book). Every body is bounded by
:data:`~hypertrain.compute.wire.BODY_LIMIT` (413 before parsing) and parsed strictly (400
naming the field): the bodies are the classes of :mod:`hypertrain.compute.wire`, which the node
shares, decoded and encoded by the one converter. Register (:class:`~hypertrain.compute.wire.
RegisterRequest`) answers the node's public record plus ``key`` only when one was minted (the
only time a key is ever sent). Keyless minting is limited per source network
(:mod:`.sources`): over ``HYPERTRAIN_COMPUTE_MINT_PER_MINUTE`` keys in a minute is 429 with
``Retry-After`` and a detail naming the limit (:mod:`hypertrain.compute.sybils`); a register
with ``account`` (a node key) mints a key of that key's account
(:mod:`hypertrain.compute.pairing`).

Lease and result are served as plain ASGI in front of this app (:mod:`.leasepath`, with the
same answers and bounds; listed here for the URL map). Lease: ``{capabilities, hardware,
wait_ms?}`` in ONE write transaction with the key's authentication
(:func:`~hypertrain.coordinator.flows.compute.lease_for_key`); the capabilities and hardware
replace the node's stored ones. A disabled node gets 403 ``{detail, reenable_at_ms,
reenable_at}``. Otherwise the request is held until a copy is granted (``{"job":
LeaseGrant}``) or ``wait_ms`` (default and at most :data:`~hypertrain.compute.wire.
LONG_POLL_MS`) passes (``{"job": null}``: never an instant empty answer unless the client asked
for ``wait_ms = 0``); a copy queued meanwhile is leased to the longest-held poll by the
transaction that queued it (:meth:`~hypertrain.coordinator.computehub.ComputeHub.write`). While
the daemon stops: 503. A held poll whose client disconnected before its answer went out
returns its copy to the queue at once (no strike; event ``returned``; :mod:`.leasepath`); a
client that leaves after the answer was sent leaves the copy leased until its deadline, when
it expires without a strike.

Inputs: only the node holding the copy's lease, with its token, before the deadline (403
otherwise, 404 unknown copy or name); every download of a hidden trace is logged and published
as a ``trace`` event naming the node. Result: a missing key is 401 before the body is read;
then ONE write transaction authenticates the key and submits the body
(:func:`~hypertrain.coordinator.flows.compute.receive_result`), and the book's answer is
returned as is (200, or 410 for a late post that counts for nothing); 4xx errors change
nothing. A result may carry the node's next lease request (``next``: the lease's body), so
that a cycle is one request: a 200 result is then answered with the lease's answer under
``next``, leased in the same transaction and held as a lease poll when nothing is ready
(:mod:`.leasepath`). Every route runs its book transaction through
:meth:`~hypertrain.coordinator.computehub.ComputeHub.write` (or hands its events to
:meth:`~hypertrain.coordinator.computehub.ComputeHub.publish`), which sends them on
``/v1/events`` as kind ``compute`` and wakes the waiters they concern.

Lease and result requests come from a source network too (:mod:`.sources`), which the
pairing rules compare (:mod:`hypertrain.compute.pairing`).

Status: the online nodes only (each with its probation and its own and its network's strikes
today), one page at a time (:mod:`hypertrain.compute.status`):
``limit`` 1..:data:`~hypertrain.compute.status.PAGE_MAX` (default
:data:`~hypertrain.compute.status.PAGE_DEFAULT`), ``after`` the ``next`` of the previous page (at
most 64 characters); anything else is 400 naming the parameter.

Leaderboard: the nodes by compute credits (:mod:`hypertrain.compute.leaderboard`: rank, id,
handle, compute credits, jobs done, strikes, agreement rate in ppm, last seen), paged with the
public views' ``?offset=&limit=`` (:mod:`hypertrain.coordinator.flows.pages`: 400 naming a bad
parameter; ``page: {offset, limit, next_offset}``); one node's row by its id (404 unknown, 400
for an id over 64 characters). Both answer through the answer cache (:func:`~hypertrain.
coordinator.web.http.cached_json_response`), like the run views.

Benchmark (admin, ``{run_id?}``; default the only running run): one ``step-throughput`` step
(tokens per second of reference training steps of the run's model, from its newest round's
start state on its public trace) for the nodes of its hardware class (``cpu-generic``); two
answers agree within the challenge's tolerance band; a timing step is never scored by the
fallback (the daemon is not of that class). One step per round (asking again answers the same
job). ``GET /v1/compute/steps/{job}`` shows its result.
"""

from __future__ import annotations

import logging
from functools import partial
from importlib import resources
from typing import TYPE_CHECKING

from quart import Response, request
from quart_trio import QuartTrio

from hypertrain.compute import (
    Node,
    authenticate,
    enqueue_step,
    status,
    trace_event,
)
from hypertrain.compute.status import PAGE_DEFAULT, PAGE_MAX, ComputeStatus
from hypertrain.compute.wire import (
    BODY_LIMIT,
    LEASE_HEADER,
    BenchmarkRequest,
    DisabledAnswer,
    ErrorAnswer,
    LeaseAnswer,
    LeaseRequest,
    RegisterAnswer,
    RegisterRequest,
    ResultCounted,
    ResultJudged,
    ResultPost,
    ResultStatus,
    Standing,
)
from hypertrain.coordinator.context import Coordinator
from hypertrain.coordinator.flows.compute import (
    BenchmarkQueued,
    benchmark_target,
    input_of,
    job_view,
    register_for,
)
from hypertrain.coordinator.flows.leaderboard import (
    LeaderboardPage,
    leaderboard_view,
    standing_view,
)
from hypertrain.coordinator.flows.pages import page_of
from hypertrain.coordinator.flows.viewwire import ScoringJobView
from hypertrain.coordinator.web.auth import request_bearer, require_admin
from hypertrain.coordinator.web.http import (
    cached_json_response,
    json_response,
    object_response,
    read_body,
)
from hypertrain.coordinator.web.leasepath import LEASE_PATH, serve_lease_path
from hypertrain.coordinator.web.routedoc import (
    OCTETS,
    Doc,
    Media,
    Param,
    add_route,
    errors,
)
from hypertrain.coordinator.web.runs import PAGE_PARAMS
from hypertrain.coordinator.web.sources import SourceNetworks
from hypertrain.protocol.converter import structure, unstructure
from hypertrain.protocol.errors import AuthError, Conflict, Malformed
from hypertrain.protocol.jcs import parse_json
from hypertrain.protocol.validators import int_in, int_param
from hypertrain.scoring.registry import STEP_THROUGHPUT

if TYPE_CHECKING:
    from hypertrain.coordinator.web.app import AppParts

__all__ = ["register"]

log = logging.getLogger(__name__)


def _now_ms(ctx: Coordinator) -> int:
    return int(ctx.wall.now() * 1000)


async def _json() -> object:
    return parse_json(await read_body(BODY_LIMIT))


def _status_page_args() -> tuple[str | None, int]:
    """``(after, limit)`` of the status query (module doc; 400 naming the parameter)."""
    after = request.args.get("after")
    if after is not None and not 0 < len(after) <= 64:
        raise Malformed("after must be a node id of 1 to 64 characters")
    raw = request.args.get("limit")
    if raw is None:
        return after, PAGE_DEFAULT
    try:
        return after, int_param("limit", raw, int_in(1, PAGE_MAX))
    except Malformed as e:
        raise Malformed(f"limit must be an integer from 1 to {PAGE_MAX}, got {raw!r:.40}") from e


def _page() -> str:
    return resources.files("hypertrain.coordinator.web").joinpath("compute.html").read_text()


async def served_in_front(copy_id: str | None = None) -> Response:
    """The Quart view of the lease path's two routes, which :mod:`.leasepath` serves in front
    of the app: listed here for the URL map (405 for other methods), never reached."""
    raise RuntimeError(f"the lease path is served in front of the app, not by Quart ({copy_id})")


def register(app: QuartTrio, ctx: Coordinator, parts: AppParts) -> None:
    """Add the compute routes to ``app``."""
    hub = ctx.compute

    def key_of_request() -> str:
        key = request_bearer()
        if key is None:
            raise AuthError("a node key is required: Authorization: Bearer ht_...")
        return key

    async def node_of() -> Node:
        return await ctx.db.write(authenticate, key_of_request(), _now_ms(ctx))

    sources = SourceNetworks.of(ctx.settings)

    async def post_register() -> Response:
        req = structure(RegisterRequest, await _json())
        network = sources.of_scope(request.scope, req.key or None)
        answer, events = await ctx.db.write(
            partial(register_for, settings=hub.settings), req, network, _now_ms(ctx)
        )
        hub.publish(events)
        return json_response(unstructure(answer))

    async def get_input(copy_id: str, name: str) -> Response:
        node = await node_of()
        token = request.headers.get(LEASE_HEADER)
        sha256, hidden, challenge = await ctx.db.read(
            input_of, node, copy_id, token, name, _now_ms(ctx)
        )
        if hidden:
            log.info(
                "node %s (%s) downloads the hidden trace of copy %s",
                node.node_id,
                node.handle,
                copy_id,
            )
            hub.publish([trace_event(node.node_id, challenge, "hidden")])
        return object_response(ctx.objects, sha256)

    inputs = parts.inputs

    async def post_benchmark() -> Response:
        require_admin(ctx)
        named = structure(BenchmarkRequest, await _json()).run_id
        run_id, w = await ctx.db.read(benchmark_target, named)
        model = await inputs.shared(run_id, "model")
        state = await inputs.start_state(run_id, w)
        trace = await inputs.shared(run_id, "public")
        if model is None or state is None or trace is None:
            raise Conflict(
                f"run {run_id} round {w}: no start state or no registered dataset to measure on"
            )
        files = [
            {"name": name, "sha256": sha, "size": size}
            for name, (sha, size) in zip(STEP_THROUGHPUT.inputs, (model, state, trace), strict=True)
        ]
        job_id, _ = await hub.write(
            partial(
                enqueue_step,
                challenge_id=STEP_THROUGHPUT.id,
                subject={"run_id": run_id, "w": w, "benchmark": STEP_THROUGHPUT.id},
                step="public",
                inputs=files,
                now_ms=_now_ms(ctx),
                wait_ms=hub.settings.wait_ms,
                settings=hub.settings,
            )
        )
        return json_response(unstructure(BenchmarkQueued(job_id, run_id, w)))

    async def get_job_view(job_id: str) -> Response:
        return json_response(await ctx.db.read(job_view, job_id))

    async def get_status() -> Response:
        after, limit = _status_page_args()
        view = await ctx.db.read(
            partial(status, settings=hub.settings, after=after, limit=limit), _now_ms(ctx)
        )
        return json_response(view)

    async def get_leaderboard() -> Response:
        page = page_of(request.args)
        return await cached_json_response(
            parts.answers, lambda: ctx.db.read(leaderboard_view, page)
        )

    async def get_standing(node_id: str) -> Response:
        if len(node_id) > 64:
            raise Malformed("node: a node id of 1 to 64 characters")
        return await cached_json_response(
            parts.answers, lambda: ctx.db.read(standing_view, node_id)
        )

    async def get_page() -> Response:
        return Response(_page(), content_type="text/html; charset=utf-8")

    node_refusals = errors(403, 409)
    add_route(
        app,
        "/v1/compute/register",
        "compute.register",
        post_register,
        "POST",
        Doc(
            summary="mint a node key (none sent) or attach one",
            body=RegisterRequest,
            answers={200: RegisterAnswer},
            errors=errors(401, 409, 429),
        ),
    )
    app.asgi_app = serve_lease_path(  # type: ignore[method-assign,assignment]
        app.asgi_app, ctx, metrics=parts.metrics
    )
    add_route(
        app,
        LEASE_PATH,
        "compute.lease",
        served_in_front,
        "POST",
        Doc(
            summary="long poll for one copy to compute (served in front of the app)",
            auth="node",
            body=LeaseRequest,
            answers={200: LeaseAnswer, 403: DisabledAnswer},
            errors=errors(503),
        ),
    )
    add_route(
        app,
        "/v1/compute/jobs/<copy_id>/inputs/<name>",
        "compute.input",
        get_input,
        "GET",
        Doc(
            summary="one input file of a leased copy",
            auth="node",
            params=(Param(name=LEASE_HEADER, where="header", required=True),),
            answers={200: Media(OCTETS)},
            errors=node_refusals,
        ),
    )
    add_route(
        app,
        "/v1/compute/jobs/<copy_id>/result",
        "compute.result",
        served_in_front,
        "POST",
        Doc(
            summary="a copy's answer, and maybe the next lease (served in front of the app)",
            auth="node",
            body=ResultPost,
            answers={200: ResultStatus | ResultJudged | ResultCounted, 410: ErrorAnswer},
            errors=node_refusals,
        ),
    )
    add_route(
        app,
        "/v1/compute/status",
        "compute.status",
        get_status,
        "GET",
        Doc(
            summary="the online nodes, one page at a time",
            params=(
                Param(name="limit", schema=int_in(1, PAGE_MAX).schema),
                Param(name="after", schema={"type": "string", "minLength": 1, "maxLength": 64}),
            ),
            answers={200: ComputeStatus},
        ),
    )
    add_route(
        app,
        "/v1/compute/leaderboard",
        "compute.leaderboard",
        get_leaderboard,
        "GET",
        Doc(
            summary="the nodes by compute credits, one page",
            params=PAGE_PARAMS,
            answers={200: LeaderboardPage},
        ),
    )
    add_route(
        app,
        "/v1/compute/leaderboard/<node_id>",
        "compute.standing",
        get_standing,
        "GET",
        Doc(
            summary="one node's leaderboard row and rank",
            answers={200: Standing},
            errors=errors(404),
        ),
    )
    add_route(
        app,
        "/v1/compute/steps/<job_id>",
        "compute.step",
        get_job_view,
        "GET",
        Doc(summary="one scoring step's state and result", answers={200: ScoringJobView}),
    )
    add_route(
        app,
        "/v1/admin/compute/benchmark",
        "compute.benchmark",
        post_benchmark,
        "POST",
        Doc(
            summary="measure the nodes' hardware on a run's newest round",
            auth="admin",
            body=BenchmarkRequest,
            answers={200: BenchmarkQueued},
            errors=errors(404, 409),
        ),
    )
    add_route(
        app,
        "/compute",
        "compute.page",
        get_page,
        "GET",
        Doc(summary="the compute network's live view", answers={200: Media("text/html")}),
    )
