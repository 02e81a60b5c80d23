"""The book's deadlines: lease expiry, the fallback window, and the reaper's next wake-up.

Promises (times are the caller's wall clock in ms; nothing here reads a clock):

- :func:`expire_due`: every leased copy with ``deadline_ms < now`` is expired, without a
  strike, as :func:`transitions.expire_copy` says (a replacement with a fresh window, or the
  fallback at the job's ``max_expiries``-th expiry). A result at ``now == deadline_ms`` still
  counts, so the copy is due at ``deadline_ms + 1``.
- :func:`fallback_due`: every ``queued`` job with ``wait_deadline_ms <= now`` that still has a
  queued copy leaves the node network (:func:`transitions.send_to_fallback`: deterministic jobs
  go to ``fallback``, timing jobs end ``unscored``). A job whose copies are all leased or
  answered at its deadline keeps going (its leases are bounded by their own deadlines). Returns
  the events; a ``fallback`` event names each job it sent to the trusted evaluator (which
  reads its work with :func:`~hypertrain.compute.jobs.pending_fallbacks`).
- :func:`next_deadline_ms`: the earliest instant at which :func:`expire_due` or
  :func:`fallback_due` has work (a lease's ``deadline_ms + 1``, a waiting job's
  ``wait_deadline_ms``), or None. Read from the store, so a restarted reaper rebuilds its timer
  from the stored deadlines instead of resetting them. It is the earlier of its two parts,
  each one indexed query: :func:`lease_due_ms` (the earliest lease's ``deadline_ms + 1``) and
  :func:`wait_due_ms` (the earliest waiting job's ``wait_deadline_ms``); a caller that knows
  only one part can have moved earlier (a transaction that only leased: leasing never makes a
  window due sooner) reads that part alone.
"""

from __future__ import annotations

import sqlite3

from hypertrain.compute.model import DEFAULT_SETTINGS, ComputeSettings, Event
from hypertrain.compute.rows import JOB_COLUMNS, get_copy, job_from_row
from hypertrain.compute.transitions import expire_copy, send_to_fallback
from hypertrain.scoring.registry import get_challenge

__all__ = ["expire_due", "fallback_due", "lease_due_ms", "next_deadline_ms", "wait_due_ms"]

_WAITING = (
    "state = 'queued' AND EXISTS (SELECT 1 FROM compute_copies c"
    " WHERE c.job_id = compute_jobs.job_id AND +c.state = 'queued')"
)
"""A job still waiting for nodes. Each query here is bounded by the work at hand, never by the
book's history (tests/compute/test_book_plans.py): ``+c.state`` keeps SQLite off the
``(state, queued_ms)`` index, which would scan every queued copy for each job, and onto the
job's own copies; leases are found through the partial deadline index of leased copies."""


def expire_due(
    conn: sqlite3.Connection, now_ms: int, *, settings: ComputeSettings = DEFAULT_SETTINGS
) -> list[Event]:
    """Expire overdue leases (module doc)."""
    rows = conn.execute(
        "SELECT c.copy_id, j.challenge"
        " FROM compute_copies c INDEXED BY compute_copies_by_deadline JOIN compute_jobs j"
        " USING (job_id) WHERE c.state = 'leased' AND c.deadline_ms < ?"
        " ORDER BY c.deadline_ms, c.copy_id",
        (now_ms,),
    ).fetchall()
    events: list[Event] = []
    for copy_id, challenge_id in rows:
        copy = get_copy(conn, copy_id)
        events += expire_copy(conn, copy, get_challenge(challenge_id), now_ms, settings)
    return events


def fallback_due(conn: sqlite3.Connection, now_ms: int) -> list[Event]:
    """Send steps whose window ended to the fallback (module doc)."""
    rows = conn.execute(
        f"SELECT {JOB_COLUMNS} FROM compute_jobs WHERE {_WAITING} AND wait_deadline_ms <= ?"
        " ORDER BY wait_deadline_ms, job_id",
        (now_ms,),
    ).fetchall()
    events: list[Event] = []
    for row in rows:
        job = job_from_row(row)
        events += send_to_fallback(conn, job, get_challenge(job.challenge), "wait", now_ms)
    return events


def lease_due_ms(conn: sqlite3.Connection) -> int | None:
    """When the earliest lease is due to expire (its ``deadline_ms + 1``), or None."""
    row = conn.execute(
        "SELECT deadline_ms + 1 FROM compute_copies INDEXED BY compute_copies_by_deadline"
        " WHERE state = 'leased' ORDER BY deadline_ms LIMIT 1"
    ).fetchone()
    return None if row is None else int(row[0])


def wait_due_ms(conn: sqlite3.Connection) -> int | None:
    """When the earliest waiting job's window ends (its ``wait_deadline_ms``), or None."""
    row = conn.execute(
        f"SELECT wait_deadline_ms FROM compute_jobs WHERE {_WAITING}"
        " ORDER BY wait_deadline_ms LIMIT 1"
    ).fetchone()
    return None if row is None else int(row[0])


def next_deadline_ms(conn: sqlite3.Connection) -> int | None:
    """When the reaper should next call :func:`expire_due` / :func:`fallback_due`."""
    due = [d for d in (lease_due_ms(conn), wait_due_ms(conn)) if d is not None]
    return min(due) if due else None
