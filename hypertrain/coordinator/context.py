"""The coordinator's shared state: one :class:`Coordinator` handed to every route module.

Built once by the composition root (:mod:`hypertrain.daemon.main`) or by a test, with
:meth:`Coordinator.create`; route modules receive it in ``register(app, ctx)`` and close over
it (no module-level singletons, STYLE item 2).

Beacon rounds enter through one path, :meth:`Coordinator.ingest_beacon`, used by both the admin
route and the daemon's in-process pusher (through :class:`CoordinatorSink`):

1. :func:`~hypertrain.beacon.ingest.ingest_round` (verify, store once; 400/409);
2. if D (the latest stored round) advanced: ``beacon.observe(D)``, then every callable in
   ``beacon_observers`` in order, given the new D (the run lifecycle subscribes here);
3. a new round is published on the event hub as ``beacon`` ``{"round", "latest"}``.

A repeat of a stored round (same signature and randomness) is answered from one read, without
the BLS check (it was verified when stored). Ingests are serialised by a lock, so observers see
D strictly increasing; step 2 runs shielded from cancellation (a client hanging up must not
lose the round-state work of a stored round), bounded by :data:`OBSERVERS_TIMEOUT`. An
observer that raises is logged and the others still run: a stored round cannot be un-stored,
so its answer stays a success.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Awaitable, Callable
from typing import Final

import attrs
import trio

from hypertrain.beacon import (
    BeaconClock,
    BeaconRound,
    ChainInfo,
    IngestResult,
    SinkRefused,
    get_round,
    ingest_round,
    latest_round,
)
from hypertrain.coordinator.computehub import ComputeHub
from hypertrain.coordinator.events import EventHub
from hypertrain.coordinator.metagraph import Metagraph, RosterOnly
from hypertrain.coordinator.services.ledgerfeed import LedgerFeed
from hypertrain.coordinator.settings import CoordinatorSettings
from hypertrain.coordinator.tokens import TokenFiles
from hypertrain.protocol.errors import KeyfileError, NotConfigured, ProtocolError
from hypertrain.protocol.keys import (
    Keypair,
    PrivateFileKey,
    load_keypair,
    private_file_key,
)
from hypertrain.store import Database, ObjectStore
from nurseries import WallClock, cleanup_scope

__all__ = ["OBSERVERS_TIMEOUT", "BeaconObserver", "Coordinator", "CoordinatorSink"]

log = logging.getLogger(__name__)

OBSERVERS_TIMEOUT: Final = 30.0
"""Seconds (Trio clock) the beacon observers of one new round may take together."""

BeaconObserver = Callable[[int], Awaitable[None]]
"""``await observer(D)`` after D, the latest ingested round, advanced."""


@attrs.define(eq=False)
class Coordinator:
    """Everything a route needs; see the module docstring."""

    settings: CoordinatorSettings
    db: Database
    objects: ObjectStore
    chain: ChainInfo
    beacon: BeaconClock
    tokens: TokenFiles
    events: EventHub
    wall: WallClock
    stopping: trio.Event = attrs.field(factory=trio.Event)
    """Set first at shutdown: long polls and SSE answer 503 / end; new ones are refused."""
    beacon_observers: list[BeaconObserver] = attrs.field(factory=list)
    metagraph: Metagraph = attrs.field(factory=RosterOnly)
    """Who may act as a miner beyond the roster (``CHALLENGE_MASTER_URL``'s metagraph)."""
    ledger: LedgerFeed | None = None
    """The ledger and its clock (:mod:`.services.ledgerfeed`); None when the composition root opened
    none (``get_weights`` then answers 503)."""
    compute: ComputeHub = attrs.field()
    """The compute network's settings and wake-ups (:mod:`.computehub`)."""
    _key_cache: tuple[PrivateFileKey, Keypair] | None = attrs.field(default=None, init=False)
    _ingest_lock: trio.Lock = attrs.field(factory=trio.Lock, init=False)

    @classmethod
    async def create(
        cls,
        settings: CoordinatorSettings,
        *,
        db: Database,
        objects: ObjectStore,
        chain: ChainInfo,
        wall: WallClock,
        events: EventHub | None = None,
        metagraph: Metagraph | None = None,
    ) -> Coordinator:
        """Build a coordinator over an open store; the beacon clock starts at the stored D."""
        latest = await db.read(latest_round)
        return cls(
            settings=settings,
            db=db,
            objects=objects,
            chain=chain,
            beacon=BeaconClock(chain, wall, latest=latest),
            tokens=TokenFiles(
                admin=settings.admin_token_file,
                worker=settings.worker_token_file,
                internal=settings.internal_token_file,
            ),
            events=EventHub() if events is None else events,
            wall=wall,
            metagraph=RosterOnly() if metagraph is None else metagraph,
        )

    @compute.default
    def _compute_hub(self) -> ComputeHub:
        return ComputeHub.from_settings(self.settings, self.events, self.db, self.wall)

    def coord_keypair(self) -> Keypair:
        """K_coord from ``HYPERTRAIN_COORD_KEY_FILE``, re-loaded only when the file changed.

        Raises :class:`NotConfigured` (503) naming the problem: unset, missing, unsafe
        (mode, owner, symlink) or malformed.
        """
        path = self.settings.coord_key_file
        if path is None:
            raise NotConfigured("K_coord not configured (HYPERTRAIN_COORD_KEY_FILE is unset)")
        try:
            key = private_file_key(os.stat(path, follow_symlinks=False))
        except OSError as e:
            self._key_cache = None
            raise NotConfigured(f"K_coord key file unreadable: {path}: {e.strerror}") from e
        cached = self._key_cache
        if cached is not None and cached[0] == key:
            return cached[1]
        try:
            keypair = load_keypair(path)
        except KeyfileError as e:
            self._key_cache = None
            raise NotConfigured(f"K_coord key file unusable: {e.detail}") from e
        self._key_cache = (key, keypair)
        return keypair

    async def ingest_beacon(self, rnd: BeaconRound) -> IngestResult:
        """Verify and store ``rnd``, then advance the clock, observers and events.

        Raises :class:`~hypertrain.beacon.InvalidRound` (400) or
        :class:`~hypertrain.protocol.errors.Conflict` (409) with nothing changed.
        """
        async with self._ingest_lock:
            repeat = await self.db.read(_stored_repeat, rnd)
            if repeat is not None:
                return repeat
            result = await ingest_round(self.db, self.chain, rnd, now=self.wall.now())
            if result.latest > self.beacon.latest:
                with cleanup_scope(
                    OBSERVERS_TIMEOUT, what=f"beacon observers of D={result.latest}"
                ):
                    self.beacon.observe(result.latest)
                    await self._notify(result.latest)
            if result.created:
                self.events.publish("beacon", result.to_json())
            return result

    async def _notify(self, latest: int) -> None:
        for observer in list(self.beacon_observers):
            try:
                await observer(latest)
            except Exception:
                log.exception("beacon observer %r failed for D=%d", observer, latest)


def _stored_repeat(conn: sqlite3.Connection, rnd: BeaconRound) -> IngestResult | None:
    """The answer to a repeat of a stored round, or None when ``rnd`` is not one.

    A round stored with exactly this signature and randomness was verified when it was
    stored, so a repeat skips the BLS check (~2 ms) and the write: idempotent and cheap.
    """
    if get_round(conn, rnd.round) != rnd:
        return None
    return IngestResult(round=rnd.round, latest=latest_round(conn), created=False)


class CoordinatorSink:
    """The pusher's sink inside the daemon: every round goes through ``ingest_beacon``."""

    def __init__(self, ctx: Coordinator) -> None:
        self._ctx = ctx

    async def known(self) -> int:
        """D from the ``beacon`` table."""
        return await self._ctx.db.read(latest_round)

    async def push(self, rnd: BeaconRound) -> int:
        """Ingest ``rnd``; a refusal (409, 400) becomes :class:`SinkRefused` with its status."""
        try:
            result = await self._ctx.ingest_beacon(rnd)
        except ProtocolError as e:
            raise SinkRefused(f"ingest round {rnd.round}: {e.detail}", e.status) from e
        return result.latest
