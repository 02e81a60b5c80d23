"""The soft scores of a round read from a real compute book (DESIGN.md section 9).

The jobs are made as production makes them: the scoring feed's transaction
(:func:`~hypertrain.coordinator.flows.scoring.enqueue_scoring`) enqueues each upload's steps,
and they settle through the book: two nodes that agree, two that fail alike, or the fallback
evaluator's answer. Checked: only a hidden step settled with an ok answer counts (not the
public step, not a failed answer, not a NaN, not a step still queued or waiting for the
fallback, not another run's or round's jobs); the scores are relative to the hotkeys given;
every hotkey given is answered.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path

import pytest

from hypertrain.compute import Answer, job_scores
from hypertrain.coordinator.flows.scoring import enqueue_scoring
from hypertrain.coordinator.flows.softscores import round_soft_scores
from hypertrain.coordinator.tables.scoring import Upload, scoring_subject
from hypertrain.protocol.f32 import f32_hex
from hypertrain.store import open_database
from nurseries import FixedClock
from tests.compute.support import FP, T0, Book, failed, good, inputs

RUN = "ab" * 32
OTHER_RUN = "cd" * 32
W = 3
WAIT = 20_000
T1 = T0 + 10 * WAIT
"""When the nodes' phase starts (the fallback phase is over by then)."""
NAN = "0000c07f"

Outcome = str | None
"""A step's answer in these tests: an f32 hex loss, or None for a crash."""


@pytest.fixture
async def book(tmp_path: Path) -> AsyncIterator[Book]:
    async with open_database(tmp_path / "state.db", wall_clock=FixedClock(0.0)) as db:
        yield Book(db)


async def _upload(
    book: Book, hotkey: str, now: int, steps: tuple[str, ...], *, run_id: str = RUN, w: int = W
) -> dict[str, str]:
    """Enqueue ``hotkey``'s scoring ``steps`` as the feed does; its job ids by step."""
    upload = Upload(run_id, w, hotkey, "ee" * 32)
    enqueue = partial(enqueue_scoring, now_ms=now, settings=book.settings)
    book.events += await book.db.write(enqueue, upload, {step: inputs() for step in steps})
    jobs = await book.db.read(job_scores, upload.subject)
    return {job.step: job.job_id for job in jobs}


async def _by_nodes(book: Book, outcomes: dict[str, Outcome]) -> None:
    """Two nodes lease every queued copy and answer each job's ``outcomes`` alike."""
    nodes = [(await book.node(T1, handle=name))[0] for name in ("alice", "bob")]
    leased = True
    while leased:
        leased = False
        for node in nodes:
            grant = await book.lease(node, T1)
            if grant is None:
                continue
            leased = True
            loss = outcomes[grant.job_id]
            body = failed(grant, "crash") if loss is None else good(grant, loss)
            await book.post(node, grant.copy_id, body, T1)


async def _by_fallback(book: Book, outcomes: dict[str, Outcome]) -> None:
    """The waiting steps go to the fallback; the trusted evaluator answers ``outcomes``."""
    await book.fallback(T0 + WAIT)
    for job_id, loss in outcomes.items():
        answer = Answer.failed("crash") if loss is None else Answer.success(loss, FP, wall_ms=7)
        await book.trusted(job_id, answer, T0 + WAIT + 1)


async def _settle_a_round(book: Book) -> None:
    """Round W of RUN (the hotkeys' letters say what they stand for in the test below)."""
    # The fallback's phase. B's public loss would be the round's best: it must not count.
    b = await _upload(book, "B", T0, ("public", "hidden"))
    d = await _upload(book, "D", T0, ("public", "hidden"))
    nan = await _upload(book, "N", T0, ("public", "hidden"))
    waiting = await _upload(book, "P", T0, ("public", "hidden"))
    elsewhere = [
        await _upload(book, "A", T0, ("hidden",), run_id=OTHER_RUN),
        await _upload(book, "A", T0, ("hidden",), w=W + 1),
    ]
    await _by_fallback(
        book,
        {
            b["public"]: f32_hex(1.0),
            b["hidden"]: f32_hex(3.0),
            d["public"]: f32_hex(2.5),
            d["hidden"]: None,
            nan["public"]: f32_hex(2.5),
            nan["hidden"]: NAN,
            waiting["public"]: f32_hex(2.5),
            **{jobs["hidden"]: f32_hex(0.5) for jobs in elsewhere},
        },
    )  # P's hidden step is left waiting for the trusted evaluator
    # The nodes' phase.
    a = await _upload(book, "A", T1, ("public", "hidden"))
    i = await _upload(book, "I", T1, ("public", "hidden"))
    c = await _upload(book, "C", T1, ("public", "hidden"))
    await _by_nodes(
        book,
        {
            a["public"]: f32_hex(9.0),
            a["hidden"]: f32_hex(2.0),
            i["public"]: f32_hex(0.1),
            i["hidden"]: f32_hex(2.25),
            c["public"]: f32_hex(2.5),
            c["hidden"]: None,
        },
    )
    # Still queued: E's daemon had no holdout (public step only), F's steps are not leased.
    await _upload(book, "E", T1, ("public",))
    await _upload(book, "F", T1, ("public", "hidden"))


def _hidden_states(conn: sqlite3.Connection) -> dict[str, tuple[str, str | None, bool | None]]:
    """``hotkey -> (state, how, ok)`` of round W's hidden steps."""
    out: dict[str, tuple[str, str | None, bool | None]] = {}
    for hotkey in "ABCDEFGINP":
        for job in job_scores(conn, scoring_subject(RUN, W, hotkey)):
            if job.step == "hidden":
                ok = None if job.result is None else bool(job.result["ok"])
                out[hotkey] = (job.state, job.settled_how, ok)
    return out


async def test_only_settled_ok_hidden_losses_of_the_round_count(book: Book) -> None:
    await _settle_a_round(book)
    assert await book.db.read(_hidden_states) == {
        "A": ("settled", "agreement", True),
        "B": ("settled", "fallback", True),
        "C": ("settled", "agreement", False),
        "D": ("settled", "fallback", False),
        "F": ("queued", None, None),
        "I": ("settled", "agreement", True),
        "N": ("settled", "fallback", True),
        "P": ("fallback", None, None),
    }
    hotkeys = ["P", "I", "G", "F", "E", "D", "C", "B", "A", "N"]
    scores = await book.db.read(round_soft_scores, RUN, W, hotkeys)
    # A 2.0 (best), I 2.25, B 3.0 (worst): I's is 10^6 * (3 - 2.25) / (3 - 2).
    expected = dict.fromkeys(hotkeys, 0) | {"A": 1_000_000, "I": 750_000, "B": 0}
    assert scores == expected
    assert list(scores) == hotkeys


async def test_scores_are_relative_to_the_hotkeys_given(book: Book) -> None:
    await _settle_a_round(book)
    read = book.db.read
    assert await read(round_soft_scores, RUN, W, ["B", "C", "I"]) == {"B": 0, "C": 0, "I": 10**6}
    assert await read(round_soft_scores, RUN, W, ["B", "G"]) == {"B": 10**6, "G": 0}
    assert await read(round_soft_scores, RUN, W, []) == {}
    # another round of the run: only A, settled by the fallback at 0.5
    assert await read(round_soft_scores, RUN, W + 1, ["A", "B"]) == {"A": 10**6, "B": 0}


async def test_a_round_without_settled_hidden_scores_is_all_0(book: Book) -> None:
    await _upload(book, "A", T0, ("public", "hidden"))
    scores = await book.db.read(round_soft_scores, RUN, W, ["A", "B"])
    assert scores == {"A": 0, "B": 0}
