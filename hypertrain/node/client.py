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
  JSON answers are read up to :data:`MAX_ANSWER_BYTES`.
- **Retries** with capped exponential backoff and jitter (:class:`RetryPolicy`): the input
  download (before its first byte) and registering with a key retry network errors and 5xx;
  minting (register without a key) retries only a failed connection, since a request that was
  sent may have minted a key already; the result post retries network errors only (the
  server answers an identical repeated body the same way). The lease poll is not retried here:
  the node's loop backs off between polls.
- **Inputs stream** (:meth:`NodeClient.fetch_input`) as raw bytes (``Accept-Encoding:
  identity``, no inflation) with the declared size as a cap: a ``Content-Length`` above it is
  refused before any byte is read, and :class:`~hypertrain.node.cache.InputCache` stops at the
  first byte past it.
- **Typed errors** (:mod:`hypertrain.node.errors`, under :class:`NodeClientError`):
  :class:`Unreachable` (network failure or 5xx after the retries), :class:`Unauthorized` (401),
  :class:`Disabled` (the lease's 403, with the re-enable time), :class:`Refused` (any other
  non-2xx). A post's 410 (late) and 409 (another answer already posted) are answers
  (:class:`PostAnswer`), not errors. The network error behind one is kept as its cause.
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

from hypertrain.node.cache import InputSpec
from hypertrain.node.errors import Disabled, InputMismatch, Refused, Unauthorized, Unreachable
from hypertrain.scoring.inputs import check_input_name

__all__ = [
    "DEFAULT_RETRY",
    "DEFAULT_TIMEOUTS",
    "MAX_ANSWER_BYTES",
    "MAX_RESULT_BYTES",
    "NodeClient",
    "NodeTimeouts",
    "PostAnswer",
    "RetryPolicy",
]

MAX_ANSWER_BYTES: Final = 1 << 20
"""Bytes of a JSON answer the client reads; a longer one is :class:`Refused`."""
MAX_RESULT_BYTES: Final = 64 * 1024
"""The coordinator's limit on a result body."""
LEASE_HEADER: Final = "X-HT-Lease"

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


@attrs.frozen
class RetryPolicy:
    """Capped exponential backoff with jitter: attempt ``n`` (from 0) waits
    ``min(cap, base * 2**n) * (0.5 + jitter()/2)`` seconds; ``attempts`` tries in all."""

    attempts: int = 4
    base: float = 0.5
    cap: float = 8.0

    def delay(self, attempt: int, jitter: float) -> float:
        return min(self.cap, self.base * 2.0**attempt) * (0.5 + jitter / 2)


DEFAULT_TIMEOUTS: Final = NodeTimeouts()
DEFAULT_RETRY: Final = RetryPolicy()


@attrs.frozen
class PostAnswer:
    """The coordinator's answer to a result: 200 (``status`` such as ``counted``), 410 (late,
    counts nothing) or 409 (a different answer was posted first)."""

    http_status: int
    status: str | None
    detail: str
    body: dict[str, Any] = attrs.field(factory=dict, eq=False)

    @property
    def accepted(self) -> bool:
        return self.http_status == 200

    @property
    def credits(self) -> int | None:
        """The node's compute credits after this answer, when the coordinator said."""
        value = self.body.get("compute_credits")
        return value if type(value) is int else None

    def describe(self) -> str:
        if self.http_status == 200:
            earned = "" if self.credits is None else f", {self.credits} credits earned"
            return (self.status or "accepted") + earned
        if self.http_status == 410:
            return f"late, not counted ({self.detail})"
        return f"refused: {self.detail}"


def _segment(value: str) -> str:
    return quote(check_input_name(value), safe="")


def _detail(body: Any, fallback: str) -> str:
    if isinstance(body, dict) and isinstance(body.get("detail"), str):
        return " ".join(body["detail"].split())[:300]
    return fallback


class NodeClient:
    """Typed calls of the compute routes; ``base_url`` is the coordinator (no trailing slash).

    Use as ``async with NodeClient(...) as client`` or call :meth:`aclose`.
    """

    def __init__(
        self,
        base_url: str,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        timeouts: NodeTimeouts = DEFAULT_TIMEOUTS,
        retry: RetryPolicy = DEFAULT_RETRY,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeouts = timeouts
        self.retry = retry
        self._jitter = jitter
        self._key: str | None = None
        self._http = httpx.AsyncClient(
            transport=transport, timeout=timeouts.httpx(), follow_redirects=False
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
    ) -> tuple[int, Any]:
        """One request; ``(status, decoded JSON body or None)``. Network errors propagate."""
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
            return response.status_code, await _read_json_capped(response)

    async def _retrying(
        self, call: Callable[[], Awaitable[T]], *, retry_on: tuple[type[Exception], ...]
    ) -> T:
        for attempt in range(self.retry.attempts):
            try:
                return await call()
            except retry_on as e:
                if attempt + 1 >= self.retry.attempts:
                    raise Unreachable(_why(e)) from e
            await trio.sleep(self.retry.delay(attempt, self._jitter()))
        raise AssertionError("unreachable")

    def _check(self, status: int, body: Any) -> dict[str, Any]:
        if 200 <= status < 300:
            if not isinstance(body, dict):
                raise Refused(status, "the answer is not a JSON object")
            return body
        if status == 401:
            raise Unauthorized(_detail(body, "unknown or malformed node key"))
        if status >= 500:
            raise _ServerError(status, _detail(body, "server error"))
        if 300 <= status < 400:
            raise Refused(status, "redirect refused (the node only talks to its coordinator)")
        raise Refused(status, _detail(body, "refused"))

    # -- routes --------------------------------------------------------------------------

    async def register(
        self, key: str | None, handle: str | None, capabilities: Sequence[str], hardware: str
    ) -> dict[str, Any]:
        """``POST /v1/compute/register``; the answer's ``key`` is present only when minted."""
        body = {
            "key": key,
            "handle": handle,
            "capabilities": list(capabilities),
            "hardware": hardware,
        }

        async def call() -> dict[str, Any]:
            status, answer = await self._send("POST", "/v1/compute/register", body=body, auth=False)
            return self._check(status, answer)

        retry_on: tuple[type[Exception], ...] = (
            (httpx.TransportError, _ServerError) if key is not None else (httpx.ConnectError,)
        )
        try:
            return await self._retrying(call, retry_on=retry_on)
        except (httpx.TransportError, _ServerError) as e:
            raise Unreachable(_why(e)) from e

    async def lease(
        self, capabilities: Sequence[str], hardware: str, wait_ms: int | None = None
    ) -> dict[str, Any] | None:
        """``POST /v1/compute/jobs/lease`` (a long poll): the offered job, or None."""
        body: dict[str, Any] = {"capabilities": list(capabilities), "hardware": hardware}
        if wait_ms is not None:
            body["wait_ms"] = wait_ms
        try:
            status, answer = await self._send(
                "POST", "/v1/compute/jobs/lease", body=body, auth=True,
                read=self.timeouts.lease_read,
            )  # fmt: skip
            if status == 403 and isinstance(answer, dict) and "reenable_at_ms" in answer:
                at_ms = answer.get("reenable_at_ms")
                at = answer.get("reenable_at")
                raise Disabled(
                    _detail(answer, "disabled"),
                    at_ms if isinstance(at_ms, int) and not isinstance(at_ms, bool) else None,
                    at if isinstance(at, str) else None,
                )
            job = self._check(status, answer).get("job")
        except (httpx.TransportError, _ServerError) as e:
            raise Unreachable(_why(e)) from e
        if job is not None and not isinstance(job, dict):
            raise Refused(status, "the lease answer's job is not an object")
        return job

    async def fetch_input(
        self, copy_id: str, lease: str, spec: InputSpec
    ) -> AsyncGenerator[bytes, None]:
        """``GET /v1/compute/jobs/{id}/inputs/{name}``: the raw bytes, streamed (module doc)."""
        path = f"/v1/compute/jobs/{_segment(copy_id)}/inputs/{_segment(spec.name)}"
        headers = {**self._auth(), LEASE_HEADER: lease, "Accept-Encoding": "identity"}
        timeout = self.timeouts.httpx(self.timeouts.input_read)
        for attempt in range(self.retry.attempts):
            started = False
            try:
                async with self._http.stream(
                    "GET", self.base_url + path, headers=headers, timeout=timeout
                ) as response:
                    if not response.is_success:
                        self._check(response.status_code, await _read_json_capped(response))
                    length = response.headers.get("content-length")
                    if length is not None and (not length.isdigit() or int(length) > spec.size):
                        raise InputMismatch(
                            f"input {spec.name}: the server offers {length} bytes,"
                            f" declared {spec.size}"
                        )
                    async for chunk in response.aiter_raw():
                        started = True
                        yield chunk
                return
            except (httpx.TransportError, _ServerError) as e:
                if started or attempt + 1 >= self.retry.attempts:
                    raise Unreachable(f"input {spec.name}: {_why(e)}") from e
            await trio.sleep(self.retry.delay(attempt, self._jitter()))

    async def post_result(self, copy_id: str, body: dict[str, Any]) -> PostAnswer:
        """``POST /v1/compute/jobs/{id}/result`` (module doc: retried on network errors)."""
        if len(json.dumps(body).encode()) > MAX_RESULT_BYTES:
            raise Refused(413, f"the result is over {MAX_RESULT_BYTES} bytes; not sent")
        path = f"/v1/compute/jobs/{_segment(copy_id)}/result"

        async def call() -> tuple[int, Any]:
            return await self._send("POST", path, body=body, auth=True)

        status, answer = await self._retrying(call, retry_on=(httpx.TransportError,))
        if status in (409, 410):
            detail = _detail(answer, "late" if status == 410 else "another answer was posted")
            return PostAnswer(status, None, detail, answer if isinstance(answer, dict) else {})
        try:
            checked = self._check(status, answer)
        except _ServerError as e:
            raise Refused(e.status, e.detail) from e
        verdict = checked.get("status")
        return PostAnswer(200, verdict if isinstance(verdict, str) else None, "", checked)


async def _read_json_capped(response: httpx.Response) -> Any:
    """The answer's JSON, read up to :data:`MAX_ANSWER_BYTES` (None when not JSON)."""
    raw = bytearray()
    async for chunk in response.aiter_bytes():
        raw += chunk
        if len(raw) > MAX_ANSWER_BYTES:
            raise Refused(response.status_code, "answer too large")
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None


class _ServerError(Exception):
    """A 5xx answer (retryable where the call allows it)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.detail = detail


def _why(exc: BaseException) -> str:
    """A one-line reason without the request (never a header, so never the key)."""
    if isinstance(exc, _ServerError):
        return str(exc)
    text = " ".join(str(exc).split())[:200]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
