"""The wire shape of the dispute routes' answers (docs/auditor.md, "Disputes").

:mod:`.disputes` builds them as dicts (the dispute view is also a part of the round view,
:mod:`.viewwire`); these classes describe those dicts key for key, for ``GET /openapi.json``.
No field has a default: every key is written, null included (the converter omits a field equal
to its default). A resolved dispute's ``outcome`` is the free JSON the referee's Resolution
recorded.
"""

from __future__ import annotations

from typing import Any, Literal

from attrs import frozen

from hypertrain.coordinator.tables.disputes import DisputeState
from hypertrain.rounds.bisection import Level, Party, RefereeKind

__all__ = [
    "BisectTaken",
    "BisectView",
    "DisputeOpened",
    "DisputeResolved",
    "DisputeStageView",
    "DisputeView",
    "DisputesList",
    "PointView",
    "RefereeView",
]


@frozen
class PointView:
    """A canonical point (``layer`` and ``index`` null at the levels above them)."""

    level: Level
    t: int
    layer: int | None
    index: int | None


@frozen
class RefereeView:
    """What the referee decides, while the dispute is open."""

    kind: RefereeKind
    op_spec: str
    point: PointView | None
    agreed: PointView | None
    agreed_hash: str | None
    agreed_step: str | None
    miner_hash: str | None
    auditor_hash: str | None
    leaf: int | None
    inputs_hash: str


@frozen
class DisputeStageView:
    """The bisection stage the parties answer: ``interval`` ``[a, b]`` cut at ``points``."""

    level: Level
    t: int
    layer: int | None
    interval: tuple[int, int]
    N: int
    points: tuple[int, ...]
    deadline_round: int | None
    awaiting: tuple[Party, ...]


@frozen
class BisectView:
    """One Bisect posted, in order."""

    seq: int
    party: str
    role: Party
    level: Level
    t: int
    layer: int | None
    interval: tuple[int, int]
    N: int
    hashes: tuple[str, ...]
    received_round: int


@frozen
class DisputeView:
    """``GET /v1/runs/{id}/disputes/{dispute_id}`` (and each item of the list and of the
    round view's ``disputes``)."""

    dispute_id: str
    run_id: str
    w: int
    miner: str
    auditor: str
    job_id: str
    challenge_hash: str
    verdict_hash: str
    first_bad_leaf: int | None
    action: str
    state: DisputeState
    opened_round: int
    stage: DisputeStageView | None
    referee: RefereeView | None
    outcome: dict[str, Any] | None
    bisects: tuple[BisectView, ...]


@frozen
class DisputesList:
    """``GET /v1/runs/{id}/disputes``: the run's disputes the filters keep."""

    run_id: str
    disputes: tuple[DisputeView, ...]


@frozen
class DisputeOpened:
    """``POST /v1/runs/{id}/dispute``: the dispute's id and state."""

    dispute_id: str
    state: DisputeState


@frozen
class BisectTaken:
    """``POST /v1/runs/{id}/bisect``: the Bisect's order and where the dispute stands now."""

    dispute_id: str
    seq: int
    state: DisputeState
    stage: DisputeStageView | None
    referee: RefereeView | None


@frozen
class DisputeResolved:
    """``POST /v1/runs/{id}/resolution``: the loser."""

    dispute_id: str
    loser: Party
    state: Literal["resolved"]
