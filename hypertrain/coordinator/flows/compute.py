"""The compute routes' transactions that are not the book's own (:mod:`.web.compute`).

- :func:`register_for`: a register request in ONE write: :func:`~hypertrain.compute.
  register_node` from the request's network (429 when it minted its limit, probation when it
  had a node disabled in the last day), answered with the node's record, its probation and
  its own and its network's strikes today;
- :func:`receive_result`: a result post in ONE write: the node's key is authenticated (401
  missing, malformed or unknown; the node is marked seen), the body parsed as strict JSON
  (400), then :func:`~hypertrain.compute.submit_result` takes it (its own status table:
  200/410 answered, 400/403/404/409 refused). A refusal rolls the whole transaction back.
  When the post carries the node's next lease request (``next``; a malformed one is refused
  with the rest of the body, before anything changes) and the result is answered 200, the
  same transaction then leases for it as :func:`lease_for_key` would (from the network of
  the post), unless the node is
  disabled by now (its own result may have struck it): no lease then, and the node's next
  plain lease is answered its 403. The caller holds a lease that got nothing as a poll;
- :func:`lease_for_key`: a lease request in ONE write: the key authenticated (401; the node
  is marked seen), the body parsed (400 JSON, 400 naming the field), a disabled node answered
  with its :class:`~hypertrain.compute.wire.DisabledAnswer` (403, nothing else changes), else
  :func:`~hypertrain.compute.lease` from the request's network (the grant or None; the
  pairing rules of :mod:`hypertrain.compute.pairing` apply). A refusal rolls it all back;
- :func:`input_of`: which object a node may download as an input of a copy it holds (403 not
  its lease, wrong token or past the deadline, or a slice of a hidden window the node is bound
  to another slice of: :func:`~hypertrain.compute.slices.check_input`; 404 unknown copy or
  input name). The lease token is the short-lived token bound to the lease that the hidden
  shards need: minted per grant, stored hashed on the copy, valid only for that copy's node
  and only until the lease's deadline (kill time + grace);
- :func:`benchmark_target`: the run and round a benchmark measures on (409 when ambiguous);
- :func:`job_view`: a scoring step's public view (404 unknown).
"""

from __future__ import annotations

import sqlite3
from typing import Any, Final

import attrs

from hypertrain.compute import (
    ComputeSettings,
    Event,
    LeaseGrant,
    Node,
    authenticate,
    get_node,
    iso_ms,
    register_node,
    secret_matches,
)
from hypertrain.compute.combined import combined_step
from hypertrain.compute.leases import lease_read
from hypertrain.compute.nodes import mark_seen, node_of_key
from hypertrain.compute.results import check_result, take_result
from hypertrain.compute.rows import get_copy, get_job
from hypertrain.compute.slices import check_input
from hypertrain.compute.sybils import strikes_today
from hypertrain.compute.wire import (
    LEASE_HEADER,
    DisabledAnswer,
    ErrorAnswer,
    LeaseRequest,
    RegisterAnswer,
    RegisterRequest,
    ResultAnswer,
)
from hypertrain.coordinator.tables.runs import get_run, list_runs, next_round_w
from hypertrain.protocol.converter import structure
from hypertrain.protocol.errors import Conflict, Forbidden, NotFound
from hypertrain.protocol.jcs import parse_json

__all__ = [
    "HIDDEN_TRACE",
    "BenchmarkQueued",
    "Leased",
    "NextLease",
    "Received",
    "benchmark_target",
    "input_of",
    "job_view",
    "lease_for_key",
    "receive_result",
    "register_for",
]

HIDDEN_TRACE: Final = "trace.u16"


@attrs.frozen
class BenchmarkQueued:
    """``POST /v1/admin/compute/benchmark``: the step measuring the nodes of run_id's round w."""

    job: str
    run_id: str
    w: int


NextLease = tuple[Node, LeaseRequest, LeaseGrant | None]
"""The lease a result post asked for and got: the node (as leased), its request, the grant."""
Received = tuple[int, ResultAnswer | ErrorAnswer, NextLease | None, list[Event]]
"""What :func:`receive_result` returns: the result's status and answer, the lease taken with
it (None: none was asked or taken) and the events of both."""


def register_for(
    conn: sqlite3.Connection,
    req: RegisterRequest,
    network: str | None,
    now_ms: int,
    *,
    settings: ComputeSettings,
) -> tuple[RegisterAnswer, list[Event]]:
    """One register request's transaction (module doc)."""
    node, minted, events = register_node(
        conn,
        key=req.key,
        handle=req.handle or None,
        capabilities=req.capabilities,
        hardware=req.hardware,
        now_ms=now_ms,
        network=network,
        account=req.account,
        settings=settings,
    )
    networks = [] if node.network is None else [node.network]
    per_node, per_network = strikes_today(conn, [node.node_id], networks, now_ms)
    strikes = (per_node[node.node_id], sum(per_network.values()))
    return node.register_answer(minted, strikes), events


def receive_result(
    conn: sqlite3.Connection,
    key: str,
    copy_id: str,
    body: bytes,
    now_ms: int,
    *,
    settings: ComputeSettings,
    lease: bool = True,
    network: str | None = None,
) -> Received:
    """One result post, authentication, submission and the next lease together (module doc);
    ``lease=False`` (the daemon stops): no lease, whatever the post asked; ``network``: the
    post's source network."""
    node = authenticate(conn, key, now_ms)
    checked = check_result(conn, node, copy_id, parse_json(body))
    status, answer, events = take_result(conn, node, checked, now_ms, settings=settings)
    ask = checked.posted.next
    if ask is None or status != 200 or not lease:
        return status, answer, None, events
    node = get_node(conn, node.node_id)
    if node.disabled(now_ms):
        return status, answer, None, events
    grant, leased = _lease_as_asked(conn, node, ask, now_ms, settings, network)
    return status, answer, (node, ask, grant), [*events, *leased]


Leased = tuple[Node, LeaseRequest, LeaseGrant | DisabledAnswer | None, list[Event]]
"""What :func:`lease_for_key` returns: the node, its request, the outcome and the events."""


def lease_for_key(
    conn: sqlite3.Connection,
    key: str,
    body: bytes,
    now_ms: int,
    *,
    settings: ComputeSettings,
    network: str | None = None,
) -> Leased:
    """One lease request's transaction from ``network`` (module doc)."""
    node = node_of_key(conn, key)  # marked seen by the lease, or below when disabled
    req = structure(LeaseRequest, parse_json(body))
    if node.disabled(now_ms):
        node = mark_seen(conn, node, now_ms)
        until = node.disabled_until_ms
        disabled = DisabledAnswer(
            detail=f"node {node.node_id} is disabled until {iso_ms(until)} (strikes today)",
            reenable_at_ms=until,
            reenable_at=iso_ms(until),
        )
        return node, req, disabled, []
    grant, events = _lease_as_asked(conn, node, req, now_ms, settings, network)
    return attrs.evolve(node, last_seen_ms=now_ms), req, grant, events


def _lease_as_asked(
    conn: sqlite3.Connection,
    node: Node,
    ask: LeaseRequest,
    now_ms: int,
    settings: ComputeSettings,
    network: str | None,
) -> tuple[LeaseGrant | None, list[Event]]:
    """:func:`~hypertrain.compute.leases.lease_read` for the capabilities and hardware asked,
    from ``network``."""
    return lease_read(
        conn,
        node,
        capabilities=ask.capabilities,
        hardware=ask.hardware,
        now_ms=now_ms,
        settings=settings,
        network=network,
    )


def input_of(
    conn: sqlite3.Connection, node: Node, copy_id: str, token: str | None, name: str, now_ms: int
) -> tuple[str, bool, str]:
    """``(sha256, is the hidden trace, challenge)`` of input ``name`` of a copy this node holds
    (module doc)."""
    copy = get_copy(conn, copy_id)
    if copy.node_id != node.node_id or copy.token_hash is None:
        raise Forbidden(f"copy {copy_id} is not leased to this node")
    if token is None or not secret_matches(token, copy.token_hash):
        raise Forbidden(f"{LEASE_HEADER} is not the lease token of copy {copy_id}")
    if copy.state != "leased" or copy.deadline_ms is None or now_ms > copy.deadline_ms:
        raise Forbidden(f"copy {copy_id} is no longer leased ({copy.state})")
    job = get_job(conn, copy.job_id)
    check_input(conn, node.node_id, job.job_id)
    for item in job.inputs:
        if item.name == name:
            return item.sha256, job.step == "hidden" and name == HIDDEN_TRACE, job.challenge
    raise NotFound(f"copy {copy_id} has no input {name!r:.80}")


def benchmark_target(conn: sqlite3.Connection, run_id: str | None) -> tuple[str, int]:
    """``(run_id, newest round)`` of a benchmark: the named run, else the only running one."""
    if run_id is None:
        running = [r for r, status in list_runs(conn) if status == "running"]
        if len(running) != 1:
            raise Conflict(f"name the run: {len(running)} runs are running")
        run_id = running[0]
    get_run(conn, run_id)
    w = next_round_w(conn, run_id) - 1
    if w < 0:
        raise Conflict(f"run {run_id} has no round yet")
    return run_id, w


def job_view(conn: sqlite3.Connection, job_id: str) -> dict[str, Any]:
    """A scoring step's public view (``Job.score_json``); 404 unknown. A sliced hidden step's
    id (``hs...``, as the round view names it) answers its combination of its slices."""
    if job_id.startswith("hs"):
        combined = combined_step(conn, job_id)
        if combined is None:
            raise NotFound(f"no compute job {job_id}")
        return combined.score_json()
    return get_job(conn, job_id).score_json()
