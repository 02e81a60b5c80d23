"""The bare ASGI app the HTTP benches measure the daemon against: the floor of the stack."""

from __future__ import annotations

import json
from typing import Any, Final

HELLO: Final = json.dumps({"hello": "world"}).encode()
HELLO_LENGTH: Final = str(len(HELLO)).encode()


async def hello_app(scope: Any, receive: Any, send: Any) -> None:
    """Reads the body (if any), answers ``{"hello": "world"}``; handles the lifespan."""
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    while (await receive()).get("more_body", False):
        pass
    headers = [(b"content-type", b"application/json"), (b"content-length", HELLO_LENGTH)]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": HELLO})
