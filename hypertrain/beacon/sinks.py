"""Where the pusher delivers rounds: a coordinator's admin API, or the daemon's own store.

A :class:`BeaconSink` answers two questions: ``await sink.known()`` (D, the latest round it
holds, 0 for none) and ``await sink.push(rnd)`` (store one verified round, return D after).
Failures are classified for the pusher (:mod:`hypertrain.beacon.errors`):

==================================  =====================================================
network error, HTTP 408/429/5xx     :class:`SinkUnavailable`, retried on the next tick
HTTP 401, 403                       :class:`SinkAuthError`, fatal (the token is wrong)
any other status (409, 400, ...)    :class:`SinkRefused` with the status, fatal
token file unsafe or not one token  :class:`TokenFileError`, fatal (a usage error)
==================================  =====================================================

:class:`HttpSink` speaks the admin API (``GET {api}/v1/beacon/latest`` ->
``{"round": n, ...}``; ``POST {api}/v1/admin/beacon`` with ``Authorization: Bearer <token>``
and the relay's round JSON -> ``{"round", "latest"}``), re-reading the token file for every
push so a rotated token is picked up without a restart. :class:`StoreSink` is the daemon's
in-process sink: the same :func:`~hypertrain.beacon.ingest.ingest_round` as the admin route,
then :meth:`BeaconClock.observe <hypertrain.beacon.clock.BeaconClock.observe>`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Final, Protocol

import httpx

from hypertrain.beacon.chain import BeaconRound, ChainInfo
from hypertrain.beacon.clock import BeaconClock
from hypertrain.beacon.errors import SinkAuthError, SinkRefused, SinkUnavailable, TokenFileError
from hypertrain.beacon.ingest import ingest_round, latest_round
from hypertrain.beacon.relays import USER_AGENT
from hypertrain.protocol.converter import unstructure
from hypertrain.protocol.errors import KeyfileError, ProtocolError
from hypertrain.protocol.keys import read_private_file
from hypertrain.protocol.tokens import MAX_TOKEN_FILE_BYTES, token_in
from hypertrain.store import Database
from nurseries import WallClock

__all__ = [
    "DEFAULT_SINK_TIMEOUT",
    "MAX_TOKEN_FILE_BYTES",
    "BeaconSink",
    "HttpSink",
    "StoreSink",
    "read_token",
]

DEFAULT_SINK_TIMEOUT: Final = httpx.Timeout(connect=3.0, read=10.0, write=10.0, pool=5.0)
"""Per-request limits towards the coordinator (an ingest also runs audit selection)."""

_DETAIL_CHARS: Final = 200


class BeaconSink(Protocol):
    """Somewhere verified rounds are stored (see the module docstring)."""

    async def known(self) -> int:
        """D: the latest round the sink holds (0 when none)."""
        ...

    async def push(self, rnd: BeaconRound) -> int:
        """Store ``rnd`` (idempotent for a round already held); return D after."""
        ...


def read_token(path: Path) -> str:
    """The one token of the file ``path`` (:func:`~hypertrain.protocol.tokens.token_in`: the
    daemon's own rule).

    The file is read as the daemon reads its own token files
    (:func:`~hypertrain.protocol.keys.read_private_file`: a regular file, never through a
    symlink, owned by this user, no group or other permission bits). Raises
    :class:`TokenFileError` for a missing, unsafe, unreadable, oversized or malformed file;
    its detail names the file and, for a mode that lets others read it, the fix.
    """
    try:
        data = read_private_file(path, MAX_TOKEN_FILE_BYTES, "token file")
    except KeyfileError as e:
        raise TokenFileError(f"admin token file {e.detail}") from e
    except OSError as e:
        raise TokenFileError(f"admin token file {path}: cannot read ({e.strerror})") from e
    token = token_in(data)
    if token is None:
        raise TokenFileError(
            f"admin token file {path}: does not hold exactly one token (visible ASCII,"
            " no whitespace)"
        )
    return token.decode("ascii")


def _detail(response: httpx.Response) -> str:
    try:
        detail = response.json().get("detail", "")
    except (ValueError, AttributeError, UnicodeDecodeError):
        detail = response.text
    text = " ".join(str(detail).split())[:_DETAIL_CHARS]
    return f": {text}" if text else ""


def _check_status(response: httpx.Response, what: str) -> None:
    """Raise the sink error of a non-200 answer (see the table in the module docstring)."""
    status = response.status_code
    if status == 200:
        return
    message = f"{what}: HTTP {status}{_detail(response)}"
    if status in (408, 429) or status >= 500:
        raise SinkUnavailable(message)
    if status in (401, 403):
        raise SinkAuthError(message, status)
    raise SinkRefused(message, status)


def _int_field(response: httpx.Response, key: str, what: str) -> int:
    try:
        value = response.json()[key]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        value = None
    if type(value) is not int or value < 0:
        raise SinkRefused(f"{what}: answer has no integer {key!r}: {response.text[:80]!r}", 200)
    return value


class HttpSink:
    """The coordinator's admin API at ``api`` (e.g. ``http://127.0.0.1:8081``)."""

    def __init__(
        self,
        api: str,
        token_file: Path,
        *,
        client: httpx.AsyncClient,
        timeout: httpx.Timeout = DEFAULT_SINK_TIMEOUT,
    ) -> None:
        self._api = api.rstrip("/")
        self._token_file = token_file
        self._client = client
        self._timeout = timeout

    async def known(self) -> int:
        """``GET {api}/v1/beacon/latest`` -> its ``round``."""
        what = f"GET {self._api}/v1/beacon/latest"
        response = await self._send("GET", "/v1/beacon/latest", what)
        return _int_field(response, "round", what)

    async def push(self, rnd: BeaconRound) -> int:
        """``POST {api}/v1/admin/beacon`` with the round JSON -> the answer's ``latest``."""
        token = read_token(self._token_file)
        what = f"POST {self._api}/v1/admin/beacon (round {rnd.round})"
        response = await self._send(
            "POST",
            "/v1/admin/beacon",
            what,
            content=json.dumps(unstructure(rnd)).encode(),
            headers={"authorization": f"Bearer {token}", "content-type": "application/json"},
        )
        return _int_field(response, "latest", what)

    async def _send(
        self,
        method: str,
        path: str,
        what: str,
        *,
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        try:
            response = await self._client.request(
                method,
                f"{self._api}{path}",
                content=content,
                headers={"user-agent": USER_AGENT, **(headers or {})},
                timeout=self._timeout,
            )
        except httpx.TransportError as e:
            raise SinkUnavailable(f"{what}: {type(e).__name__}: {str(e) or 'no detail'}") from e
        _check_status(response, what)
        return response


class StoreSink:
    """The daemon's own store: ingest through :func:`ingest_round`, then wake the clock."""

    def __init__(
        self, db: Database, info: ChainInfo, *, wall: WallClock, clock: BeaconClock | None = None
    ) -> None:
        self._db = db
        self._info = info
        self._wall = wall
        self._clock = clock

    async def known(self) -> int:
        """D from the ``beacon`` table."""
        return await self._db.read(latest_round)

    async def push(self, rnd: BeaconRound) -> int:
        """Ingest ``rnd``; a refusal (409, 400) becomes :class:`SinkRefused` with its status."""
        try:
            result = await ingest_round(self._db, self._info, rnd, now=self._wall.now())
        except ProtocolError as e:
            raise SinkRefused(f"ingest round {rnd.round}: {e.detail}", e.status) from e
        if self._clock is not None:
            self._clock.observe(result.latest)
        return result.latest
