"""The external aggregator's HTTP client of the daemon's routes (spec 9), admin token in hand.

One :class:`httpx.AsyncClient` with explicit timeouts and an injectable transport. Promises:

- every call is bounded: httpx timeouts per request, and a network error or a 502/503/504
  answer (a ``Retry-After`` honoured) is retried with :func:`nurseries.retry` (exponential
  backoff, full jitter) for :attr:`Retry.budget` seconds from the first try, after which the
  call raises :class:`DaemonUnreachable` (its cause the last failure);
- any other non-2xx answer raises :class:`Refused` with the status and the server's
  ``detail``; a 401 is :class:`TokenRefused` (the admin token file holds the wrong token);
- downloads are checked: bytes that do not hash to the requested key raise
  :class:`DaemonUnreachable` after the retries (never returned), a 404 raises
  :class:`~hypertrain.protocol.errors.NotFound` (the merge excludes a missing delta exactly
  as the daemon's own aggregator does).

Error tree::

    RemoteError
    ├── DaemonUnreachable   network errors / 5xx after the retries  (CLI exit 3)
    └── Refused             any other non-2xx answer                 (CLI exit 1)
        └── TokenRefused    401                                      (CLI exit 2)
"""

from __future__ import annotations

import hashlib
import logging
import random
from collections.abc import Callable
from typing import Any, Final

import attrs
import httpx
import trio

from hypertrain.protocol.errors import NotFound
from hypertrain.protocol.pages import RUN_VIEW_LISTS, read_all_pages, round_key
from nurseries import Backoff, GaveUp, parse_retry_after, retry

__all__ = [
    "DEFAULT_RETRY",
    "RETRIED_STATUSES",
    "AggregatorClient",
    "DaemonUnreachable",
    "Refused",
    "RemoteError",
    "Retry",
    "RetryableStatus",
    "TokenRefused",
    "response_detail",
    "transient",
]

log = logging.getLogger(__name__)

RETRIED_STATUSES: Final = frozenset({502, 503, 504})
"""Answers worth another try (a proxy or a daemon restarting)."""


class RemoteError(Exception):
    """A call to the daemon failed (module doc)."""


class DaemonUnreachable(RemoteError):
    """The daemon did not answer usefully within the retries."""


class Refused(RemoteError):
    """A non-2xx answer: ``status`` and the server's ``detail``."""

    def __init__(self, method: str, path: str, status: int, detail: str) -> None:
        self.status, self.detail = status, detail
        super().__init__(f"{method} {path}: HTTP {status}: {detail}")


class TokenRefused(Refused):
    """401: the daemon does not accept the admin token."""


@attrs.frozen
class Retry:
    """How long a call keeps trying: network errors and 502/503/504 answers are retried for
    ``budget`` seconds from the first try (0: one try), waiting per ``backoff`` with full
    jitter drawn from ``draw`` (:func:`nurseries.next_delay`)."""

    budget: float = 60.0
    backoff: Backoff = attrs.field(factory=lambda: Backoff(initial=1.0, maximum=30.0))
    timeout: httpx.Timeout = attrs.field(
        factory=lambda: httpx.Timeout(connect=10.0, read=120.0, write=120.0, pool=10.0)
    )
    """Per request: connect, read (also of a whole object), write, pool."""
    draw: Callable[[], float] = attrs.field(default=random.random, eq=False, repr=False)


class RetryableStatus(Exception):
    """A 502/503/504 answer, or a download whose bytes do not hash to its key: worth another
    try, after the server's ``Retry-After`` if any."""

    def __init__(self, what: str, response: httpx.Response) -> None:
        super().__init__(what)
        self.retry_after = parse_retry_after(response.headers.get("retry-after"))


def transient(error: Exception) -> float | None:
    """The retry rule of the daemon's clients: a network error or a :class:`RetryableStatus`
    is worth another try (after its ``Retry-After``); anything else is final."""
    if isinstance(error, httpx.TransportError):
        return 0.0
    if isinstance(error, RetryableStatus):
        return error.retry_after or 0.0
    return None


DEFAULT_RETRY: Final = Retry()


def response_detail(response: httpx.Response) -> str:
    """The ``detail`` of an error answer (or the start of its text)."""
    try:
        body: Any = response.json()
    except ValueError:
        return response.text[:200]
    if isinstance(body, dict) and body.get("detail") is not None:
        return str(body["detail"])
    return str(body)[:200]


class AggregatorClient:
    """The daemon's routes an external aggregator calls; ``api`` is the base URL."""

    def __init__(
        self,
        api: str,
        admin_token: str,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        retry: Retry = DEFAULT_RETRY,
    ) -> None:
        self.api = api.rstrip("/")
        self.retry = retry
        self._auth = {"Authorization": f"Bearer {admin_token}"}
        self._http = httpx.AsyncClient(transport=transport, timeout=retry.timeout)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _send(
        self,
        method: str,
        path: str,
        *,
        ok: tuple[int, ...] = (),
        sound: Callable[[httpx.Response], bool] = lambda _: True,
        **kwargs: Any,
    ) -> httpx.Response:
        """One call, retried (module doc); a 2xx answer that is not ``sound`` is retried too."""

        async def once() -> httpx.Response:
            response = await self._http.request(
                method, self.api + path, headers=self._auth, **kwargs
            )
            status = response.status_code
            if status in ok or (response.is_success and sound(response)):
                return response
            if response.is_success:
                why = f"{method} {path}: the bytes do not hash to the key"
                raise RetryableStatus(why, response)
            if status not in RETRIED_STATUSES:
                cls = TokenRefused if status == 401 else Refused
                raise cls(method, path, status, response_detail(response))
            raise RetryableStatus(
                f"{method} {path}: HTTP {status}: {response_detail(response)}", response
            )

        def warn(error: Exception, delay: float) -> None:
            log.warning("%s %s failed (%s); retrying in %.3g s", method, path, error, delay)

        deadline = trio.current_time() + self.retry.budget
        try:
            return await retry(
                once, deadline=deadline, transient=transient, backoff=self.retry.backoff,
                draw=self.retry.draw, on_retry=warn,
            )  # fmt: skip
        except GaveUp as e:
            raise DaemonUnreachable(f"{method} {self.api}{path}: {e}") from e

    async def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = await self._send(method, path, **kwargs)
        try:
            return response.json()
        except ValueError as e:
            raise DaemonUnreachable(f"{method} {path}: the answer is not JSON") from e

    async def run_view(self, run_id: str) -> dict[str, Any]:
        """``GET /v1/runs/{id}`` with every page of its rounds (the oldest round not final may
        be far down the history: one request per 256 rounds)."""
        path = f"/v1/runs/{run_id}"

        async def page(offset: int) -> dict[str, Any]:
            params = {"offset": str(offset)} if offset else {}
            return dict(await self._json("GET", path, params=params))

        return await read_all_pages(page, RUN_VIEW_LISTS, key=round_key)

    async def beacon_latest(self) -> int:
        """D: ``GET /v1/beacon/latest``."""
        return int((await self._json("GET", "/v1/beacon/latest"))["round"])

    async def round_view(self, run_id: str, w: int) -> dict[str, Any] | None:
        """``GET /v1/runs/{id}/rounds/{w}``; None while round ``w`` is not open."""
        response = await self._send("GET", f"/v1/runs/{run_id}/rounds/{w}", ok=(404,))
        return None if response.status_code == 404 else dict(response.json())

    async def inputs(self, run_id: str, w: int) -> dict[str, Any]:
        """``GET /v1/aggregator/runs/{id}/rounds/{w}/inputs`` (default ``d_open``)."""
        return dict(await self._json("GET", f"/v1/aggregator/runs/{run_id}/rounds/{w}/inputs"))

    async def get_object(self, sha256: str) -> bytes:
        """``GET /v1/objects/{sha256}``, checked against its key; NotFound on 404."""
        path = f"/v1/objects/{sha256}"
        response = await self._send(
            "GET", path, ok=(404,),
            sound=lambda r: hashlib.sha256(r.content).hexdigest() == sha256,
        )  # fmt: skip
        if response.status_code == 404:
            raise NotFound(f"object {sha256} is not in the daemon's store")
        return response.content

    async def put_object(self, data: bytes) -> str:
        """``PUT /v1/aggregator/objects/{sha256}`` (idempotent); returns the key."""
        key = hashlib.sha256(data).hexdigest()
        await self._send("PUT", f"/v1/aggregator/objects/{key}", content=data)
        return key

    async def aggregate(
        self, run_id: str, w: int, envelope: dict[str, Any]
    ) -> tuple[int, dict[str, Any]]:
        """``POST .../rounds/{w}/aggregate``: ``(status, body)``; a 409 is returned, not raised."""
        path = f"/v1/aggregator/runs/{run_id}/rounds/{w}/aggregate"
        response = await self._send("POST", path, ok=(409,), json=envelope)
        body = response.json()
        return response.status_code, dict(body) if isinstance(body, dict) else {}

    async def finalize(
        self, run_id: str, w: int, envelope: dict[str, Any]
    ) -> tuple[int, dict[str, Any]]:
        """``POST .../rounds/{w}/finalize``: ``(status, body)``; a 409 (already final, or not
        finalisable yet) and a 422 (the server's plan changed since its template was read) are
        returned, not raised."""
        path = f"/v1/aggregator/runs/{run_id}/rounds/{w}/finalize"
        response = await self._send("POST", path, ok=(409, 422), json=envelope)
        try:
            body = response.json()
        except ValueError as e:
            raise DaemonUnreachable(f"POST {path}: the answer is not JSON") from e
        return response.status_code, dict(body) if isinstance(body, dict) else {}

    async def rollback(self, run_id: str, w: int, request: dict[str, Any]) -> tuple[int, str]:
        """``POST .../rounds/{w}/rollback`` ``{rollback, old_tape_w1, new_tapes}``: ``(status,
        detail)``; a 409 (rolled back already, or too late) is returned, not raised."""
        path = f"/v1/aggregator/runs/{run_id}/rounds/{w}/rollback"
        response = await self._send("POST", path, ok=(409,), json=request)
        if response.status_code == 409:
            try:
                detail = str(response.json().get("detail"))
            except (ValueError, AttributeError):
                detail = response.text[:200]
            return 409, detail
        return response.status_code, ""

    async def publish_state(self, run_id: str, w: int, theta_start_sha256: str) -> None:
        """``PUT .../rounds/{w}/state`` (write-once; the same value again is 200)."""
        await self._json(
            "PUT",
            f"/v1/aggregator/runs/{run_id}/rounds/{w}/state",
            json={"theta_start_sha256": theta_start_sha256},
        )

    async def record_tape(self, run_id: str, w: int, tape_key: str) -> None:
        """``PUT .../rounds/{w}/tape`` (write-once; the same tape again is 200)."""
        await self._json(
            "PUT",
            f"/v1/aggregator/runs/{run_id}/rounds/{w}/tape",
            json={"tape_key": tape_key},
        )
