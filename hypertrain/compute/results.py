"""A node's result post (``POST /v1/compute/jobs/<copy>/result`` after JSON parsing).

:func:`submit_result` returns ``(http status, answer, events)`` for outcomes that are answered
with a body: 200 with a :data:`~hypertrain.compute.wire.ResultAnswer`, and 410 with an
:class:`~hypertrain.compute.wire.ErrorAnswer` (which may still change state: an overdue lease is
expired on the spot). Refusals that change nothing RAISE (the routes map them), checked in this
order: ``NotFound`` 404 unknown copy; ``Forbidden`` 403 a copy not leased to this node;
``Malformed`` 400 a body that is not a :class:`~hypertrain.compute.wire.ResultPost` (the
converter) or whose answer :func:`answers.answer_of` refuses for the job's challenge;
``Forbidden`` 403 a lease token that is not this copy's (a body posted to another copy carries
the wrong token and is refused outright); ``Conflict`` 409 an answer different from the one
already recorded for the copy; and for a slice of a hidden step (:func:`slices.
check_slice_answer`), after the token: ``Malformed`` 400 an ok answer without its
per-sequence ``losses``, ``Conflict`` 409 a ``window`` that is not the copy's (a stale hidden
window). None of these strikes anyone. :func:`submit_result` is
:func:`check_result` (every refusal but the 409, nothing written) then :func:`take_result`
(the rest): a caller that must know the parsed post before anything changes (the lease asked
with the result, :mod:`hypertrain.coordinator.flows.compute`) runs the two itself.

In order, for the copy's own node with the right token:

1. A copy that already has an answer: the same canonical answer (:meth:`Answer.key`) gets the
   first response again (one vote, one credit); any other 409.
2. 410, counting nothing and striking nobody: the copy expired or was cancelled; the post came
   after its deadline (``now > deadline_ms``; the copy is expired now and replaced, as the
   reaper would have done); or its job was settled by the nodes or ended unscored (a slice
   whose hidden window was rotated out: the answer says so).
3. ``busy: true``: a non-verdict; the copy is ``released``, a new copy is queued in its place
   (inside the step's existing window; event ``queued``) which this node can never take; no
   strike.
4. Otherwise the answer is counted. If the job waits for the fallback, it is held (``held``)
   and judged when the trusted result arrives; if the fallback already settled it, it is judged
   now (``judged``); else :func:`rules.decide` runs on the job's counted answers and its
   decision is applied (``counted``; ``verdict`` set when this answer settled the job).
"""

from __future__ import annotations

import json
import sqlite3

import attrs

from hypertrain.compute.answers import Answer, answer_of
from hypertrain.compute.jobs import queued_event
from hypertrain.compute.keys import secret_matches
from hypertrain.compute.ledger import set_verdict
from hypertrain.compute.model import DEFAULT_SETTINGS, ComputeSettings, Event, Job, Node, iso_ms
from hypertrain.compute.nodes import get_node, normalise_capabilities, normalise_hardware
from hypertrain.compute.rows import Copy, counted, get_copy, get_job
from hypertrain.compute.rules import decide, judge
from hypertrain.compute.slices import ROTATED, check_slice_answer
from hypertrain.compute.transitions import apply_decision, expire_copy, queue_copy
from hypertrain.compute.wire import (
    ErrorAnswer,
    ResultAnswer,
    ResultCounted,
    ResultJudged,
    ResultPost,
    ResultStatus,
)
from hypertrain.protocol.converter import structure, unstructure
from hypertrain.protocol.errors import Conflict, Forbidden, Malformed
from hypertrain.scoring.registry import Challenge, get_challenge

__all__ = ["GONE", "Checked", "Submitted", "check_result", "submit_result", "take_result"]

GONE = 410

Submitted = tuple[int, ResultAnswer | ErrorAnswer, list[Event]]
"""What :func:`submit_result` returns: ``(http status, answer, events)``."""


def _gone(copy_id: str, detail: str) -> ErrorAnswer:
    return ErrorAnswer(f"copy {copy_id}: {detail}; this answer counts for nothing")


def _expired(copy: Copy) -> str:
    """Why a post on an expired lease counts for nothing (made only when it is answered)."""
    return f"the lease expired at {iso_ms(copy.deadline_ms or 0)}"


def _record(conn: sqlite3.Connection, copy: Copy, answer: Answer, state: str, now_ms: int) -> None:
    order = None
    if state == "answered":
        (last,) = conn.execute(
            "SELECT coalesce(max(answer_order), 0) FROM compute_copies WHERE job_id = ?",
            (copy.job_id,),
        ).fetchone()
        order = last + 1
    conn.execute(
        "UPDATE compute_copies SET state = ?, answer = ?, answer_key = ?, answered_ms = ?,"
        " answer_order = ? WHERE copy_id = ?",
        (state, json.dumps(answer.to_json()), answer.key(), now_ms, order, copy.copy_id),
    )


def _respond(
    conn: sqlite3.Connection, copy_id: str, answer: ResultAnswer, events: list[Event]
) -> Submitted:
    conn.execute(
        "UPDATE compute_copies SET response = ? WHERE copy_id = ?",
        (json.dumps(unstructure(answer)), copy_id),
    )
    return 200, answer, events


@attrs.frozen
class Checked:
    """A result post that passed the refusals :func:`check_result` makes; nothing written."""

    copy: Copy
    job: Job
    challenge: Challenge
    posted: ResultPost
    answer: Answer


def check_result(conn: sqlite3.Connection, node: Node, copy_id: str, body: object) -> Checked:
    """The refusals of a result post before any change, in the module doc's order: 404, 403,
    400 (the whole :class:`~hypertrain.compute.wire.ResultPost`, its ``next`` included), 403."""
    copy = get_copy(conn, copy_id)
    if copy.node_id != node.node_id:
        raise Forbidden(f"copy {copy_id} is not leased to this node")
    job = get_job(conn, copy.job_id)
    challenge = get_challenge(job.challenge)
    posted = structure(ResultPost, body)
    if posted.next is not None:  # what the lease would refuse, refused before the result is
        try:
            normalise_capabilities(posted.next.capabilities)
            normalise_hardware(posted.next.hardware)
        except Malformed as e:
            raise Malformed(f"ResultPost body: $.next.{e.detail}") from e
    answer = answer_of(challenge, posted)
    if copy.token_hash is None or not secret_matches(posted.lease, copy.token_hash):
        raise Forbidden(f"the lease token is not the one of copy {copy_id}")
    check_slice_answer(conn, job, answer, posted.window)
    return Checked(copy, job, challenge, posted, answer)


def submit_result(
    conn: sqlite3.Connection,
    node: Node,
    copy_id: str,
    body: object,
    now_ms: int,
    *,
    settings: ComputeSettings = DEFAULT_SETTINGS,
) -> Submitted:
    """Take one result post, ``body`` the posted JSON (module doc)."""
    checked = check_result(conn, node, copy_id, body)
    return take_result(conn, node, checked, now_ms, settings=settings)


def take_result(
    conn: sqlite3.Connection,
    node: Node,
    checked: Checked,
    now_ms: int,
    *,
    settings: ComputeSettings = DEFAULT_SETTINGS,
) -> Submitted:
    """Apply a result post :func:`check_result` passed (module doc, from step 1)."""
    copy, job, challenge, answer = checked.copy, checked.job, checked.challenge, checked.answer
    copy_id = copy.copy_id
    if copy.answer_key is not None:
        if copy.answer_key == answer.key() and copy.response is not None:
            return 200, copy.response, []
        raise Conflict(f"copy {copy_id} already has a different answer")
    if copy.state == "expired":
        return GONE, _gone(copy_id, _expired(copy)), []
    if job.state == "unscored" and job.reason == ROTATED:
        return GONE, _gone(copy_id, "its hidden window was rotated out (stale window)"), []
    if copy.state != "leased":
        return GONE, _gone(copy_id, f"the copy is {copy.state}"), []
    assert copy.deadline_ms is not None
    if now_ms > copy.deadline_ms:
        gone = _gone(copy_id, _expired(copy))
        return GONE, gone, expire_copy(conn, copy, challenge, now_ms, settings)
    if job.state == "unscored" or (job.state == "settled" and job.settled_how != "fallback"):
        conn.execute("UPDATE compute_copies SET state = 'late' WHERE copy_id = ?", (copy_id,))
        return GONE, _gone(copy_id, f"the step is already {job.state}"), []
    if answer.busy:
        _record(conn, copy, answer, "released", now_ms)
        requeued: list[Event] = []
        if job.state == "queued":
            queue_copy(conn, job, challenge, now_ms, settings, fresh_window=False)
            requeued.append(queued_event(job.job_id, job.challenge, job.step, 1))
        return _respond(conn, copy_id, ResultStatus(copy=copy_id, status="released"), requeued)
    _record(conn, copy, answer, "answered", now_ms)
    answered = counted(conn, job.job_id)
    events: list[Event] = [
        ("result", {"job": job.job_id, "challenge": job.challenge, "answers": len(answered)})
    ]
    if job.state == "fallback":
        return _respond(conn, copy_id, ResultStatus(copy=copy_id, status="held"), events)
    if job.state == "settled":
        assert job.result is not None
        verdict = judge(challenge, Answer.from_json(job.result), answer)
        events += set_verdict(conn, get_copy(conn, copy_id), verdict, now_ms, settings)
        judged = ResultJudged(
            copy=copy_id,
            status="judged",
            verdict=verdict,
            compute_credits=get_node(conn, node.node_id).compute_credits,
        )
        return _respond(conn, copy_id, judged, events)
    decision = decide(challenge, [c.answer for c in answered if c.answer is not None])
    events += apply_decision(conn, job, challenge, answered, decision, now_ms, settings)
    verdict, job_state, credits = conn.execute(
        "SELECT c.verdict, j.state, n.compute_credits"
        " FROM compute_copies c, compute_jobs j, compute_nodes n"
        " WHERE c.copy_id = ? AND j.job_id = ? AND n.node_id = ?",
        (copy_id, job.job_id, node.node_id),
    ).fetchone()  # what the decision left: three rows by key, nothing decoded
    counted_reply = ResultCounted(
        copy=copy_id,
        status="counted",
        verdict=verdict,
        job_state=job_state,
        compute_credits=credits,
    )
    return _respond(conn, copy_id, counted_reply, events)
