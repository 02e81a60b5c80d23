"""A dispute as the auditor sees it (spec 6.4, issue 14): the view it reads, what it owes,
where its recomputation starts, and the bodies it signs.

The coordinator runs the bisection (:mod:`hypertrain.rounds.bisection`); an auditor takes part
in two ways, decided here from the :class:`DisputeView` alone:

- **party** (:func:`owed_stage`): in an open dispute against its own verdict (``auditor`` is
  its ss58) whose current ``stage`` awaits ``"auditor"``, it owes the ``N + 1`` hashes of the
  stage's points from its own recomputation (:func:`bisect_of`). The stage is rebuilt from the
  view and its points must be ``p_j = a + ceil(j (b - a) / N)``, else the view is refused;
- **referee** (:func:`owed_ruling`): in an open dispute waiting for its referee, unless the
  disputed auditor is itself (a referee is never a party: a run needs two auditors for one),
  it decides the :class:`~hypertrain.rounds.bisection.RefereeCase` from an honest
  recomputation and signs the Resolution (:func:`resolution_of`): ``op_spec`` the case's,
  ``inputs_hash = bisection.inputs_hash(agreed_step, agreed_hash)``, ``output_hash`` its own
  value at the disputed point, ``loser`` the losing role's ss58. A leaf case compares the
  rebuilt leaf with the committed one, ``job.leaves[leaf]`` (:func:`committed_leaf`).

Both recompute round ``w`` from the inputs of the disputed job (``GET /v1/worker/jobs/{id}``),
checked as the audit checks them (:func:`recompute_start`):

- full mode: the public round start (the start theta, which must hash to the RoundOpen's
  ``theta_hash``, a reset optimizer state, ``t = 0``), what the audit replays;
- segments mode: the served state at the start ``a*J`` of the challenged window ``[a, b]``
  that holds the disputed leaf ``k`` (``a < k <= b``), whose serve must pass
  :func:`~hypertrain.auditor.checks.check_serves`.

Pure: no trio, no httpx, no torch (:class:`Recomputer` is the torch side's protocol,
:class:`hypertrain.auditor.replayer.TorchReplayer` the real one).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol

import attrs
from attrs import field, frozen

from hypertrain.auditor.checks import check_serves, serve_blob_shas
from hypertrain.auditor.errors import DisputeError
from hypertrain.auditor.job import AuditJob
from hypertrain.auditor.verdict import Samples, start_theta
from hypertrain.protocol.converter import structure
from hypertrain.protocol.envelope import CLIENT_EXP, Envelope, seal
from hypertrain.protocol.errors import SchemaError
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.messages import Bisect, Resolution
from hypertrain.protocol.validators import hex64, optional, ss58, text, u_int
from hypertrain.rounds.bisection import (
    Level,
    Party,
    Point,
    RefereeCase,
    RefereeKind,
    Ruling,
    Stage,
    inputs_hash,
    points,
    stage_points,
)
from hypertrain.rounds.segments import Window
from hypertrain.trainer.state import TrainState

__all__ = [
    "DisputeState",
    "DisputeView",
    "PointView",
    "Recomputation",
    "RecomputeStart",
    "Recomputer",
    "RefereeView",
    "StageView",
    "bisect_of",
    "check_job_of",
    "committed_leaf",
    "disputed_window",
    "owed_ruling",
    "owed_stage",
    "read_dispute",
    "recompute_start",
    "resolution_of",
    "seal_bisect",
    "seal_resolution",
    "stage_of",
    "start_blob_shas",
]

DisputeState = Literal["open", "accepted", "resolved"]


@frozen
class PointView:
    """A point of the view (``{level, t, layer, index}``)."""

    level: Level
    t: int = field(validator=u_int)
    layer: int | None = field(default=None, validator=optional(u_int))
    index: int | None = field(default=None, validator=optional(u_int))

    def point(self) -> Point:
        return Point(self.level, self.t, self.layer, self.index)


@frozen
class StageView:
    """The bisection round waiting for Bisects."""

    level: Level
    interval: tuple[int, int]
    N: int = field(validator=u_int)
    points: tuple[int, ...]
    awaiting: tuple[Party, ...]
    t: int | None = field(default=None, validator=optional(u_int))
    layer: int | None = field(default=None, validator=optional(u_int))
    deadline_round: int | None = field(default=None, validator=optional(u_int))


@frozen
class RefereeView:
    """The case waiting for its Resolution (:class:`~hypertrain.rounds.bisection.RefereeCase`
    fields)."""

    kind: RefereeKind
    op_spec: str = field(validator=text(256))
    point: PointView | None = None
    agreed: PointView | None = None
    agreed_hash: str | None = field(default=None, validator=optional(hex64))
    agreed_step: str | None = field(default=None, validator=optional(hex64))
    miner_hash: str | None = field(default=None, validator=optional(hex64))
    auditor_hash: str | None = field(default=None, validator=optional(hex64))
    leaf: int | None = field(default=None, validator=optional(u_int))

    def case(self) -> RefereeCase:
        return RefereeCase(
            kind=self.kind,
            point=None if self.point is None else self.point.point(),
            op_spec=self.op_spec,
            miner_hash=self.miner_hash,
            auditor_hash=self.auditor_hash,
            agreed=None if self.agreed is None else self.agreed.point(),
            agreed_hash=self.agreed_hash,
            agreed_step=self.agreed_step,
            leaf=self.leaf,
        )


@frozen
class DisputeView:
    """What the auditor reads of a DisputeView (``GET /v1/runs/{id}/disputes``)."""

    dispute_id: str = field(validator=hex64)
    run_id: str = field(validator=hex64)
    w: int = field(validator=u_int)
    miner: str = field(validator=ss58)
    auditor: str = field(validator=ss58)
    job_id: str = field(validator=text(64))
    state: DisputeState
    challenge_hash: str | None = field(default=None, validator=optional(hex64))
    first_bad_leaf: int | None = field(default=None, validator=optional(u_int))
    stage: StageView | None = None
    referee: RefereeView | None = None


def _pick(cls: type, data: object) -> object:
    if not isinstance(data, dict):
        return data  # the converter names the wrong type
    return {f.name: data[f.name] for f in attrs.fields(cls) if f.name in data}


def read_dispute(data: object) -> DisputeView:
    """One DisputeView, keeping the keys named here (the view may grow); DisputeError naming
    the field that does not parse."""
    picked = _pick(DisputeView, data)
    if isinstance(picked, dict):
        if isinstance(picked.get("stage"), dict):
            picked["stage"] = _pick(StageView, picked["stage"])
        referee = picked.get("referee")
        if isinstance(referee, dict):
            referee = _pick(RefereeView, referee)
            assert isinstance(referee, dict)
            for key in ("point", "agreed"):
                if isinstance(referee.get(key), dict):
                    referee[key] = _pick(PointView, referee[key])
            picked["referee"] = referee
    try:
        return structure(DisputeView, picked)
    except SchemaError as e:
        name = data.get("dispute_id") if isinstance(data, dict) else None
        raise DisputeError(str(name or "?"), f"view: {e.detail}") from e


def stage_of(view: DisputeView, n_layers: int) -> Stage:
    """The view's stage as a :class:`~hypertrain.rounds.bisection.Stage`; DisputeError when
    it has none, or its interval, step, layer or points are not a stage's."""
    sv = view.stage
    if sv is None:
        raise DisputeError(view.dispute_id, "it is not at a bisection stage")
    a, b = sv.interval
    where: dict[str, int] = {}
    if sv.level != "step":
        if sv.t is None:
            raise DisputeError(view.dispute_id, f"a {sv.level} stage without its step")
        where["t"] = sv.t
    if sv.level == "op":
        if sv.layer is None:
            raise DisputeError(view.dispute_id, "an op stage without its layer")
        where["layer"] = sv.layer
    stage = Stage(sv.level, a, b, sv.N, **where)
    try:
        want = points(a, b, sv.N)
        stage_points(n_layers, stage)
    except ValueError as e:
        raise DisputeError(view.dispute_id, f"stage {sv.level} [{a}, {b}]: {e}") from e
    if tuple(want) != sv.points:
        raise DisputeError(view.dispute_id, f"stage points {list(sv.points)} are not {want}")
    return stage


def owed_stage(view: DisputeView, me: str, n_layers: int) -> Stage | None:
    """The stage this auditor (``me``) owes a Bisect for, or None (module docstring)."""
    if view.state != "open" or view.auditor != me or view.stage is None:
        return None
    if "auditor" not in view.stage.awaiting:
        return None
    return stage_of(view, n_layers)


def owed_ruling(view: DisputeView, me: str) -> RefereeCase | None:
    """The case this auditor (``me``) may rule on, or None: the dispute is not waiting for
    its referee, or ``me`` is one of its parties (module docstring)."""
    if view.state != "open" or view.referee is None or me in (view.auditor, view.miner):
        return None
    return view.referee.case()


def check_job_of(view: DisputeView, job: AuditJob) -> None:
    """DisputeError unless ``job`` is the disputed one (id, run, round, target, and the
    challenge when the view names it)."""
    challenge = job.challenge_hash if view.challenge_hash is None else view.challenge_hash
    have = (job.id, job.run_id, job.w, job.target, job.challenge_hash)
    want = (view.job_id, view.run_id, view.w, view.miner, challenge)
    if have != want:
        raise DisputeError(view.dispute_id, f"job {job.id} is not the disputed audit")


def _leaf(view: DisputeView) -> int:
    k = view.first_bad_leaf
    if k is None or k < 1:
        raise DisputeError(view.dispute_id, f"first_bad_leaf {k} has nothing to recompute")
    return k


def disputed_window(view: DisputeView, job: AuditJob) -> Window:
    """The challenged window ``[a, b]`` with ``a < first_bad_leaf <= b`` (segments mode)."""
    k = _leaf(view)
    for a, b in sorted(job.challenge.segments):
        if a < k <= b:
            return a, b
    raise DisputeError(view.dispute_id, f"leaf {k} is in no challenged window")


def _window_serves(job: AuditJob, a: int) -> list[Mapping[str, Any]]:
    t = a * job.manifest.inner.J
    out: list[Mapping[str, Any]] = []
    for envelope in job.state_serves:
        body = envelope.get("body")
        if isinstance(body, Mapping) and body.get("t") == t:
            out.append(envelope)
    return out


def start_blob_shas(view: DisputeView, job: AuditJob) -> list[str]:
    """The blobs :func:`recompute_start` needs (what the adapter fetches, hash-checked)."""
    if job.challenge.mode == "full":
        _leaf(view)
        return [job.theta_start_sha256]
    a, _ = disputed_window(view, job)
    return serve_blob_shas(_window_serves(job, a))


@attrs.frozen(eq=False)
class RecomputeStart:
    """Where a recomputation of round ``w`` starts: inner step ``t`` and the state there (full
    mode: the start theta with ``m``, ``v``, ``step`` None, a reset optimizer state)."""

    t: int
    state: TrainState


def recompute_start(view: DisputeView, job: AuditJob, blobs: Mapping[str, bytes]) -> RecomputeStart:
    """The start of the recomputation (module docstring). ``blobs`` holds the blobs of
    :func:`start_blob_shas`; BadJob for a start theta that does not check, DisputeError for a
    served state that is missing or fails its checks."""
    if job.challenge.mode == "full":
        _leaf(view)
        if job.theta_start_sha256 not in blobs:
            raise DisputeError(view.dispute_id, "the start state was not fetched")
        return RecomputeStart(0, TrainState(start_theta(job, blobs[job.theta_start_sha256])))
    a, b = disputed_window(view, job)
    found = check_serves(job, _window_serves(job, a), blobs, [(a, b)])
    if found.failure is not None:
        raise DisputeError(view.dispute_id, found.failure)
    served = found.served.get(a)
    if served is None:
        t = a * job.manifest.inner.J
        raise DisputeError(view.dispute_id, f"no state served at t={t} (window [{a}, {b}])")
    return RecomputeStart(a * job.manifest.inner.J, served.state)


def committed_leaf(view: DisputeView, job: AuditJob, case: RefereeCase) -> str | None:
    """The committed digest of a leaf case's leaf (``job.leaves[leaf]``); None otherwise."""
    if case.kind != "leaf":
        return None
    if case.leaf is None or not 0 <= case.leaf < len(job.leaves):
        raise DisputeError(view.dispute_id, f"leaf case of leaf {case.leaf}, not a leaf")
    return job.leaves[case.leaf]


def bisect_of(view: DisputeView, stage: Stage, hashes: Sequence[str], party: str) -> Bisect:
    """The Bisect of ``stage`` with this party's ``hashes`` (``N + 1`` of them)."""
    if len(hashes) != stage.n + 1:
        raise DisputeError(view.dispute_id, f"{len(hashes)} hashes for N = {stage.n}")
    return Bisect(
        dispute_id=view.dispute_id,
        level=stage.level,
        interval=(stage.a, stage.b),
        N=stage.n,
        hashes=tuple(hashes),
        party=party,
    )


def seal_bisect(
    keypair: Keypair, view: DisputeView, stage: Stage, hashes: Sequence[str]
) -> Envelope:
    """:func:`bisect_of` signed by ``keypair`` (its ss58 is the party)."""
    body = bisect_of(view, stage, hashes, keypair.ss58)
    return seal(keypair, "Bisect", view.run_id, body, CLIENT_EXP)


def resolution_of(
    view: DisputeView, case: RefereeCase, ruling: Ruling, output_hash: str
) -> Resolution:
    """The Resolution of ``case`` (module docstring)."""
    return Resolution(
        dispute_id=view.dispute_id,
        op_spec=case.op_spec,
        inputs_hash=inputs_hash(case.agreed_step, case.agreed_hash),
        output_hash=output_hash,
        loser=view.miner if ruling.loser == "miner" else view.auditor,
    )


def seal_resolution(
    keypair: Keypair, view: DisputeView, case: RefereeCase, ruling: Ruling, output_hash: str
) -> Envelope:
    """:func:`resolution_of` signed by the referee ``keypair``."""
    body = resolution_of(view, case, ruling, output_hash)
    return seal(keypair, "Resolution", view.run_id, body, CLIENT_EXP)


class Recomputation(Protocol):
    """One party's recomputation of a round (:class:`hypertrain.trainer.recompute.Recompute`)."""

    def hashes(self, stage: Stage) -> list[str]:
        """The ``N + 1`` hashes of ``stage``'s points."""
        ...

    def judge(self, case: RefereeCase, committed_leaf: str | None = None) -> tuple[Ruling, str]:
        """The ruling on ``case`` and this recomputation's hash at the disputed point."""
        ...


class Recomputer(Protocol):
    """Builds recomputations (:class:`hypertrain.auditor.replayer.TorchReplayer`)."""

    def recompute(self, job: AuditJob, start: RecomputeStart, samples: Samples) -> Recomputation:
        """Round ``job.w`` recomputed from ``start`` over the job's assigned samples."""
        ...
