"""Hidden-trace shards and their rotation over HTTP, on the real daemon in virtual time
(issue 19 items 4 and 5; spec/compute-network.md section 6 scenarios 35 and 36).

Windows and their slice jobs are put straight into the book with small stand-in objects (the
whole scoring feed runs in ``tests/node/test_hidden_shards_run.py``); nodes are plain HTTP
clients. Checked: a node never leases, nor downloads, a second slice of one window (403, even
with a lease of it); a rotation retires the old window (its queued slices answer a late post
410 "rotated out"), re-scores the last round's step and the merged theta on the new window,
refuses an answer that names the old window (409) and a new step on the old window.
"""

from __future__ import annotations

import sqlite3
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from hypertrain.compute import Event, job_scores, mint_lease_token, secret_hash
from hypertrain.compute.slices import Window, enqueue_slices, get_window, record_window
from hypertrain.compute.wire import LEASE_HEADER, InputFile
from hypertrain.coordinator.flows.hiddenwindows import open_window, theta_subject
from hypertrain.daemon.main import DaemonHandle
from hypertrain.protocol.errors import Conflict
from hypertrain.scoring.registry import DELTA_LOSS
from hypertrain.scoring.slices import summarise
from tests.coordinator.test_compute_routes import (
    Fallbacks,
    _auth,
    _daemon,
    _lease,
    _node,
    _stand_in_inputs,
)

ROTATE = 10
STEP = {"run_id": "r1", "w": ROTATE - 1, "hotkey": "h1"}
"""A step of the old window's last round: re-scored when the window rotates."""


async def _window(handle: DaemonHandle, epoch: int, slices: int = 2) -> tuple[Window, list[Any]]:
    objects = handle.ctx.objects
    whole = await objects.put_bytes(f"window {epoch}".encode(), private=True)
    parts = [
        await objects.put_bytes(f"window {epoch} slice {k}".encode(), private=True)
        for k in range(slices)
    ]
    files = tuple(InputFile("trace.u16", p.sha256, p.size) for p in parts)
    window = Window(
        window=whole.sha256, run_id="r1", epoch=epoch, first_sample=0, rows=slices, slices=files
    )
    return window, [whole, *parts]


async def _open_first(handle: DaemonHandle, subjects: list[dict[str, Any]]) -> Window:
    window, _ = await _window(handle, 0)
    files = await _stand_in_inputs(handle, "step")
    now = int(handle.ctx.wall.now() * 1000)

    def body(conn: sqlite3.Connection) -> list[Event]:
        stored = record_window(conn, window, now)
        events: list[Event] = []
        for subject in subjects:
            events += enqueue_slices(
                conn, subject=subject, window=stored, inputs=files, now_ms=now, wait_ms=20_000
            )
        return events

    await handle.ctx.compute.write(body)
    return window


def _trace_url(job: dict[str, Any]) -> str:
    return f"/v1/compute/jobs/{job['id']}/inputs/trace.u16"


async def _post_slice(
    client: httpx.AsyncClient, node: dict[str, Any], job: dict[str, Any], window: str
) -> httpx.Response:
    """``node``'s answer to its copy ``job`` of a slice, scored on ``window``."""
    result = {**summarise([1.25, 2.5]), "wallMs": 3}
    body = {"lease": job["lease"], "ok": True, "result": result, "window": window}
    return await client.post(f"/v1/compute/jobs/{job['id']}/result", json=body, headers=_auth(node))


async def test_a_node_never_leases_nor_fetches_a_second_slice_of_a_window(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with _daemon(tmp_path, Fallbacks()) as (handle, client):
        window = await _open_first(handle, [STEP, {**STEP, "hotkey": "h2"}])
        x, y, z = [await _node(client, f"n{i}") for i in range(3)]
        jx = (await _lease(client, x, 0)).json()["job"]
        assert jx["window"] == window.window
        own = await client.get(_trace_url(jx), headers={**_auth(x), LEASE_HEADER: jx["lease"]})
        assert own.status_code == 200
        assert own.content == b"window 0 slice 0"
        jy = (await _lease(client, y, 0)).json()["job"]  # slice 0's other copy
        jz = (await _lease(client, z, 0)).json()["job"]  # slice 1
        assert [j["inputs"][3]["sha256"] for j in (jy, jz)] == [
            window.slices[0].sha256,
            window.slices[1].sha256,
        ]
        # x takes slice 0 of the second step, never a copy of slice 1 (of either step).
        second = (await _lease(client, x, 0)).json()["job"]
        assert second["inputs"][3]["sha256"] == window.slices[0].sha256
        assert (await _lease(client, x, 0)).json() == {"job": None}
        # A lease of slice 1 forced onto x (as a book without the guard would give it): the
        # input route still refuses x the second slice.
        token = mint_lease_token()
        forced = await handle.ctx.db.write(_force_slice_1, x["id"], secret_hash(token))
        refused = await client.get(
            f"/v1/compute/jobs/{forced}/inputs/trace.u16",
            headers={**_auth(x), LEASE_HEADER: token},
        )
        assert refused.status_code == 403, refused.text
        assert "two slices of one window" in refused.json()["detail"]


def _force_slice_1(conn: sqlite3.Connection, node_id: str, token_hash: str) -> str:
    (copy_id,) = conn.execute(
        "SELECT c.copy_id FROM compute_copies c JOIN hidden_slice_jobs s USING (job_id)"
        " WHERE s.slice = 1 AND c.state = 'queued' ORDER BY c.copy_id LIMIT 1"
    ).fetchone()
    conn.execute(
        "UPDATE compute_copies SET state = 'leased', node_id = ?, token_hash = ?, leased_ms = 0,"
        " deadline_ms = 9e15 WHERE copy_id = ?",
        (node_id, token_hash, copy_id),
    )
    return str(copy_id)


async def test_a_rotation_rescores_on_the_new_window_and_refuses_the_old_one(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with _daemon(tmp_path, Fallbacks()) as (handle, client):
        old = await _open_first(handle, [STEP])
        x, y = [await _node(client, f"n{i}") for i in range(2)]
        stale = (await _lease(client, x, 0)).json()["job"]
        assert stale["window"] == old.window
        new, objects = await _window(handle, 1)
        theta = await _stand_in_inputs(handle, "theta")
        hub = handle.ctx.compute
        stored, _ = await hub.write(
            partial(
                open_window,
                rotate_rounds=ROTATE,
                theta_inputs=theta,
                now_ms=int(handle.ctx.wall.now() * 1000),
                settings=hub.settings,
            ),
            new,
            objects,
        )
        # The old window's queued slices ended: a late answer counts for nothing.
        late = await _post_slice(client, x, stale, old.window)
        assert late.status_code == 410, late.text
        assert "rotated out" in late.json()["detail"]
        # Re-scored on the new window: the last round's step, and the merged theta.
        fresh = (await _lease(client, y, 0)).json()["job"]
        assert fresh["window"] == new.window
        named_old = await _post_slice(client, y, fresh, old.window)
        assert named_old.status_code == 409, named_old.text
        assert "stale hidden window" in named_old.json()["detail"]
        ok = await _post_slice(client, y, fresh, new.window)
        assert ok.status_code == 200, ok.text
        steps = await handle.ctx.db.read(_slice_steps)
        (step,) = await handle.ctx.db.read(job_scores, STEP)
        with pytest.raises(Conflict, match="rotated out"):
            await handle.ctx.db.write(_new_step_on, old, theta)
    assert steps == {
        (old.window, str(STEP["hotkey"])): ["unscored", "unscored"],
        (new.window, str(STEP["hotkey"])): ["queued", "queued"],
        (new.window, "theta"): ["queued", "queued"],
    }
    assert stored.window == new.window
    assert step.state == "queued"  # the new window's slices, none settled yet
    assert step.inputs[3].sha256 == new.window
    assert theta_subject("r1", ROTATE) == {"run_id": "r1", "w": ROTATE, "theta": "start"}


def _slice_steps(conn: sqlite3.Connection) -> dict[tuple[str, str], list[str]]:
    found: dict[tuple[str, str], list[str]] = {}
    for window, subject, state in conn.execute(
        "SELECT s.window, s.step_subject, j.state FROM hidden_slice_jobs s"
        " JOIN compute_jobs j USING (job_id) ORDER BY s.window, s.step_subject, s.slice"
    ):
        who = "theta" if '"theta"' in subject else str(STEP["hotkey"])
        found.setdefault((str(window), who), []).append(str(state))
    return found


def _new_step_on(conn: sqlite3.Connection, old: Window, files: list[Any]) -> list[Event]:
    stored = get_window(conn, old.run_id, old.epoch)
    assert stored is not None
    return enqueue_slices(
        conn,
        subject={**STEP, "hotkey": "late"},
        window=stored,
        inputs=files,
        now_ms=0,
        wait_ms=DELTA_LOSS.kill_after_ms,
    )
