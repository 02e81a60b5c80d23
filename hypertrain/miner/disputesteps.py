"""The steps the dispute follower takes (spec 6.4, issue 14): rerun, Dispute, Bisect.

:class:`DisputeSteps` is the I/O of :mod:`hypertrain.miner.disputes`' steps, each journaled once
the coordinator holds it (see that module's docstring for when each is taken):

- :meth:`DisputeSteps.rerun`: the rerun's root from :func:`hypertrain.miner.rerun.rerun_root`
  through ``run_sync`` (journaled ``rerun_computed`` first, so a restart never recomputes it),
  signed over ``rerun_claim_bytes`` and posted; the classification is journaled (``reran``). A
  409 means the coordinator holds a rerun the journal missed (an answer lost, a crash after
  the post): the classification follows from the roots
  (:func:`~hypertrain.miner.disputeplan.classify_locally`);
- :meth:`DisputeSteps.open_dispute`: a Dispute ``contest`` or ``accept`` (``exp_drand =
  2^40``), journaled ``disputed``; a 409 of a dispute already held finds it in
  ``GET .../disputes?party=<hotkey>``;
- :meth:`DisputeSteps.bisect`: the stage's N+1 hashes from the miner's own
  :class:`~hypertrain.trainer.recompute.Recompute` (built once per dispute, through
  ``run_sync``; the training fault of :mod:`hypertrain.miner.faults` applies), a Bisect signed
  by the hotkey, journaled ``bisected``; a stage refused (409, 422) or journaled is never
  posted again (:meth:`DisputeSteps.stage_done`).

:meth:`DisputeSteps.call` is every request's retry: network errors and 5xx answers (retried
with :meth:`~hypertrain.miner.round.RoundRunner.retry` for ``step_retry_seconds``) are
:class:`Later`; an answer that breaks the
contract, a refusal no step expects or a failed recomputation :class:`GiveUp`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import attrs
import trio

from hypertrain.miner.answers import DisputeStage, RoundView
from hypertrain.miner.artifacts import RoundDir
from hypertrain.miner.disputeplan import (
    Classification,
    OpenDispute,
    Verdict,
    Window,
    classify_locally,
    committed_root,
    dispute_start,
    rerun_windows,
)
from hypertrain.miner.errors import ApiError, MinerError, MinerProtocolError, ServeError
from hypertrain.miner.round import RoundRunner
from hypertrain.protocol.converter import structure
from hypertrain.protocol.envelope import CLIENT_EXP, seal
from hypertrain.protocol.errors import HypertrainError
from hypertrain.protocol.hashes import rerun_claim_bytes
from hypertrain.protocol.messages import AuditChallenge, Bisect, Dispute, LeafPreimage
from hypertrain.trainer.errors import TrainerError
from hypertrain.trainer.leaves import preimage_digest
from nurseries import GaveUp, RunSync

__all__ = ["DisputeSteps", "Followed", "GiveUp", "Later"]

logger = logging.getLogger(__name__)
T = TypeVar("T")


@attrs.define
class Followed:
    """A round the follower follows: its bounds and what its polls and steps learnt."""

    w: int
    serve_deadline: int
    verdict_until: float
    challenge: AuditChallenge | None = None
    verdict: Verdict | None = None
    status: str | None = None
    moved: tuple[object, ...] | None = None
    dispute_until: float | None = None
    refused: set[tuple[object, ...]] = attrs.Factory(set)
    recompute: Any = None
    """The dispute's :class:`~hypertrain.trainer.recompute.Recompute` (built once)."""
    failing_since: float | None = None
    """When the polls started failing on the network or with 5xx answers (None: they work)."""


class Later(MinerError):
    """A step failed on the network or with a 5xx: the follower tries again at its next poll."""


class GiveUp(MinerError):
    """The round's dispute cannot be followed further: the follower settles it, logged, and
    does not journal it (a restart looks again)."""


class DisputeSteps:
    """The follower's steps (module docstring)."""

    def __init__(self, runner: RoundRunner, run_sync: RunSync) -> None:
        self.runner = runner
        self._run_sync = run_sync

    async def call(self, what: str, w: int, call: Callable[[], Awaitable[T]]) -> T:
        """``call()`` with retries; network errors and 5xx become :class:`Later`, an answer
        that breaks the contract :class:`GiveUp`; other ApiErrors propagate."""
        deadline = trio.current_time() + self.runner.settings.step_retry_seconds
        try:
            return await self.runner.retry(call, deadline)
        except GaveUp as e:
            self._progress(w, "dispute-poll-error", what=what, error=repr(str(e.__cause__)))
            raise Later from e
        except MinerProtocolError as e:
            raise GiveUp(f"{what}: {e}") from e

    def _windows_and_committed(self, follow: Followed) -> tuple[Sequence[Window], str]:
        rd = RoundDir(self.runner.config.workdir, follow.w)
        if follow.challenge is None:
            raise GiveUp("no checked challenge of our audit")
        try:
            digests = [
                preimage_digest(structure(LeafPreimage, p)) for p in rd.read_json("preimages.json")
            ]
        except (OSError, ValueError, HypertrainError) as e:
            raise GiveUp(f"preimages.json: {e}") from e
        windows = rerun_windows(follow.challenge, len(digests))
        return windows, committed_root(digests, windows)

    async def _offload(self, w: int, what: str, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` through ``run_sync``; a failure of the trainer gives the round up."""
        try:
            result: T = await self._run_sync(fn, *args)
        except (TrainerError, ServeError, ValueError, OSError, HypertrainError) as e:
            raise GiveUp(f"{what}: {e}") from e
        return result

    async def _prepare(self, w: int, view: RoundView) -> None:
        runner = self.runner
        if runner.prepare is None:
            return
        ids = RoundDir(runner.config.workdir, w).read_json("samples.json")
        try:
            await runner.prepare(ids, view.now_round)
        except MinerError as e:
            raise GiveUp(f"dataset: {e}") from e

    async def rerun(self, follow: Followed, view: RoundView, verdict: Verdict) -> None:
        runner, w = self.runner, follow.w
        windows, committed = self._windows_and_committed(follow)
        computed = runner.journal.phases(w).get("rerun_computed")
        if computed is None:
            await self._prepare(w, view)
            from hypertrain.miner.rerun import rerun_root  # imports torch: after configure

            self._progress(w, "rerun-computing", windows=len(windows))
            rd = RoundDir(runner.config.workdir, w)
            root = await self._offload(
                w, "rerun", rerun_root, runner.manifest, runner.run_id, rd, windows,
                runner.samples, runner.faults.recompute,
            )  # fmt: skip
            runner.record(w, "rerun_computed", leaves_root=root, committed_root=committed)
        else:
            root = str(computed["leaves_root"])
        hotkey = runner.keypair.ss58
        sig = runner.keypair.sign(rerun_claim_bytes(runner.run_id, w, hotkey, root)).hex()
        try:
            answer = await self.call(
                "rerun", w, lambda: runner.client.rerun(runner.run_id, w, hotkey, root, sig)
            )
            classification: Classification = answer.classification
        except ApiError as e:
            if e.status != 409:
                raise GiveUp(f"rerun refused: {e}") from e
            status = follow.status or ""
            classification = classify_locally(
                root, verdict.recomputed_leaves_root, committed, status
            )
        runner.record(w, "reran", classification=classification, leaves_root=root)

    async def open_dispute(self, follow: Followed, step: OpenDispute) -> None:
        runner, w = self.runner, follow.w
        hotkey, verdict_hash = runner.keypair.ss58, step.verdict.verdict_hash
        body = Dispute(hotkey=hotkey, verdict_hash=verdict_hash, action=step.action)
        envelope = seal(runner.keypair, "Dispute", runner.run_id, body, CLIENT_EXP)
        try:
            answer = await self.call(
                "dispute", w, lambda: runner.client.dispute(runner.run_id, envelope)
            )
            dispute_id = answer.dispute_id
        except ApiError as e:
            if e.status != 409:
                raise GiveUp(f"dispute refused: {e}") from e
            dispute_id = await self._existing(w, verdict_hash, e)
        runner.record(w, "disputed", dispute_id=dispute_id, action=step.action)

    async def _existing(self, w: int, verdict_hash: str, refused: ApiError) -> str:
        """The dispute the coordinator already holds about our verdict (a 409's)."""
        runner = self.runner
        try:
            found = await self.call(
                "disputes",
                w,
                lambda: runner.client.disputes(runner.run_id, party=runner.keypair.ss58),
            )
        except ApiError as e:
            raise GiveUp(f"dispute refused ({refused.detail}), and listing: {e}") from e
        for view in found:
            if view.verdict_hash == verdict_hash and view.miner == runner.keypair.ss58:
                return view.dispute_id
        raise GiveUp(f"dispute refused: {refused}")

    def _posted(self, follow: Followed, dispute_id: str) -> set[tuple[object, ...]]:
        events = self.runner.journal.all_of(follow.w, "bisected")
        return {
            (e["level"], *e["interval"], e["N"], e.get("t"), e.get("layer"))
            for e in events
            if e["dispute_id"] == dispute_id
        }

    def stage_done(self, follow: Followed, stage: DisputeStage) -> bool:
        """Whether this stage was posted (journal) or refused already: not posted again."""
        dispute_id = str(self.runner.journal.phases(follow.w)["disputed"]["dispute_id"])
        return stage.key() in follow.refused or stage.key() in self._posted(follow, dispute_id)

    async def bisect(self, follow: Followed, view: RoundView, stage: DisputeStage) -> None:
        runner, w = self.runner, follow.w
        dispute_id = str(runner.journal.phases(w)["disputed"]["dispute_id"])
        key = stage.key()
        try:
            target = stage.to_stage()
        except ValueError as e:
            raise GiveUp(f"the dispute's stage: {e}") from e
        recompute = await self._recompute(follow, view)
        hashes = await self._offload(w, "bisect", recompute.hashes, target)
        body = Bisect(
            dispute_id=dispute_id,
            level=stage.level,
            interval=stage.interval,
            N=stage.N,
            hashes=tuple(hashes),
            party=runner.keypair.ss58,
        )
        envelope = seal(runner.keypair, "Bisect", runner.run_id, body, CLIENT_EXP)
        try:
            await self.call("bisect", w, lambda: runner.client.bisect(runner.run_id, envelope))
        except ApiError as e:
            if e.status not in (409, 422):
                raise GiveUp(f"bisect refused: {e}") from e
            follow.refused.add(key)
            logger.warning("round %d: Bisect of stage %s refused: %s", w, key, e)
            self._progress(w, "bisect-refused", level=stage.level, status=e.status)
            return
        runner.record(
            w, "bisected", dispute_id=dispute_id, level=stage.level,
            interval=list(stage.interval), N=stage.N, t=stage.t, layer=stage.layer,
        )  # fmt: skip

    async def _recompute(self, follow: Followed, view: RoundView) -> Any:
        if follow.recompute is not None:
            return follow.recompute
        runner, w = self.runner, follow.w
        verdict, challenge = follow.verdict, follow.challenge
        if verdict is None or challenge is None or not verdict.first_bad_leaf:
            raise GiveUp("no verdict leaf to bisect")
        try:
            start = dispute_start(challenge, verdict.first_bad_leaf)
        except ValueError as e:
            raise GiveUp(str(e)) from e
        await self._prepare(w, view)
        from hypertrain.miner.rerun import dispute_recompute  # imports torch: after configure

        rd = RoundDir(runner.config.workdir, w)
        follow.recompute = await self._offload(
            w, "recompute", dispute_recompute, runner.manifest, runner.run_id, rd, start,
            runner.samples, runner.faults.recompute,
        )  # fmt: skip
        return follow.recompute

    def _progress(self, w: int, phase: str, **info: object) -> None:
        self.runner.progress.phase(w, phase, **info)
