"""Sampled trusted re-scores in the real daemon, in virtual time (issue 19 item 3; spec
compute-network.md 6 scenario 1): two colluding nodes agree on a wrong value over HTTP, the
beacon draws the step, the daemon's fallback pool re-scores it and disagrees: both are struck,
their credit is clawed back, the settled result replaced, and ``audit`` and ``strike`` are
published. An honest agreement drawn changes nothing; a draw owed when the daemon stops is
re-scored by the restarted daemon, and drawn once."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import httpx
import trio
import trio.testing

from hypertrain.compute import rescore_state
from hypertrain.coordinator.services.fallback import FallbackPool
from hypertrain.daemon.main import DaemonHandle
from hypertrain.daemon.services import SERVICES, DaemonParts, ServiceFn, ServiceSpec
from nurseries.testing import open_asgi_transport
from tests.coordinator.test_compute_routes import (
    API,
    LOSS,
    OTHER,
    Fallbacks,
    _enqueue,
    _lease,
    _node,
    _post,
)
from tests.daemon.support import daemon_settings, running_daemon

Events = list[dict[str, Any]]


@asynccontextmanager
async def _daemon(
    tmp_path: Path, fallbacks: Fallbacks | None, events: Events
) -> AsyncIterator[tuple[DaemonHandle, httpx.AsyncClient]]:
    """The daemon drawing every agreed step (1000 permille), its compute events collected in
    ``events``; without ``fallbacks`` it runs no fallback pool (nothing is re-scored)."""

    def pool(parts: DaemonParts) -> ServiceFn | None:
        return None if fallbacks is None else FallbackPool(parts.ctx, fallbacks.score, 2).run

    services = [s if s.name != "fallback" else ServiceSpec("fallback", pool) for s in SERVICES]
    settings = daemon_settings(tmp_path, period=1.0)
    settings = attrs.evolve(
        settings, coordinator=attrs.evolve(settings.coordinator, compute_audit_permille=1000)
    )
    async with (
        running_daemon(settings, services) as handle,
        open_asgi_transport(handle.app, lifespan=False) as transport,
        httpx.AsyncClient(transport=transport, base_url=API, timeout=60) as client,
        trio.open_nursery() as bg,
        handle.ctx.events.subscribe(frozenset({"compute"})) as sub,
    ):

        async def collect() -> None:
            async for event in sub:
                events.append(json.loads(event.json))

        bg.start_soon(collect)
        yield handle, client
        bg.cancel_scope.cancel()


async def _agree(
    handle: DaemonHandle, client: httpx.AsyncClient, result: dict[str, Any]
) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """Two fresh nodes settle a new step by agreeing on ``result``: ``(job, a, b)``."""
    a, b = await _node(client), await _node(client)
    job_id = await _enqueue(handle, "x")
    ja = (await _lease(client, a)).json()["job"]
    jb = (await _lease(client, b)).json()["job"]
    await _post(client, a, ja, result)
    settled = await _post(client, b, jb, result)
    assert (settled.json()["verdict"], settled.json()["job_state"]) == ("paid", "settled")
    return job_id, a, b


async def _until(handle: DaemonHandle, job_id: str, states: Sequence[str]) -> None:
    """Beacon rounds come (virtual time) until the step's re-score is in ``states``."""
    beacon = handle.ctx.beacon
    with trio.fail_after(60):
        while await handle.ctx.db.read(rescore_state, job_id) not in states:
            await beacon.wait_round(beacon.latest + 1)
    await trio.testing.wait_all_tasks_blocked()  # the published events reach the collector


def _audits(events: Events, job_id: str) -> list[str]:
    return [e["change"] for e in events if e["kind"] == "audit" and e["job"] == job_id]


async def test_colluders_agreeing_on_a_wrong_value_are_caught_by_a_drawn_rescore(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    fallbacks, events = Fallbacks(), []  # the trusted scorer says LOSS
    async with _daemon(tmp_path, fallbacks, events) as (handle, client):
        job_id, a, b = await _agree(handle, client, OTHER)
        paid = {n["id"]: n["compute_credits"] for n in await _status_nodes(client)}
        await _until(handle, job_id, ["replaced"])
        decided_ms, rescored_ms = await handle.ctx.db.read(_times, job_id)
        step = (await client.get(f"/v1/compute/steps/{job_id}")).json()
        credits = {n["id"]: n["compute_credits"] for n in await _status_nodes(client)}
    assert paid == {a["node_id"]: 1, b["node_id"]: 1}
    assert fallbacks.scored == ["x:trace.u16"]
    assert rescored_ms == decided_ms  # the draw wakes the pool at once
    assert (step["how"], step["result"]["objective"]) == ("fallback", LOSS["loss"])
    assert credits == {a["node_id"]: 0, b["node_id"]: 0}
    assert _audits(events, job_id) == ["drawn", "replaced"]
    replaced = next(e for e in events if e["kind"] == "audit" and e["change"] == "replaced")
    assert replaced["struck"] == [a["node_id"], b["node_id"]]
    assert replaced["replaced"]["objective"] == OTHER["loss"]
    assert [c["clawed"] for c in replaced["clawed_back"]] == [1, 1]
    after = events[events.index(replaced) :]
    assert sorted(e["node"] for e in after if e["kind"] == "strike") == sorted(
        [a["node_id"], b["node_id"]]
    )


async def _status_nodes(client: httpx.AsyncClient) -> list[dict[str, Any]]:
    nodes: list[dict[str, Any]] = (await client.get("/v1/compute/status")).json()["nodes"]
    return nodes


async def test_an_honest_agreement_drawn_for_a_rescore_changes_nothing(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    fallbacks, events = Fallbacks(), []
    async with _daemon(tmp_path, fallbacks, events) as (handle, client):
        job_id, a, b = await _agree(handle, client, LOSS)
        before = (await client.get(f"/v1/compute/steps/{job_id}")).json()
        await _until(handle, job_id, ["agreed"])
        after = (await client.get(f"/v1/compute/steps/{job_id}")).json()
        credits = {n["id"]: n["compute_credits"] for n in await _status_nodes(client)}
    assert fallbacks.scored == ["x:trace.u16"]
    assert after == before
    assert after["how"] == "agreement"
    assert credits == {a["node_id"]: 1, b["node_id"]: 1}
    assert _audits(events, job_id) == ["drawn", "agreed"]
    assert [e for e in events if e["kind"] == "strike"] == []


async def test_a_draw_owed_when_the_daemon_stops_is_rescored_after_its_restart(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    before: Events = []
    async with _daemon(tmp_path, None, before) as (handle, client):  # no pool: drawn, owed
        job_id, a, b = await _agree(handle, client, OTHER)
        await _until(handle, job_id, ["drawn"])
        drawn = await handle.ctx.db.read(_draw_row, job_id)
    await trio.sleep(5)  # the daemon is down for five seconds
    fallbacks, after = Fallbacks(), []
    async with _daemon(tmp_path, fallbacks, after) as (handle, client):
        await _until(handle, job_id, ["replaced"])
        redrawn = await handle.ctx.db.read(_draw_row, job_id)
        credits = {n["id"]: n["compute_credits"] for n in await _status_nodes(client)}
    assert _audits(before, job_id) == ["drawn"]
    assert "drawn" not in _audits(after, job_id)  # not drawn again
    assert redrawn == drawn
    assert fallbacks.scored == ["x:trace.u16"]
    assert credits == {a["node_id"]: 0, b["node_id"]: 0}


def _draw_row(conn: Any, job_id: str) -> tuple[Any, ...]:
    row: tuple[Any, ...] = conn.execute(
        "SELECT draw_round, beacon_round, decided_ms FROM compute_rescores WHERE job_id = ?",
        (job_id,),
    ).fetchone()
    return row


def _times(conn: Any, job_id: str) -> tuple[int, int]:
    row = conn.execute(
        "SELECT decided_ms, rescored_ms FROM compute_rescores WHERE job_id = ?", (job_id,)
    ).fetchone()
    return int(row[0]), int(row[1])
