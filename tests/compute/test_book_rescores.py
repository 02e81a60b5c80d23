"""Sampled trusted re-scores in the book (issue 19 item 3; spec/compute-network.md 6 scenario
1): a step settled by agreement is entered for the beacon's draw, drawn at most once, and a
trusted re-score that disagrees replaces the result, strikes the agreeing nodes and claws back
what they were paid."""

from __future__ import annotations

import sqlite3
from typing import Any

import attrs
import pytest

from hypertrain.compute import (
    Answer,
    Event,
    Node,
    decide_draw,
    due_draws,
    fix_draw_rounds,
    pending_rescores,
    rescore_state,
    settle_rescore,
)
from hypertrain.compute.ledger import claw_back, pardon, strike
from hypertrain.compute.rows import get_copy
from hypertrain.protocol.errors import Conflict, Malformed
from tests.compute.support import FP, LOSS, OTHER_FP, T0, Book, good, timed

WRONG = "40490fdb"
"""The value two colluding nodes agree on."""
TRUSTED = Answer.success(LOSS, FP, wall_ms=5)
RANDOMNESS = "00" * 32
"""Any round's randomness: at 1000 permille every step is drawn."""


async def _agreed(book: Book, loss: str, fp: str = FP) -> tuple[str, Node, Node]:
    """A step two fresh nodes settle by agreement on ``loss``: ``(job, a, b)``."""
    a, _ = await book.node(handle=f"a{len(book.secrets)}")
    b, _ = await book.node(handle=f"b{len(book.secrets)}")
    job = await book.enqueue(subject={"run_id": "r1", "w": 0, "hotkey": f"h{len(book.secrets)}"})
    ga, gb = await book.lease(a, T0 + 1), await book.lease(b, T0 + 2)
    assert ga is not None
    assert gb is not None
    await book.post(a, ga.copy_id, good(ga, loss, fp), T0 + 3)
    status, reply = await book.post(b, gb.copy_id, good(gb, loss, fp), T0 + 4)
    assert (status, reply["job_state"], reply["verdict"]) == (200, "settled", "paid")
    return job, a, b


async def _draw(book: Book, job: str, round_: int = 7, now: int = T0 + 10) -> list[Event]:
    """Fix the draw round at ``round_`` and decide it as soon as that round is stored."""

    def body(conn: sqlite3.Connection) -> list[Event]:
        fix_draw_rounds(conn, round_)
        assert due_draws(conn, round_ - 1) == []  # not before the round exists
        events: list[Event] = []
        for job_id, draw in due_draws(conn, round_):
            events += decide_draw(conn, job_id, draw, RANDOMNESS, now, book.settings)
        return events

    events = await book.db.write(body)
    book._keep(events)
    return events


async def _rescore(book: Book, job: str, trusted: Answer, now: int = T0 + 20) -> list[Event]:
    events = await book.db.write(
        lambda c: settle_rescore(c, job, trusted, now, settings=book.settings)
    )
    book._keep(events)
    return events


def _all_drawn(book: Book) -> Book:
    book.settings = attrs.evolve(book.settings, audit_permille=1000)
    return book


async def _clawbacks(book: Book) -> list[tuple[Any, ...]]:
    return await book.db.read(
        lambda c: c.execute(
            "SELECT copy_id, node_id, paid, clawed FROM compute_clawbacks ORDER BY copy_id"
        ).fetchall()
    )


async def test_colluders_agreeing_on_a_wrong_value_are_struck_and_clawed_back(
    book: Book,
) -> None:
    job, a, b = await _agreed(_all_drawn(book), WRONG)
    assert await book.db.read(rescore_state, job) == "waiting"
    drawn = await _draw(book, job)
    assert drawn == [
        ("audit", {"job": job, "challenge": "delta-loss", "change": "drawn", "round": 7})
    ]
    assert [j.job_id for j in await book.db.read(pending_rescores)] == [job]
    events = await _rescore(book, job, TRUSTED)
    settled = await book.job(job)
    assert (settled.state, settled.settled_how) == ("settled", "fallback")
    assert settled.result == TRUSTED.to_json()
    assert await book.db.read(rescore_state, job) == "replaced"
    assert await book.db.read(pending_rescores) == []
    for node in (a, b):
        row = await book.fresh(node)
        assert (row.credits, row.compute_credits, row.jobs_done) == (0, 0, 0)
        assert await book.strikes(node) == ["2024-01-01"]
    assert await _clawbacks(book) == [
        (f"{job}.1", a.node_id, 1, 1),
        (f"{job}.2", b.node_id, 1, 1),
    ]
    assert [kind for kind, _ in events] == ["audit", "strike", "strike"]
    audit = events[0][1]
    assert audit["change"] == "replaced"
    assert audit["struck"] == [a.node_id, b.node_id]
    assert audit["result"] == TRUSTED.to_json()
    assert audit["replaced"] == Answer.success(WRONG, FP, wall_ms=7).to_json()
    assert [c["clawed"] for c in audit["clawed_back"]] == [1, 1]
    assert {p["node"] for _, p in events[1:]} == {a.node_id, b.node_id}
    copies = [await book.db.read(get_copy, f"{job}.{i}") for i in (1, 2)]
    assert [c.verdict for c in copies] == ["struck", "struck"]
    # A replay (a crash after the write, the pool scoring again) changes nothing more.
    assert await _rescore(book, job, TRUSTED, T0 + 30) == []
    assert (await book.fresh(a)).credits == 0
    assert await book.strikes(a) == ["2024-01-01"]


async def test_an_honest_agreement_drawn_for_a_rescore_changes_nothing(book: Book) -> None:
    job, a, b = await _agreed(_all_drawn(book), LOSS)
    before = await book.job(job)
    assert len(await _draw(book, job)) == 1
    events = await _rescore(book, job, TRUSTED)
    assert events == [("audit", {"job": job, "challenge": "delta-loss", "change": "agreed"})]
    assert await book.job(job) == before
    assert await book.db.read(rescore_state, job) == "agreed"
    for node in (a, b):
        row = await book.fresh(node)
        assert (row.credits, row.compute_credits, row.jobs_done) == (1, 1, 1)
        assert await book.strikes(node) == []
    assert await _clawbacks(book) == []


async def test_an_inconclusive_rescore_changes_nothing(book: Book) -> None:
    job, a, _ = await _agreed(_all_drawn(book), WRONG)
    await _draw(book, job)
    events = await _rescore(book, job, Answer.failed("oom", error="MemoryError"))
    assert [p["change"] for _, p in events] == ["inconclusive"]
    assert (await book.job(job)).result == Answer.success(WRONG, FP, wall_ms=7).to_json()
    assert (await book.fresh(a)).credits == 1
    assert await book.strikes(a) == []


async def test_a_step_is_drawn_at_most_once_and_only_when_drawn_is_rescored(
    book: Book,
) -> None:
    job, _, _ = await _agreed(_all_drawn(book), LOSS)
    with pytest.raises(Conflict):
        await _rescore(book, job, TRUSTED)  # waiting: not drawn yet
    assert len(await _draw(book, job)) == 1
    again = await book.db.write(
        lambda c: decide_draw(c, job, 8, RANDOMNESS, T0 + 11, book.settings)
    )
    assert again == []
    assert await book.db.read(lambda c: due_draws(c, 10**9)) == []
    with pytest.raises(Malformed):
        await _rescore(book, job, Answer.busy_answer())


async def test_a_skipped_step_is_never_rescored(book: Book) -> None:
    book.settings = attrs.evolve(book.settings, audit_permille=1)
    job, _, _ = await _agreed(book, LOSS)
    book.settings = attrs.evolve(book.settings, audit_permille=0)
    assert await _draw(book, job) == []
    assert await book.db.read(rescore_state, job) == "skipped"
    assert await book.db.read(pending_rescores) == []


async def test_node_settled_steps_are_entered_and_none_at_zero_permille(book: Book) -> None:
    book.settings = attrs.evolve(book.settings, audit_permille=0)
    quiet, _, _ = await _agreed(book, LOSS)
    assert await book.db.read(rescore_state, quiet) is None
    book.settings = attrs.evolve(book.settings, audit_permille=1000)
    entered, _, _ = await _agreed(book, LOSS)
    assert await book.db.read(rescore_state, entered) == "waiting"
    # A split settled by a third copy is not entered (nor is a fallback-settled step).
    a, _ = await book.node(handle="x1")
    b, _ = await book.node(handle="x2")
    c, _ = await book.node(handle="x3")
    job = await book.enqueue(subject={"run_id": "r1", "w": 1, "hotkey": "h"})
    ga, gb = await book.lease(a, T0 + 1), await book.lease(b, T0 + 2)
    assert ga is not None
    assert gb is not None
    await book.post(a, ga.copy_id, good(ga), T0 + 3)
    await book.post(b, gb.copy_id, good(gb, fp=OTHER_FP), T0 + 4)
    gc = await book.lease(c, T0 + 5)
    assert gc is not None
    await book.post(c, gc.copy_id, good(gc), T0 + 6)
    assert (await book.job(job)).settled_how == "third-copy"
    assert await book.db.read(rescore_state, job) == "waiting"  # nodes settled it: entered


async def test_colluders_winning_a_split_by_a_third_copy_are_struck_and_clawed_back(
    book: Book,
) -> None:
    """An honest node answers the trusted value, a colluder another; a second colluder takes
    the third copy and sides with the first: the step settles on the wrong value and the
    honest node is struck. The sampled re-score catches the pair as it catches an agreement."""
    _all_drawn(book)
    honest, _ = await book.node(handle="honest")
    a, _ = await book.node(handle="colluder-a")
    c, _ = await book.node(handle="colluder-c")
    job = await book.enqueue(subject={"run_id": "r1", "w": 2, "hotkey": "h"})
    gh, ga = await book.lease(honest, T0 + 1), await book.lease(a, T0 + 2)
    assert gh is not None
    assert ga is not None
    await book.post(honest, gh.copy_id, good(gh, LOSS), T0 + 3)
    await book.post(a, ga.copy_id, good(ga, WRONG), T0 + 4)
    gc = await book.lease(c, T0 + 5)
    assert gc is not None
    await book.post(c, gc.copy_id, good(gc, WRONG), T0 + 6)
    assert (await book.job(job)).settled_how == "third-copy"
    await _draw(book, job)
    events = await _rescore(book, job, TRUSTED)
    assert await book.db.read(rescore_state, job) == "replaced"
    assert events[0][1]["struck"] == [a.node_id, c.node_id]
    for node in (a, c):
        assert ((await book.fresh(node)).compute_credits, await book.strikes(node)) == (
            0,
            ["2024-01-01"],
        )
    # The honest node was right all along: its strike is lifted and its copy paid.
    assert events[0][1]["pardoned"] == [honest.node_id]
    fresh = await book.fresh(honest)
    assert (fresh.compute_credits, fresh.jobs_done, await book.strikes(honest)) == (1, 1, [])
    assert ("accepted", honest.node_id) in [(k, p.get("node")) for k, p in events]


async def test_a_pardon_lifts_the_strike_and_the_disable_it_completed(book: Book) -> None:
    x, _ = await book.node(handle="x")
    copies = []
    for w in range(3):
        await book.enqueue(subject={"run_id": "r1", "w": 10 + w, "hotkey": "h"})
        grant = await book.lease(x, T0 + 1)
        assert grant is not None
        copies.append(await book.db.read(get_copy, grant.copy_id))
    for copy in copies:
        await book.db.write(lambda c, copy=copy: strike(c, copy, T0 + 2, book.settings))
    assert (await book.fresh(x)).disabled(T0 + 3)  # the day's third strike
    events = await book.db.write(lambda c: pardon(c, copies[0], T0 + 4, book.settings))
    fresh = await book.fresh(x)
    assert not fresh.disabled(T0 + 5)
    assert (fresh.compute_credits, len(await book.strikes(x))) == (1, 2)
    assert [kind for kind, _ in events] == ["accepted"]
    assert await book.db.write(lambda c: pardon(c, copies[0], T0 + 6, book.settings)) == []


async def test_an_answer_given_on_probation_and_clawed_back_is_owed_again(book: Book) -> None:
    """A key on probation earns nothing for its first agreed answers but counts them down; one
    a re-score shows wrong is owed again, so wrong answers never end a probation."""
    _all_drawn(book)
    p, _ = await book.node(handle="on-probation")
    await book.db.write(
        lambda conn: conn.execute(
            "UPDATE compute_nodes SET probation = 2 WHERE node_id = ?", (p.node_id,)
        )
    )
    b, _ = await book.node(handle="established")
    job = await book.enqueue(subject={"run_id": "r1", "w": 3, "hotkey": "h"})
    gp, gb = await book.lease(p, T0 + 1), await book.lease(b, T0 + 2)
    assert gp is not None
    assert gb is not None
    await book.post(p, gp.copy_id, good(gp, WRONG), T0 + 3)
    await book.post(b, gb.copy_id, good(gb, WRONG), T0 + 4)
    assert ((await book.fresh(p)).probation, (await book.fresh(p)).credits) == (1, 0)
    await _draw(book, job)
    await _rescore(book, job, TRUSTED)
    assert await book.db.read(rescore_state, job) == "replaced"
    fresh = await book.fresh(p)
    assert (fresh.probation, fresh.credits, fresh.jobs_done) == (2, 0, 0)


async def test_a_timing_step_settled_by_agreement_is_never_entered(book: Book) -> None:
    """The trusted evaluator would time the daemon's hardware, not the nodes' class: a node
    benchmark two nodes agreed on is not re-scored (it disagreed, and clawed both back)."""
    _all_drawn(book)
    a, _ = await book.node(caps=["step-throughput"], handle="t1")
    b, _ = await book.node(caps=["step-throughput"], handle="t2")
    job = await book.enqueue(challenge="step-throughput")
    ga, gb = await book.lease(a, T0 + 1), await book.lease(b, T0 + 2)
    assert ga is not None
    assert gb is not None
    await book.post(a, ga.copy_id, timed(ga, 100.0), T0 + 3)
    await book.post(b, gb.copy_id, timed(gb, 110.0), T0 + 4)
    assert (await book.job(job)).settled_how == "agreement"
    assert await book.db.read(rescore_state, job) is None


async def test_a_clawback_never_makes_a_balance_negative(book: Book) -> None:
    job, a, _ = await _agreed(book, LOSS)
    await book.db.write(
        lambda c: c.execute(
            "UPDATE compute_nodes SET credits = 0, compute_credits = 0 WHERE node_id = ?",
            (a.node_id,),
        )
    )
    copy = await book.db.read(get_copy, f"{job}.1")
    taken = await book.db.write(lambda c: claw_back(c, copy, T0 + 9))
    assert taken == {"node": a.node_id, "copy": copy.copy_id, "paid": 1, "clawed": 0}
    row = await book.fresh(a)
    assert (row.credits, row.compute_credits) == (0, 0)
    assert await book.db.write(lambda c: claw_back(c, copy, T0 + 10)) is None  # once
