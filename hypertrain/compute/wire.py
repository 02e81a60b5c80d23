"""The compute network's wire: every body a node and the coordinator exchange, as frozen attrs
classes that both sides encode and decode through the one converter
(:func:`~hypertrain.protocol.converter.structure` / :func:`~hypertrain.protocol.converter.
unstructure`; STYLE item 9). The coordinator's routes (:mod:`hypertrain.coordinator.web.compute`)
and the node (:mod:`hypertrain.node`) import these classes and nothing else for these bodies.

- ``POST /v1/compute/register``: :class:`RegisterRequest` -> :class:`RegisterAnswer`;
- ``POST /v1/compute/jobs/lease``: :class:`LeaseRequest` -> :class:`LeaseAnswer` (403
  :class:`DisabledAnswer` for a node disabled by its strikes);
- ``GET /v1/compute/jobs/{id}/inputs/{name}``: the lease token in :data:`LEASE_HEADER` -> the
  input's bytes;
- ``POST /v1/compute/jobs/{id}/result``: :class:`ResultPost` -> :data:`ResultAnswer` (409
  and 410 :class:`ErrorAnswer`);
- ``GET /v1/compute/leaderboard/{node}``: -> :class:`Standing` (the leaderboard's pages list
  the same rows).

Every error answer is an :class:`ErrorAnswer` (``{"detail": ...}``). The JSON of each class,
field by field and in this order::

    RegisterRequest {key, handle, capabilities, hardware, account?}   the four always sent
                                                               (may be null); account: a key
                                                               of the account a mint joins
    RegisterAnswer  {id, handle, capabilities, hardware, jobs_done, credits, compute_credits,
                     last_seen, node_id, probation, strikes_today, network_strikes_today,
                     key?}                                     key only when it was just minted
    LeaseRequest    {capabilities, hardware, wait_ms?}         wait_ms 0..LONG_POLL_MS
    LeaseAnswer     {job: LeaseGrant | null}
    LeaseGrant      {id, job, challenge, base, step, trace, inputs: [InputFile], step_budget_ms,
                     kill_after_ms, memory_bytes, version, objective, lease, deadline_ms,
                     window?}                         window: a slice's hidden window (sha256)
    InputFile       {name, sha256, size}
    DisabledAnswer  {detail, reenable_at_ms, reenable_at}
    ResultPost      {lease, ok, result?, class?, error?, busy?, next?: LeaseRequest, window?}
    Standing        {rank, id, handle, compute_credits, jobs_done, strikes, agreement_ppm
                     (null before any verdict), last_seen}     a leaderboard row
    ResultAnswer    {copy, status: "released" | "held", next?: LeaseAnswer}
                  | {copy, status: "judged", verdict, compute_credits, next?}
                  | {copy, status: "counted", verdict (null until settled), job_state,
                     compute_credits, next?}

A result post may carry the node's next lease request (``next``), so that one request both
answers a copy and leases the next (issue 17 goal 3): the 200 answer then carries that lease's
answer under ``next`` (a copy, or ``{"job": null}`` after the poll's ``wait_ms``). ``next`` is
absent from the answer when no lease was taken: none was asked, the result was not answered
200, the node is disabled by now, or the daemon is stopping; the node then leases the plain
way (which answers the 403 or 503 that says why).

Decoding is strict (the converter's rules: unknown keys refused, ints are ints within
0..2^53-1 where they count something, never bools, strings are strings) and each class checks
its fields, so a refusal names the field (``LeaseAnswer body: $.job.inputs[0].name: ...``):
copy ids and input names are safe file names (:func:`~hypertrain.scoring.inputs.
check_input_name`: no ``/``, no ``..``), digests 64 lower-case hex characters, a grant's
inputs non-empty with distinct names, tokens non-empty. A request field that may be absent
takes its default; a field that is null on the wire is ``None``. What a result's ``result``
object must hold depends on the job's challenge and is checked by
:func:`~hypertrain.compute.answers.answer_of`; the capability list and the hardware class are
normalised by the book (:func:`~hypertrain.compute.nodes.normalise_capabilities`).

Pure: no clock, no I/O.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

import attrs
from cattrs.gen import override

from hypertrain.protocol.converter import structure
from hypertrain.protocol.errors import SchemaError
from hypertrain.protocol.validators import (
    Check,
    FieldError,
    hex64,
    instance_of,
    int_in,
    list_of,
    optional,
    u_int,
)
from hypertrain.scoring.inputs import BadInput, check_input_name

__all__ = [
    "BODY_LIMIT",
    "LEASE_HEADER",
    "LONG_POLL_MS",
    "BenchmarkRequest",
    "DisabledAnswer",
    "ErrorAnswer",
    "InputFile",
    "JobState",
    "LeaseAnswer",
    "LeaseGrant",
    "LeaseRequest",
    "RegisterAnswer",
    "RegisterRequest",
    "ResultAnswer",
    "ResultCounted",
    "ResultJudged",
    "ResultPost",
    "ResultStatus",
    "Standing",
    "Trace",
    "Verdict",
    "read_result_answer",
]

BODY_LIMIT: Final = 64 * 1024
"""Largest body of a compute request (the node document's 64 KB)."""
LONG_POLL_MS: Final = 25_000
"""Longest (and default) hold of a lease request."""
LEASE_HEADER: Final = "X-HT-Lease"
"""The header that carries a copy's lease token on input downloads."""

Trace = Literal["public", "hidden"]
Verdict = Literal["paid", "struck", "none"]
JobState = Literal["queued", "settled", "fallback", "unscored"]

_SENT: Final = override(omit_if_default=False)
"""A field written even when it holds its default (the wire shape has it always)."""


def _safe_name(value: object) -> bool:
    try:
        check_input_name(value)
    except BadInput:
        return False
    return True


_file_name: Final = Check(_safe_name, "must be [A-Za-z0-9][A-Za-z0-9._-]{0,63} without '..'")
_non_empty: Final = Check(lambda v: isinstance(v, str) and v != "", "must be a non-empty string")


def _object_or_null(value: object, _tp: object) -> dict[str, Any] | None:
    """A JSON object (kept as the dict it is) or null."""
    if value is not None and not isinstance(value, dict):
        raise TypeError(f"expected an object or null, got {type(value).__name__}")
    return value


@attrs.frozen
class InputFile:
    """One input file of a job: the name the scorer opens, its sha256 and its size in bytes."""

    name: str = attrs.field(validator=_file_name)
    sha256: str = attrs.field(validator=hex64)
    size: int = attrs.field(validator=u_int)


def _distinct_inputs(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    list_of(instance_of(InputFile), min_len=1)(_inst, attribute, value)
    assert isinstance(value, tuple)
    names = [item.name for item in value]
    if len(set(names)) != len(names):
        raise FieldError(attribute.name, "input names must be distinct")


@attrs.frozen(kw_only=True)
class BenchmarkRequest:
    """``POST /v1/admin/compute/benchmark``: the run to measure on (none: the only running one)."""

    run_id: str | None = None


@attrs.frozen(kw_only=True)
class RegisterRequest:
    """``POST /v1/compute/register``: a key to attach (none: mint one), a handle, the profile."""

    key: Annotated[str | None, _SENT] = None
    handle: Annotated[str | None, _SENT] = None
    capabilities: Annotated[tuple[str, ...], _SENT] = ()
    hardware: Annotated[str | None, _SENT] = None
    account: str | None = None
    """A key of the account a newly minted key joins (none: a new account)."""


@attrs.frozen(kw_only=True)
class RegisterAnswer:
    """The node's public record, and ``key`` when this call minted it (the only time a key is
    ever sent)."""

    id: str
    handle: str
    capabilities: tuple[str, ...]
    hardware: str
    jobs_done: int = attrs.field(validator=u_int)
    credits: int = attrs.field(validator=u_int)
    compute_credits: int = attrs.field(validator=u_int)
    last_seen: int = attrs.field(validator=u_int)
    node_id: str = attrs.field(validator=_non_empty)
    probation: Annotated[int, _SENT] = attrs.field(default=0, validator=u_int)
    """Agreed answers the node still owes before it earns (0: not on probation)."""
    strikes_today: Annotated[int, _SENT] = attrs.field(default=0, validator=u_int)
    network_strikes_today: Annotated[int, _SENT] = attrs.field(default=0, validator=u_int)
    """Strikes of the current UTC day of every lease from the node's network."""
    key: str | None = attrs.field(default=None, repr=False)


@attrs.frozen(kw_only=True)
class Standing:
    """A node's row on the leaderboard (:mod:`hypertrain.compute.leaderboard` says each field)."""

    rank: int = attrs.field(validator=u_int)
    id: str
    handle: str
    compute_credits: int = attrs.field(validator=u_int)
    jobs_done: int = attrs.field(validator=u_int)
    strikes: int = attrs.field(validator=u_int)
    agreement_ppm: Annotated[int | None, _SENT] = attrs.field(
        default=None, validator=optional(int_in(0, 1_000_000))
    )
    last_seen: int = attrs.field(validator=u_int)


@attrs.frozen(kw_only=True)
class LeaseRequest:
    """``POST /v1/compute/jobs/lease``: the node's profile (replacing the stored one) and how
    long to hold the poll (default :data:`LONG_POLL_MS`)."""

    capabilities: Annotated[tuple[str, ...], _SENT] = ()
    hardware: Annotated[str | None, _SENT] = None
    wait_ms: int | None = attrs.field(default=None, validator=optional(int_in(0, LONG_POLL_MS)))


@attrs.frozen(kw_only=True)
class LeaseGrant:
    """Everything a node needs to run one copy; ``token`` is shown only here, once."""

    copy_id: Annotated[str, override(rename="id")] = attrs.field(validator=_file_name)
    job_id: Annotated[str, override(rename="job")] = attrs.field(validator=_non_empty)
    challenge: str = attrs.field(validator=_non_empty)
    base: str = attrs.field(validator=_non_empty)
    step: str
    """``<job>/<trace>``, shown to the volunteer only."""
    trace: Trace
    inputs: tuple[InputFile, ...] = attrs.field(validator=_distinct_inputs)
    step_budget_ms: int = attrs.field(validator=u_int)
    kill_after_ms: int = attrs.field(validator=u_int)
    memory_bytes: int = attrs.field(validator=u_int)
    version: int = attrs.field(validator=u_int)
    objective: str = attrs.field(validator=_non_empty)
    token: Annotated[str, override(rename="lease")] = attrs.field(validator=_non_empty, repr=False)
    deadline_ms: int = attrs.field(validator=u_int)
    window: str | None = attrs.field(default=None, validator=optional(hex64))
    """A slice of a hidden step only: the sha256 of its hidden window (the node echoes it in
    its result, so that a result scored on a stale window is refused)."""

    @property
    def label(self) -> str:
        """``<challenge>/<trace>``, for the volunteer's lines."""
        return f"{self.challenge}/{self.trace}"


@attrs.frozen
class LeaseAnswer:
    """A lease answer: the granted copy, or ``None`` when nothing came within the poll."""

    job: LeaseGrant | None


@attrs.frozen(kw_only=True)
class DisabledAnswer:
    """The lease's 403 for a node disabled by its strikes: when it may lease again."""

    detail: str
    reenable_at_ms: int = attrs.field(validator=u_int)
    reenable_at: str


@attrs.frozen(kw_only=True)
class ResultPost:
    """``POST /v1/compute/jobs/{id}/result``: the copy's lease token and its answer.

    ``ok: true`` carries ``result`` (the scorer's output object); ``ok: false`` carries the
    failure ``class`` and an ``error`` text, or ``busy: true`` when the node gives the copy
    back without a verdict. ``next``: the node's next lease request, taken in the same
    transaction once the result is answered 200 (module doc).
    """

    lease: str = attrs.field(validator=_non_empty, repr=False)
    ok: bool
    result: Annotated[dict[str, Any] | None, override(struct_hook=_object_or_null)] = None
    class_: Annotated[str | None, override(rename="class")] = None
    error: str | None = None
    busy: bool = False
    next: LeaseRequest | None = None
    window: str | None = attrs.field(default=None, validator=optional(hex64))
    """The hidden window the answer was scored on (the grant's ``window``), for a slice."""


@attrs.frozen(kw_only=True)
class ResultStatus:
    """A result kept without a verdict: ``released`` (busy: the copy went back to the queue)
    or ``held`` (the step waits for the fallback, which judges it)."""

    copy: str
    status: Literal["released", "held"]
    next: LeaseAnswer | None = None
    """The lease asked with the result (``ResultPost.next``), when one was taken."""


@attrs.frozen(kw_only=True)
class ResultJudged:
    """A result judged at once against the fallback's settled answer."""

    copy: str
    status: Literal["judged"]
    verdict: Verdict
    compute_credits: int = attrs.field(validator=u_int)
    next: LeaseAnswer | None = None


@attrs.frozen(kw_only=True)
class ResultCounted:
    """A result counted towards its step's agreement; ``verdict`` is None until the step is
    settled."""

    copy: str
    status: Literal["counted"]
    verdict: Verdict | None
    job_state: JobState
    compute_credits: int = attrs.field(validator=u_int)
    next: LeaseAnswer | None = None


ResultAnswer = ResultStatus | ResultJudged | ResultCounted
"""The 200 answer to a result post, one shape per ``status``."""

_ANSWER_OF_STATUS: Final[dict[str, type[ResultStatus | ResultJudged | ResultCounted]]] = {
    "released": ResultStatus,
    "held": ResultStatus,
    "judged": ResultJudged,
    "counted": ResultCounted,
}


def read_result_answer(data: object) -> ResultAnswer:
    """The :data:`ResultAnswer` of a decoded JSON body, by its ``status``; ``SchemaError``
    naming the field otherwise."""
    status = data.get("status") if isinstance(data, dict) else None
    cls = _ANSWER_OF_STATUS.get(status) if isinstance(status, str) else None
    if cls is None:
        shown = ", ".join(repr(s) for s in _ANSWER_OF_STATUS)
        raise SchemaError(f"ResultAnswer body: $.status: must be one of {shown}")
    return structure(cls, data)


@attrs.frozen
class ErrorAnswer:
    """Every refusal: ``{"detail": "..."}`` (and a 410 for a result that counts for nothing)."""

    detail: str
