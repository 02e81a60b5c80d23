"""Held polls answer in turns (issue 17 goal 4; :mod:`hypertrain.coordinator.web.leasepath`):
lease polls, and result posts whose ``next`` lease was held.

The lease path is served here on its own (``serve_lease_path`` in front of an app that answers
404) with two turns, in front of the real daemon's book and hub, in virtual time. Each request
goes straight to it as ASGI, and its ``send`` takes a chosen time for the answer's start, as a
socket send would: the test sees how many answers are being sent at once, and when each ends.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from hypertrain.compute import Event, enqueue_step
from hypertrain.coordinator.computehub import WORK
from hypertrain.coordinator.metrics import Metrics
from hypertrain.coordinator.web.leasepath import ANSWER_TURN_WAIT, LEASE_PATH, serve_lease_path
from hypertrain.daemon.main import DaemonHandle
from hypertrain.scoring.registry import DELTA_LOSS
from tests.coordinator.test_compute_routes import (
    LOSS,
    Fallbacks,
    _daemon,
    _lease,
    _node,
    _stand_in_inputs,
)

NEXT = {"capabilities": ["delta-loss"], "hardware": "cpu"}
BODY = json.dumps(NEXT).encode()
TURNS = 2
KINDS = ("lease poll", "result+next")
"""What is held: a lease poll, or a result post carrying the next lease request."""


async def _not_found(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 404, "headers": []})
    await send({"type": "http.response.body", "body": b""})


class Sends:
    """The answers' sends: each start takes ``seconds[i]`` (request ``i``); counts overlaps."""

    def __init__(self, seconds: list[float]) -> None:
        self.seconds = seconds
        self.now = 0
        self.most = 0
        self.ended: dict[int, tuple[float, Any]] = {}

    async def request(self, app: Any, i: int, key: str, path: str, body: bytes) -> None:
        messages = [{"type": "http.request", "body": body, "more_body": False}]
        scope = {
            "type": "http",
            "method": "POST",
            "path": path,
            "headers": [(b"authorization", f"Bearer {key}".encode())],
        }

        async def receive() -> dict[str, Any]:
            if messages:
                return messages.pop()
            await trio.sleep_forever()
            raise AssertionError("unreachable")

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                self.now += 1
                self.most = max(self.most, self.now)
                try:
                    await trio.sleep(self.seconds[i])
                finally:
                    self.now -= 1
            else:
                answer = json.loads(message["body"])
                self.ended[i] = (trio.current_time(), answer.get("next", answer)["job"])

        await app(scope, receive, send)


async def _burst(handle: DaemonHandle, steps: int, first: int = 0) -> float:
    """``steps`` steps (two copies each, subjects from ``first`` on) queued in one hub
    transaction; returns its instant."""
    ctx = handle.ctx
    inputs = await _stand_in_inputs(handle, "turns")

    def fill(conn: sqlite3.Connection) -> list[Event]:
        events: list[Event] = []
        for i in range(steps):
            _, queued = enqueue_step(
                conn,
                challenge_id=DELTA_LOSS.id,
                subject={"turns": first + i},
                step="public",
                inputs=inputs,
                now_ms=int(ctx.wall.now() * 1000),
                wait_ms=ctx.compute.settings.wait_ms,
                settings=ctx.compute.settings,
            )
            events += queued
        return events

    await ctx.compute.write(fill)
    return trio.current_time()


async def _six_polls_then_a_burst(
    tmp_path: Path, seconds: list[float], kind: str
) -> tuple[Sends, float]:
    """Six polls of ``kind`` held, then three steps (six copies) queued in one transaction; for
    result posts, each node first leases a copy of three earlier steps, the book then empty."""
    async with _daemon(tmp_path, Fallbacks()) as (handle, client):
        app = serve_lease_path(_not_found, handle.ctx, metrics=Metrics(), answers_at_once=TURNS)
        nodes = [await _node(client) for _ in range(6)]
        requests = [(LEASE_PATH, BODY)] * 6
        if kind == "result+next":
            await _burst(handle, 3, first=3)
            jobs = [(await _lease(client, node)).json()["job"] for node in nodes]
            requests = [
                (
                    f"/v1/compute/jobs/{job['id']}/result",
                    json.dumps(
                        {"lease": job["lease"], "ok": True, "result": LOSS, "next": NEXT}
                    ).encode(),
                )
                for job in jobs
            ]
        sends = Sends(seconds)
        async with trio.open_nursery() as nursery:
            for i, (node, (path, body)) in enumerate(zip(nodes, requests, strict=True)):
                nursery.start_soon(sends.request, app, i, node["key"], path, body)
            await trio.testing.wait_all_tasks_blocked()
            assert handle.ctx.compute.waiter.waiting(WORK) == 6
            enqueued = await _burst(handle, 3)
    return sends, enqueued


@pytest.mark.parametrize("kind", KINDS)
async def test_polls_woken_together_answer_two_at_a_time_in_turn(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, kind: str
) -> None:
    """Six held polls granted copies in one transaction: each answer's send takes 0.25 s, and
    they go out two at a time, all six copies delivered, the last pair 0.5 s after the first."""
    sends, enqueued = await _six_polls_then_a_burst(tmp_path, [0.25] * 6, kind)
    assert sends.most == TURNS
    ends = sorted(at - enqueued for at, _ in sends.ended.values())
    assert ends == [0.25, 0.25, 0.5, 0.5, 0.75, 0.75]
    assert all(job is not None for _, job in sends.ended.values())


@pytest.mark.parametrize("kind", KINDS)
async def test_a_poll_waits_for_its_turn_at_most_answer_turn_wait(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, kind: str
) -> None:
    """Two clients that do not read hold both turns for a minute: the four other polls answer
    anyway once they have waited ANSWER_TURN_WAIT for a turn."""
    sends, enqueued = await _six_polls_then_a_burst(tmp_path, [60.0] * 6, kind)
    ends = sorted(at - enqueued for at, _ in sends.ended.values())
    assert ends == [60.0] * 2 + [ANSWER_TURN_WAIT + 60.0] * 4
