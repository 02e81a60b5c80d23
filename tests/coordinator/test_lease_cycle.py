"""A result post that carries the node's next lease request: one request a cycle (issue 17 goal
3; :mod:`hypertrain.coordinator.web.leasepath`), against the real daemon in virtual time.

Checked: the result and the lease in ONE write transaction, the lease's answer under ``next``;
a lease that got nothing held as a poll (and handed the next copy), with the result committed
before the hold, however the hold ends (the client leaves, the daemon stops); a bad ``next``,
an unknown key and a refused or late result apply nothing and lease nothing; a node disabled by
now is answered without ``next``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import trio
import trio.testing

from hypertrain.coordinator.computehub import WORK
from tests.coordinator.test_compute_routes import (
    LOSS,
    OTHER,
    Fallbacks,
    _asgi,
    _auth,
    _daemon,
    _enqueue,
    _enqueue_through_hub,
    _lease,
    _node,
    _stand_in_inputs,
)

NEXT = {"capabilities": ["delta-loss"], "hardware": "cpu"}


async def _post_next(
    client: httpx.AsyncClient,
    node: Mapping[str, Any],
    job: Mapping[str, Any],
    result: Any = LOSS,
    next_: Any = NEXT,
) -> httpx.Response:
    body = {"lease": job["lease"], "ok": True, "result": result, "next": next_}
    return await client.post(f"/v1/compute/jobs/{job['id']}/result", json=body, headers=_auth(node))


def _copies(conn: Any) -> dict[str, tuple[str, str | None]]:
    """Every copy's ``(state, node)``."""
    rows = conn.execute("SELECT copy_id, state, node_id FROM compute_copies").fetchall()
    return {str(c): (str(s), n) for c, s, n in rows}


async def test_a_result_carrying_the_next_request_is_answered_with_the_next_copy(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Result and lease in one write transaction; the answer is the result's with the lease's
    answer under ``next``: the oldest copy the node may take (not the other copy of its job)."""
    async with _daemon(tmp_path, Fallbacks()) as (handle, client):
        a = await _node(client)
        first = await _enqueue(handle, "x")
        second = await _enqueue(handle, "y")
        job = (await _lease(client, a)).json()["job"]
        await trio.testing.wait_all_tasks_blocked()  # the reaper's pass for the lease is done
        before = handle.ctx.db.statistics()
        answer = await _post_next(client, a, job)
        after = handle.ctx.db.statistics()
        copies = await handle.ctx.db.read(_copies)
    body = answer.json()
    nxt = body.pop("next")["job"]
    assert (answer.status_code, job["job"]) == (200, first)
    assert body == {
        "copy": job["id"],
        "status": "counted",
        "verdict": None,
        "job_state": "queued",
        "compute_credits": 0,
    }
    assert (nxt["job"], nxt["id"]) == (second, f"{second}.1")
    assert copies[job["id"]][0] == "answered"
    assert copies[nxt["id"]] == ("leased", a["node_id"])
    assert (after.writes - before.writes, after.rollbacks - before.rollbacks) == (1, 0)


async def test_with_nothing_ready_it_is_held_after_the_result_then_handed_the_next_copy(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Nothing else queued: the result is committed, then the request is held as a lease poll
    and answered the copy the next step's own transaction hands it (ComputeHub.write), at that
    instant; with ``wait_ms`` 0 it answers ``{"job": null}`` at once."""
    async with _daemon(tmp_path, Fallbacks()) as (handle, client):
        a, b = await _node(client), await _node(client)
        await _enqueue(handle, "x")
        job = (await _lease(client, a)).json()["job"]
        other = (await _lease(client, b)).json()["job"]
        files = await _stand_in_inputs(handle, "y")
        got: list[tuple[float, httpx.Response]] = []
        async with trio.open_nursery() as nursery:

            async def cycle() -> None:
                response = await _post_next(client, a, job)
                got.append((trio.current_time(), response))

            nursery.start_soon(cycle)
            await trio.sleep(7.0)
            held = handle.ctx.compute.waiter.waiting(WORK)
            during = await handle.ctx.db.read(_copies)
            new = await _enqueue_through_hub(handle, "y", files)
            enqueued = trio.current_time()
            after = await handle.ctx.db.read(_copies)
        start = trio.current_time()
        nothing = {"capabilities": [], "hardware": "cpu", "wait_ms": 0}
        at_once = await _post_next(client, b, other, next_=nothing)
        waited = trio.current_time() - start
    ((at, answer),) = got
    assert (held, during[job["id"]][0]) == (1, "answered")  # committed before the hold
    assert (answer.status_code, answer.json()["status"]) == (200, "counted")
    handed = answer.json()["next"]["job"]
    assert (at, handed["job"]) == (enqueued, new)
    assert after[handed["id"]] == ("leased", a["node_id"])  # in the enqueue's transaction
    assert at_once.json()["job_state"] == "settled"
    assert (at_once.json()["next"], waited) == ({"job": None}, 0.0)


async def test_the_result_stays_taken_when_the_client_leaves_during_the_hold(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """A client that disconnects while its next lease is held gets no answer and holds no slot;
    its result was committed, and the identical repost is answered the result's first answer
    again, with a lease."""
    async with _daemon(tmp_path, Fallbacks()) as (handle, client):
        a = await _node(client)
        await _enqueue(handle, "x")
        job = (await _lease(client, a)).json()["job"]
        body = {"lease": job["lease"], "ok": True, "result": LOSS, "next": NEXT}
        auth = [(b"authorization", f"Bearer {a['key']}".encode())]
        path = f"/v1/compute/jobs/{job['id']}/result"
        start = trio.current_time()
        sent = await _asgi(handle.app, path, json.dumps(body).encode(), auth, start + 3.0)
        left = (trio.current_time() - start, handle.ctx.compute.waiter.waiting(WORK))
        copies = await handle.ctx.db.read(_copies)
        again = await _post_next(client, a, job, next_={**NEXT, "wait_ms": 1000})
    assert (sent, left) == ([], (3.0, 0))
    assert copies[job["id"]] == ("answered", a["node_id"])
    assert again.status_code == 200
    assert again.json() == {
        "copy": job["id"],
        "status": "counted",
        "verdict": None,
        "job_state": "queued",
        "compute_credits": 0,
        "next": {"job": None},
    }


async def test_a_stopping_daemon_answers_the_result_without_next(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Where a lease poll would be answered 503, the result is still taken and answered, only
    without ``next`` (during the hold and from the start); a plain lease is the 503."""
    async with _daemon(tmp_path, Fallbacks()) as (handle, client):
        a, b = await _node(client), await _node(client)
        await _enqueue(handle, "x")
        ja = (await _lease(client, a)).json()["job"]
        jb = (await _lease(client, b)).json()["job"]
        await _enqueue(handle, "y")  # taken by nobody below: nobody leases while stopping
        got: list[httpx.Response] = []
        async with trio.open_nursery() as nursery:

            async def cycle() -> None:
                got.append(await _post_next(client, a, ja, next_={**NEXT, "capabilities": []}))

            nursery.start_soon(cycle)
            await trio.sleep(5.0)
            held = handle.ctx.compute.waiter.waiting(WORK)
            stopped = trio.current_time()
            handle.ctx.stopping.set()
            handle.ctx.compute.close()
        answered = trio.current_time()
        late = await _post_next(client, b, jb)
        plain = await _lease(client, b)
        copies = await handle.ctx.db.read(_copies)
    assert [(r.status_code, r.json()["status"], "next" in r.json()) for r in (*got, late)] == [
        (200, "counted", False),
        (200, "counted", False),
    ]
    assert (held, answered) == (1, stopped)
    assert plain.status_code == 503
    assert sorted(state for state, _ in copies.values()) == ["answered"] * 2 + ["queued"] * 2


async def test_a_bad_next_request_is_400_naming_it_and_applies_nothing(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with _daemon(tmp_path, Fallbacks()) as (handle, client):
        a = await _node(client)
        await _enqueue(handle, "x")
        await _enqueue(handle, "y")
        job = (await _lease(client, a)).json()["job"]
        before = await handle.ctx.db.read(_copies)
        refused = [
            await _post_next(client, a, job, next_=bad)
            for bad in (
                {**NEXT, "wait_ms": 25_001},
                {**NEXT, "waitMs": 1},
                [],
                "x",
                {**NEXT, "capabilities": ["Delta-Loss"]},
                {**NEXT, "hardware": "x" * 1000},
            )
        ]
        after = await handle.ctx.db.read(_copies)
        counted = await _post_next(client, a, job)
    details = [(r.status_code, r.json()["detail"]) for r in refused]
    assert details == [
        (400, details[0][1]),
        (400, "ResultPost body: $.next: unknown field(s) 'waitMs'"),
        (400, "ResultPost body: $.next: expected an object, got an array"),
        (400, "ResultPost body: $.next: expected an object, got a string"),
        (400, "ResultPost body: $.next.capabilities: each id is [a-z0-9][a-z0-9._-]{0,63}"),
        (400, details[5][1]),
    ]
    assert details[5][1].startswith("ResultPost body: $.next.hardware: ")
    assert details[0][1].startswith("ResultPost body: $.next.wait_ms: ")
    assert after == before
    assert counted.json()["next"]["job"] is not None


async def test_an_unknown_key_a_refused_result_or_a_late_one_leases_nothing(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """401, 403 (another node's copy), 409 (another answer) and 410 (past the deadline) carry
    no ``next`` and take no copy; so does a 200 for a node disabled by now."""
    async with _daemon(tmp_path, Fallbacks()) as (handle, client):
        a, b = await _node(client), await _node(client)
        await _enqueue(handle, "x")
        ja = (await _lease(client, a)).json()["job"]
        jb = (await _lease(client, b)).json()["job"]
        await _enqueue(handle, "y")
        await _enqueue(handle, "z")
        nothing = {"capabilities": [], "hardware": "cpu", "wait_ms": 0}
        first = await _post_next(client, b, jb, next_=nothing)
        stranger = {"key": "ht_" + "A" * 32}
        answers = [
            await _post_next(client, stranger, ja),
            await _post_next(client, b, ja),
            await _post_next(client, b, jb, result=OTHER),
        ]
        await trio.sleep((ja["deadline_ms"] - handle.ctx.wall.now() * 1000) / 1000 + 1)
        await _enqueue(handle, "w")  # y and z went to the fallback meanwhile
        answers.append(await _post_next(client, a, ja))
        after = await handle.ctx.db.read(_copies)
        await handle.ctx.db.write(
            lambda conn: conn.execute(
                "UPDATE compute_nodes SET disabled_until_ms = ? WHERE node_id = ?",
                (int(handle.ctx.wall.now() * 1000) + 3_600_000, b["node_id"]),
            )
        )
        disabled = await _post_next(client, b, jb)
        end = await handle.ctx.db.read(_copies)
    assert first.json()["next"] == {"job": None}
    assert [r.status_code for r in answers] == [401, 403, 409, 410]
    assert all("next" not in r.json() for r in answers)
    taken = {c: n for c, (_, n) in after.items() if n is not None}
    assert taken == {ja["id"]: a["node_id"], jb["id"]: b["node_id"]}
    assert (disabled.status_code, "next" in disabled.json()) == (200, False)
    assert end == after
