"""The compute lease path as plain ASGI in front of the Quart app (issue 17 goal 3).

``POST /v1/compute/jobs/lease`` and ``POST /v1/compute/jobs/{id}/result`` are what every node
calls in a loop; Quart's dispatch and response cost more than the routes' own work (py-spy:
56% of the server's time), so :func:`serve_lease_path` serves these two (method and path
exactly; anything else, ``GET`` on those paths included, goes to the Quart app unchanged,
which still lists both routes: 405 for other methods) with every guarantee of a Quart route:

- the same answers: :class:`~hypertrain.protocol.errors.ProtocolError` -> its status and
  ``{"detail"}``; any other exception logged with its traceback and 500 ``{"detail":
  "internal error"}`` (:mod:`.http`'s one mapping); ``trio.Cancelled`` is never caught;
- the edge's bounds first: headers over :data:`~.http.HEADERS_LIMIT` are 431; the body is
  bounded by :data:`~hypertrain.compute.wire.BODY_LIMIT` (413 on its ``Content-Length``
  before reading, then counted) and must arrive within :data:`~.http.BODY_TIMEOUT` (400);
- a missing or malformed node key is 401 before the body is read, and so is an unknown one
  (a key seen once is remembered: keys never change and nodes are never removed);
- early answers are made safe for keep-alive by ``serve_asgi``'s ``guard_unread_bodies``, as
  every answer of the app is (DESIGN.md section 9);
- ONE write transaction per request (:meth:`~hypertrain.coordinator.computehub.ComputeHub.
  write`), leasing from the request's source network (:mod:`.sources`; a held poll keeps
  it): a lease authenticates and leases together
  (:func:`~hypertrain.coordinator.flows.compute.lease_for_key`), a result authenticates and
  submits together (:func:`~hypertrain.coordinator.flows.compute.receive_result`); the body
  is parsed once, inside it. A poll that got nothing is held (route doc in :mod:`.compute`):
  it answers the copy handed to it, or ``{"job": null}`` at its ``wait_ms``, 503 when the
  daemon stops, and it ends without an answer when the client disconnects;
- a copy granted to a held poll whose client has gone is returned at once, never left leased
  to a dead request until its deadline (scenario 20): the poll watches for ``http.disconnect``
  (:func:`~nurseries.open_disconnect_watch`) from the hold to its turn to answer; a client gone
  by then, or a send that raises (``OSError``, as ASGI servers may on a closed connection),
  gets no answer and the grant goes back through ONE write transaction of the book
  (:func:`~hypertrain.compute.return_unsent`: no strike, no expiry counted, event
  ``returned``), whose hub hands the copy to the next held poll in that same transaction. An
  answer sent in full is the client's: a close after it (or one still in flight when it went
  out, which the server cannot tell apart) leaves the lease to its deadline, as before;
- a result post that carries the node's next lease request (``next``, a
  :class:`~hypertrain.compute.wire.LeaseRequest`) is one cycle in one request: its ONE write
  transaction authenticates, submits and, when the result is answered 200, leases (a bad
  ``next`` is a 400 naming it and nothing is applied; a refused result leases nothing). The
  answer is the result's own with the lease's answer under ``next``. A lease that got nothing
  is held exactly as a lease poll is, AFTER the result committed: whatever ends the hold, the
  result stays taken. Where a lease poll would answer 503 (the daemon stops, before or during
  the hold), the result is answered without ``next`` instead (its answer is not lost; the
  node's next plain lease gets the 503); a client that disconnects gets no answer, and its
  identical repost gets the result's first answer again and a lease;
- held polls (lease polls, and result posts whose ``next`` was held) answer in turns: at most
  ``answers_at_once`` (default :data:`ANSWERS_AT_ONCE`) send at a time, the others waiting for a
  turn (first come, first served) at most :data:`ANSWER_TURN_WAIT` seconds each, then answering
  anyway. A burst of copies handed out in one transaction wakes that many polls at once, and
  Trio runs woken tasks one step each in turn: 10,000 answers started together all ended
  together at the end of the burst (p50 near p99), with every one's half-built answer alive at
  once, which the cyclic collector walked again and again (young collections took 1.4-1.7 s of
  CPU in a 10,000-copy burst, 0.3-0.4 s in turns; ``bench/compute.py --rows burst``). The wait
  for a turn is bounded because an answer's send cannot be cancelled (hypercorn shields it): a
  client that does not read and has let its socket's send buffer fill keeps its turn, and
  ``answers_at_once`` such clients delay every held answer by :data:`ANSWER_TURN_WAIT`, never
  more;
- each lease answer counts in ``metrics`` by outcome (a copy, none, 403), and each result
  taken by its answer's status, once its transaction committed
  (:meth:`~hypertrain.coordinator.metrics.Metrics.on_lease`, ``on_result``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from functools import partial
from typing import Any, Final

import attrs
import trio

from hypertrain.compute import (
    LeaseAsk,
    LeaseGrant,
    Node,
    is_node_key,
    lease,
    return_unsent,
    secret_hash,
)
from hypertrain.compute.nodes import node_of_key
from hypertrain.compute.wire import (
    BODY_LIMIT,
    LONG_POLL_MS,
    ErrorAnswer,
    LeaseAnswer,
    LeaseRequest,
)
from hypertrain.coordinator.computehub import Wake
from hypertrain.coordinator.context import Coordinator
from hypertrain.coordinator.flows.compute import lease_for_key, receive_result
from hypertrain.coordinator.metrics import Metrics
from hypertrain.coordinator.tokens import bearer_token
from hypertrain.coordinator.web.answers import encode_json
from hypertrain.coordinator.web.http import (
    BODY_TIMEOUT,
    INTERNAL_DETAIL,
    JSON_CONTENT_TYPE,
    RETRY_AFTER_STOPPING,
    STOPPING_DETAIL,
    check_header_size,
    too_large,
    too_slow,
)
from hypertrain.coordinator.web.sources import SourceNetworks
from hypertrain.protocol.converter import unstructure
from hypertrain.protocol.errors import AuthError, ProtocolError
from nurseries import (
    ASGIApp,
    DisconnectWatch,
    Notified,
    Stopping,
    WaitResult,
    cleanup_scope,
    open_disconnect_watch,
)

__all__ = [
    "ANSWERS_AT_ONCE",
    "ANSWER_TURN_WAIT",
    "GIVE_BACK_TIMEOUT",
    "KNOWN_KEYS_LIMIT",
    "LEASE_PATH",
    "serve_lease_path",
]

log = logging.getLogger(__name__)

LEASE_PATH: Final = "/v1/compute/jobs/lease"
_RESULT_PATH: Final = re.compile(r"/v1/compute/jobs/([^/]+)/result")
KNOWN_KEYS_LIMIT: Final = 1 << 16
"""Node keys remembered as known (their sha256); past it the memory starts afresh."""
ANSWERS_AT_ONCE: Final = 64
"""Held polls that send their answers at one time (module doc)."""
ANSWER_TURN_WAIT: Final = 10.0
"""Seconds a held poll waits for its turn to answer at most (module doc): within the 15 s a
node's lease read timeout leaves past the 25 s hold, and above a 10,000-answer burst's length
(at 1 s, the last polls of such a burst stopped waiting and answered all together again)."""
GIVE_BACK_TIMEOUT: Final = 5.0
"""Seconds the transaction that returns an undelivered grant's copy may wait, shielded."""
_JSON: Final = (b"content-type", JSON_CONTENT_TYPE.encode())


class _Gone(Exception):
    """The client disconnected before it was answered: nobody to answer."""


class _Stopping(Exception):
    """The daemon stops: 503 with ``Retry-After``."""


def _lease_answer(answer: LeaseAnswer | None) -> Any:
    """A held lease poll's answer; None: the daemon stops (503)."""
    if answer is None:
        raise _Stopping
    return unstructure(answer)


class _Exchange:
    """One request of the lease path: its head, its body, its answer."""

    def __init__(self, scope: Any, receive: Any, send: Any) -> None:
        self.scope = scope
        self.receive = receive
        self.send = send

    def header(self, name: bytes) -> bytes | None:
        for key, value in self.scope["headers"]:
            if key.lower() == name:
                return bytes(value)
        return None

    def node_key(self, *, well_formed: bool) -> str:
        """The bearer node key: 401 when missing (and, asked for, when not a node key)."""
        raw = self.header(b"authorization")
        key = None if raw is None else bearer_token(raw.decode("latin-1"))
        if key is None:
            raise AuthError("a node key is required: Authorization: Bearer ht_...")
        if well_formed and not is_node_key(key):
            raise AuthError("malformed node key")
        return key

    async def body(self, limit: int) -> bytes:
        """The body (module doc: 413 past ``limit``, 400 when too slow)."""
        declared = self.header(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise too_large(limit, int(declared))
        parts: list[bytes] = []
        size = 0
        with trio.move_on_after(BODY_TIMEOUT) as scope:
            while True:
                message = await self.receive()
                if message["type"] == "http.disconnect":
                    raise _Gone
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > limit:
                    raise too_large(limit, None)
                parts.append(chunk)
                if not message.get("more_body", False):
                    return b"".join(parts)
        assert scope.cancelled_caught
        raise too_slow()

    async def answer(self, status: int, obj: Any, *extra: tuple[bytes, bytes]) -> None:
        body = encode_json(obj)
        headers = [_JSON, (b"content-length", str(len(body)).encode()), *extra]
        await self.send({"type": "http.response.start", "status": status, "headers": headers})
        await self.send({"type": "http.response.body", "body": body})


def _lease_outcome(grant: LeaseGrant | None) -> str:
    return "empty" if grant is None else "granted"


def serve_lease_path(
    app: ASGIApp, ctx: Coordinator, *, metrics: Metrics, answers_at_once: int = ANSWERS_AT_ONCE
) -> ASGIApp:
    """``app`` with the lease path served in front of it (module doc)."""
    hub = ctx.compute
    sources = SourceNetworks.of(ctx.settings)
    known: set[str] = set()
    turns = trio.Semaphore(answers_at_once)  # FIFO: trio's semaphore parks in a ParkingLot

    def now_ms() -> int:
        return int(ctx.wall.now() * 1000)

    async def check_known(key: str) -> None:
        digest = secret_hash(key)
        if digest not in known:
            await ctx.db.read(node_of_key, key)  # 401 unknown
            if len(known) >= KNOWN_KEYS_LIMIT:
                known.clear()
            known.add(digest)

    async def hold(
        watch: DisconnectWatch, node: Node, req: LeaseRequest, network: str | None
    ) -> LeaseGrant | None:
        """The long poll of a node that got nothing (route doc in :mod:`.compute`)."""
        wait_ms = LONG_POLL_MS if req.wait_ms is None else req.wait_ms
        deadline = trio.current_time() + wait_ms / 1000
        ask = LeaseAsk(node, req.capabilities, req.hardware, network)
        hops = 0  # a wake this poll holds for a new copy (ComputeHub: hand it on if unused)
        try:
            while trio.current_time() < deadline:
                # Parked with no checkpoint since the lease transaction committed: a copy
                # queued after it is handed to this poll (ComputeHub.write) or wakes it.
                woken: WaitResult[Wake] | None = None
                with watch.cancelled_on_disconnect():
                    woken = await hub.hold(ask, deadline)
                if woken is None:
                    raise _Gone  # cancelled by the watch while it waited, granted nothing
                if isinstance(woken, Notified):
                    if isinstance(woken.value, LeaseGrant):  # handed to it: leased already
                        return woken.value
                    hops = woken.value  # before any checkpoint: a cancel hands it on
                if isinstance(woken, Stopping) or ctx.stopping.is_set():
                    raise _Stopping
                if not isinstance(woken, Notified) or watch.gone:
                    return None
                grant, _ = await hub.write(
                    partial(
                        lease,
                        node=node,
                        capabilities=req.capabilities,
                        hardware=req.hardware,
                        now_ms=now_ms(),
                        settings=hub.settings,
                        network=network,
                    )
                )
                if grant is not None:
                    hops = 0
                    return grant
                hub.hand_on(hops)
                hops = 0
            return None
        finally:
            hub.hand_on(hops)  # woken, then answered null at the deadline or cancelled

    async def give_back(grant: LeaseGrant) -> None:
        """``grant``'s answer never reached its client: its copy goes back (module doc)."""
        with cleanup_scope(GIVE_BACK_TIMEOUT, what=f"returning copy {grant.copy_id}"):
            await hub.write(return_unsent, grant)

    async def deliver(exchange: _Exchange, obj: Any, grant: LeaseGrant | None) -> None:
        """A 200 carrying ``grant``: a send that fails (the client is gone) gives it back."""
        try:
            await exchange.answer(200, obj)
        except OSError as e:
            if grant is not None:
                await give_back(grant)
            raise _Gone from e

    async def answer_held(
        exchange: _Exchange,
        node: Node,
        req: LeaseRequest,
        network: str | None,
        answer_of: Callable[[LeaseAnswer | None], Any],
    ) -> None:
        """Hold the poll, then send its answer in turn (module doc); ``answer_of`` makes the
        answer from the lease's (None: the daemon stops, which raises ``_Stopping`` for a
        lease poll). A grant whose client is gone before its answer is sent goes back."""
        grant: LeaseGrant | None = None
        turn = False
        try:
            async with open_disconnect_watch(exchange.receive) as watch:
                try:
                    grant = await hold(watch, node, req, network)
                    metrics.on_lease(_lease_outcome(grant))
                    obj = answer_of(LeaseAnswer(grant))
                except _Stopping:
                    obj = answer_of(None)
                with watch.cancelled_on_disconnect(), trio.move_on_after(ANSWER_TURN_WAIT):
                    await turns.acquire()
                    turn = True
            if watch.gone:  # final for every disconnect the server delivered (nurseries)
                raise _Gone
            sent, grant = grant, None  # sent, the copy is the client's: deliver gives it
            await deliver(exchange, obj, sent)  # back only when the send fails
        finally:
            if turn:
                turns.release()
            if grant is not None:
                await give_back(grant)

    async def post_lease(exchange: _Exchange) -> None:
        if ctx.stopping.is_set():
            raise _Stopping
        key = exchange.node_key(well_formed=True)
        await check_known(key)
        body = await exchange.body(BODY_LIMIT)
        network = sources.of_scope(exchange.scope, key)
        node, req, outcome, _ = await hub.write(
            partial(lease_for_key, settings=hub.settings, network=network), key, body, now_ms()
        )
        if outcome is not None and not isinstance(outcome, LeaseGrant):
            metrics.on_lease("refused")
            await exchange.answer(403, unstructure(outcome))
            return
        if outcome is None and req.wait_ms != 0:
            await answer_held(exchange, node, req, network, _lease_answer)
            return
        metrics.on_lease(_lease_outcome(outcome))
        await deliver(exchange, unstructure(LeaseAnswer(outcome)), outcome)

    async def post_result(exchange: _Exchange, copy_id: str) -> None:
        key = exchange.node_key(well_formed=False)  # the rest in the transaction, after the body
        body = await exchange.body(BODY_LIMIT)
        network = sources.of_scope(exchange.scope, key)
        code, answer, leased, _ = await hub.write(
            partial(
                receive_result,
                settings=hub.settings,
                lease=not ctx.stopping.is_set(),
                network=network,
            ),
            key,
            copy_id,
            body,
            now_ms(),
        )
        metrics.on_result("gone" if isinstance(answer, ErrorAnswer) else answer.status)
        if leased is None or isinstance(answer, ErrorAnswer):
            await exchange.answer(code, unstructure(answer))
            return
        node, req, grant = leased
        if grant is None and req.wait_ms != 0:  # the result is committed: held for ``next``

            def with_next(next_answer: LeaseAnswer | None) -> Any:
                # None (the daemon stops): the result's answer without ``next`` (module doc)
                return unstructure(attrs.evolve(answer, next=next_answer))

            await answer_held(exchange, node, req, network, with_next)
            return
        metrics.on_lease(_lease_outcome(grant))
        await deliver(exchange, unstructure(attrs.evolve(answer, next=LeaseAnswer(grant))), grant)

    async def serve(exchange: _Exchange, copy_id: str | None) -> None:
        try:
            check_header_size(exchange.scope["headers"])
            if copy_id is None:
                await post_lease(exchange)
            else:
                await post_result(exchange, copy_id)
        except _Gone:
            return
        except _Stopping:
            retry = (b"retry-after", str(RETRY_AFTER_STOPPING).encode())
            await exchange.answer(503, STOPPING_DETAIL, retry)
        except ProtocolError as e:
            await exchange.answer(e.status, e.to_json())
        except Exception as e:
            scope = exchange.scope
            log.error("unhandled error in %s %s", scope["method"], scope["path"], exc_info=e)
            await exchange.answer(500, {"detail": INTERNAL_DETAIL})

    async def lease_path(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            path = scope["path"]
            if path == LEASE_PATH:
                await serve(_Exchange(scope, receive, send), None)
                return
            found = _RESULT_PATH.fullmatch(path)
            if found is not None:
                await serve(_Exchange(scope, receive, send), found[1])
                return
        await app(scope, receive, send)

    return lease_path
