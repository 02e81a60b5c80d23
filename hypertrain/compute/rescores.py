"""Sampled trusted re-scores of steps the nodes settled by agreement (issue 19 item 3).

The table is ``compute_rescores`` (migration 0020); the draw rule is :mod:`.draws`. A row's
``state``: ``waiting`` (settled, not decided yet) -> ``skipped`` | ``drawn`` (the fallback pool
re-scores it) -> ``agreed`` | ``replaced`` | ``inconclusive``.

Promises (each the body of one transaction, or part of the caller's; times from the caller):

- :func:`note_agreement` (inside the settling transaction, :func:`.transitions.settle_job`): a
  step of a deterministic challenge that nodes settled (by ``agreement``, or by a ``third-copy``:
  two colluders can win a split against an honest node) while ``audit_permille > 0`` is
  entered once, ``waiting``, with no draw round yet. Steps the fallback settled are not (its
  result is the trusted one already), nor timing steps (the trusted evaluator would time the
  daemon's hardware, not the nodes' class).
- :func:`fix_draw_rounds`: every entered step without a draw round gets ``draw``, the beacon
  observer's :func:`.draws.draw_round`; it never changes afterwards.
- :func:`due_draws`: the waiting steps whose draw round is at or below ``latest``.
- :func:`decide_draw`: decides one due step with the randomness of ``beacon_round`` (the first
  stored round at or after its draw round) at ``settings.audit_permille``, recorded with the
  row: ``skipped`` (no event) or ``drawn`` (event ``audit`` ``{change: "drawn"}``, which wakes
  the fallback pool). Only a ``waiting`` step is decided, so no step is drawn twice.
- :func:`pending_rescores`: the drawn steps waiting for the fallback pool, oldest draw first
  (read from the store: a restarted daemon re-scores what it had drawn).
- :func:`settle_rescore`: the trusted answer of a drawn step, judged by the rule two copies
  use (:func:`.rules.agree`) against the settled result:

  - they agree: ``agreed``, and nothing else changes (event ``audit`` ``{change: "agreed"}``);
  - they differ but either is inconclusive (``timeout``, ``oom``): ``inconclusive``, nothing
    else changes (the trusted evaluator could not tell);
  - otherwise ``replaced``: the job's result becomes the trusted answer and its
    ``settled_how`` ``fallback`` (the trusted evaluator's result now stands); each paid copy
    the trusted answer judges ``struck`` (:func:`.rules.judge`: the agreeing pair) is struck
    through :func:`.ledger.strike` (a strike of the re-score's UTC day, disabling the node at
    the day's limit like any other) and its credit taken back by :func:`.ledger.claw_back`;
    each copy struck at settlement that the trusted answer judges ``paid`` (the honest node of
    a split two colluders won by a third copy) is pardoned (:func:`.ledger.pardon`: strike
    lifted, paid). Events: ``audit`` ``{change: "replaced", result, replaced, struck,
    clawed_back, pardoned, consumed}``, then the ``strike`` of each node struck, then the
    ``accepted`` of each copy pardoned. ``consumed`` comes from the caller (what
    already used the overturned result, e.g. a round already final): recorded and reported,
    never undone here.

  A replay on a step already re-scored is a no-op without events; a step never drawn is
  ``Conflict``; a busy answer ``Malformed``.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from hypertrain.compute.answers import Answer
from hypertrain.compute.draws import is_drawn
from hypertrain.compute.ledger import claw_back, pardon, strike
from hypertrain.compute.model import ComputeSettings, Event, Job
from hypertrain.compute.rows import JOB_COLUMNS, counted, get_job, job_from_row
from hypertrain.compute.rules import agree, is_inconclusive, judge
from hypertrain.protocol.errors import Conflict, Malformed
from hypertrain.scoring.registry import get_challenge

__all__ = [
    "decide_draw",
    "due_draws",
    "fix_draw_rounds",
    "note_agreement",
    "pending_rescores",
    "rescore_state",
    "settle_rescore",
]


def note_agreement(
    conn: sqlite3.Connection, job_id: str, now_ms: int, settings: ComputeSettings
) -> None:
    """Enter a step just settled by agreement for the draw (module doc)."""
    if settings.audit_permille > 0:
        conn.execute(
            "INSERT OR IGNORE INTO compute_rescores (job_id, settled_ms) VALUES (?, ?)",
            (job_id, now_ms),
        )


def fix_draw_rounds(conn: sqlite3.Connection, draw: int) -> int:
    """Give every entered step without a draw round the round ``draw``; how many got it."""
    return int(
        conn.execute(
            "UPDATE compute_rescores INDEXED BY compute_rescores_unfixed SET draw_round = ?"
            " WHERE draw_round IS NULL",
            (draw,),
        ).rowcount
    )


def due_draws(conn: sqlite3.Connection, latest: int) -> list[tuple[str, int]]:
    """``(job id, draw round)`` of each waiting step whose draw round is at most ``latest``."""
    rows = conn.execute(
        "SELECT job_id, draw_round FROM compute_rescores INDEXED BY compute_rescores_due"
        " WHERE state = 'waiting' AND draw_round IS NOT NULL AND draw_round <= ?"
        " ORDER BY draw_round, job_id",
        (latest,),
    ).fetchall()
    return [(str(job_id), int(r)) for job_id, r in rows]


def decide_draw(
    conn: sqlite3.Connection,
    job_id: str,
    beacon_round: int,
    randomness: str,
    now_ms: int,
    settings: ComputeSettings,
) -> list[Event]:
    """Decide one due step with ``beacon_round``'s ``randomness`` (module doc)."""
    permille = settings.audit_permille
    drawn = is_drawn(randomness, job_id, permille)
    changed = conn.execute(
        "UPDATE compute_rescores SET state = ?, beacon_round = ?, permille = ?, decided_ms = ?"
        " WHERE job_id = ? AND state = 'waiting'",
        ("drawn" if drawn else "skipped", beacon_round, permille, now_ms, job_id),
    ).rowcount
    if not changed or not drawn:
        return []
    challenge = get_job(conn, job_id).challenge
    payload = {"job": job_id, "challenge": challenge, "change": "drawn", "round": beacon_round}
    return [("audit", payload)]


def pending_rescores(conn: sqlite3.Connection) -> list[Job]:
    """The drawn steps not re-scored yet, oldest draw first."""
    rows = conn.execute(
        f"SELECT {', '.join('j.' + c for c in JOB_COLUMNS.split(', '))}"
        " FROM compute_rescores r INDEXED BY compute_rescores_drawn JOIN compute_jobs j"
        " USING (job_id) WHERE r.state = 'drawn' ORDER BY r.decided_ms, r.job_id"
    ).fetchall()
    return [job_from_row(r) for r in rows]


def rescore_state(conn: sqlite3.Connection, job_id: str) -> str | None:
    """The re-score state of a step (module doc), None when it was never entered."""
    row = conn.execute("SELECT state FROM compute_rescores WHERE job_id = ?", (job_id,)).fetchone()
    return None if row is None else str(row[0])


def _finish(
    conn: sqlite3.Connection, job_id: str, state: str, trusted: Answer, now_ms: int, **more: Any
) -> None:
    conn.execute(
        "UPDATE compute_rescores SET state = ?, trusted = ?, rescored_ms = ?, replaced = ?,"
        " consumed = ? WHERE job_id = ?",
        (
            state,
            json.dumps(trusted.to_json()),
            now_ms,
            more.get("replaced"),
            more.get("consumed"),
            job_id,
        ),
    )


def settle_rescore(
    conn: sqlite3.Connection,
    job_id: str,
    trusted: Answer,
    now_ms: int,
    *,
    settings: ComputeSettings,
    consumed: str | None = None,
) -> list[Event]:
    """Judge a drawn step's settled result by the trusted re-score (module doc)."""
    if trusted.busy:
        raise Malformed("a busy answer cannot re-score a step")
    state = rescore_state(conn, job_id)
    if state in ("agreed", "replaced", "inconclusive"):
        return []
    if state != "drawn":
        raise Conflict(f"step {job_id} was not drawn for a re-score ({state})")
    job = get_job(conn, job_id)
    assert job.result is not None
    challenge = get_challenge(job.challenge)
    settled = Answer.from_json(job.result)
    payload: dict[str, Any] = {"job": job_id, "challenge": job.challenge}
    if agree(challenge, settled, trusted):
        _finish(conn, job_id, "agreed", trusted, now_ms)
        return [("audit", {**payload, "change": "agreed"})]
    if is_inconclusive(settled) or is_inconclusive(trusted):
        _finish(conn, job_id, "inconclusive", trusted, now_ms)
        return [("audit", {**payload, "change": "inconclusive"})]
    replaced = json.dumps(job.result)
    _finish(conn, job_id, "replaced", trusted, now_ms, replaced=replaced, consumed=consumed)
    conn.execute(
        "UPDATE compute_jobs SET result = ?, settled_how = 'fallback' WHERE job_id = ?",
        (json.dumps(trusted.to_json()), job_id),
    )
    strikes: list[Event] = []
    struck: list[str] = []
    clawed: list[dict[str, Any]] = []
    pardoned: list[str] = []
    paid: list[Event] = []
    for copy in counted(conn, job_id):
        if copy.answer is None:
            continue
        verdict = judge(challenge, trusted, copy.answer)
        if copy.verdict == "struck" and verdict == "paid":  # it was right all along
            assert copy.node_id is not None
            pardoned.append(copy.node_id)
            paid += pardon(conn, copy, now_ms, settings)
            continue
        if copy.verdict != "paid" or verdict != "struck":
            continue
        assert copy.node_id is not None
        struck.append(copy.node_id)
        taken = claw_back(conn, copy, now_ms)
        if taken is not None:
            clawed.append(taken)
        strikes += strike(conn, copy, now_ms, settings)
    change = {
        "change": "replaced",
        "result": trusted.to_json(),
        "replaced": job.result,
        "struck": struck,
        "clawed_back": clawed,
        "pardoned": pardoned,
        "consumed": consumed,
    }
    return [("audit", {**payload, **change}), *strikes, *paid]
