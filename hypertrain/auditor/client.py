"""The auditor's HTTP client for the worker routes of the audit wire contract and the dispute
routes (notes/disputes-wire.md).

One :class:`httpx.AsyncClient` with named timeouts (:class:`ClientSettings`) and an injectable
transport (tests pass :class:`httpx.MockTransport`). Every worker route carries
``Authorization: Bearer <worker token>``; the run view (``GET /v1/runs/{id}``) needs none but
gets it too (same origin).

Retries: a network error (``httpx.TransportError``, timeouts included) or a 5xx answer is retried
with :func:`nurseries.retry` (the project's one retry primitive: exponential backoff
``settings.backoff``, full jitter from ``jitter``, a 503's ``Retry-After`` honoured) for
``settings.retry_budget`` seconds from the first try; then the call raises
:class:`~hypertrain.auditor.errors.Unreachable` (chained to the last failure). A 4xx the route's
contract does not make part of the answer raises :class:`~hypertrain.auditor.errors.ApiError` at
once. POSTs are retried too: lease may then lease a second job (the first one's lease expires and it
is requeued), heartbeat and fail are idempotent, a repeated complete is refused with 409 and
surfaces as ApiError.

Objects (``GET /v1/objects/{sha}``) are hash-checked: bytes that do not hash to ``sha`` raise
:class:`~hypertrain.auditor.errors.FetchFailed` and are never returned.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from typing import Any, Final

import attrs
import httpx
import trio
from attrs import field, frozen

from hypertrain.auditor.errors import ApiError, BadJob, FetchFailed, Unreachable
from hypertrain.protocol.converter import structure
from hypertrain.protocol.errors import SchemaError
from hypertrain.protocol.validators import hex64, u_int
from nurseries import Backoff, GaveUp, parse_retry_after, retry

__all__ = [
    "DEFAULT_BACKOFF",
    "DEFAULT_SETTINGS",
    "AuditorClient",
    "ClientSettings",
    "ServeItem",
    "ServesAnswer",
]

DEFAULT_BACKOFF: Final = Backoff(initial=1.0, factor=2.0, maximum=30.0)
"""Waits of up to 1, 2, 4, 8 ... 30 s between the tries (full jitter)."""


@frozen
class ClientSettings:
    """Named HTTP timeouts (seconds) and the retries' backoff and budget."""

    connect: float = 10.0
    read: float = 120.0
    """Also bounds a whole object download between two received chunks."""
    write: float = 60.0
    pool: float = 10.0
    backoff: Backoff = DEFAULT_BACKOFF
    retry_budget: float = 30.0
    """Seconds a call keeps retrying from its first try."""

    def timeout(self) -> httpx.Timeout:
        return httpx.Timeout(connect=self.connect, read=self.read, write=self.write, pool=self.pool)


DEFAULT_SETTINGS: Final = ClientSettings()


@frozen
class ServeItem:
    """An item of ``GET /v1/worker/jobs/{id}/serves``."""

    serve: dict[str, Any]
    blob_sha256: str = field(validator=hex64)


@frozen
class ServesAnswer:
    """``GET /v1/worker/jobs/{id}/serves``: the beacon round now and the serves stored."""

    now_round: int = field(validator=u_int)
    serves: tuple[ServeItem, ...]


def _known(cls: type, data: object) -> object:
    if not isinstance(data, dict):
        return data
    return {f.name: data[f.name] for f in attrs.fields(cls) if f.name in data}


def _read_serves(body: object, where: str) -> ServesAnswer:
    picked = _known(ServesAnswer, body)
    if isinstance(picked, dict) and isinstance(picked.get("serves"), list):
        picked["serves"] = [_known(ServeItem, item) for item in picked["serves"]]
    try:
        return structure(ServesAnswer, picked)
    except SchemaError as e:
        raise BadJob(f"{where}: {e.detail}") from e


class _ServerError(ApiError):
    """A 5xx answer, worth another try (after its ``Retry-After``)."""

    def __init__(self, method: str, path: str, response: httpx.Response) -> None:
        super().__init__(method, path, response.status_code, _body(response))
        self.retry_after = parse_retry_after(response.headers.get("retry-after"))


def _transient(error: Exception) -> float | None:
    if isinstance(error, httpx.TransportError):
        return 0.0
    if isinstance(error, _ServerError):
        return error.retry_after or 0.0
    return None


class AuditorClient:
    """Typed calls of the auditor routes; ``api`` is the base URL (no trailing slash)."""

    def __init__(
        self,
        api: str,
        token: str,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        settings: ClientSettings = DEFAULT_SETTINGS,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self.api = api.rstrip("/")
        self.settings = settings
        self._jitter = jitter
        self._http = httpx.AsyncClient(
            transport=transport,
            timeout=settings.timeout(),
            headers={"Authorization": f"Bearer {token}"},
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _send(self, method: str, path: str, json: object) -> httpx.Response:
        """One request, retried on network errors and 5xx (module docstring)."""

        async def once() -> httpx.Response:
            response = await self._http.request(method, self.api + path, json=json)
            if response.status_code < 500:
                return response
            raise _ServerError(method, path, response)

        deadline = trio.current_time() + self.settings.retry_budget
        try:
            return await retry(
                once, deadline=deadline, transient=_transient, backoff=self.settings.backoff,
                draw=self._jitter,
            )  # fmt: skip
        except GaveUp as e:
            raise Unreachable(f"{method} {path}: {e.__cause__}") from e

    async def _call(
        self, method: str, path: str, *, json: object = None, ok: tuple[int, ...] = ()
    ) -> tuple[int, Any]:
        response = await self._send(method, path, json)
        body = _body(response)
        if response.is_success or response.status_code in ok:
            return response.status_code, body
        raise ApiError(method, path, response.status_code, body)

    async def manifest_envelope(self, run_id: str) -> Any:
        """``GET /v1/runs/{id}`` → its ``manifest_envelope`` (None when absent)."""
        _, body = await self._call("GET", f"/v1/runs/{run_id}")
        return body.get("manifest_envelope") if isinstance(body, dict) else None

    async def lease(self, run_id: str) -> Any:
        """``POST /v1/worker/lease`` for ``run_id``: the job JSON, or None when idle (204)."""
        status, body = await self._call("POST", "/v1/worker/lease", json={"run_id": run_id})
        return None if status == 204 else body

    async def heartbeat(self, job_id: str, lease: str) -> Any:
        """``POST /v1/worker/jobs/{id}/heartbeat`` → ``{id, lease_expires_round}``."""
        _, body = await self._call(
            "POST", f"/v1/worker/jobs/{job_id}/heartbeat", json={"lease": lease}
        )
        return body

    async def serves(self, job_id: str, lease: str) -> ServesAnswer:
        """``GET /v1/worker/jobs/{id}/serves?lease=L``."""
        path = f"/v1/worker/jobs/{job_id}/serves?lease={lease}"
        _, body = await self._call("GET", path)
        return _read_serves(body, f"GET {path}")

    async def complete(self, job_id: str, lease: str, verdict: dict[str, Any]) -> Any:
        """``POST /v1/worker/jobs/{id}/complete`` → ``{id, state, result, forfeit?}``."""
        _, body = await self._call(
            "POST",
            f"/v1/worker/jobs/{job_id}/complete",
            json={"lease": lease, "verdict": verdict},
        )
        return body

    async def fail(self, job_id: str, lease: str, reason: str, *, retry: bool) -> Any:
        """``POST /v1/worker/jobs/{id}/fail`` (``reason`` cut to 500 chars) → ``{id, state}``."""
        _, body = await self._call(
            "POST",
            f"/v1/worker/jobs/{job_id}/fail",
            json={"lease": lease, "reason": reason[:500], "retry": retry},
        )
        return body

    async def job(self, job_id: str) -> Any:
        """``GET /v1/worker/jobs/{id}``: the audit job JSON (``lease`` null), for any job."""
        _, body = await self._call("GET", f"/v1/worker/jobs/{job_id}")
        return body

    async def disputes(
        self,
        run_id: str,
        *,
        state: str | None = None,
        party: str | None = None,
        referee: bool = False,
    ) -> list[Any]:
        """``GET /v1/runs/{id}/disputes[?state=][&party=][&referee=1]`` → the DisputeViews
        (as JSON; a body without a ``disputes`` list raises ApiError)."""
        query = [f"state={state}"] if state is not None else []
        query += [f"party={party}"] if party is not None else []
        query += ["referee=1"] if referee else []
        path = f"/v1/runs/{run_id}/disputes" + ("?" + "&".join(query) if query else "")
        status, body = await self._call("GET", path)
        views = body.get("disputes") if isinstance(body, dict) else None
        if not isinstance(views, list):
            raise ApiError("GET", path, status, {"detail": "the answer has no disputes list"})
        return views

    async def bisect(self, run_id: str, envelope: dict[str, Any]) -> Any:
        """``POST /v1/runs/{id}/bisect`` of a Bisect envelope → ``{dispute_id, seq, state,
        stage, referee}``."""
        _, body = await self._call("POST", f"/v1/runs/{run_id}/bisect", json=envelope)
        return body

    async def resolution(self, run_id: str, envelope: dict[str, Any]) -> Any:
        """``POST /v1/runs/{id}/resolution`` of a Resolution envelope → ``{dispute_id, loser,
        state}``."""
        _, body = await self._call("POST", f"/v1/runs/{run_id}/resolution", json=envelope)
        return body

    async def get_object(self, sha256: str) -> bytes:
        """The bytes of object ``sha256``, hash-checked (module docstring)."""
        path = f"/v1/objects/{sha256}"
        response = await self._send("GET", path, None)
        if not response.is_success:
            raise ApiError("GET", path, response.status_code, _body(response))
        data = response.content
        got = hashlib.sha256(data).hexdigest()
        if got != sha256:
            raise FetchFailed(f"object {sha256} arrived with sha256 {got}")
        return data


def _body(response: httpx.Response) -> Any:
    if not response.content:
        return None
    try:
        return response.json()
    except ValueError:
        return response.text
