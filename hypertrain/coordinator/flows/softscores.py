"""The soft scores of a round's miners, read from the compute book (DESIGN.md section 9).

The ledger weighs each miner's tokens by its soft score when it finalizes a round (spec 8);
:func:`~hypertrain.rounds.softscore.soft_scores` holds the rule, this module finds its input:

- :func:`round_soft_scores` (read): the soft scores of round ``w``'s miners, as they stand in
  the book now, one ``jobs_of_subjects`` read of all the round's hotkeys (the subject is
  :func:`~hypertrain.coordinator.tables.scoring.scoring_subject`), their sliced hidden steps
  on one window (``one_round``: losses on two data sets are never compared);
- :func:`round_jobs` (read): the scoring jobs of round ``w``'s miners, that one read (the
  round view's and the dashboard's);
- :func:`scores_of_jobs`: the same from scoring jobs already read (the round view's);
- :func:`settled_hidden_objective`: which of a miner's jobs counts, and its objective.

A miner's hidden-trace score is settled when its ``delta-loss`` job of step ``hidden`` is in
state ``settled`` (by agreement, by a third copy or by the trusted fallback evaluator alike)
with an ``ok`` answer; the answer's objective is the f32 hex of the loss. Anything else is no
settled score, and a soft score of 0: no upload, no hidden step (a daemon without a
``holdout_dir`` enqueues only the public one), a job still queued or waiting for the fallback,
a job ``unscored``, a job settled with a failed answer (``ok`` false, a failure class), or a
loss that is not finite. The public step never counts.

Until the round is finalized a score can change, for every miner: a hidden step settling late
moves the round's best or worst loss. No trio here: a read transaction body.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping, Sequence

from hypertrain.compute import Answer, Job, jobs_of_subjects
from hypertrain.coordinator.tables.scoring import scoring_subject
from hypertrain.rounds.softscore import soft_scores
from hypertrain.scoring.registry import DELTA_LOSS

__all__ = ["round_jobs", "round_soft_scores", "scores_of_jobs", "settled_hidden_objective"]


def settled_hidden_objective(jobs: Iterable[Job]) -> str | None:
    """The f32 hex objective of the settled, ok hidden-trace ``delta-loss`` job among a
    miner's scoring ``jobs``; None when there is none (module doc)."""
    for job in jobs:
        if (job.challenge, job.step, job.state) != (DELTA_LOSS.id, "hidden", "settled"):
            continue
        if job.result is None:
            continue
        answer = Answer.from_json(job.result)
        if answer.ok and isinstance(answer.objective, str):
            return answer.objective
    return None


def scores_of_jobs(hotkeys: Iterable[str], jobs: Mapping[str, Sequence[Job]]) -> dict[str, int]:
    """The soft score of each of ``hotkeys`` from their scoring ``jobs`` (by hotkey; a hotkey
    without an entry has none), every hotkey answered."""
    return soft_scores({h: settled_hidden_objective(jobs.get(h, ())) for h in hotkeys})


def round_soft_scores(
    conn: sqlite3.Connection, run_id: str, w: int, hotkeys: Sequence[str]
) -> dict[str, int]:
    """The soft score in ppm (0..10^6) of each of ``hotkeys`` in round ``w`` of the run, as
    the book stands now (module doc); every hotkey given is in the answer.

    ``hotkeys`` are the round's committed miners: all of them at once, since each score is
    relative to the best and worst settled losses among those given. A miner with a hidden
    score always has a commit, so passing more hotkeys (the whole roster of the round) gives
    the committed ones the same scores and the others 0.
    """
    return scores_of_jobs(hotkeys, round_jobs(conn, run_id, w, hotkeys))


def round_jobs(
    conn: sqlite3.Connection, run_id: str, w: int, hotkeys: Sequence[str]
) -> dict[str, list[Job]]:
    """The scoring jobs of each of ``hotkeys`` in round ``w`` of the run, in one read; their
    sliced hidden steps are all read on one window (``one_round``), never two data sets."""
    subjects = [scoring_subject(run_id, w, h) for h in hotkeys]
    return dict(zip(hotkeys, jobs_of_subjects(conn, subjects, one_round=True), strict=True))
