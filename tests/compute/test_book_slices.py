"""Hidden-trace shards in the book (issue 19 item 4): one slice of a window per node, across
every step of the window; a slice's answer carries its per-sequence losses, which the step's
score combines exactly; a slice's result replaced later (a trusted re-score) moves the step's
score with it."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import numpy as np
import pytest

from hypertrain.compute import Event, LeaseGrant, Node, job_scores, return_unsent
from hypertrain.compute.slices import Window, enqueue_slices, record_window
from hypertrain.compute.wire import InputFile
from hypertrain.coordinator.flows.compute import job_view
from hypertrain.protocol.errors import NotFound, ProtocolError
from hypertrain.scoring.slices import summarise
from tests.compute.support import T0, Book, inputs

WINDOW = "77" * 32
STEPS = [{"run_id": "r1", "w": 3, "hotkey": h} for h in ("h1", "h2")]
LOSSES = {0: [1.5, 2.25, 3.0], 1: [0.5, 4.75]}
"""Per-sequence losses of slice 0 and slice 1 (the same for both steps: same rows, same
made-up model)."""


def _window(slices: int = 2) -> Window:
    files = tuple(InputFile("trace.u16", f"{k + 1:x}" * 64, 10 + k) for k in range(slices))
    return Window(window=WINDOW, run_id="r1", epoch=0, first_sample=0, rows=5, slices=files)


async def _open(book: Book, window: Window) -> None:
    def body(conn: sqlite3.Connection) -> list[Event]:
        stored = record_window(conn, window, T0)
        events: list[Event] = []
        for subject in STEPS:
            events += enqueue_slices(
                conn, subject=subject, window=stored, inputs=inputs(), now_ms=T0, wait_ms=20_000
            )
        return events

    book._keep(await book.db.write(body))


def _slice_answer(grant: LeaseGrant, k: int, **extra: Any) -> dict[str, Any]:
    result = {**summarise(np.array(LOSSES[k], dtype=np.float32)), "wallMs": 5}
    return {"lease": grant.token, "ok": True, "result": result, "window": WINDOW, **extra}


def _slice_of(grant: LeaseGrant) -> int:
    sha = next(f.sha256 for f in grant.inputs if f.name == "trace.u16")
    return int(sha[0], 16) - 1


async def _lease_all(book: Book, nodes: list[Node]) -> list[tuple[Node, LeaseGrant]]:
    """Each node in turn leases until it gets nothing (the first would take every copy it
    may); the grants in order."""
    grants: list[tuple[Node, LeaseGrant]] = []
    for node in nodes:
        while (grant := await book.lease(node, T0 + 1)) is not None:
            grants.append((node, grant))
    return grants


async def test_a_node_gets_one_slice_of_a_window_across_all_its_steps(book: Book) -> None:
    await _open(book, _window())
    nodes = [(await book.node(handle=f"n{i}"))[0] for i in range(4)]
    grants = await _lease_all(book, nodes)
    held: dict[str, set[int]] = {}
    for node, grant in grants:
        assert grant.window == WINDOW
        held.setdefault(node.node_id, set()).add(_slice_of(grant))
    assert all(len(slices) == 1 for slices in held.values()), held
    # Two steps x two slices x two copies, all leased: each node took its slice of both steps.
    assert len(grants) == 8
    assert sorted(len([g for n, g in grants if n.node_id == i]) for i in held) == [2, 2, 2, 2]


async def test_a_grant_given_back_unsent_unbinds_its_slice(book: Book) -> None:
    """A held poll's client left before its grant was sent (``return_unsent``): the node never
    saw the slice, so it is not bound to it; a node that holds a copy stays bound."""
    await _open(book, _window())
    node, _ = await book.node(handle="gone")
    first = await book.lease(node, T0 + 1)
    second = await book.lease(node, T0 + 1)  # the same slice of the other step
    assert first is not None
    assert second is not None
    assert _slice_of(first) == _slice_of(second)
    holders = "SELECT node_id, slice FROM hidden_slice_holders"
    await book.db.write(lambda conn: return_unsent(conn, first))
    assert await book.db.read(lambda c: c.execute(holders).fetchall()) == [
        (node.node_id, _slice_of(first))
    ]  # it still holds the other step's copy of that slice
    await book.db.write(lambda conn: return_unsent(conn, second))
    assert await book.db.read(lambda c: c.execute(holders).fetchall()) == []


async def test_the_steps_score_is_the_exact_combination_of_its_slices(book: Book) -> None:
    await _open(book, _window())
    nodes = [(await book.node(handle=f"n{i}"))[0] for i in range(4)]
    for node, grant in await _lease_all(book, nodes):
        status, reply = await book.post(
            node, grant.copy_id, _slice_answer(grant, _slice_of(grant)), T0 + 2
        )
        assert status == 200, reply
    for subject in STEPS:
        (step,) = await book.db.read(job_scores, subject)
        whole = summarise(np.array(LOSSES[0] + LOSSES[1], dtype=np.float32))
        assert (step.step, step.state, step.settled_how) == ("hidden", "settled", "agreement")
        assert step.result is not None
        assert step.result["objective"] == whole["loss"]
        assert step.result["fingerprint"] == whole["fingerprint"]
        assert step.result["losses"] == whole["losses"]
        assert step.subject == subject
        # the round view names the step by this id: the step route answers it, combined
        assert await book.db.read(job_view, step.job_id) == step.score_json()


async def test_an_unknown_combined_step_id_is_not_found(book: Book) -> None:
    await _open(book, _window())
    with pytest.raises(NotFound, match="no compute job hs0123456789abcdef"):
        await book.db.read(job_view, "hs0123456789abcdef")


async def test_a_slices_replaced_result_moves_the_steps_score(book: Book) -> None:
    """How a trusted re-score of one settled slice (issue 19 item 3) meets the shards: the
    step's score is read from its slices, so replacing a slice's result replaces the step's."""
    await _open(book, _window())
    nodes = [(await book.node(handle=f"n{i}"))[0] for i in range(4)]
    for node, grant in await _lease_all(book, nodes):
        await book.post(node, grant.copy_id, _slice_answer(grant, _slice_of(grant)), T0 + 2)
    trusted = summarise(np.array([0.25, 0.125], dtype=np.float32))
    stored = {"ok": True, "objective": trusted["loss"], "fingerprint": trusted["fingerprint"]}

    def replace(conn: sqlite3.Connection) -> None:
        (job_id,) = conn.execute(
            "SELECT job_id FROM hidden_slice_jobs WHERE slice = 1 AND step_subject LIKE '%h1%'"
        ).fetchone()
        conn.execute(
            "UPDATE compute_jobs SET result = ?, settled_how = 'fallback' WHERE job_id = ?",
            (json.dumps({**stored, "wall_ms": 1, "losses": trusted["losses"]}), job_id),
        )

    await book.db.write(replace)
    (step,) = await book.db.read(job_scores, STEPS[0])
    whole = summarise(np.array(LOSSES[0] + [0.25, 0.125], dtype=np.float32))
    assert step.result is not None
    assert (step.result["objective"], step.settled_how) == (whole["loss"], "fallback")
    (other,) = await book.db.read(job_scores, STEPS[1])
    assert other.settled_how == "agreement"


async def test_a_slice_answer_needs_its_losses_and_its_own_window(book: Book) -> None:
    await _open(book, _window())
    node, _ = await book.node(handle="n0")
    grant = await book.lease(node, T0 + 1)
    assert grant is not None
    k = _slice_of(grant)
    bare = _slice_answer(grant, k)
    del bare["result"]["losses"]
    assert "losses" in await _refused(book, node, grant, bare)
    stale = _slice_answer(grant, k, window="66" * 32)
    assert "stale hidden window" in await _refused(book, node, grant, stale, 409)
    forged = _slice_answer(grant, k)
    forged["result"]["loss"] = "00000000"
    assert "result.loss" in await _refused(book, node, grant, forged)
    assert (await book.post(node, grant.copy_id, _slice_answer(grant, k), T0 + 2))[0] == 200


async def _refused(
    book: Book, node: Node, grant: LeaseGrant, body: dict[str, Any], status: int = 400
) -> str:
    with pytest.raises(ProtocolError) as refused:
        await book.post(node, grant.copy_id, body, T0 + 2)
    assert refused.value.status == status, refused.value
    return refused.value.detail
