"""The miner reacts to a MISMATCH by itself (spec 6.4, issue 14): rerun, dispute, bisect.

:class:`DisputeFollower` is a task beside the round loop and the
:class:`~hypertrain.miner.auditserve.AuditServer` (same nursery in
:func:`~hypertrain.miner.session.run_miner`). It follows every round this miner posted its
leaves for (journal ``leaves``) until the round's audit needs nothing more from it (journal
``dispute_settled``). Every ``poll_seconds`` it reads the round view and, once there is one, the
dispute's view, and applies :func:`~hypertrain.miner.disputeplan.next_step`, whose steps
:mod:`hypertrain.miner.disputesteps` takes:

1. **rerun** (status ``MISMATCH``, the verdict a ReplayVerdict of this run signed by one of
   ``manifest.auditors`` for our job's ``challenge_hash``): the miner recomputes exactly what
   the auditor did (:mod:`hypertrain.miner.rerun`, through ``run_sync``: worker threads in
   production), journals ``rerun_computed`` (so a restart never recomputes it), signs
   ``rerun_claim_bytes`` over the root and posts ``POST .../rerun``; the classification is
   journaled (``reran``). A 409 means the coordinator already holds a rerun the journal missed
   (a crash after the post): the classification is derived from the roots
   (:func:`~hypertrain.miner.disputeplan.classify_locally`);
2. **TRANSIENT**: nothing more. **CONTEST**: a Dispute ``contest``; **FAULT**: a Dispute
   ``accept`` (``verdict_hash`` = the verdict body's digest, ``exp_drand = 2^40``); the
   ``dispute_id`` is journaled (``disputed``); a 409 of an existing dispute finds it in
   ``GET .../disputes?party=<hotkey>``;
3. **bisect**: while the dispute is open and its ``stage.awaiting`` holds ``"miner"``, the
   stage's N+1 hashes come from the miner's own
   :class:`~hypertrain.trainer.recompute.Recompute` (the training fault of
   :mod:`hypertrain.miner.faults` applies) and go out as a Bisect signed by the hotkey
   (``bisected``). A stage the coordinator refused (409, 422) or the journal already holds is
   not posted again;
4. **outcome**: ``accepted`` or ``resolved``: journaled (``dispute_settled`` with loser,
   cause, op_spec), logged, and an item of :attr:`DisputeFollower.records` (the Summary's
   ``disputes``).

Honeypots (a mode other than ``honest``) never dispute: they are the operator's test of the
auditors. Failures never reach the round loop: network errors and 5xx answers are retried with
:meth:`~hypertrain.miner.round.RoundRunner.retry` (``step_retry_seconds``) and then at the next
poll; a 4xx no step expects, an answer that breaks the contract or a recomputation that fails gives
the round up, logged (``dispute-given-up``), never fatal. Every wait is bounded:

- waiting for the verdict ends at the wall time of the serve deadline plus
  ``verdict_grace_seconds`` (estimated from the Receipt's round, shortened by each view's D);
- waiting on the auditor, the referee or a timeout ends ``dispute_grace_seconds`` after the
  dispute last moved, or after the current stage's ``deadline_round`` (at ``period`` seconds a
  round), whichever is later;
- a coordinator that does not answer (network errors, 5xx) is given up on at the verdict's
  bound while nothing is asked of the miner, else after ``dispute_grace_seconds`` of failures.

A round given up this way is not journaled as settled: a restart looks at it again.
"""

from __future__ import annotations

import logging
from typing import Any, Final

import attrs
import trio

from hypertrain.miner.answers import DisputeView, RoundView, ViewJob, read_answer
from hypertrain.miner.artifacts import RoundDir
from hypertrain.miner.auditserve import check_challenge
from hypertrain.miner.disputeplan import (
    Classification,
    Finished,
    OpenDispute,
    PostBisect,
    Rerun,
    RoundFacts,
    Settle,
    Step,
    Verdict,
    Wait,
    next_step,
)
from hypertrain.miner.disputesteps import DisputeSteps, Followed, GiveUp, Later
from hypertrain.miner.errors import ApiError, MinerProtocolError
from hypertrain.miner.honeypot import HoneypotMode
from hypertrain.miner.passes import Passes
from hypertrain.miner.round import RoundRunner
from hypertrain.protocol.converter import structure
from hypertrain.protocol.envelope import verify
from hypertrain.protocol.errors import HypertrainError
from hypertrain.protocol.messages import ReplayVerdict, RoundOpen
from nurseries import RunSync

__all__ = ["DisputeFollower", "DisputeRecord"]

logger = logging.getLogger(__name__)

_MAX_STEPS: Final = 8
"""Steps taken in one poll of one round (rerun, dispute, bisect, ...): a bound, not a budget."""


@attrs.frozen
class DisputeRecord:
    """How the audit of a MISMATCHed round ended for this miner (an item of the summary).

    ``reason`` says why the follower stopped (``transient``, ``accepted``, ``resolved``,
    ``gave-up: ...``); the dispute's fields are None where there was none.
    """

    w: int
    reason: str
    classification: Classification | None = None
    dispute_id: str | None = None
    action: str | None = None
    state: str | None = None
    loser: str | None = None
    loser_role: str | None = None
    cause: str | None = None
    op_spec: str | None = None


class DisputeFollower:
    """Reruns, disputes and bisects this miner's MISMATCHed rounds (module docstring)."""

    def __init__(self, runner: RoundRunner, *, run_sync: RunSync) -> None:
        self.runner = runner
        self._steps = DisputeSteps(runner, run_sync)
        self._follows: dict[int, Followed] = {}
        self._settled: dict[int, str] = {}
        self._records: list[DisputeRecord] = []
        self._noted: set[str] = set()
        self._passes = Passes()

    @property
    def records(self) -> tuple[DisputeRecord, ...]:
        """The MISMATCHed rounds settled, in order (those the journal already held first)."""
        return tuple(self._records)

    def settled(self) -> dict[int, str]:
        """Round -> why nothing more is to be done about its audit (a copy)."""
        return dict(self._settled)

    # -- the task ----------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Poll and act every ``poll_seconds``; ends only by cancellation."""
        self._load_settled()
        task_status.started()
        await self._passes.run(self.poll_once, self.runner.config.poll_seconds)

    async def wait_settled(self) -> None:
        """Return once no followed round is left (:meth:`run` must be running)."""
        await self._passes.wait_while(self.pending)

    def pending(self) -> list[int]:
        """The rounds still followed: leaves posted, audit not settled, artifacts kept."""
        runner = self.runner
        if runner.mode is not HoneypotMode.HONEST:
            return []  # honeypots never dispute (module docstring)
        journal = runner.journal
        out = []
        for w in journal.rounds():
            phases = journal.phases(w)
            if w in self._settled or "leaves" not in phases or "dispute_settled" in phases:
                continue
            if RoundDir(runner.config.workdir, w).exists("round_open.json"):
                out.append(w)
            else:
                self._settled[w] = "pruned"
        return out

    async def poll_once(self) -> None:
        """One pass over the followed rounds."""
        for w in self.pending():
            follow = self._follow(w)
            if follow is None:
                continue
            try:
                await self._advance(follow)
            except Later:
                self._unreachable(follow)
            except GiveUp as e:
                self._give_up(follow, str(e))
            else:
                follow.failing_since = None

    # -- one round ---------------------------------------------------------------------------

    def _follow(self, w: int) -> Followed | None:
        if w in self._follows:
            return self._follows[w]
        runner = self.runner
        try:
            ro = structure(
                RoundOpen, RoundDir(runner.config.workdir, w).read_json("round_open.json")
            )
        except (OSError, ValueError, HypertrainError) as e:
            self._settle(w, f"gave-up: round_open.json: {e}", journal=False)
            return None
        deadline = ro.d_audit + runner.manifest.verify.T.serve_deadline
        committed = runner.journal.phases(w).get("committed", {})
        since = int(committed.get("received_round", ro.d_commit))
        follow = Followed(w, deadline, self._verdict_bound(deadline, since))
        self._follows[w] = follow
        return follow

    def _verdict_bound(self, serve_deadline: int, now_round: int) -> float:
        rounds_left = max(serve_deadline - now_round, 0)
        grace = self.runner.settings.verdict_grace_seconds
        return trio.current_time() + rounds_left * self.runner.manifest.beacon.period + grace

    async def _advance(self, follow: Followed) -> None:
        """Read the views and take the steps they call for (module docstring)."""
        view = await self._round_view(follow.w)
        self._read_round(follow, view)
        dispute = await self._dispute(follow)
        for _ in range(_MAX_STEPS):
            step = next_step(self._facts(follow, view, dispute))
            if isinstance(step, PostBisect) and self._steps.stage_done(follow, step.stage):
                step = Wait("coordinator")  # posted (the view lags) or refused
            if isinstance(step, Wait):
                self._wait(follow, view, dispute, step)
                return
            if isinstance(step, Settle):
                self._settle(follow.w, step.why, journal=True)
                return
            if isinstance(step, Finished):
                self._finish(follow, step.dispute)
                return
            await self._act(follow, view, step)
            dispute = await self._dispute(follow)

    async def _act(self, follow: Followed, view: RoundView, step: Step) -> None:
        if isinstance(step, Rerun):
            await self._steps.rerun(follow, view, step.verdict)
        elif isinstance(step, OpenDispute):
            await self._steps.open_dispute(follow, step)
        elif isinstance(step, PostBisect):
            await self._steps.bisect(follow, view, step.stage)

    def _facts(self, follow: Followed, view: RoundView, dispute: DisputeView | None) -> RoundFacts:
        phases = self.runner.journal.phases(follow.w)
        hotkey = self.runner.keypair.ss58
        job = self._job_raw(view)
        return RoundFacts(
            now_round=view.now_round,
            audited=view.audit_beacon_round is not None,
            selected=None if view.selected is None else hotkey in view.selected,
            status=follow.status,
            job_state=None if job is None or follow.challenge is None else str(job.get("state")),
            serve_deadline=follow.serve_deadline,
            verdict=follow.verdict,
            classification=phases.get("reran", {}).get("classification"),
            dispute_id=phases.get("disputed", {}).get("dispute_id"),
            dispute=dispute,
        )

    # -- reading -----------------------------------------------------------------------------

    async def _round_view(self, w: int) -> RoundView:
        client, run_id = self.runner.client, self.runner.run_id
        try:
            view = await self._steps.call(
                "round view", w, lambda: client.round_view(run_id, w, full=True)
            )
        except ApiError as e:
            raise GiveUp(f"round view: {e}") from e
        if view is None:
            raise GiveUp("the round view answers 404")
        return view

    def _job_raw(self, view: RoundView) -> dict[str, Any] | None:
        hotkey = self.runner.keypair.ss58
        return next((j for j in view.jobs if j.get("target") == hotkey), None)

    def _read_round(self, follow: Followed, view: RoundView) -> None:
        """Our status, our job's challenge and the verdict, each checked once read."""
        w, hotkey = follow.w, self.runner.keypair.ss58
        mine = [m for m in view.miners if m.hotkey == hotkey]
        follow.status = mine[0].status if mine else None
        raw = self._job_raw(view)
        if raw is not None and follow.challenge is None:
            try:
                job = read_answer(ViewJob, raw, f"round {w} view job")
                follow.challenge = check_challenge(self.runner, w, job)
            except MinerProtocolError as e:
                self._note(w, f"challenge:{w}", str(e))
            else:
                follow.serve_deadline = follow.challenge.serve_deadline
        follow.verdict_until = min(
            follow.verdict_until, self._verdict_bound(follow.serve_deadline, view.now_round)
        )
        if follow.verdict is None and mine and mine[0].verdict is not None and raw is not None:
            follow.verdict = self._verdict(w, mine[0].verdict, str(raw.get("challenge_hash")))

    def _verdict(self, w: int, raw: dict[str, Any], challenge_hash: str) -> Verdict | None:
        auditors = set(self.runner.manifest.auditors)
        try:
            verified = verify(
                raw,
                expected_run_id=self.runner.run_id,
                signer_allowed=lambda t, s: t == "ReplayVerdict" and s in auditors,
            )
        except HypertrainError as e:
            self._note(w, f"verdict:{w}", f"the verdict does not verify: {e}")
            return None
        message = verified.message
        if not isinstance(message, ReplayVerdict) or message.challenge_hash != challenge_hash:
            self._note(w, f"verdict:{w}", "the verdict is not for our audit's challenge")
            return None
        return Verdict(
            verified.body_digest,
            message.challenge_hash,
            message.first_bad_leaf,
            message.recomputed_leaves_root,
        )

    async def _dispute(self, follow: Followed) -> DisputeView | None:
        event = self.runner.journal.phases(follow.w).get("disputed")
        if event is None:
            return None
        client, run_id, dispute_id = self.runner.client, self.runner.run_id, event["dispute_id"]
        try:
            view = await self._steps.call(
                "dispute view", follow.w, lambda: client.dispute_view(run_id, dispute_id)
            )
        except ApiError as e:
            raise GiveUp(f"dispute view: {e}") from e
        if view.dispute_id != dispute_id or view.miner != self.runner.keypair.ss58:
            raise GiveUp(f"the dispute view is not of dispute {dispute_id} of this miner")
        return view

    # -- the steps ---------------------------------------------------------------------------

    # -- bounds and endings ------------------------------------------------------------------

    def _wait(
        self, follow: Followed, view: RoundView, dispute: DisputeView | None, step: Wait
    ) -> None:
        now = trio.current_time()
        if dispute is None:
            if step.why == "verdict" and now >= follow.verdict_until:
                raise GiveUp("no verdict by the serve deadline's time")
            return
        stage = dispute.stage
        moved = (
            dispute.state,
            None if stage is None else stage.key(),
            None if stage is None else stage.awaiting,
            dispute.referee is not None,
            len(dispute.bisects),
        )
        if moved != follow.moved or follow.dispute_until is None:
            follow.moved = moved
            period = self.runner.manifest.beacon.period
            left = 0 if stage is None else max(stage.deadline_round - view.now_round, 0)
            follow.dispute_until = now + left * period + self.runner.settings.dispute_grace_seconds
        if now >= follow.dispute_until:
            raise GiveUp(f"the dispute did not move while waiting for the {step.why}")

    def _unreachable(self, follow: Followed) -> None:
        """A poll failed on the network or with a 5xx: give up once past the verdict's bound
        (nothing asked of the miner yet) or ``dispute_grace_seconds`` of failures (a rerun or
        a dispute under way)."""
        now = trio.current_time()
        if follow.failing_since is None:
            follow.failing_since = now
        phases = self.runner.journal.phases(follow.w)
        engaged = follow.status == "MISMATCH" or "rerun_computed" in phases
        grace = self.runner.settings.dispute_grace_seconds
        if now >= (follow.failing_since + grace if engaged else follow.verdict_until):
            self._give_up(
                follow, f"no answer from the coordinator for {now - follow.failing_since:.0f}s"
            )

    def _finish(self, follow: Followed, dispute: DisputeView) -> None:
        w, outcome = follow.w, dispute.outcome
        fields: dict[str, Any] = {
            "dispute_id": dispute.dispute_id,
            "action": dispute.action,
            "state": dispute.state,
            "loser": None if outcome is None else outcome.loser,
            "loser_role": None if outcome is None else outcome.loser_role,
            "cause": None if outcome is None else outcome.cause,
            "op_spec": None if outcome is None else outcome.op_spec,
        }
        logger.info("round %d: dispute %s %s: %s", w, dispute.dispute_id, dispute.state, fields)
        self._settle(w, dispute.state, journal=True, **fields)

    def _give_up(self, follow: Followed, why: str) -> None:
        logger.warning("round %d: dispute follow given up: %s", follow.w, why)
        self._progress(follow.w, "dispute-given-up", reason=repr(why))
        self._settle(follow.w, f"gave-up: {why}", journal=False)

    def _settle(self, w: int, why: str, *, journal: bool, **fields: Any) -> None:
        self._settled[w] = why
        classification = self.runner.journal.phases(w).get("reran", {}).get("classification")
        if journal:
            self.runner.record(w, "dispute_settled", reason=why, **fields)
        else:
            self._progress(w, "dispute-settled", reason=why.split(":", 1)[0])
        if classification is not None:
            self._records.append(
                DisputeRecord(w, why, classification, **self._record_fields(w, fields))
            )

    def _record_fields(self, w: int, fields: dict[str, Any]) -> dict[str, Any]:
        disputed = self.runner.journal.phases(w).get("disputed", {})
        out = {k: fields.get(k) for k in ("state", "loser", "loser_role", "cause", "op_spec")}
        out["dispute_id"] = fields.get("dispute_id", disputed.get("dispute_id"))
        out["action"] = fields.get("action", disputed.get("action"))
        return out

    def _load_settled(self) -> None:
        """The records of rounds the journal already holds as settled after a rerun."""
        journal = self.runner.journal
        for w in journal.rounds():
            phases = journal.phases(w)
            done, reran = phases.get("dispute_settled"), phases.get("reran")
            if done is None or w in self._settled:
                continue
            self._settled[w] = str(done.get("reason", ""))
            if reran is not None:
                self._records.append(
                    DisputeRecord(
                        w, self._settled[w], reran.get("classification"),
                        **self._record_fields(w, done),
                    )
                )  # fmt: skip

    def _note(self, w: int, key: str, why: str) -> None:
        """Log a coordinator problem once per ``key``."""
        if key in self._noted:
            return
        self._noted.add(key)
        logger.warning("round %d: dispute follower: %s", w, why)
        self._progress(w, "dispute-ignored", reason=repr(why))

    def _progress(self, w: int, phase: str, **info: object) -> None:
        self.runner.progress.phase(w, phase, **info)
