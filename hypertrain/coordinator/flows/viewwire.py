"""The wire shape of the hot public views: the run view, the roster view and the round view.

These views are built as dicts and encoded once per change through the answer cache (the
round view splices its pre-encoded ``assignment``: :mod:`.compactjson`,
:class:`~hypertrain.coordinator.flows.roundview.EncodedAssignment`), so they are not built
through these classes: the classes describe the bytes those builders write, key for key, for
``GET /openapi.json``, and ``tests/coordinator/test_openapi.py`` checks the real answers of
each route against them (schema and a round trip through the converter), so a key added to a
builder without its field here fails that test.

No field has a default: the views write every key, null included, and the converter omits a
field equal to its default. Where a key exists only with ``full`` (the round view's per-miner
envelopes and verdict), the item is one of two classes (:class:`RoundMiner`,
:class:`RoundMinerFull`). Envelopes are :class:`~hypertrain.protocol.envelope.Envelope`; the
bodies a stored job or dispute carries as free JSON (a job's ``subject`` and ``result``, a
dispute's ``outcome``) are objects.
"""

from __future__ import annotations

from typing import Any

from attrs import frozen

from hypertrain.coordinator.flows.disputewire import DisputeView
from hypertrain.coordinator.flows.pages import PageAt
from hypertrain.coordinator.tables.runs import RosterCounts, RosterRow
from hypertrain.protocol.envelope import Envelope
from hypertrain.rounds.assignment import Assignment
from hypertrain.rounds.deadlines import RunConfig
from hypertrain.rounds.states import RoundState

__all__ = [
    "AuditJobView",
    "FinalEntryView",
    "FinalView",
    "MinerScore",
    "RerunView",
    "RollbackView",
    "RosterView",
    "RoundMiner",
    "RoundMinerFull",
    "RoundOfRun",
    "RoundView",
    "RunView",
    "ScoringJobView",
    "ServeView",
]


@frozen
class RoundOfRun:
    """One round of the run view: its index and state at D."""

    w: int
    state: RoundState


@frozen
class RunView:
    """``GET /v1/runs/{id}``: the run, its config and manifest, D, a page of its rounds (newest
    first) and the roster's counts."""

    run_id: str
    status: str
    config: RunConfig | None
    manifest_envelope: Envelope
    now_round: int
    rounds: tuple[RoundOfRun, ...]
    page: PageAt
    roster_counts: RosterCounts


@frozen
class RosterView:
    """``GET /v1/runs/{id}/roster``: a page of the run's roster rows, by hotkey."""

    run_id: str
    roster: tuple[RosterRow, ...]
    page: PageAt


@frozen
class MinerScore:
    """A miner's delta-loss job of one step (``loss`` the objective's f32 hex)."""

    job: str
    state: str
    how: str | None
    ok: bool | None
    loss: str | None
    fingerprint: str | None


@frozen
class RerunView:
    """A MISMATCHed miner's rerun."""

    leaves_root: str
    classification: str
    epoch: int
    rerun_round: int


@frozen
class RoundMiner:
    """A miner of the round view, without ``full``."""

    hotkey: str
    slot: int
    status: str
    selected: bool
    received_round: int | None
    delta_hash: str | None
    rerun: RerunView | None
    scores: dict[str, MinerScore]
    soft_score_ppm: int


@frozen
class RoundMinerFull(RoundMiner):
    """A miner of the round view with ``full``: also its envelopes (null until posted) and its
    verdict (the view writes them after ``delta_hash``; JSON keys have no order)."""

    commit: Envelope | None
    receipt: Envelope | None
    delta_manifest: Envelope | None
    verdict: Envelope | None


@frozen
class ServeView:
    """A state served to an audit."""

    t: int
    blob_sha256: str


@frozen
class AuditJobView:
    """An audit job of the round (``state`` ``waiting`` while a queued job cannot be leased)."""

    id: str
    target: str
    state: str
    result: str | None
    challenge: Envelope
    challenge_hash: str
    serves: tuple[ServeView, ...]
    attempts: int
    auditor: str | None
    verdict_round: int | None


@frozen
class ScoringJobView:
    """A delta-loss job's settled view (``Job.score_json``)."""

    job: str
    challenge: str
    version: int
    subject: dict[str, Any]
    step: str
    state: str
    how: str | None
    result: dict[str, Any] | None
    settled_ms: int | None


@frozen
class RollbackView:
    """Rounds w and w + 1 recomputed without the faulted miners."""

    envelope: Envelope
    excluded: tuple[str, ...]
    old_tapes: tuple[str, str]
    new_tapes: tuple[str, str]
    recorded_round: int


@frozen
class FinalEntryView:
    """A committed miner's ledger entry."""

    verdict: str
    tokens: int
    soft_score_ppm: int


@frozen
class FinalView:
    """The round's Finalize record (:func:`~hypertrain.coordinator.flows.roundview.final_json`)."""

    envelope: Envelope
    entries: dict[str, FinalEntryView]
    final_round: int
    at: int
    ledger_round: int
    vesting_round: int
    released_round: int
    ledger_synced: bool


@frozen
class RoundView:
    """``GET /v1/runs/{id}/rounds/{w}`` (:func:`~hypertrain.coordinator.flows.roundview.
    round_view` says each key)."""

    run_id: str
    w: int
    state: RoundState
    now_round: int
    round_open: Envelope
    base: int
    state_sha256: str | None
    v0_sha256: str | None
    tape_key: str | None
    update_norm: float | None
    clipped: int | None
    heldout_loss: float | None
    heldout_loss_after: float | None
    assignment: tuple[Assignment, ...] | None
    assignment_beacon_round: int
    assignment_beacon_signature: str | None
    audit_beacon_round: int
    audit_beacon_signature: str | None
    selected: tuple[str, ...] | None
    miners: tuple[RoundMiner | RoundMinerFull, ...]
    page: PageAt | None
    jobs: tuple[AuditJobView, ...]
    scoring_jobs: tuple[ScoringJobView, ...]
    forfeits: tuple[Envelope, ...]
    disputes: tuple[DisputeView, ...]
    rollback: RollbackView | None
    finalize: FinalView | None
