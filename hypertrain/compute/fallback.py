"""The trusted evaluator's answer settles a step the node network could not (DESIGN.md 6).

Promises of :func:`settle_trusted` (one transaction):

- Only a job in state ``fallback`` is settled: it becomes ``settled`` with ``how = fallback``
  and the trusted answer as its result. Calling it again on a job already settled by the
  fallback is a no-op returning no events (a replay after a crash settles once); any other
  state is ``Conflict`` (409). A busy trusted answer is ``Malformed`` (the evaluator must
  retry, not settle).
- Every answered copy not yet judged is judged with :func:`rules.judge`: paid, struck, or
  ``none`` (inconclusive: no pay, no strike). Copies still leased keep their lease and are
  judged when they post (:func:`results.submit_result`); queued copies are cancelled (pay 0).
- Events: ``settled`` (how ``fallback``, with the result), then ``accepted``/``strike`` per copy.
"""

from __future__ import annotations

import sqlite3

from hypertrain.compute.answers import Answer
from hypertrain.compute.ledger import set_verdict
from hypertrain.compute.model import DEFAULT_SETTINGS, ComputeSettings, Event
from hypertrain.compute.rows import counted, get_job
from hypertrain.compute.rules import judge
from hypertrain.compute.transitions import mark_settled
from hypertrain.protocol.errors import Conflict, Malformed
from hypertrain.scoring.registry import get_challenge

__all__ = ["settle_trusted"]


def settle_trusted(
    conn: sqlite3.Connection,
    job_id: str,
    trusted: Answer,
    now_ms: int,
    *,
    settings: ComputeSettings = DEFAULT_SETTINGS,
) -> list[Event]:
    """Settle a fallback job with the trusted answer (module doc)."""
    if trusted.busy:
        raise Malformed("a busy answer cannot settle a step")
    job = get_job(conn, job_id)
    if job.state == "settled" and job.settled_how == "fallback":
        return []
    if job.state != "fallback":
        raise Conflict(f"job {job_id} is {job.state}, not waiting for the fallback")
    challenge = get_challenge(job.challenge)
    # Copies still leased keep their lease: their answers are judged when they arrive.
    events = mark_settled(conn, job, "fallback", trusted, ("queued",), now_ms)
    for copy in counted(conn, job_id):
        if copy.verdict is None and copy.answer is not None:
            verdict = judge(challenge, trusted, copy.answer)
            events += set_verdict(conn, copy, verdict, now_ms, settings)
    return events
