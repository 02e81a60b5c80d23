"""The external aggregator's HTTP client of the daemon's routes (spec 9), admin token in hand.

One :class:`httpx.AsyncClient` with explicit timeouts and an injectable transport. Promises:

- every call is bounded: httpx timeouts per request, and a network error or a 502/503/504
  answer is retried with exponential backoff (:class:`Retry`), after which the call raises
  :class:`DaemonUnreachable`;
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
from typing import Any, Final

import attrs
import httpx
import trio

from hypertrain.protocol.errors import NotFound

__all__ = [
    "DEFAULT_RETRY",
    "AggregatorClient",
    "DaemonUnreachable",
    "Refused",
    "RemoteError",
    "Retry",
    "TokenRefused",
    "response_detail",
]

log = logging.getLogger(__name__)

_RETRIED_STATUSES: Final = frozenset({502, 503, 504})


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
    """Backoff for network errors and 502/503/504: ``attempts`` tries in all, waiting
    ``initial`` seconds after the first failure, doubling up to ``maximum``."""

    attempts: int = 6
    initial: float = 1.0
    maximum: float = 30.0
    timeout: httpx.Timeout = attrs.field(
        factory=lambda: httpx.Timeout(connect=10.0, read=120.0, write=120.0, pool=10.0)
    )
    """Per request: connect, read (also of a whole object), write, pool."""

    def delays(self) -> list[float]:
        """The waits between the tries."""
        return [min(self.initial * 2**i, self.maximum) for i in range(self.attempts - 1)]


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
        self, method: str, path: str, *, ok: tuple[int, ...] = (), **kwargs: Any
    ) -> httpx.Response:
        delays = self.retry.delays()
        for attempt in range(self.retry.attempts):
            try:
                response = await self._http.request(
                    method, self.api + path, headers=self._auth, **kwargs
                )
            except httpx.TransportError as e:
                problem = f"{type(e).__name__}: {e}"
            else:
                if response.is_success or response.status_code in ok:
                    return response
                if response.status_code not in _RETRIED_STATUSES:
                    cls = TokenRefused if response.status_code == 401 else Refused
                    raise cls(method, path, response.status_code, response_detail(response))
                problem = f"HTTP {response.status_code}: {response_detail(response)}"
            if attempt < len(delays):
                log.warning(
                    "%s %s failed (%s); retrying in %g s", method, path, problem, delays[attempt]
                )
                await trio.sleep(delays[attempt])
        raise DaemonUnreachable(
            f"{method} {self.api}{path}: no answer after {self.retry.attempts} tries ({problem})"
        )

    async def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = await self._send(method, path, **kwargs)
        try:
            return response.json()
        except ValueError as e:
            raise DaemonUnreachable(f"{method} {path}: the answer is not JSON") from e

    async def run_view(self, run_id: str) -> dict[str, Any]:
        """``GET /v1/runs/{id}``."""
        return dict(await self._json("GET", f"/v1/runs/{run_id}"))

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
        for _ in range(self.retry.attempts):
            response = await self._send("GET", path, ok=(404,))
            if response.status_code == 404:
                raise NotFound(f"object {sha256} is not in the daemon's store")
            if hashlib.sha256(response.content).hexdigest() == sha256:
                return response.content
            log.warning("GET %s: the bytes do not hash to the key; fetching again", path)
        raise DaemonUnreachable(f"GET {path}: the bytes never hashed to the key")

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
