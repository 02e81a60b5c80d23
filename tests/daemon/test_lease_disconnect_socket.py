"""A held lease poll whose client closes its socket returns its copy (issue 19 item 6, scenario
20), over a real loopback socket served by hypercorn: the disconnect the app acts on is the
one hypercorn delivers when the client's close reaches it.

The lease path is served on its own with one turn to answer (``serve_lease_path`` in front of
an app that answers 404), in front of the real daemon's book and hub. The turn is taken by an
in-process poll whose answer's send does not end until the test lets it; node a's poll over
the socket is then granted a copy and waits for a turn; a closes its socket. Real time: every
wait is bounded by a generous ``fail_after`` and nothing asserts how fast anything was.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

import h11
import httpx
import trio

from hypertrain.coordinator.computehub import SSE_KIND, WORK
from hypertrain.coordinator.metrics import Metrics
from hypertrain.coordinator.web.leasepath import LEASE_PATH, serve_lease_path
from nurseries import serve_asgi
from nurseries.testing import open_asgi_transport
from tests.coordinator.test_compute_routes import (
    API,
    _enqueue_through_hub,
    _lease,
    _node,
    _stand_in_inputs,
)
from tests.coordinator.test_lease_disconnect import BODY, Leaving
from tests.daemon.support import daemon_settings, running_daemon

BOUND = 30.0
"""Real seconds within which each awaited thing must happen; far above any honest time."""


async def _not_found(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    await send({"type": "http.response.start", "status": 404, "headers": []})
    await send({"type": "http.response.body", "body": b""})


async def _held(handle: Any, count: int) -> None:
    """Until ``count`` lease polls are held (bounded by the caller)."""
    while handle.ctx.compute.waiter.waiting(WORK) < count:  # noqa: ASYNC110 - a socket: no event
        await trio.sleep(0.01)


async def test_a_copy_granted_to_a_poll_whose_socket_closed_goes_back_to_the_queue(
    tmp_path: Path,
) -> None:
    settings = daemon_settings(tmp_path, period=1.0)
    async with (
        running_daemon(settings, services=()) as handle,
        open_asgi_transport(handle.app, lifespan=False) as transport,
        httpx.AsyncClient(transport=transport, base_url=API, timeout=60) as client,
        trio.open_nursery() as nursery,
    ):
        app = serve_lease_path(_not_found, handle.ctx, metrics=Metrics(), answers_at_once=1)
        url = await nursery.start(partial(serve_asgi, app, "127.0.0.1", 0))
        port = int(str(url).rsplit(":", 1)[1])
        holder, a = await _node(client), await _node(client)
        inputs = await _stand_in_inputs(handle, "socket")
        let_go = trio.Event()
        holding = Leaving(holder["key"], let_go=let_go)  # a client that does not read
        with trio.fail_after(BOUND):
            nursery.start_soon(holding.poll, app)
            await _held(handle, 1)
            first = await _enqueue_through_hub(handle, "first", inputs)
            await holding.sending.wait()  # its answer is being sent: the only turn is taken
            other = (await _lease(client, a)).json()["job"]["id"]  # the first step's other copy
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            conn = h11.Connection(h11.CLIENT)
            headers = [
                ("Host", "daemon"),
                ("Content-Length", str(len(BODY))),
                ("Authorization", f"Bearer {a['key']}"),
            ]
            request = h11.Request(method="POST", target=LEASE_PATH, headers=headers)
            await stream.send_all(conn.send(request) + conn.send(h11.Data(data=BODY)))
            await _held(handle, 1)
        async with handle.ctx.events.subscribe([SSE_KIND]) as events:
            job_id = await _enqueue_through_hub(handle, "socket", inputs)  # a: granted, waits
            granted = await _copy(handle, f"{job_id}.1")
            await stream.aclose()  # a leaves before its turn to answer came
            with trio.fail_after(BOUND):
                async for event in events:
                    if json.loads(event.json)["kind"] == "returned":
                        break
        returned = await _copy(handle, f"{job_id}.1")
        turn_taken = holding.sent == []
        let_go.set()
        nursery.cancel_scope.cancel()
    assert other == f"{first}.2"
    assert granted == ("leased", a["node_id"])
    assert (returned, turn_taken) == (("queued", None), True)


async def _copy(handle: Any, copy_id: str) -> tuple[str, str | None]:
    row = await handle.ctx.db.read(
        lambda conn: conn.execute(
            "SELECT state, node_id FROM compute_copies WHERE copy_id = ?", (copy_id,)
        ).fetchone()
    )
    return str(row[0]), row[1]
