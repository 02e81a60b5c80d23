"""The beacon's side of the sampled trusted re-scores (issue 19 item 3), one transaction each.

- :func:`draw_rescores` (the beacon observer's write, :mod:`..services.rescores`): the steps
  settled by agreement since the last observer get their draw round
  (:func:`~hypertrain.compute.draws.draw_round` of the latest stored round and ``due``, the
  round the wall clock has made due), then every waiting step whose draw round is stored is
  decided by the randomness of the first stored round at or after it
  (:func:`~hypertrain.compute.decide_draw`). Reads are bounded by the work at hand (partial
  indexes of waiting and unfixed rows); a restarted daemon decides at its first round whatever
  it missed, since the rows and their rounds are in the store.
- :func:`record_rescore` (the fallback pool's write): the trusted re-score of a drawn step
  (:func:`~hypertrain.compute.settle_rescore`), with what already consumed the step's settled
  result. The consumers of a settled scoring step are the round view (read live) and the
  soft scores a round's Finalize weighs its miners by (:mod:`.softscores`, read from the book
  when the round is finalised). A result replaced before its round is final simply feeds the
  Finalize; when the round is already final (its Finalize signed, its ledger entries queued),
  nothing is rewritten: the re-score records ``consumed`` ("round w of run r was already
  final ...") and reports it in its ``audit`` event. No merge reads scores (the aggregator's
  merge uses the deltas), so a merged round needs nothing else.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from hypertrain.beacon.ingest import latest_round
from hypertrain.compute import (
    Answer,
    ComputeSettings,
    Event,
    decide_draw,
    draw_round,
    due_draws,
    fix_draw_rounds,
    settle_rescore,
)
from hypertrain.compute.rows import get_job
from hypertrain.coordinator.tables.finality import get_final

__all__ = ["draw_rescores", "record_rescore"]


def _first_stored(conn: sqlite3.Connection, round_: int) -> tuple[int, str] | None:
    row = conn.execute(
        "SELECT round, randomness FROM beacon WHERE round >= ? ORDER BY round LIMIT 1",
        (round_,),
    ).fetchone()
    return None if row is None else (int(row[0]), str(row[1]))


def draw_rescores(
    conn: sqlite3.Connection, due: int, now_ms: int, *, settings: ComputeSettings
) -> list[Event]:
    """Fix the new steps' draw round, decide the due ones (module doc)."""
    latest = latest_round(conn)
    fix_draw_rounds(conn, draw_round(latest, due))
    events: list[Event] = []
    for job_id, draw in due_draws(conn, latest):
        found = _first_stored(conn, draw)
        if found is None:  # not stored yet (due_draws only gives rounds up to the latest)
            continue
        beacon_round, randomness = found
        events += decide_draw(conn, job_id, beacon_round, randomness, now_ms, settings)
    return events


def _consumed(conn: sqlite3.Connection, subject: dict[str, Any]) -> str | None:
    """What already used a scoring step's settled result and cannot be rewritten: its round's
    Finalize (module doc); None for any other subject or a round not final yet."""
    run_id, w = subject.get("run_id"), subject.get("w")
    if not isinstance(run_id, str) or not isinstance(w, int):
        return None
    final = get_final(conn, run_id, w)
    if final is None:
        return None
    return (
        f"round {w} of run {run_id} was already final (D={final.final_round}): its Finalize"
        " and ledger entries stand"
    )


def record_rescore(
    conn: sqlite3.Connection,
    job_id: str,
    trusted: Answer,
    now_ms: int,
    *,
    settings: ComputeSettings,
) -> list[Event]:
    """The trusted re-score of a drawn step (module doc)."""
    consumed = _consumed(conn, get_job(conn, job_id).subject)
    return settle_rescore(conn, job_id, trusted, now_ms, settings=settings, consumed=consumed)
