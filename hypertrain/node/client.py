"""The node's HTTP client for the coordinator's compute routes (DESIGN.md section 6).

One :class:`httpx.AsyncClient` with an injectable transport (tests pass
:class:`httpx.MockTransport`) and named timeouts (:class:`NodeTimeouts`). Promises:

- **The key goes to one origin only.** Every URL is built from the configured base URL and
  fixed route templates; path segments taken from a job (copy id, input name) must pass
  :func:`~hypertrain.scoring.inputs.check_input_name`, so none can climb out of its route; the
  client never follows a redirect (``follow_redirects=False``; a 3xx is :class:`Refused`) and
  never uses a URL the server sends. The key travels only as ``Authorization: Bearer`` and
  appears in no error message.
- **Every wait is bounded**: connect/read/write/pool timeouts on every request; the lease long
  poll gets a read timeout of :attr:`NodeTimeouts.lease_read` (40 s against the server's 25 s);
  JSON answers are read up to :data:`~hypertrain.node.client_answers.MAX_ANSWER_BYTES`.
- **Typed bodies.** Every request body and every answer is a class of
  :mod:`hypertrain.compute.wire`, encoded and decoded by the one converter, the same classes the
  coordinator uses. An answer that does not decode is :class:`Refused`, except a lease answer
  whose job does not: that is :class:`BadOffer` (the job is abandoned before a byte of it is
  fetched); so is the lease answer a result's answer carries (``next``), as a value beside the
  result's answer, which stands.
- **Retries** with :func:`nurseries.retry` (exponential backoff from :data:`DEFAULT_BACKOFF`,
  full jitter from the injected ``jitter`` source) until a deadline: the lease's for the input
  download and the result post (the caller passes it, on the Trio clock), :attr:`NodeClient.
  retry_budget` seconds from the first try for registering. The input download (before its
  answer starts) and registering with a key retry network errors and 5xx; minting (register
  without a key) retries only a failed connection, since a request that was sent may have
  minted a key already; the result post retries network errors only (the server answers an
  identical repeated body the same way; one that carried the next lease request is leased
  anew). The lease poll is not retried here: the node's loop
  backs off between polls (:mod:`hypertrain.node.runner`, on the same schedule). An answer's
  ``Retry-After`` (delta seconds; a shutting-down coordinator sends one with its 503) is the
  least wait before the next try, here and in the loop: the errors carry it as
  ``retry_after``; when it is longer than what is left before the deadline, the retries stop.
- **Inputs stream** (:meth:`NodeClient.fetch_input`) as raw bytes (``Accept-Encoding:
  identity``, no inflation) with the declared size as a cap: a ``Content-Length`` above it is
  refused before any byte is read, and :class:`~hypertrain.node.cache.InputCache` stops at the
  first byte past it.
- **Typed errors** (:mod:`hypertrain.node.errors`, under ``NodeClientError``):
  :class:`Unreachable` (network failure or 5xx after the retries), :class:`Unauthorized` (401),
  :class:`Disabled` (the lease's 403, with the re-enable time), :class:`Refused` (any other
  non-2xx). A post's 410 (late) and 409 (another answer already posted) are answers
  (:class:`PostAnswer`), not errors. The network or decoding error behind one is kept as its
  cause.
"""

from __future__ import annotations

import json
import random
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from typing import Any, Final, TypeVar
from urllib.parse import quote

import attrs
import httpx
import trio

from hypertrain.compute.wire import (
    BODY_LIMIT,
    LEASE_HEADER,
    InputFile,
    LeaseAnswer,
    LeaseGrant,
    LeaseRequest,
    RegisterAnswer,
    RegisterRequest,
    ResultPost,
    Standing,
    read_result_answer,
)
from hypertrain.node.client_answers import (
    PostAnswer,
    RawAnswer,
    ServerError,
    carried_lease,
    decoded_as,
    detail_of,
    failure_text,
    raise_if_disabled,
    read_json_capped,
    retry_after_of,
    unreachable_error,
)
from hypertrain.node.errors import (
    BadOffer,
    InputMismatch,
    Refused,
    Unauthorized,
    Unreachable,
)
from hypertrain.protocol.converter import structure, unstructure
from hypertrain.protocol.errors import SchemaError
from hypertrain.scoring.inputs import check_input_name
from nurseries import Backoff, GaveUp, retry

__all__ = [
    "DEFAULT_BACKOFF",
    "DEFAULT_TIMEOUTS",
    "RETRY_BUDGET",
    "NodeClient",
    "NodeTimeouts",
]

_NEXT_REFUSED: Final = "unknown field(s) 'next'"
"""What a coordinator that predates ``ResultPost.next`` answers (400) to a post carrying it."""

T = TypeVar("T")


@attrs.frozen
class NodeTimeouts:
    """Named HTTP timeouts in seconds; the lease poll and input downloads get their own read."""

    connect: float = 10.0
    read: float = 30.0
    write: float = 30.0
    pool: float = 10.0
    lease_read: float = 40.0
    input_read: float = 60.0

    def httpx(self, read: float | None = None) -> httpx.Timeout:
        return httpx.Timeout(
            connect=self.connect, read=self.read if read is None else read,
            write=self.write, pool=self.pool,
        )  # fmt: skip


DEFAULT_TIMEOUTS: Final = NodeTimeouts()
DEFAULT_BACKOFF: Final = Backoff(initial=0.5, maximum=8.0)
RETRY_BUDGET: Final = 30.0
"""Seconds a call without a lease deadline (registering) keeps retrying from its first try."""


def _segment(value: str) -> str:
    return quote(check_input_name(value), safe="")


class NodeClient:
    """Typed calls of the compute routes; ``base_url`` is the coordinator (no trailing slash),
    reached directly or through ``proxy`` alone (never a proxy named by the environment).

    Use as ``async with NodeClient(...) as client`` or call :meth:`aclose`.
    """

    def __init__(
        self,
        base_url: str,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        timeouts: NodeTimeouts = DEFAULT_TIMEOUTS,
        backoff: Backoff = DEFAULT_BACKOFF,
        retry_budget: float = RETRY_BUDGET,
        jitter: Callable[[], float] = random.random,
        proxy: str | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeouts = timeouts
        self.backoff = backoff
        self.retry_budget = retry_budget
        self._jitter = jitter
        self._key: str | None = None
        self.next_in_results = True
        """Whether the coordinator takes a result's next lease request (:meth:`post_result`)."""
        # The node's key must reach its coordinator and no one else: the environment's proxy
        # variables (HTTP_PROXY, ALL_PROXY...) are ignored; only ``proxy`` (--proxy) is used.
        self._http = httpx.AsyncClient(
            transport=transport,
            timeout=timeouts.httpx(),
            follow_redirects=False,
            trust_env=False,
            proxy=proxy,
        )

    async def __aenter__(self) -> NodeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True), trio.move_on_after(5):
            await self._http.aclose()

    def use_key(self, key: str) -> None:
        """The key sent as ``Authorization: Bearer`` from now on."""
        self._key = key

    def _auth(self) -> dict[str, str]:
        if self._key is None:
            raise Unauthorized("no node key yet: register first")
        return {"Authorization": f"Bearer {self._key}"}

    # -- plumbing ------------------------------------------------------------------------

    async def _send(
        self, method: str, path: str, *, body: object, auth: bool, read: float | None = None
    ) -> RawAnswer:
        """One request and its answer. Network errors propagate."""
        headers = {"Accept": "application/json", **(self._auth() if auth else {})}
        content = None if body is None else json.dumps(body).encode()
        if content is not None:
            headers["Content-Type"] = "application/json"
        async with self._http.stream(
            method,
            self.base_url + path,
            content=content,
            headers=headers,
            timeout=self.timeouts.httpx(read),
        ) as response:
            return RawAnswer.of(response, await read_json_capped(response))

    async def _retrying(
        self,
        call: Callable[[], Awaitable[T]],
        *,
        retry_on: tuple[type[Exception], ...],
        deadline: float | None = None,
    ) -> T:
        """``call()``, retried while it fails with one of ``retry_on`` until ``deadline`` (Trio
        time; None: :attr:`retry_budget` from now); then :class:`Unreachable`."""
        if deadline is None:
            deadline = trio.current_time() + self.retry_budget
        try:
            return await retry(
                call, deadline=deadline, backoff=self.backoff, draw=self._jitter,
                transient=lambda e: retry_after_of(e) if isinstance(e, retry_on) else None,
            )  # fmt: skip
        except GaveUp as e:
            raise unreachable_error(e.last) from e

    def _check(self, answer: RawAnswer) -> Any:
        """A 2xx answer's decoded JSON; the typed error of any other status."""
        status, body = answer.status, answer.body
        if 200 <= status < 300:
            return body
        if status == 401:
            raise Unauthorized(detail_of(body, "unknown or malformed node key"))
        if status >= 500:
            raise ServerError(status, detail_of(body, "server error"), answer.retry_after)
        if 300 <= status < 400:
            raise Refused(status, "redirect refused (the node only talks to its coordinator)")
        raise Refused(status, detail_of(body, "refused"), retry_after=answer.retry_after)

    # -- routes --------------------------------------------------------------------------

    async def register(
        self, key: str | None, handle: str | None, capabilities: Sequence[str], hardware: str
    ) -> RegisterAnswer:
        """``POST /v1/compute/register``; the answer's ``key`` is set only when minted."""
        body = unstructure(
            RegisterRequest(
                key=key, handle=handle, capabilities=tuple(capabilities), hardware=hardware
            )
        )

        async def call() -> RegisterAnswer:
            answer = await self._send("POST", "/v1/compute/register", body=body, auth=False)
            return decoded_as(RegisterAnswer, answer.status, self._check(answer))

        retry_on: tuple[type[Exception], ...] = (
            (httpx.TransportError, ServerError) if key is not None else (httpx.ConnectError,)
        )
        try:
            return await self._retrying(call, retry_on=retry_on)
        except (httpx.TransportError, ServerError) as e:
            raise unreachable_error(e) from e

    async def lease(
        self, capabilities: Sequence[str], hardware: str, wait_ms: int | None = None
    ) -> LeaseGrant | None:
        """``POST /v1/compute/jobs/lease`` (a long poll): the offered job, or None.

        :class:`BadOffer` when the answer's job is malformed or hostile (module doc)."""
        request = LeaseRequest(capabilities=tuple(capabilities), hardware=hardware, wait_ms=wait_ms)
        try:
            answer = await self._send(
                "POST", "/v1/compute/jobs/lease", body=unstructure(request), auth=True,
                read=self.timeouts.lease_read,
            )  # fmt: skip
            if answer.status == 403:
                raise_if_disabled(answer.body)
            body = self._check(answer)
        except (httpx.TransportError, ServerError) as e:
            raise unreachable_error(e) from e
        if not isinstance(body, dict):
            raise Refused(answer.status, "the answer is not a JSON object")
        try:
            return structure(LeaseAnswer, body).job
        except SchemaError as e:
            raise BadOffer(e.detail) from e

    async def fetch_input(
        self, copy_id: str, lease: str, spec: InputFile, *, deadline: float | None = None
    ) -> AsyncGenerator[bytes, None]:
        """``GET /v1/compute/jobs/{id}/inputs/{name}``: the raw bytes, streamed (module doc);
        retried until the answer starts, up to ``deadline`` (the lease's, on the Trio clock)."""
        path = f"/v1/compute/jobs/{_segment(copy_id)}/inputs/{_segment(spec.name)}"
        headers = {**self._auth(), LEASE_HEADER: lease, "Accept-Encoding": "identity"}
        timeout = self.timeouts.httpx(self.timeouts.input_read)

        async def start() -> httpx.Response:
            request = self._http.build_request(
                "GET", self.base_url + path, headers=headers, timeout=timeout
            )
            response = await self._http.send(request, stream=True)
            try:
                if not response.is_success:
                    self._check(RawAnswer.of(response, await read_json_capped(response)))
                length = response.headers.get("content-length")
                if length is not None and (not length.isdigit() or int(length) > spec.size):
                    raise InputMismatch(
                        f"input {spec.name}: the server offers {length} bytes, declared {spec.size}"
                    )
            except BaseException:
                await response.aclose()
                raise
            return response

        try:
            response = await self._retrying(
                start, retry_on=(httpx.TransportError, ServerError), deadline=deadline
            )
        except Unreachable as e:
            raise Unreachable(f"input {spec.name}: {e}", retry_after=e.retry_after) from e
        try:
            async for chunk in response.aiter_raw():
                yield chunk
        except httpx.TransportError as e:
            raise Unreachable(f"input {spec.name}: {failure_text(e)}") from e
        finally:
            await response.aclose()

    async def standing(self, node_id: str) -> Standing:
        """``GET /v1/compute/leaderboard/{node}``: the node's leaderboard row (one try: the
        loop asks again later)."""
        path = f"/v1/compute/leaderboard/{_segment(node_id)}"
        try:
            answer = await self._send("GET", path, body=None, auth=False)
            return decoded_as(Standing, answer.status, self._check(answer))
        except (httpx.TransportError, ServerError) as e:
            raise unreachable_error(e) from e

    async def post_result(
        self, copy_id: str, post: ResultPost, *, deadline: float | None = None
    ) -> PostAnswer:
        """``POST /v1/compute/jobs/{id}/result`` (module doc: retried on network errors until
        ``deadline``, the lease's on the Trio clock). A post that carries the node's next lease
        request (``post.next``) waits as a lease poll does (:attr:`NodeTimeouts.lease_read`);
        the lease's answer is :attr:`PostAnswer.next`. A coordinator that refuses the field
        (400 ``unknown field(s) 'next'``: nothing was applied) gets the post again without it,
        and :attr:`next_in_results` is False from then on. A retry (the answer was lost: the
        first try may have been taken, and its lease with it) carries no ``next``: it gets the
        result's first answer, and never takes a second lease."""
        body = unstructure(post)
        if len(json.dumps(body).encode()) > BODY_LIMIT:
            raise Refused(413, f"the result is over {BODY_LIMIT} bytes; not sent")
        path = f"/v1/compute/jobs/{_segment(copy_id)}/result"
        plain = unstructure(attrs.evolve(post, next=None))
        tries = 0

        async def call() -> RawAnswer:
            nonlocal tries
            tries += 1
            if tries == 1 and post.next is not None:  # held as a lease poll is
                return await self._send(
                    "POST", path, body=body, auth=True, read=self.timeouts.lease_read
                )
            return await self._send("POST", path, body=plain, auth=True)

        answer = await self._retrying(call, retry_on=(httpx.TransportError,), deadline=deadline)
        status = answer.status
        if post.next is not None and status == 400 and _NEXT_REFUSED in detail_of(answer.body, ""):
            self.next_in_results = False
            return await self.post_result(copy_id, attrs.evolve(post, next=None), deadline=deadline)
        if status in (409, 410):
            detail = detail_of(
                answer.body, "late" if status == 410 else "another answer was posted"
            )
            return PostAnswer(status, None, detail)
        try:
            checked = self._check(answer)
        except ServerError as e:
            raise Refused(e.status, e.detail, retry_after=e.retry_after) from e
        carried = checked.pop("next", None) if isinstance(checked, dict) else None
        try:
            result = read_result_answer(checked)
        except SchemaError as e:
            raise Refused(status, f"unreadable answer: {e.detail}") from e
        return PostAnswer(200, result, next=None if carried is None else carried_lease(carried))
