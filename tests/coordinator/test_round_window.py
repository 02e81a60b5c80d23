"""A round's sliced hidden steps are read on one window (issue 19, the rotation's re-scores).

After a rotation the scoring feed enqueues the previous round's hidden steps again on the new
window. Soft scores compare the round's miners' losses with one another, so every miner's loss
must come from the same data set: the newest window on which all of the round's hidden steps
have settled, else the round's own (oldest) window. Checked on a round of two miners whose
steps were re-queued on window 1: while only h1's new slices have settled, the soft scores and
the round view's hidden losses all come from window 0; once h2's settle too, all from window 1.
The slices settle as a node pair's agreement leaves them (state, how and an ok answer with its
per-sequence losses), written straight into the book.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from hypertrain.compute import Answer, Event, canonical_subject
from hypertrain.compute.slices import Window, enqueue_slices, record_window
from hypertrain.compute.wire import InputFile
from hypertrain.coordinator.flows.softscores import round_jobs, round_soft_scores
from hypertrain.coordinator.tables.scoring import scoring_subject
from hypertrain.scoring.slices import combine, summarise
from hypertrain.store import open_database
from nurseries import FixedClock
from tests.compute.support import T0, Book, inputs

RUN = "ab" * 32
W = 3
HOTKEYS = ("h1", "h2")
LOSSES = {(0, "h1"): 1.0, (0, "h2"): 2.0, (1, "h1"): 4.0, (1, "h2"): 3.0}
"""Each miner's per-sequence loss on each window (epoch): h1 is the better on window 0, h2 on
window 1, and h1's window 1 against h2's window 0 would make h2 the better again."""


@pytest.fixture
async def book(tmp_path: Path) -> AsyncIterator[Book]:
    async with open_database(tmp_path / "state.db", wall_clock=FixedClock(0.0)) as db:
        yield Book(db)


def _window(epoch: int) -> Window:
    files = tuple(InputFile("trace.u16", f"{epoch}{k}" * 32, 10) for k in range(2))
    return Window(
        window=f"{epoch + 7}" * 64,
        run_id=RUN,
        epoch=epoch,
        first_sample=epoch * 5,
        rows=5,
        slices=files,
    )


async def _rotated(book: Book) -> None:
    """Round ``W``'s two hidden steps on window 0, then again on window 1."""

    def body(conn: sqlite3.Connection) -> list[Event]:
        events: list[Event] = []
        for epoch in (0, 1):
            stored = record_window(conn, _window(epoch), T0 + epoch)
            for hotkey in HOTKEYS:
                subject = scoring_subject(RUN, W, hotkey)
                events += enqueue_slices(
                    conn, subject=subject, window=stored, inputs=inputs(), now_ms=T0, wait_ms=1
                )
        return events

    book._keep(await book.db.write(body))


def _per_slice(epoch: int, hotkey: str) -> list[str]:
    """The ``losses`` hex of each of the step's two slices (two sequences each)."""
    loss = LOSSES[(epoch, hotkey)]
    return [summarise(np.full(2, loss + k / 8, dtype=np.float32))["losses"] for k in range(2)]


async def _settle(book: Book, epoch: int, hotkey: str) -> None:
    def body(conn: sqlite3.Connection) -> None:
        subject = canonical_subject(scoring_subject(RUN, W, hotkey))
        rows = conn.execute(
            "SELECT s.job_id FROM hidden_slice_jobs s JOIN hidden_windows w USING (window)"
            " WHERE s.step_subject = ? AND w.epoch = ? ORDER BY s.slice",
            (subject, epoch),
        ).fetchall()
        assert len(rows) == 2
        for (job_id,), losses in zip(rows, _per_slice(epoch, hotkey), strict=True):
            part = summarise(np.frombuffer(bytes.fromhex(losses), dtype="<f4"))
            answer = Answer.success(part["loss"], part["fingerprint"], losses=losses)
            conn.execute(
                "UPDATE compute_jobs SET state = 'settled', settled_how = 'agreement',"
                " settled_ms = ?, result = ? WHERE job_id = ?",
                (T0 + 1, json.dumps(answer.to_json()), job_id),
            )

    await book.db.write(body)


async def _read(book: Book) -> tuple[dict[str, int], dict[str, str]]:
    """The round's soft scores and each miner's hidden loss as the round view reads it."""
    scores = await book.db.read(round_soft_scores, RUN, W, list(HOTKEYS))
    jobs = await book.db.read(round_jobs, RUN, W, list(HOTKEYS))
    losses = {}
    for hotkey, found in jobs.items():
        (step,) = [j for j in found if j.step == "hidden"]
        assert step.state == "settled"
        assert step.result is not None
        losses[hotkey] = step.result["objective"]
    return scores, losses


def _on(epoch: int) -> dict[str, str]:
    return {h: combine(_per_slice(epoch, h))["loss"] for h in HOTKEYS}


async def test_a_rounds_hidden_losses_all_come_from_one_window(book: Book) -> None:
    await _rotated(book)
    for hotkey in HOTKEYS:
        await _settle(book, 0, hotkey)
    assert await _read(book) == ({"h1": 1_000_000, "h2": 0}, _on(0))
    await _settle(book, 1, "h1")  # h2's window-1 slices are still queued
    assert await _read(book) == ({"h1": 1_000_000, "h2": 0}, _on(0))
    await _settle(book, 1, "h2")
    assert await _read(book) == ({"h1": 0, "h2": 1_000_000}, _on(1))
