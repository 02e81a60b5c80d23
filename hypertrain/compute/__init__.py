"""The coordinator's compute-job book: node keys, answers, agreement rules, and the SQLite
state machine of jobs, copies, leases, strikes and credit (issue 8 item 1; no HTTP here).

Pure modules (no clock, no I/O): :mod:`.wire` (every body of the compute routes, shared with
the node: requests, grants, answers), :mod:`.keys` (node keys, lease tokens, handles),
:mod:`.answers` (a posted result checked into an :class:`Answer`), :mod:`.rules` (agreement,
decisions, judging, the UTC day), :mod:`.model` (settings, events, records).

Store functions (each the body of ONE ``db.write``/``db.read`` transaction; each takes the wall
time ``now_ms`` from its caller and returns the events to publish as ``(kind, payload)``):
:func:`register_node`, :func:`authenticate` (:mod:`.nodes`); :func:`enqueue_step`,
:func:`job_scores`, :func:`jobs_of_subjects`, :func:`pending_fallbacks` (:mod:`.jobs`);
:func:`lease`, :func:`hand_out` (:mod:`.leases`);
:func:`submit_result` (:mod:`.results`); :func:`expire_due`, :func:`fallback_due`,
:func:`next_deadline_ms`, :func:`lease_due_ms`, :func:`wait_due_ms` (:mod:`.timers`);
:func:`settle_trusted` (:mod:`.fallback`);
:func:`status` (:mod:`.status`). Tables: ``0008_compute.sql``.

Hidden-trace shards (issue 19 items 4 and 5; ``0021_hidden_slices.sql``): :mod:`.slices`
(a hidden step as one job per slice of its window, one slice of a window per node, the
rotation's retirement of old windows; imported from there, not re-exported) and
:mod:`.combined` (a sliced step read as one job, its score the exact combination of its
slices': :func:`job_scores` and :func:`jobs_of_subjects` return it).

Life of a step: ``enqueue_step`` -> two queued copies -> ``lease`` (two different nodes) ->
``submit_result`` x2 -> agreement (settled, both paid) | split (third copy, majority, minority
struck) | fallback (``fallback_due``/rules -> the trusted evaluator -> ``settle_trusted``).
"""

from hypertrain.compute.answers import ERROR_TEXT_LIMIT, Answer, answer_of, parse_answer
from hypertrain.compute.fallback import settle_trusted
from hypertrain.compute.jobs import (
    canonical_subject,
    enqueue_step,
    job_scores,
    jobs_of_subjects,
    pending_fallbacks,
)
from hypertrain.compute.keys import (
    check_handle,
    is_node_key,
    mint_key,
    mint_lease_token,
    new_handle,
    secret_hash,
    secret_matches,
)
from hypertrain.compute.leases import LeaseAsk, eligible_challenges, hand_out, lease
from hypertrain.compute.model import (
    DEFAULT_SETTINGS,
    EVENT_KINDS,
    ComputeSettings,
    Event,
    EventKind,
    Job,
    Node,
    iso_ms,
    trace_event,
)
from hypertrain.compute.nodes import (
    DEFAULT_HARDWARE,
    authenticate,
    get_node,
    normalise_capabilities,
    normalise_hardware,
    register_node,
)
from hypertrain.compute.results import GONE, Submitted, submit_result
from hypertrain.compute.rules import (
    DAY_MS,
    Decision,
    Verdict,
    agree,
    decide,
    is_inconclusive,
    judge,
    next_day_start_ms,
    utc_day,
    within_tolerance,
)
from hypertrain.compute.status import status
from hypertrain.compute.timers import (
    expire_due,
    fallback_due,
    lease_due_ms,
    next_deadline_ms,
    wait_due_ms,
)
from hypertrain.compute.wire import (
    InputFile,
    LeaseGrant,
    ResultAnswer,
    ResultPost,
)

__all__ = [
    "DAY_MS",
    "DEFAULT_HARDWARE",
    "DEFAULT_SETTINGS",
    "ERROR_TEXT_LIMIT",
    "EVENT_KINDS",
    "GONE",
    "Answer",
    "ComputeSettings",
    "Decision",
    "Event",
    "EventKind",
    "InputFile",
    "Job",
    "LeaseAsk",
    "LeaseGrant",
    "Node",
    "ResultAnswer",
    "ResultPost",
    "Submitted",
    "Verdict",
    "agree",
    "answer_of",
    "authenticate",
    "canonical_subject",
    "check_handle",
    "decide",
    "eligible_challenges",
    "enqueue_step",
    "expire_due",
    "fallback_due",
    "get_node",
    "hand_out",
    "is_inconclusive",
    "is_node_key",
    "iso_ms",
    "job_scores",
    "jobs_of_subjects",
    "judge",
    "lease",
    "lease_due_ms",
    "mint_key",
    "mint_lease_token",
    "new_handle",
    "next_day_start_ms",
    "next_deadline_ms",
    "normalise_capabilities",
    "normalise_hardware",
    "parse_answer",
    "pending_fallbacks",
    "register_node",
    "secret_hash",
    "secret_matches",
    "settle_trusted",
    "status",
    "submit_result",
    "trace_event",
    "utc_day",
    "wait_due_ms",
    "within_tolerance",
]
