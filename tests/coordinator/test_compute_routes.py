"""The compute routes and services of the real daemon, in virtual time (spec/compute-network.md 6).

Jobs are enqueued straight into the book with small stand-in input objects; nodes are plain
HTTP clients posting chosen answers, so each scenario controls every answer and every instant.
The reaper and the fallback pool are the daemon's own services (the fallback scorer is a fake
with a chosen outcome).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio
import trio.testing

from hypertrain.compute import enqueue_step, get_node
from hypertrain.coordinator.computehub import WORK
from hypertrain.coordinator.services.fallback import FallbackPool, trusted_answer
from hypertrain.daemon.main import DaemonHandle
from hypertrain.daemon.services import SERVICES, DaemonParts, ServiceFn, ServiceSpec
from hypertrain.scoring.outcome import ScoreOutcome
from hypertrain.scoring.registry import DELTA_LOSS, Challenge
from nurseries.testing import open_asgi_transport
from tests.coordinator.harness import ADMIN_TOKEN
from tests.daemon.support import daemon_settings, running_daemon

API = "http://coord"
LOSS = {"loss": "40a00000", "fingerprint": "ab" * 32, "wallMs": 12}
OTHER = {"loss": "40a00001", "fingerprint": "cd" * 32, "wallMs": 9}
TRUSTED = ScoreOutcome(ok=True, result=dict(LOSS), failure=None, error="", wall_ms=5)


@attrs.define
class Fallbacks:
    outcome: ScoreOutcome = TRUSTED
    scored: list[str] = attrs.field(factory=list)

    async def score(self, challenge: Challenge, inputs: Mapping[str, Path]) -> ScoreOutcome:
        self.scored.append(inputs["trace.u16"].read_bytes().decode())
        return self.outcome


@asynccontextmanager
async def _daemon(
    tmp_path: Path, fallbacks: Fallbacks
) -> AsyncIterator[tuple[DaemonHandle, httpx.AsyncClient]]:
    def pool(parts: DaemonParts) -> ServiceFn:
        return FallbackPool(parts.ctx, fallbacks.score, 2).run

    services = [s if s.name != "fallback" else ServiceSpec("fallback", pool) for s in SERVICES]
    settings = daemon_settings(tmp_path, period=1.0)
    async with (
        running_daemon(settings, services) as handle,
        open_asgi_transport(handle.app, lifespan=False) as transport,
        httpx.AsyncClient(transport=transport, base_url=API, timeout=60) as client,
    ):
        yield handle, client


async def _enqueue(handle: DaemonHandle, label: str) -> str:
    """A delta-loss step whose four inputs are small stand-in objects."""
    ctx = handle.ctx
    inputs = []
    for name in DELTA_LOSS.inputs:
        info = await ctx.objects.put_bytes(f"{label}:{name}".encode())
        inputs.append({"name": name, "sha256": info.sha256, "size": info.size})
    job_id, events = await ctx.db.write(_step(handle, label, inputs))
    ctx.compute.publish(events)
    return job_id


async def _node(client: httpx.AsyncClient, handle: str | None = None) -> dict[str, Any]:
    r = await client.post(
        "/v1/compute/register",
        json={"key": None, "handle": handle, "capabilities": ["delta-loss"], "hardware": "cpu"},
    )
    assert r.status_code == 200, r.text
    return dict(r.json())


def _auth(node: Mapping[str, Any]) -> dict[str, str]:
    return {"Authorization": f"Bearer {node['key']}"}


async def _lease(
    client: httpx.AsyncClient, node: Mapping[str, Any], wait_ms: int | None = None
) -> httpx.Response:
    body: dict[str, Any] = {"capabilities": ["delta-loss"], "hardware": "cpu"}
    if wait_ms is not None:
        body["wait_ms"] = wait_ms
    return await client.post("/v1/compute/jobs/lease", json=body, headers=_auth(node))


async def _post(
    client: httpx.AsyncClient, node: Mapping[str, Any], job: Mapping[str, Any], result: Any
) -> httpx.Response:
    body = {"lease": job["lease"], "ok": True, "result": result}
    return await client.post(f"/v1/compute/jobs/{job['id']}/result", json=body, headers=_auth(node))


async def test_register_mints_once_attaches_after_and_refuses_bad_input(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with _daemon(tmp_path, Fallbacks()) as (_, client):
        minted = await _node(client, "alice")
        attached = await client.post(
            "/v1/compute/register",
            json={"key": minted["key"], "capabilities": [], "hardware": "x"},
        )
        taken = await client.post(
            "/v1/compute/register", json={"handle": "ALICE", "capabilities": []}
        )
        unknown = await client.post(
            "/v1/compute/register", json={"key": "ht_" + "a" * 32, "capabilities": []}
        )
        extra = await client.post("/v1/compute/register", json={"capabilities": [], "x": 1})
        no_key = await client.post("/v1/compute/jobs/lease", json={})
        status = (await client.get("/v1/compute/status")).text
        one = (await client.get("/v1/compute/status?limit=1")).json()
        bad_args = [
            (await client.get(f"/v1/compute/status?{query}")).json()["detail"]
            for query in ("limit=0", "limit=501", "limit=1e3", "limit=" + "9" * 40, "after=")
        ]
        page = await client.get("/compute")
    assert minted["key"].startswith("ht_")
    assert minted["handle"] == "alice"
    assert attached.status_code == 200
    assert "key" not in attached.json()
    assert attached.json()["node_id"] == minted["node_id"]
    assert (taken.status_code, unknown.status_code, extra.status_code) == (409, 401, 400)
    assert no_key.status_code == 401
    assert minted["key"] not in status
    assert "alice" in status
    assert (len(one["nodes"]), one["online_nodes"], one["next"]) == (1, 1, None)
    assert all(d.startswith(("limit must be", "after must be")) for d in bad_args), bad_args
    assert page.status_code == 200
    assert "/v1/compute/status" in page.text


async def test_an_empty_long_poll_answers_null_at_25_s_and_a_new_job_wakes_it(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with _daemon(tmp_path, Fallbacks()) as (handle, client):
        node = await _node(client)
        start = trio.current_time()
        empty = await _lease(client, node)
        waited = trio.current_time() - start
        got: list[httpx.Response] = []
        async with trio.open_nursery() as nursery:

            async def poll() -> None:
                got.append(await _lease(client, node))

            nursery.start_soon(poll)
            await trio.sleep(10)
            start = trio.current_time()
            await _enqueue(handle, "a")
        woke = trio.current_time() - start
    assert empty.json() == {"job": None}
    assert waited == pytest.approx(25.0, abs=0.01)
    assert got[0].json()["job"]["challenge"] == "delta-loss"
    assert woke < 0.1


async def test_two_nodes_agree_both_are_paid_and_inputs_need_the_lease(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with _daemon(tmp_path, Fallbacks()) as (handle, client):
        a, b, c = await _node(client), await _node(client), await _node(client)
        await _enqueue(handle, "x")
        ja = (await _lease(client, a)).json()["job"]
        again = await _lease(client, a, wait_ms=1000)  # never both copies of one job
        jb = (await _lease(client, b)).json()["job"]
        url = f"/v1/compute/jobs/{ja['id']}/inputs/trace.u16"
        own = await client.get(url, headers={**_auth(a), "X-HT-Lease": ja["lease"]})
        other = await client.get(url, headers={**_auth(c), "X-HT-Lease": ja["lease"]})
        wrong = await client.get(url, headers={**_auth(a), "X-HT-Lease": jb["lease"]})
        missing = await client.get(
            f"/v1/compute/jobs/{ja['id']}/inputs/nope",
            headers={**_auth(a), "X-HT-Lease": ja["lease"]},
        )
        cross = await _post(client, a, {**jb, "lease": ja["lease"]}, LOSS)
        first = await _post(client, a, ja, LOSS)
        again_same = await _post(client, a, ja, {**LOSS, "wallMs": 99})
        changed = await _post(client, a, ja, OTHER)
        second = await _post(client, b, jb, LOSS)
        late = await _post(client, c, ja, LOSS)
        big = await client.post(
            f"/v1/compute/jobs/{jb['id']}/result",
            content=b'{"x":"' + b"a" * (64 * 1024) + b'"}',
            headers={**_auth(b), "Content-Type": "application/json"},
        )
        status = (await client.get("/v1/compute/status")).json()
    assert ja["job"] == jb["job"]
    assert ja["id"] != jb["id"]
    assert again.json() == {"job": None}
    assert own.content == b"x:trace.u16"
    assert (other.status_code, wrong.status_code, missing.status_code) == (403, 403, 404)
    assert cross.status_code == 403
    assert first.status_code == 200
    assert again_same.json() == first.json()
    assert changed.status_code == 409
    assert second.status_code == 200
    assert second.json()["status"] == "counted"
    assert late.status_code == 403
    assert big.status_code == 413
    credits = {n["id"]: n["compute_credits"] for n in status["nodes"]}
    assert credits == {a["node_id"]: 1, b["node_id"]: 1, c["node_id"]: 0}
    assert status["done_24h"] == 1


async def test_a_vanished_lease_expires_at_its_deadline_and_goes_to_another_node(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    events: list[dict[str, Any]] = []
    async with (
        _daemon(tmp_path, Fallbacks()) as (handle, client),
        trio.open_nursery() as bg,
        handle.ctx.events.subscribe(frozenset({"compute"})) as sub,
    ):

        async def collect() -> None:
            async for event in sub:
                events.append(json.loads(event.json))

        bg.start_soon(collect)
        a, b, c = await _node(client), await _node(client), await _node(client)
        await _enqueue(handle, "x")
        ja = (await _lease(client, a)).json()["job"]
        jb = (await _lease(client, b)).json()["job"]
        assert (await _post(client, b, jb, LOSS)).status_code == 200
        deadline_ms = ja["deadline_ms"]
        leased_ms = int(handle.ctx.wall.now() * 1000)
        assert deadline_ms - leased_ms == DELTA_LOSS.kill_after_ms + 30_000
        # Node c keeps polling: it gets the replacement right after the expiry.
        with trio.fail_after(200):
            while (replacement := (await _lease(client, c)).json()["job"]) is None:
                pass
        replaced_at = int(handle.ctx.wall.now() * 1000)
        posted_late = await _post(client, a, ja, LOSS)
        settled = await _post(client, c, replacement, LOSS)
        await trio.sleep(0.1)
        bg.cancel_scope.cancel()
    assert replacement is not None
    assert replacement["job"] == ja["job"]
    assert replaced_at == deadline_ms + 1
    assert posted_late.status_code == 410
    assert settled.json()["status"] == "counted"
    kinds = [e["kind"] for e in events]
    assert "expired" in kinds
    assert "settled" in kinds
    assert "strike" not in kinds


async def test_a_step_no_node_takes_is_scored_by_the_fallback_at_20_s(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    fallbacks = Fallbacks()
    async with _daemon(tmp_path, fallbacks) as (handle, client):
        job_id = await _enqueue(handle, "lonely")
        enqueued = trio.current_time()
        node = await _node(client)
        await trio.sleep(20.001)
        empty = await _lease(client, node, wait_ms=0)
        await trio.sleep(60)  # the pool scores at the end of the window
        job = await handle.ctx.db.read(_job_state, job_id)
    assert empty.json() == {"job": None}
    assert fallbacks.scored == ["lonely:trace.u16"]
    assert job == ("settled", "fallback")
    assert trio.current_time() - enqueued >= 20


def _job_state(conn: Any, job_id: str) -> tuple[str, str | None]:
    row = conn.execute(
        "SELECT state, settled_how FROM compute_jobs WHERE job_id = ?", (job_id,)
    ).fetchone()
    return str(row[0]), row[1]


async def test_three_strikes_disable_a_node_until_the_utc_day_changes(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with _daemon(tmp_path, Fallbacks()) as (handle, client):
        liar, h1, h2 = await _node(client), await _node(client), await _node(client)
        for i in range(3):
            await _enqueue(handle, f"s{i}")
            jl = (await _lease(client, liar)).json()["job"]
            j1 = (await _lease(client, h1)).json()["job"]
            await _post(client, liar, jl, OTHER)
            await _post(client, h1, j1, LOSS)
            third = (await _lease(client, h2)).json()["job"]
            await _post(client, h2, third, LOSS)
        refused = await _lease(client, liar)
        now_ms = int(handle.ctx.wall.now() * 1000)
    assert refused.status_code == 403
    body = refused.json()
    day_ms = 86_400_000
    assert body["reenable_at_ms"] == (now_ms // day_ms + 1) * day_ms
    assert body["reenable_at"].endswith("T00:00:00.000Z")
    assert "disabled until" in body["detail"]


def test_the_trusted_evaluators_outcome_becomes_an_answer() -> None:
    ok = trusted_answer(DELTA_LOSS, attrs.evolve(TRUSTED, wall_ms=7))
    failed = trusted_answer(
        DELTA_LOSS,
        ScoreOutcome(ok=False, result=None, failure="oom", error="MemoryError", wall_ms=7),
    )
    assert ok.to_json() == {
        "ok": True,
        "objective": LOSS["loss"],
        "fingerprint": LOSS["fingerprint"],
        "wall_ms": 7,
    }
    assert failed.to_json() == {"ok": False, "class": "oom", "error": "MemoryError"}


async def test_a_restarted_daemon_keeps_open_leases_and_their_deadlines(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with _daemon(tmp_path, Fallbacks()) as (handle, client):
        a, b, c = await _node(client), await _node(client), await _node(client)
        job_id = await _enqueue(handle, "r")
        ja = (await _lease(client, a)).json()["job"]
        jb = (await _lease(client, b)).json()["job"]
    await trio.sleep(5)  # the daemon is down for five seconds
    async with _daemon(tmp_path, Fallbacks()) as (handle, client):
        # a's answer, posted after the restart and before its deadline, counts.
        counted = await _post(client, a, ja, LOSS)
        # b never answers: its copy expires at its stored deadline, not a reset one.
        with trio.fail_after(200):
            while (replacement := (await _lease(client, c)).json()["job"]) is None:
                pass
        replaced_at = int(handle.ctx.wall.now() * 1000)
        settled = await _post(client, c, replacement, LOSS)
        job = await handle.ctx.db.read(_job_state, job_id)
    assert counted.status_code == 200
    assert counted.json()["status"] == "counted"
    assert replacement["job"] == jb["job"] == job_id
    assert replaced_at == jb["deadline_ms"] + 1
    assert settled.json()["status"] == "counted"
    assert job == ("settled", "agreement")


async def test_a_split_wakes_a_held_lease_poll_with_the_third_copy_at_once(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """The result that splits a step queues its third copy; the poll waiting for work gets it
    at that very instant, not at the end of its 25 s hold."""
    async with _daemon(tmp_path, Fallbacks()) as (handle, client):
        a, b, c = await _node(client), await _node(client), await _node(client)
        await _enqueue(handle, "x")
        ja = (await _lease(client, a)).json()["job"]
        jb = (await _lease(client, b)).json()["job"]
        answered: list[tuple[float, httpx.Response]] = []
        async with trio.open_nursery() as nursery:

            async def poll() -> None:
                response = await _lease(client, c)
                answered.append((trio.current_time(), response))

            nursery.start_soon(poll)
            await trio.sleep(5)  # c's poll is held: no copy is leasable for it
            assert answered == []
            assert (await _post(client, a, ja, LOSS)).json()["job_state"] == "queued"
            split = await _post(client, b, jb, OTHER)
            split_at = trio.current_time()
    ((at, response),) = answered
    third = response.json()["job"]
    assert split.json()["job_state"] == "queued"
    assert third is not None
    assert third["job"] == ja["job"]
    assert third["id"] not in (ja["id"], jb["id"])
    assert at == split_at


async def test_a_busy_copy_given_back_wakes_a_held_lease_poll_at_once(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with _daemon(tmp_path, Fallbacks()) as (handle, client):
        a, b, c = await _node(client), await _node(client), await _node(client)
        await _enqueue(handle, "x")
        ja = (await _lease(client, a)).json()["job"]
        await _lease(client, b)
        answered: list[tuple[float, httpx.Response]] = []
        async with trio.open_nursery() as nursery:

            async def poll() -> None:
                response = await _lease(client, c)
                answered.append((trio.current_time(), response))

            nursery.start_soon(poll)
            await trio.sleep(5)
            released = await client.post(
                f"/v1/compute/jobs/{ja['id']}/result",
                json={"lease": ja["lease"], "ok": False, "busy": True},
                headers=_auth(a),
            )
            released_at = trio.current_time()
    ((at, response),) = answered
    assert released.json() == {"copy": ja["id"], "status": "released"}
    assert response.json()["job"]["job"] == ja["job"]
    assert at == released_at


@asynccontextmanager
async def _held_polls(
    client: httpx.AsyncClient, nodes: list[dict[str, Any]]
) -> AsyncIterator[tuple[dict[int, tuple[float, Any]], float]]:
    """One lease poll per node, started 0.5 s apart (poll 0 waits longest), held in the block;
    yields the answers as they come (``i -> (time, job)``) and the first poll's start."""
    answered: dict[int, tuple[float, Any]] = {}
    async with trio.open_nursery() as nursery:

        async def poll(i: int) -> None:
            response = await _lease(client, nodes[i])
            answered[i] = (trio.current_time(), response.json()["job"])

        start = trio.current_time()
        for i in range(len(nodes)):
            nursery.start_soon(poll, i)
            await trio.sleep(0.5)
        yield answered, start


async def test_a_new_step_wakes_two_held_polls_the_longest_waiting_first(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Issue 17 goal 4: a step's two copies wake two of the ten held polls (the two that have
    waited longest), not all ten: the other eight stay held to the end of their 25 s."""
    async with _daemon(tmp_path, Fallbacks()) as (handle, client):
        nodes = [await _node(client) for _ in range(10)]
        async with _held_polls(client, nodes) as (answered, start):
            assert handle.ctx.compute.waiter.waiting(WORK) == 10
            await _enqueue(handle, "x")
            enqueued = trio.current_time()
            await trio.testing.wait_all_tasks_blocked()
            assert handle.ctx.compute.waiter.waiting(WORK) == 8
            # Only the two woken polls ran a lease transaction (it notes when a node was seen).
            seen = [await handle.ctx.db.read(get_node, n["node_id"]) for n in nodes]
            assert [n.last_seen_ms for n in seen[2:]] == [
                int(handle.ctx.wall.now() * 1000 - 500 * (10 - i)) for i in range(2, 10)
            ]
    for i in (0, 1):
        at, job = answered[i]
        assert (at, job is not None) == (enqueued, True), (i, answered[i])
    for i in range(2, 10):
        assert answered[i] == (pytest.approx(start + 0.5 * i + 25.0), None), (i, answered[i])


async def test_a_poll_woken_for_a_copy_its_node_may_not_take_hands_the_wake_on(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """A copy given back wakes one poll: the longest waiting, of the node holding the step's
    other copy, may not take it and hands the wake on; the next poll gets it at once."""
    async with _daemon(tmp_path, Fallbacks()) as (handle, client):
        a, b, c = await _node(client), await _node(client), await _node(client)
        await _enqueue(handle, "x")
        ja = (await _lease(client, a)).json()["job"]
        jb = (await _lease(client, b)).json()["job"]
        answered: dict[str, tuple[float, Any]] = {}
        async with trio.open_nursery() as nursery:

            async def poll(name: str, node: Mapping[str, Any]) -> None:
                response = await _lease(client, node)
                answered[name] = (trio.current_time(), response.json()["job"])

            nursery.start_soon(poll, "a", a)  # holds copy 1: may not take copy 2
            await trio.sleep(1)
            nursery.start_soon(poll, "c", c)
            await trio.sleep(1)
            released = await client.post(
                f"/v1/compute/jobs/{jb['id']}/result",
                json={"lease": jb["lease"], "ok": False, "busy": True},
                headers=_auth(b),
            )
            released_at = trio.current_time()
    assert released.json() == {"copy": jb["id"], "status": "released"}
    at, job = answered["c"]
    assert (at, job["job"]) == (released_at, ja["job"])
    assert answered["a"] == (pytest.approx(25.0 + released_at - 2), None)


async def test_a_third_copy_nobody_takes_goes_to_the_fallback_when_its_window_ends(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """The split's fresh 20 s window wakes the reaper (its plan was the leases' 90 s deadlines)
    and the fallback event wakes the pool: both at the window's end, in virtual time."""
    fallbacks = Fallbacks()
    timeline: list[tuple[float, str]] = []
    async with (
        _daemon(tmp_path, fallbacks) as (handle, client),
        trio.open_nursery() as bg,
        handle.ctx.events.subscribe(frozenset({"compute"})) as sub,
    ):

        async def collect() -> None:
            async for event in sub:
                timeline.append((trio.current_time(), json.loads(event.json)["kind"]))

        bg.start_soon(collect)
        a, b = await _node(client), await _node(client)
        await _enqueue(handle, "x")
        ja = (await _lease(client, a)).json()["job"]
        jb = (await _lease(client, b)).json()["job"]
        await trio.sleep(1)
        await _post(client, a, ja, LOSS)
        await _post(client, b, jb, OTHER)
        await trio.sleep(40)
        bg.cancel_scope.cancel()
    at = {kind: t for t, kind in timeline}
    assert [kind for _, kind in timeline if kind in ("split", "fallback", "settled")] == [
        "split",
        "fallback",
        "settled",
    ]
    assert at["fallback"] - at["split"] == pytest.approx(20.0, abs=0.002)
    assert at["settled"] == at["fallback"]
    assert fallbacks.scored == ["x:trace.u16"]


async def test_a_result_post_is_one_write_transaction(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Authentication and submission commit together; a refused post rolls back as one."""
    async with _daemon(tmp_path, Fallbacks()) as (handle, client):
        a, b = await _node(client), await _node(client)
        await _enqueue(handle, "x")
        ja = (await _lease(client, a)).json()["job"]
        await _lease(client, b)
        await trio.testing.wait_all_tasks_blocked()  # the reaper's pass for the leases is done
        db = handle.ctx.db
        before = db.statistics()
        counted = await _post(client, a, ja, LOSS)
        between = db.statistics()
        changed = await _post(client, a, ja, OTHER)
        after = db.statistics()
    assert (counted.status_code, changed.status_code) == (200, 409)
    assert (between.writes - before.writes, between.rollbacks - before.rollbacks) == (1, 0)
    assert (after.writes - between.writes, after.rollbacks - between.rollbacks) == (0, 1)


async def test_malformed_lease_and_result_bodies_are_400_naming_the_field(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with _daemon(tmp_path, Fallbacks()) as (handle, client):
        node = await _node(client)
        await _enqueue(handle, "x")
        refused = []
        for body, field in [
            ({"wait_ms": True}, "wait_ms"),
            ({"wait_ms": 25_001}, "wait_ms"),
            ({"wait_ms": 2**60}, "wait_ms"),
            ({"capabilities": "delta-loss"}, "capabilities"),
            ({"waitMs": 1000}, "unknown field"),
        ]:
            r = await client.post("/v1/compute/jobs/lease", json=body, headers=_auth(node))
            refused.append((r, field))
        job = (await _lease(client, node)).json()["job"]
        url = f"/v1/compute/jobs/{job['id']}/result"
        for body, field in [
            ({"lease": job["lease"], "ok": True, "result": [1]}, "result"),
            ({"lease": job["lease"], "ok": 1}, "ok"),
            ({"lease": job["lease"], "ok": False, "class": 3}, "class"),
            ({"lease": job["lease"], "ok": True, "result": {**LOSS, "wallMs": True}}, "wallMs"),
        ]:
            refused.append((await client.post(url, json=body, headers=_auth(node)), field))
        counted = await _post(client, node, job, LOSS)
    for response, field in refused:
        assert response.status_code == 400, (field, response.text)
        assert field in response.json()["detail"]
    assert counted.json()["status"] == "counted"


async def test_a_malformed_benchmark_body_is_400_naming_the_field(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with _daemon(tmp_path, Fallbacks()) as (_handle, client):
        admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        answers = []
        for body, field in [({"run_id": 7}, "run_id"), ({"run": "x"}, "unknown field")]:
            r = await client.post("/v1/admin/compute/benchmark", json=body, headers=admin)
            answers.append((r, field))
        nothing = await client.post("/v1/admin/compute/benchmark", json={}, headers=admin)
    for response, field in answers:
        assert response.status_code == 400, (field, response.text)
        assert field in response.json()["detail"]
    assert nothing.status_code == 409  # well formed: no run is running here


def _step(handle: DaemonHandle, label: str, inputs: list[Any]) -> Any:
    """The transaction that enqueues a delta-loss step labelled ``label`` over ``inputs``."""
    ctx = handle.ctx
    return partial(
        enqueue_step,
        challenge_id=DELTA_LOSS.id,
        subject={"label": label},
        step="public",
        inputs=inputs,
        now_ms=int(ctx.wall.now() * 1000),
        wait_ms=ctx.compute.settings.wait_ms,
        settings=ctx.compute.settings,
    )


async def _enqueue_through_hub(handle: DaemonHandle, label: str, inputs: list[Any]) -> str:
    """A delta-loss step enqueued as the daemon's own producers do (``ComputeHub.write``)."""
    ctx = handle.ctx
    job_id, _ = await ctx.compute.write(_step(handle, label, inputs))
    return job_id


async def _stand_in_inputs(handle: DaemonHandle, label: str) -> list[Any]:
    files = []
    for name in DELTA_LOSS.inputs:
        info = await handle.ctx.objects.put_bytes(f"{label}:{name}".encode())
        files.append({"name": name, "sha256": info.sha256, "size": info.size})
    return files


def _queued_copies(conn: Any, job_id: str) -> list[str]:
    rows = conn.execute(
        "SELECT copy_id FROM compute_copies WHERE job_id = ? AND state = 'queued'", (job_id,)
    ).fetchall()
    return [str(r[0]) for r in rows]


async def test_a_new_step_is_handed_to_the_two_longest_held_polls_in_its_own_transaction(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Issue 17 goal 4: the enqueue transaction itself leases the step's two copies to the two
    polls that have waited longest; they only answer their grants (no lease transaction of
    their own: no snapshot ever shows the copies queued) and the other eight stay held."""
    async with _daemon(tmp_path, Fallbacks()) as (handle, client):
        nodes = [await _node(client) for _ in range(10)]
        files = await _stand_in_inputs(handle, "x")
        async with _held_polls(client, nodes) as (answered, start):
            writes = handle.ctx.db.statistics().writes
            job_id = await _enqueue_through_hub(handle, "x", files)
            assert handle.ctx.db.statistics().writes == writes + 1
            assert handle.ctx.compute.waiter.waiting(WORK) == 8
            enqueued = trio.current_time()
            assert await handle.ctx.db.read(_queued_copies, job_id) == []
    for i in (0, 1):
        at, job = answered[i]
        assert (at, job["job"]) == (enqueued, job_id)
    assert {answered[0][1]["id"], answered[1][1]["id"]} == {f"{job_id}.1", f"{job_id}.2"}
    for i in range(2, 10):
        assert answered[i] == (pytest.approx(start + 0.5 * i + 25.0), None), (i, answered[i])


async def test_a_step_queued_while_a_poll_is_on_its_way_to_wait_still_reaches_it(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """No poll parks after a new copy went out: whatever step of its lease an enqueue lands
    on (k scheduler steps after the polls start, for every k up to long after they parked),
    both polls answer the step's copies at that same instant."""
    async with _daemon(tmp_path, Fallbacks()) as (handle, client):
        for k in range(24):
            a, b = await _node(client), await _node(client)
            files = await _stand_in_inputs(handle, f"k{k}")
            answered: list[tuple[float, Any]] = []

            async def poll(node: Mapping[str, Any], answered: list[Any] = answered) -> None:
                response = await _lease(client, node)
                answered.append((trio.current_time(), response.json()["job"]))

            async def enqueue_after(steps: int, label: str, files: list[Any] = files) -> None:
                for _ in range(steps):
                    await trio.lowlevel.checkpoint()
                await _enqueue_through_hub(handle, label, files)

            start = trio.current_time()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(poll, a)
                nursery.start_soon(poll, b)
                nursery.start_soon(enqueue_after, k, f"k{k}")
            assert [(at, job is not None) for at, job in answered] == [(start, True)] * 2, k


async def _asgi(
    app: Any, path: str, body: bytes, headers: list[tuple[bytes, bytes]], leave_at: float | None
) -> list[dict[str, Any]]:
    """One request straight to the app; the client disconnects at Trio time ``leave_at``."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"coord"), *headers],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 2),
    }
    messages = [{"type": "http.request", "body": body, "more_body": False}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop()
        if leave_at is None:
            await trio.sleep_forever()
        await trio.sleep_until(leave_at)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


async def test_a_held_poll_whose_client_leaves_stops_waiting_at_once(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """The lease path is plain ASGI (issue 17 goal 3): like Quart's routes, a poll ends when its
    client disconnects, unanswered, and holds no slot after."""
    async with _daemon(tmp_path, Fallbacks()) as (handle, client):
        node = await _node(client)
        body = json.dumps({"capabilities": ["delta-loss"], "hardware": "cpu"}).encode()
        auth = [(b"authorization", f"Bearer {node['key']}".encode())]
        start = trio.current_time()
        sent = await _asgi(handle.app, "/v1/compute/jobs/lease", body, auth, start + 3.0)
        assert (sent, trio.current_time() - start) == ([], 3.0)
        assert handle.ctx.compute.waiter.waiting(WORK) == 0


async def test_the_lease_path_keeps_the_bounds_and_answers_of_the_routes(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Before the body: no key, a malformed or an unknown one is 401 (the body is never read);
    a declared body over 64 KiB is 413; headers over 16 KiB are 431; other methods are Quart's
    405; errors are ``{"detail"}`` with the status of their class."""
    async with _daemon(tmp_path, Fallbacks()) as (_handle, client):
        node = await _node(client)
        lease = "/v1/compute/jobs/lease"
        huge = {"Content-Length": "70000"}
        unknown = {"Authorization": "Bearer ht_" + "A" * 32}
        answers = [
            await client.post(lease, json={}),
            await client.post(lease, content=b"x", headers={"Authorization": "Bearer ht_x"}),
            await client.post(lease, content=b"x" * 70000, headers={**unknown, **huge}),
            await client.post(lease, content=b"x" * 70000, headers={**_auth(node), **huge}),
            await client.post(lease, content=b"{", headers=_auth(node)),
            await client.post(lease, json={}, headers={**_auth(node), "X-Big": "y" * 17000}),
            await client.get(lease, headers=_auth(node)),
            await client.post("/v1/compute/jobs/nope/result", json={}),
            await client.post("/v1/compute/jobs/nope/result", json={}, headers=_auth(node)),
        ]
    assert [(a.status_code, a.json()["detail"]) for a in answers] == [
        (401, "a node key is required: Authorization: Bearer ht_..."),
        (401, "malformed node key"),
        (401, "unknown node key"),
        (413, "request body over the limit of 65536 bytes (got 70000 bytes)"),
        (400, answers[4].json()["detail"]),
        (431, "request headers over the limit of 16384 bytes"),
        (405, f"method GET not allowed on {lease}"),
        (401, "a node key is required: Authorization: Bearer ht_..."),
        (404, "no compute job copy nope"),
    ]
    assert answers[4].json()["detail"].startswith("JSON: ")
