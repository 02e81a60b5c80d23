"""The coordinator's compute-job book: node keys, answers, agreement rules, and the SQLite
state machine of jobs, copies, leases, strikes and credit (issue 8 item 1; no HTTP here).

Pure modules (no clock, no I/O): :mod:`.wire` (every body of the compute routes, shared with
the node: requests, grants, answers), :mod:`.keys` (node keys, lease tokens, handles),
:mod:`.answers` (a posted result checked into an :class:`Answer`), :mod:`.rules` (agreement,
decisions, judging, the UTC day), :mod:`.model` (settings, events, records), :mod:`.draws` (which
settled steps the beacon draws for a trusted re-score), :mod:`.networks` (the source network of a
request: /24, /48, trusted proxies), :mod:`.pairing` (who may hold copies of one job together, as
the lease's SQL condition).

Store functions (each the body of ONE ``db.write``/``db.read`` transaction; each takes the wall
time ``now_ms`` from its caller and returns the events to publish as ``(kind, payload)``):
:func:`register_node`, :func:`authenticate` (:mod:`.nodes`; minting limited per network and
probation by :mod:`.sybils`); :func:`enqueue_step`,
:func:`job_scores`, :func:`jobs_of_subjects`, :func:`pending_fallbacks` (:mod:`.jobs`);
:func:`lease`, :func:`hand_out`, :func:`return_unsent` (:mod:`.leases`);
:func:`submit_result` (:mod:`.results`); :func:`expire_due`, :func:`fallback_due`,
:func:`next_deadline_ms`, :func:`lease_due_ms`, :func:`wait_due_ms` (:mod:`.timers`);
:func:`settle_trusted` (:mod:`.fallback`);
:func:`fix_draw_rounds`, :func:`due_draws`, :func:`decide_draw`, :func:`pending_rescores`,
:func:`settle_rescore` (:mod:`.rescores`);
:func:`status` (:mod:`.status`); :func:`leaderboard_rows`, :func:`standing_of`
(:mod:`.leaderboard`). Tables: ``0008_compute.sql`` (the leaderboard's index: ``0019``),
``0020_compute_rescores.sql``.

Hidden-trace shards (issue 19 items 4 and 5; ``0021_hidden_slices.sql``): :mod:`.slices`
(a hidden step as one job per slice of its window, one slice of a window per node, the
rotation's retirement of old windows; imported from there, not re-exported) and
:mod:`.combined` (a sliced step read as one job, its score the exact combination of its
slices': :func:`job_scores` and :func:`jobs_of_subjects` return it).

Life of a step: ``enqueue_step`` -> two queued copies -> ``lease`` (two nodes the pairing
rules allow together: not one account, not one network, not two young keys) ->
``submit_result`` x2 -> agreement (settled, both paid) | split (third copy, majority, minority
struck) | fallback (``fallback_due``/rules -> the trusted evaluator -> ``settle_trusted``).
A step settled by agreement may then be drawn by the beacon (``fix_draw_rounds``,
``decide_draw``) and re-scored by the trusted evaluator (``settle_rescore``).
"""

from hypertrain.compute.answers import ERROR_TEXT_LIMIT, Answer, answer_of, parse_answer
from hypertrain.compute.draws import draw_round, is_drawn
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
from hypertrain.compute.leaderboard import leaderboard_rows, standing_of
from hypertrain.compute.leases import LeaseAsk, eligible_challenges, hand_out, lease, return_unsent
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
from hypertrain.compute.rescores import (
    decide_draw,
    due_draws,
    fix_draw_rounds,
    pending_rescores,
    rescore_state,
    settle_rescore,
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
    Standing,
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
    "Standing",
    "Submitted",
    "Verdict",
    "agree",
    "answer_of",
    "authenticate",
    "canonical_subject",
    "check_handle",
    "decide",
    "decide_draw",
    "draw_round",
    "due_draws",
    "eligible_challenges",
    "enqueue_step",
    "expire_due",
    "fallback_due",
    "fix_draw_rounds",
    "get_node",
    "hand_out",
    "is_drawn",
    "is_inconclusive",
    "is_node_key",
    "iso_ms",
    "job_scores",
    "jobs_of_subjects",
    "judge",
    "leaderboard_rows",
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
    "pending_rescores",
    "register_node",
    "rescore_state",
    "return_unsent",
    "secret_hash",
    "secret_matches",
    "settle_rescore",
    "settle_trusted",
    "standing_of",
    "status",
    "submit_result",
    "trace_event",
    "utc_day",
    "wait_due_ms",
    "within_tolerance",
]
