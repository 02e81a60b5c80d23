"""The relay client: fetch drand rounds from several HTTP relays and trust only agreement.

``RelayClient(relays, chain, client=httpx.AsyncClient(...))`` asks every relay at once (one
task per relay in a nursery) for ``{relay}/{chain_hash}/info``, ``.../public/latest`` or
``.../public/{round}`` and applies the agreement rules of :mod:`hypertrain.beacon.agreement`:
every relay that answers must give the same genuine answer and at least ``min_relays`` must
answer. Rounds are verified with ``check_round`` *before* they count as an answer, so nothing
this client returns is unverified.

Per relay, network errors (timeouts included) and HTTP 408, 429 and 5xx are retried up to
``retries`` times, waiting ``backoff * 2**attempt`` seconds (capped at ``backoff_max``, or a
relay's ``Retry-After`` when that is longer, still capped); other statuses are final for that
relay in that query. Each HTTP request is bounded by the named ``timeout`` (an
``httpx.Timeout``) and each whole query by ``query_timeout`` on Trio's clock: a relay still
busy then counts as failed. So every method returns or raises within ``query_timeout``
(twice that for ``latest`` when relays straddle a round boundary), never hangs.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Final, TypeVar

import httpx
import trio

from hypertrain import __version__
from hypertrain.beacon.agreement import (
    Answered,
    Failed,
    Invalid,
    Outcome,
    agree,
    chain_mismatches,
    straddle_round,
)
from hypertrain.beacon.bls import check_round
from hypertrain.beacon.chain import BeaconRound, ChainInfo
from hypertrain.beacon.errors import ChainMismatch
from hypertrain.protocol.errors import Malformed

__all__ = [
    "DEFAULT_BACKOFF",
    "DEFAULT_BACKOFF_MAX",
    "DEFAULT_HTTP_TIMEOUT",
    "DEFAULT_QUERY_TIMEOUT",
    "DEFAULT_RELAYS",
    "DEFAULT_RETRIES",
    "MAX_RESPONSE_BYTES",
    "USER_AGENT",
    "RelayClient",
    "normalize_relay",
]

DEFAULT_RELAYS: Final = ("https://api.drand.sh", "https://drand.cloudflare.com")
"""drand's public HTTP relays (spec section 4.2)."""
USER_AGENT: Final = f"hypertrain/{__version__} (drand relay client)"
"""Sent with every request: the public relays answer 403 to clients without one."""
DEFAULT_HTTP_TIMEOUT: Final = httpx.Timeout(connect=3.0, read=5.0, write=5.0, pool=5.0)
"""Per-request limits: connecting, each read, each write, waiting for a pooled connection."""
DEFAULT_QUERY_TIMEOUT: Final = 10.0
"""Seconds (Trio clock) one query may take across all relays, retries included."""
DEFAULT_RETRIES: Final = 2
"""Retries per relay and query after a retryable failure (so at most 3 attempts)."""
DEFAULT_BACKOFF: Final = 0.5
"""Seconds before the first retry; doubled for each further one."""
DEFAULT_BACKOFF_MAX: Final = 4.0
"""Longest wait between two attempts, ``Retry-After`` included."""
DEFAULT_MAX_STRADDLE: Final = 2
"""Most rounds relays' ``latest`` may differ by and still count as a boundary straddle."""
MAX_RESPONSE_BYTES: Final = 64 * 1024
"""A relay answer longer than this is refused (info and rounds are a few hundred bytes)."""

_RETRY_STATUSES: Final = frozenset({408, 429})
T = TypeVar("T")


class _RelayFailed(Exception):
    """One relay failed one request; ``retry`` says whether another attempt may help."""

    def __init__(self, reason: str, *, retry: bool, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry = retry
        self.retry_after = retry_after


def normalize_relay(url: str) -> str:
    """``url`` without trailing slashes; ValueError unless it is an http(s) URL with a host."""
    parsed = httpx.URL(url.strip())
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ValueError(f"relay {url!r} is not an http(s) URL with a host")
    return str(parsed).rstrip("/")


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after", "")
    return float(value) if value.isascii() and value.isdigit() else None


class RelayClient:
    """Agreement-checked, verified access to one drand chain through several relays."""

    def __init__(
        self,
        relays: Sequence[str],
        chain: ChainInfo,
        *,
        client: httpx.AsyncClient,
        min_relays: int = 2,
        timeout: httpx.Timeout = DEFAULT_HTTP_TIMEOUT,
        query_timeout: float = DEFAULT_QUERY_TIMEOUT,
        retries: int = DEFAULT_RETRIES,
        backoff: float = DEFAULT_BACKOFF,
        backoff_max: float = DEFAULT_BACKOFF_MAX,
        max_straddle: int = DEFAULT_MAX_STRADDLE,
        check: Callable[[ChainInfo, BeaconRound], None] = check_round,
    ) -> None:
        """``relays`` must be distinct (after dropping trailing slashes) and at least
        ``min_relays`` (>= 1) of them; ``check`` verifies a round (the BLS check by default).
        Raises ValueError for bad settings."""
        normalized = [normalize_relay(r) for r in relays]
        if len(set(normalized)) != len(normalized):
            raise ValueError(f"relays must be distinct: {', '.join(normalized)}")
        if min_relays < 1:
            raise ValueError(f"min_relays must be >= 1, got {min_relays}")
        if len(normalized) < min_relays:
            raise ValueError(
                f"need at least {min_relays} relays, got {len(normalized)}: {', '.join(normalized)}"
            )
        if retries < 0 or backoff < 0 or backoff_max < 0 or query_timeout <= 0:
            raise ValueError("retries, backoff and backoff_max must be >= 0, query_timeout > 0")
        self._relays = tuple(normalized)
        self._chain = chain
        self._client = client
        self._min_relays = min_relays
        self._timeout = timeout
        self._query_timeout = query_timeout
        self._retries = retries
        self._backoff = backoff
        self._backoff_max = backoff_max
        self._max_straddle = max_straddle
        self._check = check

    @property
    def relays(self) -> tuple[str, ...]:
        """The relay base URLs, normalized."""
        return self._relays

    @property
    def chain(self) -> ChainInfo:
        """The pinned chain."""
        return self._chain

    async def info(self) -> ChainInfo:
        """The pinned chain, once enough relays confirmed they serve exactly it.

        :class:`ChainMismatch` names the relays and fields that differ.
        """

        def parse(data: object) -> ChainInfo:
            served = ChainInfo.from_json(data)
            differ = chain_mismatches(self._chain, served)
            if differ:
                raise Malformed(f"serves another chain (differs in {', '.join(differ)})")
            return self._chain

        outcomes = await self._ask_all("info", parse)
        return agree(outcomes, min_relays=self._min_relays, what="info", disagreement=ChainMismatch)

    async def round(self, round_: int) -> BeaconRound:
        """Round ``round_``, verified and agreed on by the relays."""
        if round_ < 1:
            raise ValueError(f"rounds start at 1, got {round_}")

        def parse(data: object) -> BeaconRound:
            rnd = self._verified(data)
            if rnd.round != round_:
                raise Malformed(f"asked for round {round_}, got round {rnd.round}")
            return rnd

        outcomes = await self._ask_all(f"public/{round_}", parse)
        return agree(outcomes, min_relays=self._min_relays, what=f"round {round_}")

    async def latest(self) -> BeaconRound:
        """The latest round the relays agree on, verified.

        Relays straddling a round boundary (answers a few rounds apart, all genuine) are asked
        again for the lowest round they reported.
        """
        outcomes = await self._ask_all("public/latest", self._verified)
        lowest = straddle_round(
            outcomes, min_relays=self._min_relays, max_straddle=self._max_straddle
        )
        if lowest is not None:
            return await self.round(lowest)
        return agree(outcomes, min_relays=self._min_relays, what="latest")

    def _verified(self, data: object) -> BeaconRound:
        rnd = BeaconRound.from_json(data)
        self._check(self._chain, rnd)
        return rnd

    async def _ask_all(self, path: str, parse: Callable[[object], T]) -> dict[str, Outcome[T]]:
        """One outcome per relay, asked concurrently, within ``query_timeout``."""
        outcomes: dict[str, Outcome[T]] = {}

        async def ask(relay: str) -> None:
            outcomes[relay] = await self._ask_one(relay, path, parse)

        with trio.move_on_after(self._query_timeout):
            async with trio.open_nursery() as nursery:
                for relay in self._relays:
                    nursery.start_soon(ask, relay, name=f"relay {relay}")
        late = Failed(f"no answer within {self._query_timeout:g} s")
        return {relay: outcomes.get(relay, late) for relay in self._relays}

    async def _ask_one(self, relay: str, path: str, parse: Callable[[object], T]) -> Outcome[T]:
        """What ``relay`` answers, retrying retryable failures with backoff."""
        url = f"{relay}/{self._chain.hash}/{path}"
        attempt = 0
        while True:
            try:
                data = await self._get_json(url)
            except _RelayFailed as failure:
                if not failure.retry or attempt >= self._retries:
                    tries = f" (after {attempt + 1} attempts)" if attempt else ""
                    return Failed(f"{failure.reason}{tries}")
                delay = self._backoff * 2**attempt
                if failure.retry_after is not None:
                    delay = max(delay, failure.retry_after)
                await trio.sleep(min(delay, self._backoff_max))
                attempt += 1
                continue
            try:
                return Answered(parse(data))
            except Malformed as e:
                return Invalid(e.detail)

    async def _get_json(self, url: str) -> object:
        """The JSON of a 200 answer at ``url``; :class:`_RelayFailed` otherwise."""
        headers = {"user-agent": USER_AGENT, "accept": "application/json"}
        try:
            async with self._client.stream(
                "GET", url, headers=headers, timeout=self._timeout
            ) as response:
                status = response.status_code
                if status != 200:
                    retry = status in _RETRY_STATUSES or status >= 500
                    raise _RelayFailed(
                        f"HTTP {status}", retry=retry, retry_after=_retry_after(response)
                    )
                body = bytearray()
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > MAX_RESPONSE_BYTES:
                        raise _RelayFailed(
                            f"answer longer than {MAX_RESPONSE_BYTES} bytes", retry=False
                        )
        except httpx.TransportError as e:
            reason = f"{type(e).__name__}: {str(e) or 'no detail'}"
            raise _RelayFailed(reason, retry=True) from e
        try:
            return json.loads(body)
        except (ValueError, UnicodeDecodeError) as e:
            raise _RelayFailed("answer is not JSON", retry=False) from e
