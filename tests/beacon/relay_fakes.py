"""Fakes shared by the relay and pusher tests: a signing chain and misbehaving relay apps."""

from __future__ import annotations

import json
from typing import Any

from hypertrain.beacon.chain import BeaconRound
from hypertrain.beacon.local import LocalChain
from hypertrain.protocol.converter import unstructure
from nurseries import ASGIApp, WallClock

GENESIS = 1_700_000_000.0
SEED = bytes(range(32))


def make_chain(clock: WallClock, *, period_ms: int = 3000, seed: bytes = SEED) -> LocalChain:
    """An in-memory local chain with genesis at :data:`GENESIS`."""
    return LocalChain.from_seed(
        seed, clock=clock, period_ms=period_ms, genesis_ms=int(GENESIS * 1000)
    )


IMPOSTOR_SEED = bytes(range(1, 33))


async def _answer(send: Any, status: int, body: object) -> None:
    payload = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


def tampering_app(inner: ASGIApp, impostor: LocalChain) -> ASGIApp:
    """``inner``, except that each round it serves carries ``impostor``'s signature of it.

    Well-formed, randomness = sha256(signature), a valid G1 point: only BLS can tell.
    """

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or "/public/" not in scope["path"]:
            await inner(scope, receive, send)
            return
        captured: list[Any] = []

        async def capture(message: Any) -> None:
            captured.append(message)

        await inner(scope, receive, capture)
        start, body = captured[0], captured[1]
        if start["status"] != 200:
            await _answer(send, start["status"], json.loads(body["body"]))
            return
        rnd = BeaconRound.from_json(json.loads(body["body"]))
        await _answer(send, 200, unstructure(impostor.round(rnd.round)))

    return app


def down_app(status: int = 503) -> ASGIApp:
    """A relay that answers every request with ``status``."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        await _answer(send, status, {"detail": "down for maintenance"})

    return app
