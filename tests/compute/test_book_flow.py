"""The compute book: leasing, result posts, agreement, splits, credit (scenarios 2-3, 9-12,
15, 26, 28, 31)."""

from __future__ import annotations

import sqlite3

import pytest

from hypertrain.compute import Answer
from hypertrain.compute.ledger import pay
from hypertrain.compute.rows import get_copy
from hypertrain.protocol.errors import Conflict, Forbidden, Malformed, NotFound
from tests.compute.support import FP, LOSS, OTHER_FP, T0, Book, busy, failed, good


async def test_two_agreeing_nodes_settle_and_are_paid_once(book: Book) -> None:
    a, _ = await book.node(handle="alice")
    b, _ = await book.node(handle="bob")
    job = await book.enqueue()
    ga = await book.lease(a, T0 + 1)
    gb = await book.lease(b, T0 + 2)
    assert ga is not None
    assert gb is not None
    assert {ga.copy_id, gb.copy_id} == {f"{job}.1", f"{job}.2"}
    assert ga.inputs[0].name == "model.json"
    assert ga.deadline_ms == T0 + 1 + 90_000
    assert await book.lease(a, T0 + 3) is None
    status, reply = await book.post(a, ga.copy_id, good(ga), T0 + 10)
    assert (status, reply["status"], reply["verdict"]) == (200, "counted", None)
    status, reply = await book.post(b, gb.copy_id, good(gb), T0 + 20)
    assert (reply["verdict"], reply["job_state"]) == ("paid", "settled")
    settled = await book.job(job)
    assert (settled.state, settled.settled_how) == ("settled", "agreement")
    assert settled.result == Answer.success(LOSS, FP, wall_ms=7).to_json()
    for node in (a, b):
        row = await book.fresh(node)
        assert (row.credits, row.compute_credits, row.jobs_done) == (1, 1, 1)
    assert book.kinds() == [
        "register",
        "register",
        "queued",
        "lease",
        "lease",
        "result",
        "result",
        "settled",
        "accepted",
        "accepted",
    ]
    # Before settlement no event names a node.
    for kind, payload in book.events[:7]:
        assert "node" not in payload or kind == "register"


async def test_same_key_is_one_node_and_never_holds_both_copies(book: Book) -> None:
    """Scenario 2: the second lease of the same account gets another job or nothing."""
    a, key = await book.node()
    again, minted = (await book.node(key=key))[0], None
    assert again.node_id == a.node_id
    assert minted is None
    job1 = await book.enqueue()
    first = await book.lease(a, T0 + 1)
    assert first is not None
    assert first.job_id == job1
    assert await book.lease(again, T0 + 2) is None
    job2 = await book.enqueue(subject={"run_id": "r1", "w": 0, "hotkey": "h2"})
    second = await book.lease(again, T0 + 3)
    assert second is not None
    assert second.job_id == job2


async def test_fast_garbage_is_outvoted_by_a_third_node(book: Book) -> None:
    """Scenario 3 (and 4): split -> third copy to a third node -> garbage struck."""
    garbage, _ = await book.node()
    honest, _ = await book.node()
    third, _ = await book.node()
    job = await book.enqueue()
    gg = await book.lease(garbage, T0 + 1)
    gh = await book.lease(honest, T0 + 2)
    assert gg is not None
    assert gh is not None
    await book.post(garbage, gg.copy_id, good(gg, loss="deadbeef"), T0 + 3)
    await book.post(honest, gh.copy_id, good(gh), T0 + 30_000)
    assert book.kinds()[-1] == "split"
    assert (await book.job(job)).wait_deadline_ms == T0 + 30_000 + 20_000
    assert await book.lease(garbage, T0 + 30_001) is None
    assert await book.lease(honest, T0 + 30_001) is None
    g3 = await book.lease(third, T0 + 40_000)
    assert g3 is not None
    assert g3.copy_id == f"{job}.3"
    _status, reply = await book.post(third, g3.copy_id, good(g3), T0 + 41_000)
    assert reply["verdict"] == "paid"
    settled = await book.job(job)
    assert (settled.state, settled.settled_how) == ("settled", "third-copy")
    assert [(await book.fresh(n)).credits for n in (garbage, honest, third)] == [0, 1, 1]
    assert await book.strikes(garbage) == ["2024-01-01"]
    assert book.kinds().count("settled") == 1
    assert book.kinds().count("strike") == 1


async def test_all_three_differ_goes_to_the_fallback_and_is_judged(book: Book) -> None:
    nodes = [(await book.node())[0] for _ in range(3)]
    job = await book.enqueue()
    g = [await book.lease(n, T0 + 1) for n in nodes[:2]]
    assert g[0] is not None
    assert g[1] is not None
    await book.post(nodes[0], g[0].copy_id, good(g[0], loss="00000001"), T0 + 2)
    await book.post(nodes[1], g[1].copy_id, good(g[1], loss="00000002"), T0 + 3)
    g3 = await book.lease(nodes[2], T0 + 4)
    assert g3 is not None
    _status, reply = await book.post(nodes[2], g3.copy_id, good(g3, loss="00000003"), T0 + 5)
    assert reply["job_state"] == "fallback"
    assert [j.job_id for j in await book.fallback(T0 + 6)] == [job]
    events = await book.trusted(job, Answer.success("00000002", FP), T0 + 7)
    assert [k for k, _ in events] == ["settled", "strike", "accepted", "strike"]
    assert [(await book.fresh(n)).credits for n in nodes] == [0, 1, 0]
    assert await book.trusted(job, Answer.success("00000002", FP), T0 + 8) == []


async def test_a_guessed_copy_id_is_refused_without_any_change(book: Book) -> None:
    """Scenario 9."""
    holder, _ = await book.node()
    guesser, _ = await book.node()
    job = await book.enqueue()
    grant = await book.lease(holder, T0 + 1)
    assert grant is not None
    with pytest.raises(Forbidden, match="not leased to this node"):
        await book.post(guesser, grant.copy_id, good(grant), T0 + 2)
    with pytest.raises(Forbidden):
        await book.post(guesser, f"{job}.2", good(grant), T0 + 2)
    with pytest.raises(NotFound):
        await book.post(guesser, "nope.1", good(grant), T0 + 2)
    copy = await book.db.read(get_copy, grant.copy_id)
    assert (copy.state, copy.node_id, copy.answer) == ("leased", holder.node_id, None)
    assert await book.strikes(guesser) == []


async def test_a_cross_posted_body_is_refused_outright(book: Book) -> None:
    """Scenario 10: job A's body (with A's lease token) posted to job B."""
    node, _ = await book.node()
    await book.enqueue()
    await book.enqueue(subject={"run_id": "r1", "w": 0, "hotkey": "h2"})
    ga = await book.lease(node, T0 + 1)
    gb = await book.lease(node, T0 + 2)
    assert ga is not None
    assert gb is not None
    assert ga.job_id != gb.job_id
    with pytest.raises(Forbidden, match="lease token"):
        await book.post(node, gb.copy_id, good(ga), T0 + 3)
    assert (await book.db.read(get_copy, gb.copy_id)).answer is None
    with pytest.raises(Malformed):
        await book.post(node, gb.copy_id, {"ok": True}, T0 + 3)


async def test_duplicate_posts_are_idempotent_and_a_changed_answer_is_409(book: Book) -> None:
    """Scenarios 11 and 12."""
    a, _ = await book.node()
    b, _ = await book.node()
    await book.enqueue()
    ga, gb = await book.lease(a, T0 + 1), await book.lease(b, T0 + 1)
    assert ga is not None
    assert gb is not None
    first = await book.post(a, ga.copy_id, good(ga), T0 + 2)
    assert await book.post(a, ga.copy_id, good(ga), T0 + 3) == first
    with pytest.raises(Conflict):
        await book.post(a, ga.copy_id, good(ga, loss="00000000"), T0 + 4)
    settled = await book.post(b, gb.copy_id, good(gb), T0 + 5)
    events = len(book.events)
    assert await book.post(b, gb.copy_id, good(gb), T0 + 6) == settled
    assert await book.post(a, ga.copy_id, good(ga), T0 + 7) == first
    assert len(book.events) == events
    assert (await book.fresh(b)).credits == 1


async def test_replacement_and_third_copies_never_go_to_a_previous_holder(book: Book) -> None:
    """Scenario 15, including a holder whose lease expired."""
    a, _ = await book.node()
    b, _ = await book.node()
    c, _ = await book.node()
    job = await book.enqueue()
    ga, gb = await book.lease(a, T0), await book.lease(b, T0)
    assert ga is not None
    assert gb is not None
    await book.expire(T0 + 90_001)
    assert book.kinds()[-1] == "expired"
    assert await book.lease(a, T0 + 90_002) is None
    await book.post(b, gb.copy_id, good(gb), T0 + 90_003)
    assert await book.lease(b, T0 + 90_004) is None
    gc = await book.lease(c, T0 + 90_005)
    assert gc is not None
    assert gc.copy_id == f"{job}.3"
    holders = [x.node_id for x in await book.copies(job)]
    assert len([h for h in holders if h]) == len({h for h in holders if h})


async def test_the_store_refuses_two_copies_of_a_job_for_one_node(book: Book) -> None:
    a, _ = await book.node()
    job = await book.enqueue()
    await book.lease(a, T0)

    def force(conn: sqlite3.Connection) -> None:
        conn.execute(
            "UPDATE compute_copies SET node_id = ? WHERE copy_id = ?", (a.node_id, f"{job}.2")
        )

    with pytest.raises(sqlite3.IntegrityError):
        await book.db.write(force)


async def test_same_failure_class_with_different_text_agrees(book: Book) -> None:
    """Scenario 26 (crash: agreement; oom: inconclusive, paid when the fallback also OOMs)."""
    a, _ = await book.node()
    b, _ = await book.node()
    crash = await book.enqueue()
    ga, gb = await book.lease(a, T0), await book.lease(b, T0)
    assert ga is not None
    assert gb is not None
    assert ga.job_id == crash
    await book.post(a, ga.copy_id, failed(ga, "crash", "Traceback at 0x1"), T0 + 1)
    await book.post(b, gb.copy_id, failed(gb, "crash", "Traceback at 0x2"), T0 + 2)
    assert (await book.job(crash)).settled_how == "agreement"
    oom = await book.enqueue(subject={"run_id": "r1", "w": 0, "hotkey": "h2"})
    ga, gb = await book.lease(a, T0 + 3), await book.lease(b, T0 + 3)
    assert ga is not None
    assert gb is not None
    await book.post(a, ga.copy_id, failed(ga, "oom", "Killed"), T0 + 4)
    assert (await book.job(oom)).state == "fallback"
    await book.post(b, gb.copy_id, failed(gb, "oom", "MemoryError"), T0 + 5)
    await book.trusted(oom, Answer.failed("oom"), T0 + 6)
    assert [(await book.fresh(n)).credits for n in (a, b)] == [2, 2]


async def test_credit_exactly_once_and_nothing_for_struck_or_cancelled(book: Book) -> None:
    """Scenario 28."""
    a, _ = await book.node()
    b, _ = await book.node()
    job = await book.enqueue()
    ga = await book.lease(a, T0)
    assert ga is not None
    await book.post(a, ga.copy_id, good(ga, fp=OTHER_FP), T0 + 1)
    await book.fallback(T0 + 20_000)
    await book.trusted(job, Answer.success(LOSS, FP), T0 + 20_001)
    copies = await book.copies(job)
    assert [(c.state, c.verdict) for c in copies] == [("answered", "struck"), ("cancelled", None)]
    gb = await book.lease(b, T0 + 20_002)
    assert gb is None

    copy = await book.db.read(get_copy, ga.copy_id)
    replay = await book.db.write(lambda c: pay(c, copy, T0 + 9, book.settings))
    assert replay == [
        ("accepted", {"job": job, "copy": ga.copy_id, "node": a.node_id, "credit": 1})
    ]
    assert await book.db.write(lambda c: pay(c, copy, T0 + 9, book.settings)) == []
    row = await book.fresh(a)
    assert (row.credits, row.compute_credits, row.jobs_done) == (1, 1, 1)


async def test_busy_gives_the_copy_back_without_a_strike(book: Book) -> None:
    """Scenario 31."""
    a, _ = await book.node()
    b, _ = await book.node()
    c, _ = await book.node()
    job = await book.enqueue()
    ga = await book.lease(a, T0)
    assert ga is not None
    status, reply = await book.post(a, ga.copy_id, busy(ga), T0 + 1)
    assert (status, reply["status"]) == (200, "released")
    assert await book.post(a, ga.copy_id, busy(ga), T0 + 2) == (status, reply)
    assert await book.lease(a, T0 + 3) is None
    gb, gc = await book.lease(b, T0 + 4), await book.lease(c, T0 + 5)
    assert gb is not None
    assert gc is not None
    assert {gb.copy_id, gc.copy_id} == {f"{job}.2", f"{job}.3"}
    await book.post(b, gb.copy_id, good(gb), T0 + 6)
    await book.post(c, gc.copy_id, good(gc), T0 + 7)
    assert (await book.job(job)).settled_how == "agreement"
    assert await book.strikes(a) == []
    assert (await book.fresh(a)).credits == 0
