"""The miner answers segment audits: a task beside the round loop that serves kept leaf states.

:class:`AuditServer` watches every round this miner posted its leaves for (journal ``leaves``)
and still keeps the leaf states of (``leaf_state_0.bin``: ``state_policy = carry``; full-mode
rounds keep none and are never watched), until that round's audit is *settled* for it. Every
``poll_seconds`` it reads the view ``GET /v1/runs/{id}/rounds/{w}`` of each watched round:

1. a view without ``audit_beacon_round`` comes from a coordinator that does not audit: settled;
2. ``D > serve_deadline``: settled (whatever was not served by then is WITHHELD);
3. ``selected`` null (the draw has not run) or naming us without a job yet: wait;
4. ``selected`` without our hotkey: settled;
5. each job whose ``target`` is our hotkey (other items of ``jobs``, another miner's audits or
   the round's scoring jobs, are skipped) is checked: its ``challenge`` must verify as an
   AuditChallenge signed by ``manifest.coord_pubkey`` for this run, with ``target`` = our
   hotkey, ``w`` = the round and ``challenge_hash`` = the digest of its body. A job that fails
   is a protocol violation by the coordinator: logged once (progress ``audit-ignored``) and
   ignored, never fatal. A ``full``-mode challenge asks for nothing;
6. for a ``segments`` challenge, each window start ``a`` (``t = a * J``) not served yet is
   served at once (:mod:`hypertrain.miner.serves` builds it): blob grant (``POST uploads``
   with ``challenge_hash``), ``PUT`` the blob, ``POST /v1/runs/{id}/state`` with the sealed
   StateServe (``exp_drand = 2^40``); the answer's ``stored`` is journaled as ``served``
   (``{challenge_hash, t, blob_sha256}``) with a progress line. When every window of our
   challenge is served (or given up), the round is settled.

Restarts: a window the journal records as ``served``, or whose ``t`` the job's ``serves``
already lists with our blob, is not posted again; a crash between the POST and the journal
line re-posts the identical serve, which the coordinator answers with the same 200.

Failures never reach the round loop. Network errors and 5xx answers are retried with
:meth:`~hypertrain.miner.round.RoundRunner.retry` until the round's give-up time (its
``serve_deadline``'s time plus ``serve_grace_seconds``, below) and, if that passes first, tried
again at the next poll (which then settles the round); a 4xx answer (404, 409 past the deadline or a
different serve stored, 422), a refused upload URL or a kept state that cannot be served
(:class:`~hypertrain.miner.errors.ServeError`) gives that window up, logged. Every wait is bounded:
a round stops being watched at the wall time of its ``serve_deadline`` plus ``serve_grace_seconds``
at the latest (estimated from the Receipt's round, shortened by each view's D), so a stalled beacon
or an unreachable API cannot hold :meth:`AuditServer.wait_settled` forever.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import attrs
import httpx
import trio

from hypertrain.miner.answers import RoundView, ViewJob, read_answer
from hypertrain.miner.artifacts import RoundDir, leaf_state_file
from hypertrain.miner.errors import (
    ApiError,
    MinerError,
    MinerProtocolError,
    ServeError,
    UploadRefused,
)
from hypertrain.miner.passes import Passes
from hypertrain.miner.round import RoundRunner
from hypertrain.miner.serves import PreparedServe, prepare_serve, serve_points
from hypertrain.protocol.converter import structure
from hypertrain.protocol.envelope import CLIENT_EXP, seal, verify
from hypertrain.protocol.errors import HypertrainError
from hypertrain.protocol.messages import AuditChallenge, RoundOpen
from nurseries import GaveUp

__all__ = ["AuditServer", "Served", "check_challenge"]

logger = logging.getLogger(__name__)
T = TypeVar("T")


@attrs.frozen
class Served:
    """A StateServe this process posted and the coordinator stored (an item of the summary)."""

    w: int
    t: int
    challenge_hash: str


@attrs.define
class _Watch:
    """A round being watched: its serve deadline (estimated until a challenge says) and the
    trio time after which it is given up."""

    w: int
    serve_deadline: int
    give_up_at: float


def check_challenge(runner: RoundRunner, w: int, job: ViewJob) -> AuditChallenge:
    """The job's AuditChallenge, checked (module docstring, step 5); MinerProtocolError when
    it is not a K_coord AuditChallenge of this run for our hotkey in round ``w``, or
    ``challenge_hash`` is not its digest."""
    coord = runner.manifest.coord_pubkey
    try:
        verified = verify(
            job.challenge,
            expected_run_id=runner.run_id,
            signer_allowed=lambda t, s: t == "AuditChallenge" and s == coord,
        )
    except HypertrainError as e:
        raise MinerProtocolError(f"job {job.id}: the challenge does not verify: {e}") from e
    message = verified.message
    if not isinstance(message, AuditChallenge):
        raise MinerProtocolError(f"job {job.id}: not an AuditChallenge")
    if (message.w, message.target) != (w, runner.keypair.ss58):
        raise MinerProtocolError(f"job {job.id}: the challenge is not ours for {w}")
    if verified.body_digest != job.challenge_hash:
        raise MinerProtocolError(f"job {job.id}: challenge_hash is not its digest")
    return message


class _Retry(MinerError):
    """A serve failed on the network or with a 5xx: try again at the next poll."""


class AuditServer:
    """Serves the segment audits of this miner's rounds (module docstring)."""

    def __init__(self, runner: RoundRunner) -> None:
        self.runner = runner
        self._watches: dict[int, _Watch] = {}
        self._settled: dict[int, str] = {}
        self._given_up: set[tuple[str, int]] = set()
        self._noted: set[str] = set()
        self._served: list[Served] = []
        self._passes = Passes()

    @property
    def served(self) -> tuple[Served, ...]:
        """The serves this process posted and saw stored, in order."""
        return tuple(self._served)

    def settled(self) -> dict[int, str]:
        """Round -> why its audit needs nothing more from this miner (a copy)."""
        return dict(self._settled)

    # -- the task ----------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Poll and serve every ``poll_seconds``; ends only by cancellation."""
        task_status.started()
        await self._passes.run(self.poll_once, self.runner.config.poll_seconds)

    async def wait_settled(self) -> None:
        """Return once no watched round is left (:meth:`run` must be running)."""
        await self._passes.wait_while(self.pending)

    def pending(self) -> list[int]:
        """The rounds still watched: leaves posted, leaf states kept, audit not settled."""
        runner = self.runner
        journal, workdir = runner.journal, runner.config.workdir
        out = []
        for w in journal.rounds():
            if w in self._settled or "leaves" not in journal.phases(w):
                continue
            if RoundDir(workdir, w).exists(leaf_state_file(0)):
                out.append(w)
            else:  # full mode, or pruned: nothing to serve, ever
                self._settled[w] = "not-kept: no leaf states"
        return out

    async def poll_once(self) -> None:
        """One pass over the watched rounds."""
        for w in self.pending():
            watch = self._watch(w)
            if watch is None:
                continue
            await self._check(watch)
            if w not in self._settled and trio.current_time() >= watch.give_up_at:
                self._settle(w, "gave-up: the serve deadline's time passed")

    # -- one round ---------------------------------------------------------------------------

    def _watch(self, w: int) -> _Watch | None:
        if w in self._watches:
            return self._watches[w]
        runner = self.runner
        try:
            ro = structure(
                RoundOpen, RoundDir(runner.config.workdir, w).read_json("round_open.json")
            )
        except (OSError, ValueError, HypertrainError) as e:
            self._settle(w, f"gave-up: round_open.json: {e}")
            return None
        deadline = ro.d_audit + runner.manifest.verify.T.serve_deadline
        committed = runner.journal.phases(w).get("committed", {})
        since = int(committed.get("received_round", ro.d_commit))
        watch = _Watch(w, deadline, self._bound(deadline, since))
        self._watches[w] = watch
        return watch

    def _bound(self, serve_deadline: int, now_round: int) -> float:
        period = self.runner.manifest.beacon.period
        rounds_left = max(serve_deadline - now_round, 0)
        return trio.current_time() + rounds_left * period + self.runner.settings.serve_grace_seconds

    async def _check(self, watch: _Watch) -> None:
        w = watch.w
        view = await self._view(w)
        if view is None:
            return
        if view.audit_beacon_round is None:
            self._settle(w, "no-audits: the coordinator does not audit")
            return
        hotkey = self.runner.keypair.ss58
        mine = self._jobs(w, view)
        for _, challenge in mine:
            watch.serve_deadline = challenge.serve_deadline
        watch.give_up_at = min(watch.give_up_at, self._bound(watch.serve_deadline, view.now_round))
        if view.now_round > watch.serve_deadline:
            self._settle(w, f"deadline: D={view.now_round} > serve_deadline={watch.serve_deadline}")
            return
        if view.selected is None:
            return
        if hotkey not in view.selected:
            self._settle(w, "not-selected")
            return
        if not mine:
            return  # selected, the job is not listed yet (or its challenge was ignored)
        done = [await self._serve_job(w, job, challenge) for job, challenge in mine]
        if all(done):
            self._settle(w, "served")

    async def _view(self, w: int) -> RoundView | None:
        try:
            view = await self.runner.client.round_view(self.runner.run_id, w)
        except (httpx.TransportError, httpx.TimeoutException) as e:
            self._progress(w, "audit-poll-error", error=type(e).__name__)
            return None
        except (ApiError, MinerProtocolError) as e:
            self._progress(w, "audit-poll-error", error=repr(str(e)))
            return None
        if view is None:
            self._note(w, f"view-404:{w}", "the round view answers 404")
        return view

    def _jobs(self, w: int, view: RoundView) -> list[tuple[ViewJob, AuditChallenge]]:
        """Our audit jobs of the view whose challenge verifies (module docstring, step 5)."""
        out = []
        for raw in view.jobs:
            if raw.get("target") != self.runner.keypair.ss58:
                continue  # another miner's audit, or not an audit job (the scoring jobs)
            try:
                job = read_answer(ViewJob, raw, f"round {w} view job")
            except MinerProtocolError as e:
                self._note(w, f"job:{raw.get('id')!r}", str(e))
                continue
            challenge = self._challenge(w, job)
            if challenge is not None:
                out.append((job, challenge))
        return out

    def _challenge(self, w: int, job: ViewJob) -> AuditChallenge | None:
        try:
            return check_challenge(self.runner, w, job)
        except MinerProtocolError as e:
            self._note(w, job.challenge_hash, str(e))
            return None

    async def _serve_job(self, w: int, job: ViewJob, challenge: AuditChallenge) -> bool:
        """Serve what the challenge still needs; True when nothing more is to be done."""
        if challenge.mode != "segments":
            return True
        journal = self.runner.journal
        stored = {s.t: s.blob_sha256 for s in job.serves}
        done = True
        for a, t in serve_points(challenge, self.runner.manifest.inner.J):
            key = (job.challenge_hash, t)
            if key in self._given_up or key in journal.served(w):
                continue
            try:
                await self._serve_one(w, job, a, stored.get(t))
            except _Retry:
                done = False
        return done

    async def _serve_one(self, w: int, job: ViewJob, a: int, stored_sha: str | None) -> None:
        runner, ch = self.runner, job.challenge_hash
        try:
            prepared = prepare_serve(
                RoundDir(runner.config.workdir, w), runner.manifest, runner.keypair.ss58, ch, a
            )
        except ServeError as e:
            self._give_up(w, ch, a * runner.manifest.inner.J, str(e))
            return
        if stored_sha is not None:
            if stored_sha == prepared.blob_sha256:
                self._stored(w, prepared, ch, posted=False)
            else:
                self._give_up(w, ch, prepared.t, f"a different blob {stored_sha} is stored")
            return
        try:
            await self._post(w, prepared, ch)
        except GaveUp as e:
            self._progress(w, "serve-error", t=prepared.t, error=repr(str(e.__cause__)))
            raise _Retry from e
        except ApiError as e:
            self._give_up(w, ch, prepared.t, str(e))
        except (UploadRefused, MinerProtocolError) as e:
            self._give_up(w, ch, prepared.t, f"protocol: {e}")

    async def _retry(self, w: int, call: Callable[[], Awaitable[T]]) -> T:
        """``call()``, retried until round ``w``'s give-up time (module doc)."""

        def note(error: Exception, delay: float) -> None:
            self._progress(w, "serve-retry", error=repr(str(error)), delay=round(delay, 3))

        return await self.runner.retry(call, self._watches[w].give_up_at, note)

    async def _post(self, w: int, prepared: PreparedServe, ch: str) -> None:
        """Blob grant, PUT, StateServe (module docstring, step 6)."""
        runner = self.runner
        client, run_id, hotkey = runner.client, runner.run_id, runner.keypair.ss58
        sha, allow_file = prepared.blob_sha256, runner.config.allow_file_upload
        url = await self._retry(w, lambda: client.upload_grant(run_id, w, hotkey, sha, ch))
        await self._retry(w, lambda: client.put_payload(url, prepared.blob, allow_file=allow_file))
        envelope = seal(runner.keypair, "StateServe", run_id, prepared.body, CLIENT_EXP)
        answer = await self._retry(w, lambda: client.post_state(run_id, envelope))
        if (answer.challenge_hash, answer.t, answer.stored) != (ch, prepared.t, True):
            raise MinerProtocolError(f"round {w}: the StateServe answer is not for our serve")
        runner.reached("serve_posted", w)
        self._stored(w, prepared, ch, posted=True)

    # -- bookkeeping -------------------------------------------------------------------------

    def _stored(self, w: int, prepared: PreparedServe, ch: str, *, posted: bool) -> None:
        """The coordinator holds this serve: journal it (once) and count it."""
        if (ch, prepared.t) not in self.runner.journal.served(w):
            self.runner.record(
                w, "served", challenge_hash=ch, t=prepared.t, blob_sha256=prepared.blob_sha256
            )
        if posted:
            self._served.append(Served(w, prepared.t, ch))

    def _give_up(self, w: int, ch: str, t: int, why: str) -> None:
        self._given_up.add((ch, t))
        logger.warning("round %d: serve t=%d of challenge %s given up: %s", w, t, ch, why)
        self._progress(w, "serve-given-up", t=t, reason=repr(why))

    def _settle(self, w: int, why: str) -> None:
        self._settled[w] = why
        logger.info("round %d: audit settled: %s", w, why)
        self._progress(w, "audit-settled", reason=why.split(":", 1)[0])

    def _note(self, w: int, key: str, why: str) -> None:
        """Log a coordinator problem once per ``key`` (a protocol violation we ignore)."""
        if key in self._noted:
            return
        self._noted.add(key)
        logger.warning("round %d: audit job ignored: %s", w, why)
        self._progress(w, "audit-ignored", reason=repr(why))

    def _progress(self, w: int, phase: str, **info: object) -> None:
        self.runner.progress.phase(w, phase, **info)
