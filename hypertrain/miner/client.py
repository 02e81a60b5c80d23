"""The miner's HTTP client for the coordinator routes it calls (spec/protocol.md section 9).

One :class:`httpx.AsyncClient` with explicit :class:`ClientTimeouts` and an injectable transport
(tests pass :class:`httpx.MockTransport` or an in-process ASGI transport). Non-2xx answers raise
:class:`ApiError` carrying the status, the ``detail`` and the decoded body, except where a route's
contract makes a status part of the answer (404 of the round view, 409 of a duplicate Commit).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final
from urllib.parse import urljoin, urlsplit

import attrs
import httpx

from hypertrain.protocol.envelope import Envelope
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.object_auth import sign_headers

__all__ = [
    "DEFAULT_TIMEOUTS",
    "OBJECT_AUTH_TTL_ROUNDS",
    "ApiError",
    "ClientTimeouts",
    "CoordinatorClient",
    "UploadRefused",
    "object_auth_headers",
]

OBJECT_AUTH_TTL_ROUNDS: Final = 100
"""How many beacon rounds a signed object request stays valid."""


@attrs.frozen
class ClientTimeouts:
    """Named HTTP timeouts (seconds): connect, read, write, pool; uploads get ``upload_read``."""

    connect: float = 10.0
    read: float = 60.0
    write: float = 60.0
    pool: float = 10.0
    upload_read: float = 300.0

    def httpx(self, *, upload: bool = False) -> httpx.Timeout:
        read = self.upload_read if upload else self.read
        return httpx.Timeout(connect=self.connect, read=read, write=self.write, pool=self.pool)


DEFAULT_TIMEOUTS: Final = ClientTimeouts()


class ApiError(Exception):
    """A non-2xx answer: ``status``, the ``detail`` string and the parsed JSON ``body``."""

    def __init__(self, method: str, path: str, status: int, body: Any) -> None:
        detail = body.get("detail") if isinstance(body, dict) else None
        self.status, self.body = status, body
        self.detail = str(detail) if detail is not None else str(body)[:200]
        super().__init__(f"{method} {path}: HTTP {status}: {self.detail}")


class UploadRefused(Exception):
    """An upload URL the miner will not use (not https, loopback http or allowed file://)."""


def object_auth_headers(keypair: Keypair, run_id: str, sha256: str, exp: int) -> dict[str, str]:
    """The signed ``X-HT-*`` headers of ``GET /v1/objects/{sha256}`` (protocol.object_auth)."""
    return sign_headers(keypair, run_id, sha256, exp)


def _is_loopback(host: str | None) -> bool:
    if not host:
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def check_upload_url(url: str, *, allow_file: bool) -> None:
    """UploadRefused unless ``url`` is https, http on loopback, or file:// when allowed."""
    parts = urlsplit(url)
    if parts.scheme == "https" or (parts.scheme == "http" and _is_loopback(parts.hostname)):
        return
    if parts.scheme == "file" and allow_file:
        return
    raise UploadRefused(f"refusing upload URL {url!r} (https, loopback http or allowed file://)")


def _write_file(url: str, data: bytes) -> None:
    Path(urlsplit(url).path).write_bytes(data)


class CoordinatorClient:
    """Typed calls of the miner routes; ``api`` is the base URL (no trailing slash)."""

    def __init__(
        self,
        api: str,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        timeouts: ClientTimeouts = DEFAULT_TIMEOUTS,
    ) -> None:
        self.api = api.rstrip("/")
        self.timeouts = timeouts
        self._http = httpx.AsyncClient(transport=transport, timeout=timeouts.httpx())

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _request(
        self,
        method: str,
        path: str,
        *,
        json: object = None,
        ok_statuses: tuple[int, ...] = (),
        **kwargs: Any,
    ) -> tuple[int, Any]:
        url = path if "://" in path else self.api + path
        response = await self._http.request(method, url, json=json, **kwargs)
        try:
            body: Any = response.json() if response.content else None
        except ValueError:
            body = response.text
        if response.is_success or response.status_code in ok_statuses:
            return response.status_code, body
        raise ApiError(method, path, response.status_code, body)

    async def list_runs(self) -> list[dict[str, Any]]:
        _, body = await self._request("GET", "/v1/runs")
        return list(body["runs"])

    async def get_run(self, run_id: str) -> dict[str, Any]:
        _, body = await self._request("GET", f"/v1/runs/{run_id}")
        return dict(body)

    async def dataset(self, run_id: str) -> dict[str, Any]:
        """``GET /v1/runs/{id}/dataset``: the run's registered dataset (404 when none)."""
        _, body = await self._request("GET", f"/v1/runs/{run_id}/dataset")
        return dict(body)

    async def beacon_latest(self) -> int:
        _, body = await self._request("GET", "/v1/beacon/latest")
        return int(body["round"])

    async def round_view(self, run_id: str, w: int) -> dict[str, Any] | None:
        """The round view, or None while round ``w`` is not opened (404)."""
        status, body = await self._request(
            "GET", f"/v1/runs/{run_id}/rounds/{w}", ok_statuses=(404,)
        )
        return None if status == 404 else dict(body)

    async def accept(self, run_id: str, envelope: Envelope) -> dict[str, Any]:
        _, body = await self._request("POST", f"/v1/runs/{run_id}/accept", json=envelope.to_json())
        return dict(body)

    async def commit(self, run_id: str, envelope: Envelope) -> tuple[str | None, dict[str, Any]]:
        """``(status, receipt envelope)``; a duplicate's 409 gives ``(None, stored receipt)``."""
        path = f"/v1/runs/{run_id}/commit"
        status, body = await self._request(
            "POST", path, json=envelope.to_json(), ok_statuses=(409,)
        )
        if status == 409:
            if not isinstance(body, dict) or not isinstance(body.get("receipt"), dict):
                raise ApiError("POST", path, status, body)
            return None, dict(body["receipt"])
        return str(body["status"]), dict(body["receipt"])

    async def post_leaves(self, run_id: str, payload: Mapping[str, Any]) -> dict[str, Any]:
        _, body = await self._request("POST", f"/v1/runs/{run_id}/leaves", json=dict(payload))
        return dict(body)

    async def upload_grant(self, run_id: str, w: int, hotkey: str, sha256: str) -> str:
        """The absolute URL to PUT the payload to."""
        _, body = await self._request(
            "POST",
            f"/v1/runs/{run_id}/uploads",
            json={"w": w, "hotkey": hotkey, "sha256": sha256},
        )
        return urljoin(self.api + "/", str(body["url"]))

    async def put_payload(self, url: str, data: bytes, *, allow_file: bool) -> None:
        """PUT ``data`` to a granted URL (or write it, for an allowed file:// URL)."""
        check_upload_url(url, allow_file=allow_file)
        if url.startswith("file://"):
            _write_file(url, data)
            return
        await self._request("PUT", url, content=data, timeout=self.timeouts.httpx(upload=True))

    async def post_delta(self, run_id: str, envelope: Envelope) -> dict[str, Any]:
        _, body = await self._request("POST", f"/v1/runs/{run_id}/delta", json=envelope.to_json())
        return dict(body)

    async def get_object(self, keypair: Keypair, run_id: str, sha256: str, now: int) -> bytes:
        """``GET /v1/objects/{sha256}`` with signed headers valid until ``now + TTL``."""
        headers = object_auth_headers(keypair, run_id, sha256, now + OBJECT_AUTH_TTL_ROUNDS)
        url = f"{self.api}/v1/objects/{sha256}"
        response = await self._http.get(url, headers=headers)
        if not response.is_success:
            raise ApiError("GET", f"/v1/objects/{sha256}", response.status_code, response.text)
        return response.content

    async def get_url(self, url: str) -> bytes:
        """Plain GET of a state_source URL."""
        response = await self._http.get(url)
        if not response.is_success:
            raise ApiError("GET", url, response.status_code, response.text)
        return response.content
