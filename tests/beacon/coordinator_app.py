"""A stand-in for the daemon's beacon routes, built on the real ``ingest_round`` and Database.

``GET /v1/beacon/latest`` -> ``{"round": D}``; ``POST /v1/admin/beacon`` with
``Authorization: Bearer <token>`` and a round's JSON -> ``{"round", "latest"}``, 400 for a
malformed or invalid round, 409 for a conflicting one, 401 without a bearer token, 403 with a
wrong one. ``fail_with`` makes every request answer that status (a coordinator in trouble);
``claim_latest`` makes ``GET /v1/beacon/latest`` answer that D (a view lagging the store, as
when two pushers race).
The real routes come with the coordinator package; this app only gives the pusher something
true to talk to.
"""

from __future__ import annotations

import hmac
import json
from typing import Any

from hypertrain.beacon.chain import BeaconRound, ChainInfo
from hypertrain.beacon.ingest import ingest_round, latest_round
from hypertrain.protocol.errors import Malformed, ProtocolError
from hypertrain.store import Database
from nurseries import WallClock

MAX_BODY = 4096


class CoordinatorApp:
    """Raw ASGI app; ``pushes`` lists the rounds POSTed (accepted or not), in order."""

    def __init__(self, db: Database, info: ChainInfo, token: str, wall: WallClock) -> None:
        self.db = db
        self.info = info
        self.token = token
        self.wall = wall
        self.fail_with: int | None = None
        self.claim_latest: int | None = None
        self.pushes: list[int] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            return
        status, body = await self._route(scope, receive)
        payload = json.dumps(body).encode()
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": payload})

    async def _route(self, scope: Any, receive: Any) -> tuple[int, object]:
        if self.fail_with is not None:
            return self.fail_with, {"detail": "coordinator unavailable"}
        method, path = scope["method"], scope["path"]
        if (method, path) == ("GET", "/v1/beacon/latest"):
            latest = await self.db.read(latest_round)
            return 200, {"round": latest if self.claim_latest is None else self.claim_latest}
        if (method, path) == ("POST", "/v1/admin/beacon"):
            denied = self._auth(dict(scope["headers"]).get(b"authorization", b""))
            if denied is not None:
                return denied
            return await self._push(await _read_body(receive))
        return 404, {"detail": f"not found: {method} {path}"}

    def _auth(self, header: bytes) -> tuple[int, object] | None:
        scheme, _, token = header.decode("latin-1").partition(" ")
        if scheme.lower() != "bearer" or not token:
            return 401, {"detail": "missing bearer token"}
        if not hmac.compare_digest(token.encode(), self.token.encode()):
            return 403, {"detail": "wrong admin token"}
        return None

    async def _push(self, body: bytes) -> tuple[int, object]:
        try:
            rnd = BeaconRound.from_json(json.loads(body))
        except (ValueError, Malformed) as e:
            return 400, {"detail": f"bad round: {e}"}
        self.pushes.append(rnd.round)
        try:
            result = await ingest_round(self.db, self.info, rnd, now=self.wall.now())
        except ProtocolError as e:
            return e.status, e.to_json()
        return 200, result.to_json()


async def _read_body(receive: Any) -> bytes:
    body = b""
    while True:
        message = await receive()
        body += bytes(message.get("body", b""))
        if len(body) > MAX_BODY or not message.get("more_body", False):
            return body
