"""Scoring steps entering and leaving the compute book: enqueue and the settled scores.

Promises:

- :func:`enqueue_step` makes one job per ``(subject, step, challenge)`` with two queued copies
  and wait deadline ``now + wait_ms`` (timing challenges: ``now + wait_ms *
  timing_wait_factor``, the time after which the step ends unscored), and returns its
  ``queued`` event (``{job, challenge, trace}``). It is idempotent: a second enqueue of the same
  step returns the existing job and publishes nothing. The subject is any JSON object (e.g.
  ``{"run_id", "w", "hotkey"}``), stored canonically (sorted keys). Inputs must name exactly
  the challenge's input files, in order, each ``{name, sha256, size}`` (stored as
  :class:`~hypertrain.compute.wire.InputFile`). Unknown challenge: ``NotFound``; a bad subject,
  step or input list: ``Malformed``.
- :func:`job_scores` lists the jobs of a subject with their state and settled result, for the
  round view and the aggregator; a hidden step cut into slices (:mod:`hypertrain.compute.
  slices`) is listed as one job combined from them (:mod:`hypertrain.compute.combined`).
  :func:`pending_fallbacks` lists the jobs waiting for the
  trusted evaluator (the fallback service's work list, also after a restart).
"""

from __future__ import annotations

import json
import secrets
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any, Final

from hypertrain.compute.combined import combined_steps
from hypertrain.compute.model import DEFAULT_SETTINGS, ComputeSettings, Event, Job
from hypertrain.compute.rows import JOB_COLUMNS, job_from_row
from hypertrain.compute.wire import InputFile
from hypertrain.protocol.converter import structure, unstructure
from hypertrain.protocol.errors import Malformed, NotFound
from hypertrain.scoring.registry import Challenge, UnknownChallenge, get_challenge

__all__ = ["canonical_subject", "enqueue_step", "job_scores", "pending_fallbacks", "queued_event"]

_FIRST_COPIES: Final = 2


def canonical_subject(subject: object) -> str:
    """The stored form of a subject: JSON with sorted keys and no spaces."""
    if not isinstance(subject, Mapping) or not subject:
        raise Malformed("subject: a non-empty JSON object")
    try:
        return json.dumps(dict(subject), sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError):
        raise Malformed("subject: only JSON values") from None


def _inputs(challenge: Challenge, inputs: object) -> tuple[InputFile, ...]:
    if not isinstance(inputs, Sequence) or isinstance(inputs, str):
        raise Malformed("inputs: a list of {name, sha256, size}")
    files = tuple(
        structure(InputFile, dict(item) if isinstance(item, Mapping) else item) for item in inputs
    )
    if tuple(f.name for f in files) != challenge.inputs:
        raise Malformed(f"inputs: {challenge.id} reads exactly {list(challenge.inputs)}")
    return files


def enqueue_step(
    conn: sqlite3.Connection,
    *,
    challenge_id: str,
    subject: Mapping[str, Any],
    step: str,
    inputs: Sequence[Mapping[str, Any]],
    now_ms: int,
    wait_ms: int,
    settings: ComputeSettings = DEFAULT_SETTINGS,
) -> tuple[str, list[Event]]:
    """Enqueue one scoring step (module doc): ``(job id, events)``."""
    try:
        challenge = get_challenge(challenge_id)
    except UnknownChallenge:
        raise NotFound(f"no challenge {challenge_id}") from None
    if step not in ("public", "hidden"):
        raise Malformed("step: 'public' or 'hidden'")
    if wait_ms < 0:
        raise Malformed("wait_ms: must be >= 0")
    subject_text = canonical_subject(subject)
    files = _inputs(challenge, inputs)
    row = conn.execute(
        "SELECT job_id FROM compute_jobs WHERE subject = ? AND step = ? AND challenge = ?",
        (subject_text, step, challenge_id),
    ).fetchone()
    if row is not None:
        return str(row[0]), []
    factor = settings.timing_wait_factor if challenge.kind == "timing" else 1
    job_id = "j" + secrets.token_hex(8)
    conn.execute(
        "INSERT INTO compute_jobs (job_id, challenge, version, subject, step, inputs,"
        " created_ms, wait_ms, wait_deadline_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            job_id,
            challenge_id,
            challenge.version,
            subject_text,
            step,
            json.dumps([unstructure(f) for f in files]),
            now_ms,
            wait_ms,
            now_ms + wait_ms * factor,
        ),
    )
    for seq in range(1, _FIRST_COPIES + 1):
        conn.execute(
            "INSERT INTO compute_copies (copy_id, job_id, seq, state, queued_ms)"
            " VALUES (?, ?, ?, 'queued', ?)",
            (f"{job_id}.{seq}", job_id, seq, now_ms),
        )
    return job_id, [queued_event(job_id, challenge_id, step, _FIRST_COPIES)]


def queued_event(job_id: str, challenge: str, step: str, copies: int) -> Event:
    """The ``queued`` event of ``copies`` copies of a job made leasable (the hub wakes that
    many polls: :func:`hypertrain.coordinator.computehub.new_copies`); its one builder."""
    return "queued", {"job": job_id, "challenge": challenge, "trace": step, "copies": copies}


def job_scores(conn: sqlite3.Connection, subject: Mapping[str, Any]) -> list[Job]:
    """Every job of ``subject`` (any state), by step then challenge; a sliced hidden step is
    one job combined from its slices (:mod:`hypertrain.compute.combined`)."""
    return jobs_of_subjects(conn, [subject])[0]


_SUBJECTS_PER_QUERY: Final = 500
"""Subjects one :func:`jobs_of_subjects` statement asks for (SQLite bounds its parameters)."""
_SUBJECT: Final = JOB_COLUMNS.split(", ").index("subject")


def jobs_of_subjects(
    conn: sqlite3.Connection, subjects: Sequence[Mapping[str, Any]], *, one_round: bool = False
) -> list[list[Job]]:
    """:func:`job_scores` of each of ``subjects``, in their order, in one statement per
    :data:`_SUBJECTS_PER_QUERY` subjects (each a search of the ``(subject, step, challenge)``
    index), and one more for their sliced hidden steps. ``one_round``: the subjects are one
    round's miners, whose sliced hidden steps are read on one common window (their losses are
    compared: :func:`hypertrain.compute.combined.round_window`)."""
    texts = [canonical_subject(subject) for subject in subjects]
    found: dict[str, list[Job]] = {text: [] for text in texts}
    for start in range(0, len(texts), _SUBJECTS_PER_QUERY):
        chunk = texts[start : start + _SUBJECTS_PER_QUERY]
        rows = conn.execute(
            f"SELECT {JOB_COLUMNS} FROM compute_jobs WHERE subject IN"
            f" ({', '.join('?' * len(chunk))}) ORDER BY subject, step, challenge",
            chunk,
        )
        for row in rows:
            job = job_from_row(row)
            found[row[_SUBJECT]].append(job)
    for text, step in combined_steps(conn, texts, one_round=one_round).items():
        found[text].append(step)
        found[text].sort(key=lambda job: (job.step, job.challenge))
    return [found[text] for text in texts]


def pending_fallbacks(conn: sqlite3.Connection) -> list[Job]:
    """Jobs in state ``fallback`` (awaiting the trusted evaluator), oldest first."""
    rows = conn.execute(
        f"SELECT {JOB_COLUMNS} FROM compute_jobs WHERE state = 'fallback'"
        " ORDER BY created_ms, job_id"
    ).fetchall()
    return [job_from_row(r) for r in rows]
