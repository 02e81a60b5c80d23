"""The public read view of a round (spec section 9), from one read transaction (the run views
are :mod:`~hypertrain.coordinator.flows.runview`).

- :func:`round_facts` + :func:`round_view`: ``GET /v1/runs/{id}/rounds/{w}``, one page of its
  miners (by hotkey). The facts are read in one transaction; the assignment (pure, keyed by
  the stored beacon signature of round ``d_assign``) is derived outside it by
  :func:`derive_assignment` and may be cached by the caller: it depends only on the run,
  ``w``, that signature, the base and the roster. :class:`EncodedAssignment` keeps each of
  its items' compact JSON once encoded, so a caller that keeps it renders the ``assignment``
  of a page by joining bytes (:mod:`~hypertrain.coordinator.flows.compactjson`), the same
  bytes as encoding the items again.

Pages (:mod:`~hypertrain.coordinator.flows.pages`): what grows with the roster is read and
answered a page at a time, each read bounded by the page: the round view's miners, with what
is per miner (its ``assignment`` item, its ``scoring_jobs``). The round-level fields stay on
every page. The per-miner envelopes (Commit, Receipt, DeltaManifest, ReplayVerdict) are
answered only with ``full``; every page carries each miner's ``delta_hash`` (null until
uploaded). Soft scores are still computed over every uploaded miner of the round (they are
relative to the round's best and worst losses).

From ``D >= d_assign`` on, the assignment needs ``drand[d_assign]``. If that round is not stored
(the pusher skipped it), the view says so instead of guessing: ``assignment`` is null while
``assignment_beacon_signature`` is null too (``assignment_beacon_round`` names the round).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Set as AbstractSet
from typing import Any, Final

from attrs import field, frozen

from hypertrain.beacon.ingest import get_round, latest_round
from hypertrain.compute import Job
from hypertrain.coordinator.flows.aggregation import AggregationRow, get_aggregation
from hypertrain.coordinator.flows.compactjson import Encoded, encode_json, encoded_list
from hypertrain.coordinator.flows.disputes import round_disputes
from hypertrain.coordinator.flows.heldout import get_loss
from hypertrain.coordinator.flows.lifecycle import parse_manifest
from hypertrain.coordinator.flows.pages import Page
from hypertrain.coordinator.flows.rerun import reruns_of_round
from hypertrain.coordinator.flows.softscores import round_jobs, scores_of_jobs
from hypertrain.coordinator.flows.worker import is_ready
from hypertrain.coordinator.tables.audits import (
    JobRow,
    ServeRow,
    draw_of,
    forfeit_envelopes,
    jobs_of_round,
    serves_of,
)
from hypertrain.coordinator.tables.disputes import disputes_of_round
from hypertrain.coordinator.tables.finality import FinalRow, RollbackRow, get_final, get_rollback
from hypertrain.coordinator.tables.miners import (
    MinerRow,
    StateRow,
    get_round_state,
    miner_details,
    uploaded_hotkeys,
)
from hypertrain.coordinator.tables.rounds import (
    RoundRow,
    get_round_row,
    miner_rows,
    round_states,
)
from hypertrain.coordinator.tables.runs import RunRow, get_run
from hypertrain.protocol.converter import unstructure
from hypertrain.protocol.errors import NotFound
from hypertrain.rounds.assignment import Assignment, assign
from hypertrain.rounds.states import RoundState

__all__ = [
    "EncodedAssignment",
    "RoundFacts",
    "derive_assignment",
    "round_facts",
    "round_view",
]


@frozen
class RoundFacts:
    """What one round view needs, read in one transaction."""

    run: RunRow
    round: RoundRow
    D: int
    state: RoundState
    assign_signature: str | None
    """Stored signature of beacon round ``d_assign`` (None before it is stored)."""
    audit_signature: str | None
    """Stored signature of beacon round ``d_audit`` (None before it is stored)."""
    miners: list[tuple[str, int, str]]
    """``(hotkey, slot, status)`` of the miners read: the page's, or all of them."""
    details: dict[str, MinerRow] = field(factory=dict)
    """Each of :attr:`miners`' posted messages, by hotkey (absent: nothing posted)."""
    page: Page | None = None
    """The page of miners read; None: every miner (the aggregator's inputs)."""
    paging: dict[str, Any] | None = None
    """The answer's ``page`` object (None without a page)."""
    start_state: StateRow | None = None
    """The published start state of the round (PUT .../rounds/{w}/state), or None."""
    aggregation: AggregationRow | None = None
    """The daemon's aggregation of the round (its tape), or None."""
    scores: dict[str, list[Job]] = field(factory=dict)
    """Each uploaded miner's compute scoring jobs (delta-loss public / hidden), by hotkey: every
    uploaded miner of the round, on or off the page (the soft scores need them all)."""
    heldout_loss: float | None = None
    """The held-out loss of theta(w), the round's start weights (None until computed)."""
    heldout_loss_after: float | None = None
    """The held-out loss of theta(w + 1), the merge result (None until merged and computed)."""
    selected: list[str] | None = None
    """The hotkeys the audit draw selected (None before the draw)."""
    audits: list[JobRow] = field(factory=list)
    """The round's audit jobs, by target."""
    serves: dict[str, list[ServeRow]] = field(factory=dict)
    """The states served to each audit, by challenge hash."""
    ready: dict[str, bool] = field(factory=dict)
    """Whether each queued audit job can be leased now, by job id."""
    forfeits: list[dict[str, Any]] = field(factory=list)
    """The sealed Forfeit envelopes of the round."""
    disputes: list[dict[str, Any]] = field(factory=list)
    """The round's disputes (their views)."""
    reruns: dict[str, dict[str, Any]] = field(factory=dict)
    """Each MISMATCHed miner's rerun, by hotkey."""
    final: FinalRow | None = None
    """The round's Finalize record once final."""
    rollback: RollbackRow | None = None
    """The round's rollback (rounds w and w + 1 recomputed), if any."""

    @property
    def assignment_due(self) -> bool:
        """Whether D has reached ``d_assign`` (the assignment is public from then on)."""
        return self.round.deadlines.d_assign <= self.D


def round_facts(
    conn: sqlite3.Connection, run_id: str, w: int, page: Page | None = None
) -> RoundFacts:
    """Read round ``w`` of the run (404 for an unknown run or round): its miners of ``page``,
    or all of them without one."""
    run = get_run(conn, run_id)
    row = get_round_row(conn, run_id, w)
    if row is None:
        raise NotFound(f"round {w} of run {run_id} is not open")
    d = latest_round(conn)
    (state,) = round_states(conn, d, [row])
    if page is None:
        miners, paging = miner_rows(conn, run_id, w), None
        details = miner_details(conn, run_id, w)
    else:
        fetched = miner_details(conn, run_id, w, page.offset, page.fetch, envelopes=page.full)
        kept, paging = page.cut(list(fetched.values()))
        miners = [(m.hotkey, m.slot, m.status) for m in kept]
        details = {m.hotkey: m for m in kept}
    audits = jobs_of_round(conn, run_id, w)
    scores = round_jobs(conn, run_id, w, uploaded_hotkeys(conn, run_id, w))
    assign_round = get_round(conn, row.deadlines.d_assign) if d >= row.deadlines.d_assign else None
    audit_round = get_round(conn, row.deadlines.d_audit) if d >= row.deadlines.d_audit else None
    return RoundFacts(
        run=run,
        round=row,
        D=d,
        state=state,
        assign_signature=None if assign_round is None else assign_round.signature,
        audit_signature=None if audit_round is None else audit_round.signature,
        miners=miners,
        details=details,
        page=page,
        paging=paging,
        start_state=get_round_state(conn, run_id, w),
        aggregation=get_aggregation(conn, run_id, w),
        scores=scores,
        heldout_loss=get_loss(conn, run_id, w),
        heldout_loss_after=get_loss(conn, run_id, w + 1),
        selected=draw_of(conn, run_id, w),
        audits=audits,
        serves={job.challenge_hash: serves_of(conn, job.challenge_hash) for job in audits},
        ready={job.job_id: is_ready(conn, job, d) for job in audits if job.state == "queued"},
        forfeits=forfeit_envelopes(conn, run_id, w),
        disputes=round_disputes(conn, disputes_of_round(conn, run_id, w)),
        reruns=reruns_of_round(conn, run_id, w),
        final=get_final(conn, run_id, w),
        rollback=get_rollback(conn, run_id, w),
    )


def derive_assignment(facts: RoundFacts) -> list[Assignment] | None:
    """The per-slot assignment, or None before ``d_assign`` or without ``drand[d_assign]``."""
    if not facts.assignment_due or facts.assign_signature is None:
        return None
    manifest = parse_manifest(facts.run.manifest_envelope)
    return assign(
        manifest,
        facts.run.run_id,
        facts.round.w,
        bytes.fromhex(facts.assign_signature),
        facts.round.body.roster,
        base=facts.round.base,
    )


class EncodedAssignment:
    """A round's assignment (:func:`derive_assignment`) with the compact JSON of each of its
    items, encoded the first time a page shows it and kept (by hotkey) as long as this
    object: at most one item per roster entry."""

    def __init__(self, assignment: list[Assignment]) -> None:
        self.assignment: Final = assignment
        self._json: dict[str, bytes] = {}

    def json_of(self, shown: AbstractSet[str]) -> Encoded:
        """The view's ``assignment``: the items of the ``shown`` hotkeys, in slot order."""
        parts = []
        for item in self.assignment:
            if item.hotkey in shown:
                encoded = self._json.get(item.hotkey)
                if encoded is None:
                    encoded = self._json[item.hotkey] = encode_json(unstructure(item))
                parts.append(encoded)
        return encoded_list(parts)


def _full(facts: RoundFacts) -> bool:
    """Whether the per-miner envelopes are answered (always without a page)."""
    return facts.page is None or facts.page.full


@frozen
class _RoundWide:
    """What each miner item reads of the whole round."""

    chosen: frozenset[str]
    verdicts: dict[str, Any]
    soft: dict[str, int]


def _miner_json(facts: RoundFacts, item: tuple[str, int, str], wide: _RoundWide) -> dict[str, Any]:
    hotkey, slot, status = item
    full = _full(facts)
    out = {
        "hotkey": hotkey,
        "slot": slot,
        "status": status,
        "selected": hotkey in wide.chosen,
        **facts.details[hotkey].view_json(full=full),
    }
    if full:
        out["verdict"] = wide.verdicts.get(hotkey)
    out["rerun"] = facts.reruns.get(hotkey)
    out["scores"] = _scores(facts.scores.get(hotkey, []))
    out["soft_score_ppm"] = wide.soft[hotkey]
    return out


def _scores(jobs: list[Job]) -> dict[str, Any]:
    """``{step: {state, how, loss, fingerprint}}`` of a miner's delta-loss jobs (loss and
    fingerprint null until settled; ``loss`` is the objective's f32 hex)."""
    out: dict[str, Any] = {}
    for job in jobs:
        result = job.result or {}
        out[job.step] = {
            "job": job.job_id,
            "state": job.state,
            "how": job.settled_how,
            "ok": result.get("ok"),
            "loss": result.get("objective"),
            "fingerprint": result.get("fingerprint"),
        }
    return out


def _audit_json(facts: RoundFacts, job: JobRow) -> dict[str, Any]:
    state: str = job.state
    if state == "queued" and not facts.ready.get(job.job_id, False):
        state = "waiting"
    return {
        "id": job.job_id,
        "target": job.target,
        "state": state,
        "result": job.result,
        "challenge": job.challenge_json(),
        "challenge_hash": job.challenge_hash,
        "serves": [
            {"t": s.t, "blob_sha256": s.blob_sha256}
            for s in facts.serves.get(job.challenge_hash, [])
        ],
        "attempts": job.attempts,
        "auditor": job.auditor,
        "verdict_round": job.verdict_round,
    }


def round_view(facts: RoundFacts, assignment: EncodedAssignment | None) -> dict[str, Any]:
    """The round view JSON (spec 9); ``assignment`` from :func:`derive_assignment`. Its
    ``assignment`` value is :class:`~hypertrain.coordinator.flows.compactjson.Encoded` (or
    null): encode the view with :func:`~hypertrain.coordinator.flows.compactjson.encode_json`.

    Beyond spec 9: ``state_sha256`` / ``v0_sha256`` name the published start state blob(s) of
    the round (null until ``PUT /v1/aggregator/runs/{id}/rounds/{w}/state``), and each
    ``miners[]`` item carries its ``delta_hash`` and, with ``full`` (or without a page), the
    Commit, Receipt and DeltaManifest envelopes once posted and the ``verdict``. With a page,
    ``miners``, ``assignment`` and ``scoring_jobs`` hold the page's miners only and ``page`` says
    where it stands (:meth:`~hypertrain.coordinator.flows.pages.Page.cut`; null without one).
    Once the daemon merged the round: ``tape_key``, ``update_norm`` (the merged update's L2
    norm, a float), ``clipped`` (how many deltas were preclipped). All null before the merge.
    With the daemon's ``holdout_dir`` set, ``heldout_loss`` is the held-out loss (mean token
    cross-entropy on the operator's private holdout) of theta(w), the round's start weights, and
    ``heldout_loss_after`` that of theta(w + 1), the merge result; each null until computed.
    Scoring (issue 8): ``scoring_jobs`` lists the round's delta-loss jobs (settled state, how,
    result) and each uploaded miner's ``scores`` gives ``{public|hidden: {job, state, how, ok,
    loss, fingerprint}}``. Each miner's ``soft_score_ppm`` (0..10^6, DESIGN.md section 9) is
    the quality weight the ledger would record for it if the round were finalized now
    (:func:`~hypertrain.coordinator.flows.softscores.round_soft_scores`): 0 without a settled
    ok hidden-trace score. It may change, for every miner, until the round is finalized (a
    hidden step settling late can move the round's best or worst loss).

    Audits (spec 9): ``selected`` is null before the draw, then the selected hotkeys; ``jobs``
    are the audit jobs ``{id, target, state, result, challenge, challenge_hash, serves: [{t,
    blob_sha256}], attempts, auditor, verdict_round}`` (``state`` ``waiting`` while a queued job
    cannot be leased yet); each miner's ``selected`` and ``verdict`` (the ReplayVerdict
    envelope); and ``forfeits``, the sealed Forfeit envelopes. Disputes (spec 6.4):
    ``disputes`` are the round's dispute views (state, stage with level, interval, points and
    deadline, the referee's case, the outcome, every Bisect in order), and each miner's
    ``rerun`` ``{leaves_root, classification, epoch, rerun_round}`` once it reran (else null).
    Finality (spec 7): ``finalize`` is null until the round is final, then :func:`final_json`;
    ``rollback`` is null unless rounds w and w + 1 were recomputed without faulted miners, then
    ``{envelope, excluded, old_tapes, new_tapes, recorded_round}``.
    """
    agg = facts.aggregation
    deadlines = facts.round.deadlines
    state = facts.start_state
    shown = {hotkey for hotkey, _, _ in facts.miners}
    wide = _RoundWide(
        chosen=frozenset(facts.selected or ()),
        verdicts={job.target: job.verdict_json() for job in facts.audits} if _full(facts) else {},
        soft=scores_of_jobs(sorted(shown | set(facts.scores)), facts.scores),
    )
    return {
        "run_id": facts.run.run_id,
        "w": facts.round.w,
        "state": facts.state.value,
        "now_round": facts.D,
        "round_open": facts.round.envelope_json(),
        "base": facts.round.base,
        "state_sha256": None if state is None else state.theta_start_sha256,
        "v0_sha256": None if state is None else state.v0_sha256,
        "tape_key": None if agg is None else agg.tape_key,
        "update_norm": None if agg is None else agg.update_norm,
        "clipped": None if agg is None else agg.clipped,
        "heldout_loss": facts.heldout_loss,
        "heldout_loss_after": facts.heldout_loss_after,
        "assignment": None if assignment is None else assignment.json_of(shown),
        "assignment_beacon_round": deadlines.d_assign,
        "assignment_beacon_signature": facts.assign_signature,
        "audit_beacon_round": deadlines.d_audit,
        "audit_beacon_signature": facts.audit_signature,
        "selected": facts.selected,
        "miners": [_miner_json(facts, item, wide) for item in facts.miners],
        "page": facts.paging,
        "jobs": [_audit_json(facts, job) for job in facts.audits],
        "scoring_jobs": [
            job.score_json()
            for hotkey, jobs in facts.scores.items()
            if hotkey in shown
            for job in jobs
        ],
        "forfeits": facts.forfeits,
        "disputes": facts.disputes,
        "rollback": None if facts.rollback is None else facts.rollback.view_json(),
        "finalize": None if facts.final is None else final_json(facts.final),
    }


def final_json(final: FinalRow) -> dict[str, Any]:
    """The round view's ``finalize``: the Finalize envelope, each committed miner's ledger
    entry ``{verdict, tokens, soft_score_ppm}`` by hotkey, and when it was final (``final_round``
    D, ``at`` the ledger time, ``ledger_round``, the drand rounds ``vesting_round`` and
    ``released_round`` where the round turns VESTING and RELEASED, ``ledger_synced``)."""
    return {
        "envelope": final.envelope_json(),
        "entries": {
            e.hotkey: {
                "verdict": e.verdict.value,
                "tokens": e.tokens,
                "soft_score_ppm": e.soft_score_ppm,
            }
            for e in final.entries
        },
        "final_round": final.final_round,
        "at": final.at,
        "ledger_round": final.ledger_round,
        "vesting_round": final.vesting_round,
        "released_round": final.released_round,
        "ledger_synced": final.ledger_synced,
    }
