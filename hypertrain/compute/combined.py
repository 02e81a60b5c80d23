"""A sliced hidden step's score, combined from its slice jobs when it is read.

:func:`combined_steps` gives, for each step subject, one :class:`~hypertrain.compute.model.Job`
of step ``hidden`` standing for its slice jobs (:mod:`hypertrain.compute.slices`), so that the
round view, the soft scores and the aggregator read a sliced step as they read an unsliced
one (:func:`~hypertrain.compute.jobs.job_scores` adds it to the subject's jobs). Rules:

- Window: the newest window (highest epoch) of the step whose slice jobs are all ``settled``;
  while there is none, the newest window. A step re-scored after a rotation keeps its old
  window's score until the new window's slices have all settled. A round's steps read
  together (``one_round``) share one window: :func:`round_window`.
- State: ``unscored`` when a slice is (reason: the first such slice's), else ``settled`` when
  all are, else ``fallback`` when one waits for the fallback, else ``queued``. How: the
  weakest of the slices' (``fallback`` < ``third-copy`` < ``agreement``).
- Result (settled only): every slice ok -> :func:`hypertrain.scoring.slices.combine` of their
  ``losses`` in slice order (the unsliced loss and fingerprint, bit for bit); else the first
  failed slice's answer (its failure class).
- Its ``job_id`` is ``hs`` + 16 hex of sha256(step subject | window) (:func:`step_id_of`,
  kept with each slice job): the book's transactions act on the slice jobs, never on it, and
  :func:`combined_step` reads the step back by it (``GET /v1/compute/steps/hs...``).

The slices' results are read as they stand, so a slice whose settled result is replaced (a
sampled trusted re-score, issue 19 item 3) changes the combined score with it.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

from hypertrain.compute.answers import Answer
from hypertrain.compute.model import Job
from hypertrain.compute.rows import JOB_COLUMNS_J, job_from_row
from hypertrain.compute.wire import InputFile
from hypertrain.scoring.slices import combine

__all__ = ["combine_slices", "combined_step", "combined_steps", "round_window", "step_id_of"]

_SUBJECTS_PER_QUERY: Final = 500
_HOW_ORDER: Final = ("fallback", "third-copy", "agreement")


def _combined_result(jobs: Sequence[Job]) -> dict[str, Any]:
    answers = [Answer.from_json(j.result or {"ok": False, "class": "crash"}) for j in jobs]
    for answer in answers:
        if not answer.ok:
            return answer.to_json()
    parts = [a.losses for a in answers]
    if any(p is None for p in parts):
        missing = Answer.failed("crash", error="a slice has no per-sequence losses")
        return missing.to_json()
    combined = combine([p for p in parts if p is not None])
    return Answer.success(
        combined["loss"], combined["fingerprint"], losses=combined["losses"]
    ).to_json()


def step_id_of(step_subject: str, window: str) -> str:
    """The combined step's id: ``hs`` + 16 hex of sha256(canonical subject | window)."""
    return "hs" + hashlib.sha256(f"{step_subject}|{window}".encode()).hexdigest()[:16]


def combined_step(conn: sqlite3.Connection, step_id: str) -> Job | None:
    """The combined step ``step_id`` (:func:`step_id_of`) on its own window; None: no such."""
    rows = conn.execute(
        f"SELECT s.step_subject, w.window, w.slices, {JOB_COLUMNS_J}"
        " FROM hidden_slice_jobs s JOIN hidden_windows w USING (window)"
        " JOIN compute_jobs j USING (job_id)"
        " WHERE s.step_id = ? ORDER BY s.slice",
        (step_id,),
    ).fetchall()
    if not rows:
        return None
    step, window, slices = rows[0][0], rows[0][1], rows[0][2]
    size = sum(int(f["size"]) for f in json.loads(slices))
    return combine_slices(step, window, size, [job_from_row(tuple(r[3:])) for r in rows])


def combine_slices(step_subject: str, window: str, size: int, jobs: Sequence[Job]) -> Job:
    """The step's :class:`Job` from its slice ``jobs`` on ``window`` in slice order (module
    doc); ``size`` is the whole window trace's size."""
    first = jobs[0]
    state: Literal["queued", "settled", "fallback", "unscored"] = "queued"
    reason = None
    unscored = [j for j in jobs if j.state == "unscored"]
    if unscored:
        state, reason = "unscored", unscored[0].reason
    elif all(j.state == "settled" for j in jobs):
        state = "settled"
    elif any(j.state == "fallback" for j in jobs):
        state = "fallback"
    how = None
    if state == "settled":
        how = next(h for h in _HOW_ORDER if any(j.settled_how == h for j in jobs))
    inputs = tuple(
        InputFile(i.name, window, size) if i.name == "trace.u16" else i for i in first.inputs
    )
    settled = [j.settled_ms for j in jobs if j.settled_ms is not None]
    return Job(
        job_id=step_id_of(step_subject, window),
        challenge=first.challenge,
        version=first.version,
        subject=json.loads(step_subject),
        step="hidden",
        inputs=inputs,
        created_ms=min(j.created_ms for j in jobs),
        wait_ms=first.wait_ms,
        wait_deadline_ms=max(j.wait_deadline_ms for j in jobs),
        state=state,
        settled_how=how,  # type: ignore[arg-type]
        reason=reason,
        result=_combined_result(jobs) if state == "settled" else None,
        settled_ms=max(settled) if state in ("settled", "unscored") and settled else None,
        expiries=sum(j.expiries for j in jobs),
    )


def combined_steps(
    conn: sqlite3.Connection, subjects: Sequence[str], *, one_round: bool = False
) -> dict[str, Job]:
    """The combined hidden step of each canonical subject of ``subjects`` that has slice jobs
    (module doc); subjects without any are absent. ``one_round``: the subjects are one round's
    miners, whose steps are all read on one window (:func:`round_window`)."""
    groups: dict[str, dict[tuple[int, str], list[Job]]] = {}
    sizes: dict[str, int] = {}
    for start in range(0, len(subjects), _SUBJECTS_PER_QUERY):
        chunk = list(subjects[start : start + _SUBJECTS_PER_QUERY])
        rows = conn.execute(
            f"SELECT s.step_subject, w.epoch, w.window, w.slices, {JOB_COLUMNS_J}"
            " FROM hidden_slice_jobs s JOIN hidden_windows w USING (window)"
            " JOIN compute_jobs j USING (job_id)"
            f" WHERE s.step_subject IN ({', '.join('?' * len(chunk))})"
            " ORDER BY s.step_subject, w.epoch, s.slice",
            chunk,
        )
        for step, epoch, window, slices, *job_row in rows:
            groups.setdefault(step, {}).setdefault((epoch, window), []).append(
                job_from_row(tuple(job_row))
            )
            if window not in sizes:
                sizes[window] = sum(int(f["size"]) for f in json.loads(slices))
    common = round_window(groups) if one_round else None
    found: dict[str, Job] = {}
    for step, by_window in groups.items():
        if common is not None:
            window, jobs = common[1], by_window[common]
        else:
            ordered = sorted(by_window.items(), reverse=True)
            complete = [(k, jobs) for k, jobs in ordered if all(j.state == "settled" for j in jobs)]
            (_, window), jobs = (complete or ordered)[0]
        found[step] = combine_slices(step, window, sizes[window], jobs)
    return found


def round_window(
    groups: Mapping[str, Mapping[tuple[int, str], Sequence[Job]]],
) -> tuple[int, str] | None:
    """The one window ``(epoch, window)`` a round's sliced hidden steps are read on, from each
    step's slice jobs by window: the newest window every step has with all its slices
    ``settled``, else the oldest window they all have (the round's own, before a rotation
    re-scored them), so that the round's losses, compared with one another, come from one
    data set. None: no window is common to all (each step then reads its own)."""
    keys = [set(by_window) for by_window in groups.values()]
    shared = sorted(set.intersection(*keys)) if keys else []
    if not shared:
        return None
    settled = [
        key
        for key in shared
        if all(j.state == "settled" for by_window in groups.values() for j in by_window[key])
    ]
    return settled[-1] if settled else shared[0]
