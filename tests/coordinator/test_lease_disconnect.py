"""A copy granted to a held poll whose client has gone goes back at once (issue 19 item 6;
spec/compute-network.md section 6 scenario 20; :mod:`hypertrain.coordinator.web.leasepath`).

The real daemon in virtual time. The poll whose client leaves is one request straight to the
app as ASGI: its ``receive`` gives ``http.disconnect`` when the test sets ``leave``, so the
test puts the disconnect exactly where it wants it: right after the transaction that granted
the poll its copy (before the poll could answer), or while it waits for its turn to answer.
The other nodes are plain HTTP clients.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import trio
import trio.testing

from hypertrain.compute import get_node
from hypertrain.coordinator.computehub import WORK
from hypertrain.coordinator.metrics import Metrics
from hypertrain.coordinator.web.leasepath import ANSWER_TURN_WAIT, LEASE_PATH, serve_lease_path
from hypertrain.daemon.main import DaemonHandle
from tests.coordinator.test_compute_routes import (
    LOSS,
    Fallbacks,
    _daemon,
    _enqueue_through_hub,
    _lease,
    _node,
    _stand_in_inputs,
)

BODY = json.dumps({"capabilities": ["delta-loss"], "hardware": "cpu"}).encode()


class Leaving:
    """One lease poll (or a post to ``path``) straight to ``app``; its client leaves when
    ``leave`` is set (module doc); its answer's send takes ``send_takes`` seconds, waits for
    ``let_go``, or fails."""

    def __init__(
        self,
        key: str,
        *,
        send_takes: float = 0.0,
        send_fails: bool = False,
        let_go: trio.Event | None = None,
        path: str = LEASE_PATH,
        body: bytes = BODY,
    ) -> None:
        self.key = key
        self.path, self.body = path, body
        self.send_takes = send_takes
        self.send_fails = send_fails
        self.let_go = let_go
        """The answer's start is sent only once it is set (a client that does not read)."""
        self.leave = trio.Event()
        self.sending = trio.Event()
        self.sent: list[dict[str, Any]] = []
        self.ended: float | None = None

    async def poll(self, app: Any) -> None:
        messages = [{"type": "http.request", "body": self.body, "more_body": False}]
        scope = {
            "type": "http",
            "method": "POST",
            "path": self.path,
            "headers": [(b"authorization", f"Bearer {self.key}".encode())],
        }

        async def receive() -> dict[str, Any]:
            if messages:
                return messages.pop()
            await self.leave.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if self.send_fails:
                raise ConnectionResetError("the connection is closed")
            if message["type"] == "http.response.start":
                self.sending.set()
                await trio.sleep(self.send_takes)
                if self.let_go is not None:
                    await self.let_go.wait()
            self.sent.append(message)

        await app(scope, receive, send)
        self.ended = trio.current_time()


async def _rows(handle: DaemonHandle, job_id: str) -> list[tuple[str, str, str | None]]:
    return await handle.ctx.db.read(
        lambda conn: [
            tuple(row)
            for row in conn.execute(
                "SELECT copy_id, state, node_id FROM compute_copies WHERE job_id = ? ORDER BY seq",
                (job_id,),
            )
        ]
    )


async def _strikes(handle: DaemonHandle) -> int:
    rows = await handle.ctx.db.read(
        lambda conn: conn.execute("SELECT count(*) FROM compute_strikes").fetchone()
    )
    return int(rows[0])


async def test_a_copy_granted_to_a_poll_whose_client_just_left_goes_to_the_next_held_poll(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Three polls held (a's the longest): a step's two copies go to a and b in the enqueue's
    own transaction, and a's client leaves before a's poll could answer. a's copy goes back in
    that same virtual instant and to c, the next held poll; a gets no answer, no strike, its
    record unchanged; no expiry is counted."""
    async with _daemon(tmp_path, Fallbacks()) as (handle, client):
        a, b, c = [await _node(client) for _ in range(3)]
        inputs = await _stand_in_inputs(handle, "gone")
        leaving = Leaving(a["key"])
        answers: dict[str, Any] = {}

        async def held(name: str, node: dict[str, Any]) -> None:
            answers[name] = ((await _lease(client, node)).json(), trio.current_time())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(leaving.poll, handle.app)
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(held, "b", b)
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(held, "c", c)
            await trio.testing.wait_all_tasks_blocked()
            assert handle.ctx.compute.waiter.waiting(WORK) == 3
            record = await handle.ctx.db.read(get_node, a["node_id"])
            job_id = await _enqueue_through_hub(handle, "gone", inputs)
            leaving.leave.set()  # the grant is made; the poll has not answered it yet
            enqueued = trio.current_time()
        rows = await _rows(handle, job_id)
        after = await handle.ctx.db.read(get_node, a["node_id"])
        strikes = await _strikes(handle)
        expiries = await handle.ctx.db.read(
            lambda conn: conn.execute(
                "SELECT expiries FROM compute_jobs WHERE job_id = ?", (job_id,)
            ).fetchone()[0]
        )
    assert (leaving.sent, leaving.ended) == ([], enqueued)
    (b_answer, b_at), (c_answer, c_at) = answers["b"], answers["c"]
    assert (b_at, c_at) == (enqueued, enqueued)
    assert {b_answer["job"]["id"], c_answer["job"]["id"]} == {f"{job_id}.1", f"{job_id}.2"}
    assert sorted(rows) == sorted(
        [
            (b_answer["job"]["id"], "leased", b["node_id"]),
            (c_answer["job"]["id"], "leased", c["node_id"]),
        ]
    )
    assert (after, strikes, expiries) == (record, 0, 0)


async def test_with_no_other_poll_held_the_copy_is_back_in_the_queue_at_once(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """a alone is held: it is granted one copy and leaves; that copy is queued again in the same
    instant (no node, as before its lease), and a's next poll gets it."""
    async with _daemon(tmp_path, Fallbacks()) as (handle, client):
        a = await _node(client)
        inputs = await _stand_in_inputs(handle, "alone")
        leaving = Leaving(a["key"])
        async with trio.open_nursery() as nursery:
            nursery.start_soon(leaving.poll, handle.app)
            await trio.testing.wait_all_tasks_blocked()
            job_id = await _enqueue_through_hub(handle, "alone", inputs)
            leaving.leave.set()
        rows = await _rows(handle, job_id)
        again = (await _lease(client, a)).json()["job"]
    assert leaving.sent == []
    assert rows == [(f"{job_id}.1", "queued", None), (f"{job_id}.2", "queued", None)]
    assert again["id"] == f"{job_id}.1"


async def test_a_result_post_whose_next_lease_was_held_keeps_its_result_and_returns_the_copy(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """a posts its result with its next lease request; nothing is queued for a, so the next
    lease is held; a new step's copy is granted to it and a's client leaves before the answer:
    the result stays counted, the new copy goes back to the queue."""
    async with _daemon(tmp_path, Fallbacks()) as (handle, client):
        a = await _node(client)
        inputs = await _stand_in_inputs(handle, "next")
        first = await _enqueue_through_hub(handle, "first", inputs)
        job = (await _lease(client, a)).json()["job"]
        post = {"lease": job["lease"], "ok": True, "result": LOSS, "next": json.loads(BODY)}
        path = f"/v1/compute/jobs/{job['id']}/result"
        leaving = Leaving(a["key"], path=path, body=json.dumps(post).encode())
        async with trio.open_nursery() as nursery:
            nursery.start_soon(leaving.poll, handle.app)
            await trio.testing.wait_all_tasks_blocked()
            assert handle.ctx.compute.waiter.waiting(WORK) == 1  # its result taken, next held
            job_id = await _enqueue_through_hub(handle, "next", inputs)
            leaving.leave.set()
        results = await _rows(handle, first)
        rows = await _rows(handle, job_id)
    assert leaving.sent == []
    assert results == [(f"{first}.1", "answered", a["node_id"]), (f"{first}.2", "queued", None)]
    assert rows == [(f"{job_id}.1", "queued", None), (f"{job_id}.2", "queued", None)]


async def test_a_grant_whose_send_fails_goes_back_too(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """An ASGI server may raise ``OSError`` from ``send`` on a closed connection: the grant
    that answer carried is returned as for a disconnect."""
    async with _daemon(tmp_path, Fallbacks()) as (handle, client):
        a = await _node(client)
        inputs = await _stand_in_inputs(handle, "fails")
        leaving = Leaving(a["key"], send_fails=True)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(leaving.poll, handle.app)
            await trio.testing.wait_all_tasks_blocked()
            job_id = await _enqueue_through_hub(handle, "fails", inputs)
        rows = await _rows(handle, job_id)
    assert rows == [(f"{job_id}.1", "queued", None), (f"{job_id}.2", "queued", None)]


async def test_a_poll_whose_client_leaves_while_it_waits_for_its_turn_returns_its_copy_then(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """One turn to answer, taken by a client whose answer's send takes a minute. Then a's poll
    is granted a copy and waits for a turn; a's client leaves 3 s later, and the copy is back in
    the queue at that instant, not at the end of the turn's wait (ANSWER_TURN_WAIT) nor at the
    lease's deadline."""
    async with _daemon(tmp_path, Fallbacks()) as (handle, client):
        app = serve_lease_path(handle.app, handle.ctx, metrics=Metrics(), answers_at_once=1)
        slow_node, a = await _node(client), await _node(client)
        inputs = await _stand_in_inputs(handle, "turn")
        slow, leaving = Leaving(slow_node["key"], send_takes=60.0), Leaving(a["key"])
        async with trio.open_nursery() as nursery:
            nursery.start_soon(slow.poll, app)
            await trio.testing.wait_all_tasks_blocked()
            first = await _enqueue_through_hub(handle, "first", inputs)  # slow: the turn
            await trio.testing.wait_all_tasks_blocked()
            other = (await _lease(client, a)).json()["job"]["id"]  # the first step's other copy
            nursery.start_soon(leaving.poll, app)
            await trio.testing.wait_all_tasks_blocked()
            job_id = await _enqueue_through_hub(handle, "turn", inputs)
            enqueued = trio.current_time()
            await trio.sleep(3.0)
            leaving.leave.set()
            await trio.testing.wait_all_tasks_blocked()
            rows = await _rows(handle, job_id)
            left = trio.current_time()
    assert ANSWER_TURN_WAIT > 3.0
    assert other == f"{first}.2"
    assert (leaving.sent, leaving.ended, left - enqueued) == ([], left, 3.0)
    assert rows == [(f"{job_id}.1", "queued", None), (f"{job_id}.2", "queued", None)]
    assert slow.sent
    assert slow.ended == enqueued + 60.0
