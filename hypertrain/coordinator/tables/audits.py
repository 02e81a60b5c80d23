"""Audits in the store (tables of ``0011_audits.sql``): draws, jobs, served states, forfeits.

Plain functions of a ``sqlite3.Connection`` for the DB runner, used by the audit flows
(:mod:`hypertrain.coordinator.flows.auditdraw`, :mod:`~hypertrain.coordinator.flows.worker`,
:mod:`~hypertrain.coordinator.flows.serves`) and the round view.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any, Final, Literal

from attrs import frozen

from hypertrain.coordinator.tables.runs import dumps

__all__ = [
    "JobRow",
    "JobState",
    "ServeRow",
    "VerdictFact",
    "draw_of",
    "forfeit_envelopes",
    "get_job",
    "insert_draw",
    "insert_forfeit",
    "insert_job",
    "insert_serve",
    "job_by_challenge",
    "jobs_of_round",
    "jobs_of_run",
    "leased_expired",
    "next_lease_expiry",
    "queued_jobs",
    "serves_of",
    "update_job",
    "verdicts_of_run",
]

JobState = Literal["queued", "leased", "done", "failed"]

_JOB_COLUMNS: Final = (
    "job_id, run_id, w, target, challenge, challenge_hash, mode, serve_deadline, state, lease,"
    " lease_expires_round, attempts, fail_reason, verdict, result, auditor, verdict_round"
)


@frozen
class JobRow:
    """One ``audit_jobs`` row; ``challenge`` and ``verdict`` are canonical JSON envelopes."""

    job_id: str
    run_id: str
    w: int
    target: str
    challenge: str
    challenge_hash: str
    mode: str
    serve_deadline: int
    state: JobState
    lease: str | None
    lease_expires_round: int | None
    attempts: int
    fail_reason: str | None
    verdict: str | None
    result: str | None
    auditor: str | None
    verdict_round: int | None

    def challenge_json(self) -> dict[str, Any]:
        value: dict[str, Any] = json.loads(self.challenge)
        return value

    def verdict_json(self) -> dict[str, Any] | None:
        return None if self.verdict is None else json.loads(self.verdict)


@frozen
class ServeRow:
    """One ``state_serves`` row."""

    challenge_hash: str
    t: int
    envelope: str
    blob_sha256: str


@frozen
class VerdictFact:
    """What the auditor stats read of one audit job with a verdict (:func:`verdicts_of_run`)."""

    job_id: str
    target: str
    result: str
    honeypot_commit: str | None
    """The audited RoundOpen's honeypot commitment (stored with the job by the draw)."""
    d_audit: int
    """The audited round's ``d_audit``."""


def _job(row: Sequence[Any]) -> JobRow:
    return JobRow(*row)


# --- draws ---------------------------------------------------------------------------------------


def insert_draw(
    conn: sqlite3.Connection, run_id: str, w: int, selected: Sequence[str], now: int
) -> None:
    conn.execute(
        "INSERT INTO audit_draws (run_id, w, selected, drawn_round) VALUES (?, ?, ?, ?)",
        (run_id, w, dumps(sorted(selected)), now),
    )


def draw_of(conn: sqlite3.Connection, run_id: str, w: int) -> list[str] | None:
    """The selected hotkeys of round ``w``, or None while the draw has not run."""
    row = conn.execute(
        "SELECT selected FROM audit_draws WHERE run_id = ? AND w = ?", (run_id, w)
    ).fetchone()
    return None if row is None else list(json.loads(row[0]))


# --- jobs ----------------------------------------------------------------------------------------


def insert_job(
    conn: sqlite3.Connection, job: JobRow, now: int, *, honeypot_commit: str | None
) -> None:
    """Store a drawn job; ``honeypot_commit`` is the audited RoundOpen's (the auditor stats
    read it)."""
    conn.execute(
        "INSERT INTO audit_jobs (job_id, run_id, w, target, challenge, challenge_hash, mode,"
        " serve_deadline, created_round, honeypot_commit) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            job.job_id,
            job.run_id,
            job.w,
            job.target,
            job.challenge,
            job.challenge_hash,
            job.mode,
            job.serve_deadline,
            now,
            honeypot_commit,
        ),
    )


def get_job(conn: sqlite3.Connection, job_id: str) -> JobRow | None:
    row = conn.execute(
        f"SELECT {_JOB_COLUMNS} FROM audit_jobs WHERE job_id = ?", (job_id,)
    ).fetchone()
    return None if row is None else _job(row)


def job_by_challenge(conn: sqlite3.Connection, challenge_hash: str) -> JobRow | None:
    row = conn.execute(
        f"SELECT {_JOB_COLUMNS} FROM audit_jobs WHERE challenge_hash = ?", (challenge_hash,)
    ).fetchone()
    return None if row is None else _job(row)


def jobs_of_round(conn: sqlite3.Connection, run_id: str, w: int) -> list[JobRow]:
    rows = conn.execute(
        f"SELECT {_JOB_COLUMNS} FROM audit_jobs WHERE run_id = ? AND w = ? ORDER BY target",
        (run_id, w),
    )
    return [_job(row) for row in rows]


def jobs_of_run(conn: sqlite3.Connection, run_id: str) -> list[JobRow]:
    rows = conn.execute(
        f"SELECT {_JOB_COLUMNS} FROM audit_jobs WHERE run_id = ? ORDER BY w, rowid", (run_id,)
    )
    return [_job(row) for row in rows]


def verdicts_of_run(conn: sqlite3.Connection, run_id: str) -> list[VerdictFact]:
    """Every audit job of the run with a verdict, with its round's ``d_audit`` read from the
    covering ``rounds_dates`` (no RoundOpen envelope, no challenge or verdict envelope read)."""
    rows = conn.execute(
        "SELECT j.job_id, j.target, j.result, j.honeypot_commit, r.d_audit FROM audit_jobs j"
        " JOIN rounds r INDEXED BY rounds_dates ON r.run_id = j.run_id AND r.w = j.w"
        " WHERE j.run_id = ? AND j.result IS NOT NULL",
        (run_id,),
    )
    return [VerdictFact(*row) for row in rows]


def queued_jobs(conn: sqlite3.Connection, run_id: str | None) -> list[JobRow]:
    """Queued jobs (of one run, or of all), in the order they are handed out."""
    if run_id is None:
        rows = conn.execute(
            f"SELECT {_JOB_COLUMNS} FROM audit_jobs WHERE state = 'queued' ORDER BY w, rowid"
        )
    else:
        rows = conn.execute(
            f"SELECT {_JOB_COLUMNS} FROM audit_jobs WHERE state = 'queued' AND run_id = ?"
            " ORDER BY w, rowid",
            (run_id,),
        )
    return [_job(row) for row in rows]


def leased_expired(conn: sqlite3.Connection, D: int) -> list[JobRow]:  # noqa: N803
    """Leased jobs whose lease expired (``lease_expires_round < D``)."""
    rows = conn.execute(
        f"SELECT {_JOB_COLUMNS} FROM audit_jobs WHERE state = 'leased'"
        " AND lease_expires_round < ? ORDER BY w, rowid",
        (D,),
    )
    return [_job(row) for row in rows]


def next_lease_expiry(conn: sqlite3.Connection) -> int | None:
    """The earliest ``lease_expires_round`` of a leased job, or None."""
    row = conn.execute(
        "SELECT min(lease_expires_round) FROM audit_jobs WHERE state = 'leased'"
    ).fetchone()
    return None if row is None or row[0] is None else int(row[0])


def update_job(conn: sqlite3.Connection, job_id: str, **columns: Any) -> None:
    """Set ``columns`` of job ``job_id`` (names from the table; values as stored)."""
    allowed = set(_JOB_COLUMNS.replace(" ", "").split(","))
    unknown = set(columns) - allowed
    assert not unknown, f"not audit_jobs columns: {unknown}"
    assignments = ", ".join(f"{name} = ?" for name in columns)
    cursor = conn.execute(
        f"UPDATE audit_jobs SET {assignments} WHERE job_id = ?", (*columns.values(), job_id)
    )
    assert cursor.rowcount == 1, "audit job vanished inside its transaction"


# --- served states -------------------------------------------------------------------------------


def serves_of(conn: sqlite3.Connection, challenge_hash: str) -> list[ServeRow]:
    rows = conn.execute(
        "SELECT challenge_hash, t, envelope, blob_sha256 FROM state_serves"
        " WHERE challenge_hash = ? ORDER BY t",
        (challenge_hash,),
    )
    return [ServeRow(*row) for row in rows]


def insert_serve(conn: sqlite3.Connection, serve: ServeRow, now: int) -> None:
    conn.execute(
        "INSERT INTO state_serves (challenge_hash, t, envelope, blob_sha256, stored_round)"
        " VALUES (?, ?, ?, ?, ?)",
        (serve.challenge_hash, serve.t, serve.envelope, serve.blob_sha256, now),
    )


# --- forfeits ------------------------------------------------------------------------------------


def insert_forfeit(
    conn: sqlite3.Connection, run_id: str, w: int, hotkey: str, cause: str, env: str, now: int
) -> None:
    conn.execute(
        "INSERT INTO forfeits (run_id, w, hotkey, cause, envelope, sealed_round)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        (run_id, w, hotkey, cause, env, now),
    )


def forfeit_envelopes(conn: sqlite3.Connection, run_id: str, w: int) -> list[dict[str, Any]]:
    rows = conn.execute(
        "SELECT envelope FROM forfeits WHERE run_id = ? AND w = ? ORDER BY hotkey", (run_id, w)
    )
    return [json.loads(row[0]) for row in rows]
