"""Miner registration: the run's roster, and the host network's metagraph when one is configured.

Spec 9 marks the miner routes "(M)": the signer (or the body's hotkey) must be registered on the
host network. hypertrain treats the run's roster as the registry; when ``CHALLENGE_MASTER_URL``
is set the coordinator ALSO asks the master's metagraph::

    GET {master}/v1/metagraph/latest  ->  {"hotkeys": {"<ss58>": <uid>, ...}}

cached for :data:`METAGRAPH_TTL` seconds of wall time. A hotkey missing from it is refused with
403; a master that cannot be reached, answers an error or a malformed body is 503 (the miner
retries), never a silent pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Protocol

import httpx
import trio

from hypertrain.protocol.errors import NotConfigured, UnauthorizedSigner
from nurseries import WallClock

__all__ = [
    "METAGRAPH_TIMEOUT",
    "METAGRAPH_TTL",
    "MasterMetagraph",
    "Metagraph",
    "RosterOnly",
]

METAGRAPH_TTL: Final = 30.0
"""Seconds a fetched metagraph is trusted before it is asked again."""
METAGRAPH_TIMEOUT: Final = 5.0
"""Seconds one metagraph request may take."""


class Metagraph(Protocol):
    """Whether a hotkey is registered on the host network's metagraph."""

    async def check(self, hotkey: str) -> None:
        """Return if ``hotkey`` is registered; raise ``UnauthorizedSigner`` (403) if not, or
        ``NotConfigured`` (503) when the metagraph cannot be asked."""


class RosterOnly:
    """No master configured: every hotkey passes here and the run's roster decides."""

    async def check(self, hotkey: str) -> None:
        """Accept ``hotkey``."""
        del hotkey
        await trio.lowlevel.checkpoint()


class MasterMetagraph:
    """The master's metagraph, fetched at most once per :data:`METAGRAPH_TTL` (module doc)."""

    def __init__(
        self,
        master_url: str,
        *,
        client: httpx.AsyncClient,
        wall: WallClock,
        ttl: float = METAGRAPH_TTL,
        timeout: float = METAGRAPH_TIMEOUT,
    ) -> None:
        self._url = master_url.rstrip("/") + "/v1/metagraph/latest"
        self._client = client
        self._wall = wall
        self._ttl = ttl
        self._timeout = timeout
        self._hotkeys: frozenset[str] = frozenset()
        self._fetched_at: float | None = None
        self._lock = trio.Lock()
        self.fetches = 0

    async def check(self, hotkey: str) -> None:
        """403 unless ``hotkey`` is on the (cached) metagraph; 503 when it cannot be fetched."""
        hotkeys = await self._current()
        if hotkey not in hotkeys:
            raise UnauthorizedSigner(f"{hotkey} is not registered on the metagraph")

    async def _current(self) -> frozenset[str]:
        async with self._lock:  # one fetch at a time; waiters then use its answer
            now = self._wall.now()
            if self._fetched_at is None or now - self._fetched_at >= self._ttl:
                self._hotkeys = await self._fetch()
                self._fetched_at = now
            return self._hotkeys

    async def _fetch(self) -> frozenset[str]:
        self.fetches += 1
        try:
            response = await self._client.get(self._url, timeout=self._timeout)
        except httpx.HTTPError as e:
            raise NotConfigured(f"metagraph unavailable: {type(e).__name__}") from e
        if response.status_code != 200:
            raise NotConfigured(
                f"metagraph unavailable: the master answered {response.status_code}"
            )
        try:
            body = response.json()
        except ValueError as e:
            raise NotConfigured("metagraph unavailable: the master's answer is not JSON") from e
        hotkeys = body.get("hotkeys") if isinstance(body, Mapping) else None
        if not isinstance(hotkeys, Mapping) or not all(isinstance(k, str) for k in hotkeys):
            raise NotConfigured("metagraph unavailable: no 'hotkeys' object in the answer")
        return frozenset(hotkeys)
