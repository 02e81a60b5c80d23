"""The miner's HTTP client for the coordinator routes it calls (spec/protocol.md section 9).

One :class:`httpx.AsyncClient` with explicit :class:`ClientTimeouts` and an injectable transport
(tests pass :class:`httpx.MockTransport` or an in-process ASGI transport). Non-2xx answers raise
:class:`~hypertrain.miner.errors.ApiError` carrying the status, the ``detail`` and the decoded
body, except where a route's contract makes a status part of the answer (404 of the round view,
409 of a duplicate Commit). The answers the miner reads come back as the classes of
:mod:`hypertrain.miner.answers`; one missing a field the miner reads, or with a field of the
wrong type, raises :class:`~hypertrain.miner.errors.MinerProtocolError` naming it. The answers
of Accept and DeltaManifest are not read (their 2xx is the answer). Segment audits use the
upload grant with a ``challenge_hash`` and ``POST /v1/runs/{id}/state`` (spec 3, StateServe).
Disputes (issue 14) use ``POST .../rerun``, ``.../dispute``, ``.../bisect`` and the dispute
views ``GET .../disputes[/{dispute_id}]``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, TypeVar
from urllib.parse import urljoin, urlsplit

import attrs
import httpx

from hypertrain.miner.answers import (
    AlreadyCommitted,
    BisectPosted,
    Committed,
    DatasetInfo,
    DisputeList,
    DisputeOpened,
    DisputeView,
    LeavesAccepted,
    Reran,
    RoundView,
    RunInfo,
    RunListing,
    RunsList,
    ServeStored,
    UploadGrant,
    read_answer,
)
from hypertrain.miner.errors import ApiError, UploadRefused
from hypertrain.protocol.envelope import Envelope
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.object_auth import sign_headers
from hypertrain.protocol.pages import ROUND_VIEW_LISTS, read_all_pages
from nurseries import parse_retry_after

__all__ = [
    "DEFAULT_TIMEOUTS",
    "OBJECT_AUTH_TTL_ROUNDS",
    "ClientTimeouts",
    "CoordinatorClient",
    "check_upload_url",
    "object_auth_headers",
]

T = TypeVar("T")

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


def _refusal(method: str, path: str, response: httpx.Response, body: Any) -> ApiError:
    """The ApiError of a non-2xx ``response`` (its ``Retry-After`` kept for the retries)."""
    retry_after = parse_retry_after(response.headers.get("retry-after"))
    return ApiError(method, path, response.status_code, body, retry_after=retry_after)


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
        raise _refusal(method, path, response, body)

    async def _read(self, cls: type[T], method: str, path: str, **kwargs: Any) -> T:
        """The 2xx answer of ``method path`` as a ``cls`` (module docstring)."""
        _, body = await self._request(method, path, **kwargs)
        return read_answer(cls, body, f"{method} {path}")

    async def list_runs(self) -> tuple[RunListing, ...]:
        return (await self._read(RunsList, "GET", "/v1/runs")).runs

    async def get_run(self, run_id: str) -> RunInfo:
        return await self._read(RunInfo, "GET", f"/v1/runs/{run_id}")

    async def dataset(self, run_id: str) -> DatasetInfo:
        """``GET /v1/runs/{id}/dataset``: the run's registered dataset (404 when none)."""
        return await self._read(DatasetInfo, "GET", f"/v1/runs/{run_id}/dataset")

    async def round_view(self, run_id: str, w: int, *, full: bool = False) -> RoundView | None:
        """The round view with every page of its miners (one request up to 256 miners), or
        None while round ``w`` is not opened (404); ``full``: with the miners' envelopes (the
        ReplayVerdicts), which only the dispute follower reads."""
        path = f"/v1/runs/{run_id}/rounds/{w}"
        query = {"full": "1"} if full else {}
        missing = False

        async def page(offset: int) -> Mapping[str, Any]:
            nonlocal missing
            params = {**query, "offset": str(offset)} if offset else query
            status, body = await self._request("GET", path, ok_statuses=(404,), params=params)
            missing = status == 404
            return body if isinstance(body, Mapping) and not missing else {}

        body = await read_all_pages(page, ROUND_VIEW_LISTS)
        return None if missing else read_answer(RoundView, body, f"GET {path}")

    async def accept(self, run_id: str, envelope: Envelope) -> None:
        await self._request("POST", f"/v1/runs/{run_id}/accept", json=envelope.to_json())

    async def commit(self, run_id: str, envelope: Envelope) -> Committed | AlreadyCommitted:
        """The status and Receipt; a duplicate's 409 gives the stored Receipt.

        A 409 without a ``receipt`` is a refusal (ApiError), not a duplicate.
        """
        path = f"/v1/runs/{run_id}/commit"
        status, body = await self._request(
            "POST", path, json=envelope.to_json(), ok_statuses=(409,)
        )
        if status != 409:
            return read_answer(Committed, body, f"POST {path}")
        if not isinstance(body, dict) or "receipt" not in body:
            raise ApiError("POST", path, status, body)
        return read_answer(AlreadyCommitted, body, f"POST {path} (409)")

    async def post_leaves(self, run_id: str, payload: Mapping[str, Any]) -> LeavesAccepted:
        return await self._read(
            LeavesAccepted, "POST", f"/v1/runs/{run_id}/leaves", json=dict(payload)
        )

    async def upload_grant(
        self, run_id: str, w: int, hotkey: str, sha256: str, challenge_hash: str | None = None
    ) -> str:
        """The absolute URL to PUT the payload to: the round's delta, or with
        ``challenge_hash`` a state blob served to that segment audit."""
        body: dict[str, object] = {"w": w, "hotkey": hotkey, "sha256": sha256}
        if challenge_hash is not None:
            body["challenge_hash"] = challenge_hash
        grant = await self._read(UploadGrant, "POST", f"/v1/runs/{run_id}/uploads", json=body)
        return urljoin(self.api + "/", grant.url)

    async def put_payload(self, url: str, data: bytes, *, allow_file: bool) -> None:
        """PUT ``data`` to a granted URL (or write it, for an allowed file:// URL)."""
        check_upload_url(url, allow_file=allow_file)
        if url.startswith("file://"):
            _write_file(url, data)
            return
        await self._request("PUT", url, content=data, timeout=self.timeouts.httpx(upload=True))

    async def post_delta(self, run_id: str, envelope: Envelope) -> None:
        await self._request("POST", f"/v1/runs/{run_id}/delta", json=envelope.to_json())

    async def post_state(self, run_id: str, envelope: Envelope) -> ServeStored:
        """``POST /v1/runs/{id}/state`` with a StateServe envelope (idempotent when identical)."""
        return await self._read(
            ServeStored, "POST", f"/v1/runs/{run_id}/state", json=envelope.to_json()
        )

    async def rerun(self, run_id: str, w: int, hotkey: str, leaves_root: str, sig: str) -> Reran:
        """``POST /v1/runs/{id}/rerun``: the rerun root, signed over ``rerun_claim_bytes``."""
        body = {"w": w, "hotkey": hotkey, "leaves_root": leaves_root, "sig": sig}
        return await self._read(Reran, "POST", f"/v1/runs/{run_id}/rerun", json=body)

    async def dispute(self, run_id: str, envelope: Envelope) -> DisputeOpened:
        """``POST /v1/runs/{id}/dispute`` with a Dispute envelope (accept or contest)."""
        return await self._read(
            DisputeOpened, "POST", f"/v1/runs/{run_id}/dispute", json=envelope.to_json()
        )

    async def bisect(self, run_id: str, envelope: Envelope) -> BisectPosted:
        """``POST /v1/runs/{id}/bisect`` with a Bisect envelope: the dispute after it."""
        return await self._read(
            BisectPosted, "POST", f"/v1/runs/{run_id}/bisect", json=envelope.to_json()
        )

    async def dispute_view(self, run_id: str, dispute_id: str) -> DisputeView:
        """``GET /v1/runs/{id}/disputes/{dispute_id}``."""
        return await self._read(DisputeView, "GET", f"/v1/runs/{run_id}/disputes/{dispute_id}")

    async def disputes(self, run_id: str, *, party: str | None = None) -> tuple[DisputeView, ...]:
        """``GET /v1/runs/{id}/disputes[?party=]``: the run's disputes (of ``party``)."""
        params = {} if party is None else {"party": party}
        path = f"/v1/runs/{run_id}/disputes"
        return (await self._read(DisputeList, "GET", path, params=params)).disputes

    async def get_object(self, keypair: Keypair, run_id: str, sha256: str, now: int) -> bytes:
        """``GET /v1/objects/{sha256}`` with signed headers valid until ``now + TTL``."""
        headers = object_auth_headers(keypair, run_id, sha256, now + OBJECT_AUTH_TTL_ROUNDS)
        url = f"{self.api}/v1/objects/{sha256}"
        response = await self._http.get(url, headers=headers)
        if not response.is_success:
            raise _refusal("GET", f"/v1/objects/{sha256}", response, response.text)
        return response.content

    async def get_url(self, url: str) -> bytes:
        """Plain GET of a state_source URL."""
        response = await self._http.get(url)
        if not response.is_success:
            raise _refusal("GET", url, response, response.text)
        return response.content
