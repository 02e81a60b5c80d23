"""The coordinator's answers the miner reads (spec/protocol.md section 9), as frozen attrs classes.

Each class names the fields the miner reads and no others. :func:`read_answer` structures a
parsed answer through the one converter (:mod:`hypertrain.protocol.converter`) after keeping,
at every level of nesting, only the keys the class names:

- a field the miner reads is checked as strictly as the coordinator checks what it receives
  (types, hex, ranges); a missing or wrong one is a :class:`MinerProtocolError` that names the
  route and the field (``GET /v1/runs/{id}/rounds/0: RoundView body: $.now_round: required
  field missing``), never a ``KeyError`` deeper down;
- a field it does not read is ignored: answers grow (the round view carries scores, jobs, the
  posted envelopes...), and a miner keeps working against a coordinator that added some;
- signed envelopes (``round_open``, ``receipt``, ``manifest_envelope``) stay the JSON objects
  exactly as received, so :func:`~hypertrain.protocol.envelope.verify` checks every key of them.

The dispute answers (:class:`Reran`, :class:`DisputeOpened`, :class:`BisectPosted`,
:class:`DisputeView` and its :class:`DisputeStage` / :class:`DisputeOutcome`) follow the
contract of issue 14 (``notes/disputes-wire.md``); a stage's ``interval``, ``N`` and ``points``
are checked against each other (:meth:`DisputeStage.to_stage`), since the miner computes its
Bisect hashes at exactly those points.

The round view's ``assignment[]`` items are :class:`~hypertrain.rounds.assignment.Assignment`,
the class the miner derives its own with. Its audit fields (``audit_beacon_round``, ``selected``,
``jobs``) default to "absent": a coordinator that does not audit leaves them out. Each item of
``jobs`` stays raw JSON in the view and is read as a :class:`ViewJob` on its own by the audit
server, so one malformed job is that job's problem, never the round loop's.
"""

from __future__ import annotations

import functools
import types
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

import attrs
from attrs import field, frozen

from hypertrain.miner.errors import MinerProtocolError
from hypertrain.protocol.converter import structure
from hypertrain.protocol.errors import SchemaError
from hypertrain.protocol.validators import hex64, optional, ss58, u_int
from hypertrain.rounds.assignment import Assignment
from hypertrain.rounds.bisection import Level, Party, Stage, points

__all__ = [
    "AlreadyCommitted",
    "BisectPosted",
    "Committed",
    "DatasetInfo",
    "DisputeBisect",
    "DisputeList",
    "DisputeOpened",
    "DisputeOutcome",
    "DisputeStage",
    "DisputeView",
    "LeavesAccepted",
    "Reran",
    "RoundView",
    "RunInfo",
    "RunListing",
    "RunRound",
    "RunsList",
    "ServeStored",
    "UploadGrant",
    "ViewJob",
    "ViewMiner",
    "ViewServe",
    "read_answer",
]

T = TypeVar("T")


@frozen
class RunListing:
    """An item of ``GET /v1/runs``."""

    run_id: str = field(validator=hex64)


@frozen
class RunsList:
    """``GET /v1/runs``."""

    runs: tuple[RunListing, ...]


@frozen
class RunRound:
    """An item of the run view's ``rounds``."""

    w: int = field(validator=u_int)


@frozen
class RunInfo:
    """``GET /v1/runs/{id}``: the owner-signed manifest envelope and the opened rounds."""

    manifest_envelope: dict[str, Any]
    rounds: tuple[RunRound, ...]


@frozen
class DatasetInfo:
    """``GET /v1/runs/{id}/dataset``: the sha256 of the registered dataset manifest."""

    manifest_sha256: str = field(validator=hex64)


@frozen
class ViewMiner:
    """An item of the round view's ``miners``."""

    hotkey: str
    status: str
    verdict: dict[str, Any] | None = None
    """The ReplayVerdict envelope of this miner's audit (null until posted)."""


@frozen
class RoundView:
    """``GET /v1/runs/{id}/rounds/{w}``, the parts the miner reads."""

    now_round: int = field(validator=u_int)
    """D, the latest beacon round the coordinator holds."""
    round_open: dict[str, Any]
    """The K_coord RoundOpen envelope."""
    base: int = field(validator=u_int)
    assignment: tuple[Assignment, ...] | None
    """Null before ``d_assign`` (or while its beacon round is not stored)."""
    assignment_beacon_signature: str | None
    state_sha256: str | None = field(validator=optional(hex64))
    """The published start-state blob of the round (null until published)."""
    miners: tuple[ViewMiner, ...]
    audit_beacon_round: int | None = field(default=None, validator=optional(u_int))
    """d_audit; absent (None) when the coordinator does not audit at all."""
    selected: tuple[str, ...] | None = None
    """The hotkeys the audit draw selected; None before the draw ran (D < d_audit)."""
    jobs: tuple[dict[str, Any], ...] = ()
    """The round's audit jobs, raw (each read as a :class:`ViewJob` by the audit server)."""


@frozen
class ViewServe:
    """An item of a job's ``serves``: a StateServe the coordinator stored."""

    t: int = field(validator=u_int)
    blob_sha256: str = field(validator=hex64)


@frozen
class ViewJob:
    """An item of the round view's ``jobs``: one audit of ``target`` in this round."""

    id: str
    target: str
    state: str
    challenge: dict[str, Any]
    """The K_coord-sealed AuditChallenge envelope."""
    challenge_hash: str = field(validator=hex64)
    serves: tuple[ViewServe, ...] = ()


@frozen
class ServeStored:
    """``POST /v1/runs/{id}/state`` (200): the coordinator stored the StateServe."""

    challenge_hash: str = field(validator=hex64)
    t: int = field(validator=u_int)
    stored: bool


@frozen
class Committed:
    """``POST /v1/runs/{id}/commit`` (200): the status and the K_coord Receipt envelope."""

    status: Literal["COMMITTED", "EXCLUDED"]
    receipt: dict[str, Any]


@frozen
class AlreadyCommitted:
    """The 409 of a Commit posted again: the Receipt envelope stored for the first post."""

    receipt: dict[str, Any]


@frozen
class LeavesAccepted:
    """``POST /v1/runs/{id}/leaves``: the root the coordinator computed."""

    leaves_root: str = field(validator=hex64)


@frozen
class UploadGrant:
    """``POST /v1/runs/{id}/uploads``: where to PUT the payload (relative to the API)."""

    url: str


@frozen
class Reran:
    """``POST /v1/runs/{id}/rerun``: how the coordinator classified the rerun."""

    w: int = field(validator=u_int)
    hotkey: str = field(validator=ss58)
    classification: Literal["TRANSIENT", "CONTEST", "FAULT"]


@frozen
class DisputeOpened:
    """``POST /v1/runs/{id}/dispute``: the dispute's id and state."""

    dispute_id: str = field(validator=hex64)
    state: Literal["open", "accepted"]


@frozen
class DisputeStage:
    """A dispute view's ``stage``: the bisection round waiting for Bisects."""

    level: Level
    interval: tuple[int, int]
    N: int = field(validator=u_int)
    points: tuple[int, ...]
    deadline_round: int = field(validator=u_int)
    awaiting: tuple[Party, ...]
    t: int | None = field(default=None, validator=optional(u_int))
    layer: int | None = field(default=None, validator=optional(u_int))

    def to_stage(self) -> Stage:
        """The :class:`~hypertrain.rounds.bisection.Stage`; ValueError when the interval, N
        and points do not agree (the miner hashes exactly at ``points``)."""
        a, b = self.interval
        if list(self.points) != points(a, b, self.N):
            raise ValueError(f"stage points {list(self.points)} are not those of [{a}, {b}]")
        if (self.level != "step" and self.t is None) or (self.level == "op") != (
            self.layer is not None
        ):
            raise ValueError(f"a {self.level} stage with t={self.t}, layer={self.layer}")
        if self.level == "step":
            return Stage("step", a, b, self.N)
        return Stage(self.level, a, b, self.N, self.t, self.layer)

    def key(self) -> tuple[str, int, int, int, int | None, int | None]:
        """What identifies the stage (its journal line, a Bisect's target)."""
        return (self.level, *self.interval, self.N, self.t, self.layer)


@frozen
class DisputeOutcome:
    """A dispute view's ``outcome``: who lost and why."""

    loser: str = field(validator=ss58)
    loser_role: Party
    cause: str
    op_spec: str | None = None
    resolved_round: int | None = field(default=None, validator=optional(u_int))
    reason: str | None = None


@frozen
class DisputeBisect:
    """An item of a dispute view's ``bisects``."""

    seq: int = field(validator=u_int)
    role: Party
    level: Level
    interval: tuple[int, int]
    N: int = field(validator=u_int)


@frozen
class DisputeView:
    """``GET /v1/runs/{id}/disputes/{dispute_id}`` (an item of the disputes list)."""

    dispute_id: str = field(validator=hex64)
    w: int = field(validator=u_int)
    miner: str = field(validator=ss58)
    auditor: str = field(validator=ss58)
    verdict_hash: str = field(validator=hex64)
    first_bad_leaf: int | None = field(validator=optional(u_int))
    action: Literal["accept", "contest"]
    state: Literal["open", "accepted", "resolved"]
    stage: DisputeStage | None = None
    referee: dict[str, Any] | None = None
    outcome: DisputeOutcome | None = None
    bisects: tuple[DisputeBisect, ...] = ()


@frozen
class DisputeList:
    """``GET /v1/runs/{id}/disputes``."""

    disputes: tuple[DisputeView, ...]


@frozen
class BisectPosted:
    """``POST /v1/runs/{id}/bisect``: the dispute after this Bisect."""

    dispute_id: str = field(validator=hex64)
    state: Literal["open", "accepted", "resolved"]
    seq: int | None = field(default=None, validator=optional(u_int))
    stage: DisputeStage | None = None


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls)


def _known(tp: Any, data: object) -> object:
    """``data`` keeping, in each object typed by an attrs class, only the keys it names."""
    if attrs.has(tp):
        if not isinstance(data, dict):
            return data  # the converter names the wrong type
        hints = _hints(tp)
        return {
            f.name: _known(hints[f.name], data[f.name]) for f in attrs.fields(tp) if f.name in data
        }
    origin, args = get_origin(tp), get_args(tp)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis and isinstance(data, list):
        return [_known(args[0], item) for item in data]
    if origin in (Union, types.UnionType) and data is not None:
        members = [a for a in args if a is not type(None)]
        if len(members) == 1:
            return _known(members[0], data)
    return data


def read_answer(cls: type[T], data: object, where: str) -> T:
    """``data``, the parsed answer of ``where`` (``"GET /v1/runs"``), as a ``cls``.

    Unknown keys are dropped first (module docstring); MinerProtocolError names the field that
    is missing or wrong.
    """
    try:
        return structure(cls, _known(cls, data))
    except SchemaError as e:
        raise MinerProtocolError(f"{where}: {e.detail}") from e
