"""The state changes of one compute job, shared by results, timers and the fallback.

Promises (each runs inside the caller's transaction and returns the events to publish):

- :func:`queue_copy` adds copy ``seq = max + 1`` in state ``queued``. With ``fresh_window`` the
  job's wait deadline becomes ``max(old, now + window)`` (window: ``wait_ms``; timing jobs
  ``wait_ms * timing_wait_factor``), so a third or replacement copy gets its own full window;
  without it (a busy node gave its copy back) the step's deadline stands.
- :func:`send_to_fallback`: a deterministic job goes to state ``fallback`` (awaiting the trusted
  evaluator; event ``fallback``); a timing job, which the coordinator cannot score, ends
  ``unscored`` (:func:`end_unscored`, also the end of a slice job whose hidden window was
  rotated out: event ``settled`` with state ``unscored``; its answered copies get verdict
  ``none``, its leased copies are cancelled). Queued copies are cancelled (pay 0). Leased copies
  of a fallback job keep their lease; their answers are judged against the trusted result.
- :func:`expire_copy`: a leased copy past its deadline is ``expired`` (no strike); the job's
  ``expiries`` grows; a queued job then goes to the fallback at ``max_expiries``, else gets a
  replacement copy with a fresh window. The ``expired`` event says which: ``replaced`` is true
  exactly when a replacement copy was queued.
- :func:`settle_job`: the job is ``settled`` with ``how`` and ``result``; winners are paid,
  losers struck; copies still queued or leased are cancelled. A step settled by ``agreement``
  is entered for the sampled re-score draw (:func:`.rescores.note_agreement`).
- :func:`apply_decision` carries out a :class:`Decision` of :func:`rules.decide`.
"""

from __future__ import annotations

import json
import sqlite3

from hypertrain.compute.answers import Answer
from hypertrain.compute.ledger import pay, strike
from hypertrain.compute.model import ComputeSettings, Event, Job
from hypertrain.compute.rescores import note_agreement
from hypertrain.compute.rows import Copy, get_job
from hypertrain.compute.rules import Decision
from hypertrain.scoring.registry import Challenge, get_challenge

__all__ = [
    "apply_decision",
    "end_unscored",
    "expire_copy",
    "mark_settled",
    "queue_copy",
    "send_to_fallback",
    "settle_job",
    "window_ms",
]


def window_ms(job: Job, challenge: Challenge, settings: ComputeSettings) -> int:
    """How long a queued copy of ``job`` waits for a node."""
    factor = settings.timing_wait_factor if challenge.kind == "timing" else 1
    return job.wait_ms * factor


def queue_copy(
    conn: sqlite3.Connection,
    job: Job,
    challenge: Challenge,
    now_ms: int,
    settings: ComputeSettings,
    *,
    fresh_window: bool,
) -> str:
    """Queue one more copy of ``job``; returns its copy id."""
    (last,) = conn.execute(
        "SELECT coalesce(max(seq), 0) FROM compute_copies WHERE job_id = ?", (job.job_id,)
    ).fetchone()
    copy_id = f"{job.job_id}.{last + 1}"
    conn.execute(
        "INSERT INTO compute_copies (copy_id, job_id, seq, state, queued_ms)"
        " VALUES (?, ?, ?, 'queued', ?)",
        (copy_id, job.job_id, last + 1, now_ms),
    )
    if fresh_window:
        conn.execute(
            "UPDATE compute_jobs SET wait_deadline_ms = max(wait_deadline_ms, ?) WHERE job_id = ?",
            (now_ms + window_ms(job, challenge, settings), job.job_id),
        )
    return copy_id


def _cancel(conn: sqlite3.Connection, job_id: str, states: tuple[str, ...]) -> None:
    marks = ", ".join("?" * len(states))
    conn.execute(
        # +state: through the job's own copies, not every copy in those states
        f"UPDATE compute_copies SET state = 'cancelled' WHERE job_id = ? AND +state IN ({marks})",
        (job_id, *states),
    )


def send_to_fallback(
    conn: sqlite3.Connection, job: Job, challenge: Challenge, reason: str, now_ms: int
) -> list[Event]:
    """The job leaves the node network (module doc)."""
    if challenge.kind == "timing":
        return end_unscored(conn, job, reason, now_ms)
    _cancel(conn, job.job_id, ("queued",))
    conn.execute(
        "UPDATE compute_jobs SET state = 'fallback', reason = ? WHERE job_id = ?",
        (reason, job.job_id),
    )
    return [("fallback", {"job": job.job_id, "challenge": job.challenge, "reason": reason})]


def end_unscored(conn: sqlite3.Connection, job: Job, reason: str, now_ms: int) -> list[Event]:
    """``job`` ends ``unscored`` for ``reason`` (module doc, :func:`send_to_fallback`)."""
    _cancel(conn, job.job_id, ("queued", "leased"))
    conn.execute(
        "UPDATE compute_copies SET verdict = 'none'"
        " WHERE job_id = ? AND +state = 'answered' AND verdict IS NULL",
        (job.job_id,),
    )
    conn.execute(
        "UPDATE compute_jobs SET state = 'unscored', reason = ?, settled_ms = ? WHERE job_id = ?",
        (reason, now_ms, job.job_id),
    )
    payload = {"job": job.job_id, "challenge": job.challenge, "state": "unscored"}
    return [("settled", {**payload, "reason": reason})]


def expire_copy(
    conn: sqlite3.Connection,
    copy: Copy,
    challenge: Challenge,
    now_ms: int,
    settings: ComputeSettings,
) -> list[Event]:
    """Expire a leased copy past its deadline (module doc)."""
    conn.execute("UPDATE compute_copies SET state = 'expired' WHERE copy_id = ?", (copy.copy_id,))
    conn.execute("UPDATE compute_jobs SET expiries = expiries + 1 WHERE job_id = ?", (copy.job_id,))
    job = get_job(conn, copy.job_id)
    replaced = job.state == "queued" and job.expiries < settings.max_expiries
    payload = {
        "job": job.job_id,
        "challenge": job.challenge,
        "expiries": job.expiries,
        "replaced": replaced,
    }
    events: list[Event] = [("expired", payload)]
    if replaced:
        queue_copy(conn, job, challenge, now_ms, settings, fresh_window=True)
    elif job.state == "queued":
        events += send_to_fallback(conn, job, challenge, "expiries", now_ms)
    return events


def mark_settled(
    conn: sqlite3.Connection,
    job: Job,
    how: str,
    result: Answer,
    cancel: tuple[str, ...],
    now_ms: int,
) -> list[Event]:
    """Record ``job`` settled ``how`` with ``result``, cancel its copies in ``cancel`` states;
    the ``settled`` event (the verdicts of its copies are the caller's)."""
    conn.execute(
        "UPDATE compute_jobs SET state = 'settled', settled_how = ?, result = ?, settled_ms = ?"
        " WHERE job_id = ?",
        (how, json.dumps(result.to_json()), now_ms, job.job_id),
    )
    _cancel(conn, job.job_id, cancel)
    payload = {"job": job.job_id, "challenge": job.challenge, "state": "settled", "how": how}
    return [("settled", {**payload, "result": result.to_json()})]


def settle_job(
    conn: sqlite3.Connection,
    job: Job,
    *,
    how: str,
    result: Answer,
    winners: list[Copy],
    losers: list[Copy],
    now_ms: int,
    settings: ComputeSettings,
) -> list[Event]:
    """Settle ``job`` (module doc)."""
    events = mark_settled(conn, job, how, result, ("queued", "leased"), now_ms)
    for copy in winners:
        events += pay(conn, copy, now_ms, settings)
    for copy in losers:
        events += strike(conn, copy, now_ms, settings)
    if how in ("agreement", "third-copy") and get_challenge(job.challenge).kind == "deterministic":
        # nodes settled it (two colluders winning a split through a third copy too); a timing
        # job is never re-scored: the trusted evaluator would time the daemon's hardware, not
        # the class the nodes measured (it has no fallback either)
        note_agreement(conn, job.job_id, now_ms, settings)
    return events


def apply_decision(
    conn: sqlite3.Connection,
    job: Job,
    challenge: Challenge,
    answered: list[Copy],
    decision: Decision,
    now_ms: int,
    settings: ComputeSettings,
) -> list[Event]:
    """Carry out ``decision``; ``answered`` are the counted copies it was taken on."""
    if decision.kind == "settle":
        assert decision.how is not None
        winners = [answered[i] for i in decision.winners]
        assert winners[0].answer is not None
        return settle_job(
            conn,
            job,
            how=decision.how,
            result=winners[0].answer,
            winners=winners,
            losers=[answered[i] for i in decision.losers],
            now_ms=now_ms,
            settings=settings,
        )
    if decision.kind == "third-copy":
        queue_copy(conn, job, challenge, now_ms, settings, fresh_window=True)
        return [("split", {"job": job.job_id, "challenge": job.challenge})]
    if decision.kind == "fallback":
        return send_to_fallback(conn, job, challenge, decision.reason, now_ms)
    return []
