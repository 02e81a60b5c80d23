"""The auditor's part in disputes, in Trio: it answers the bisection of the disputes against its
own verdicts and referees the disputes of the run's other auditors (spec 6.4, issue 14).

:class:`DisputeWorker` runs two forever-services beside the audit loop, each polling every
``dispute_poll_interval`` seconds (absolute schedule; a long pass skips ticks):

- :meth:`~DisputeWorker.run_party`: ``GET /v1/runs/{id}/disputes?party=<ss58>&state=open``;
  for each dispute whose stage awaits ``"auditor"`` (:func:`~hypertrain.auditor.dispute.
  owed_stage`) it builds its recomputation of the round once per dispute, computes the stage's
  hashes through ``run_sync`` and posts the Bisect it signs (``POST .../bisect``). The
  recomputation comes from the ``party`` recomputer: the one the audit replays with, so an
  auditor with a (test-only) fault answers from its own faulty recomputation;
- :meth:`~DisputeWorker.run_referee`: ``GET .../disputes?referee=1``; for each case it may rule
  on (never its own dispute: :func:`~hypertrain.auditor.dispute.owed_ruling`) it builds an
  honest recomputation (the ``referee`` recomputer), judges the case through ``run_sync`` and
  posts the Resolution it signs (``POST .../resolution``, worker token). A 409 means another
  referee resolved it first: reported as ``taken``.

The inputs of a recomputation come from the disputed job (``GET /v1/worker/jobs/{id}``, fetched
and checked once per job: :func:`~hypertrain.auditor.job.check_job`, the dispute's own job,
hash-checked blobs, :func:`~hypertrain.auditor.dispute.recompute_start`, the dataset's shards);
caches are pruned to the disputes the last poll listed.

Errors, as the audit loop handles them: a 401/403 raises
:class:`~hypertrain.auditor.errors.AuditorFatal` (the program ends); an unreachable coordinator
ends the pass, the next poll tries again; a post the coordinator refuses (409, 422, 404) is
reported and not repeated for that stage or case; a job or dispute this auditor cannot
recompute (:class:`~hypertrain.auditor.errors.BadJob`, :class:`~hypertrain.auditor.errors.
DisputeError`) is reported and not retried until the dispute moves on, a fetch that failed is
retried at the next poll; anything else is a bug: logged with its traceback, and the pass goes
on with the next dispute. Every dispute action is one progress line
(:class:`~hypertrain.auditor.progress.DisputeReport`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Hashable
from typing import NoReturn

import attrs
import trio

from hypertrain.auditor.client import AuditorClient
from hypertrain.auditor.datacache import DatasetCache
from hypertrain.auditor.dispute import (
    DisputeView,
    Recomputation,
    Recomputer,
    RecomputeStart,
    check_job_of,
    committed_leaf,
    owed_ruling,
    owed_stage,
    read_dispute,
    recompute_start,
    seal_bisect,
    seal_resolution,
    start_blob_shas,
)
from hypertrain.auditor.errors import (
    ApiError,
    AuditorFatal,
    BadJob,
    DisputeError,
    FetchFailed,
    JobFailed,
    Unreachable,
    refusal,
)
from hypertrain.auditor.job import AuditJob, check_job, read_job
from hypertrain.auditor.progress import DisputeReport, DisputeRole, DisputeState, Progress
from hypertrain.auditor.verdict import Outcome, Samples
from hypertrain.auditor.worker import DEFAULT_WORKER_SETTINGS, WorkerSettings
from hypertrain.datasets.errors import DatasetError
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.manifest import RunManifest
from hypertrain.rounds.bisection import Ruling
from nurseries import RunSync, periodic, run_inline

__all__ = ["DisputeWorker"]

logger = logging.getLogger(__name__)

_FINAL: frozenset[DisputeState] = frozenset({"bisect", "ruled", "taken", "refused"})


@attrs.frozen(eq=False)
class _Inputs:
    job: AuditJob
    start: RecomputeStart
    samples: Samples


@attrs.define
class _Desk:
    """One role's caches: inputs per (job, leaf), a recomputation per dispute, and the keys
    (dispute, stage or case) already acted on."""

    inputs: dict[tuple[str, int | None], _Inputs] = attrs.Factory(dict)
    recomputations: dict[str, Recomputation] = attrs.Factory(dict)
    done: set[tuple[str, Hashable]] = attrs.Factory(set)

    def keep(self, views: list[DisputeView]) -> None:
        ids = {v.dispute_id for v in views}
        jobs = {(v.job_id, v.first_bad_leaf) for v in views}
        self.inputs = {k: x for k, x in self.inputs.items() if k in jobs}
        self.recomputations = {k: r for k, r in self.recomputations.items() if k in ids}
        self.done = {k for k in self.done if k[0] in ids}


Act = Callable[[DisputeView, float], Awaitable[DisputeReport | None]]
Reaudit = Callable[[AuditJob], Awaitable[Outcome]]
"""An honest audit of a stored job (:meth:`hypertrain.auditor.worker.AuditorWorker.reaudit`)."""


class DisputeWorker:
    """Takes part in run ``run_id``'s disputes (module docstring)."""

    def __init__(
        self,
        *,
        client: AuditorClient,
        keypair: Keypair,
        manifest: RunManifest,
        data: DatasetCache,
        progress: Progress,
        party: Callable[[], Recomputer],
        referee: Callable[[], Recomputer],
        reaudit: Reaudit | None = None,
        settings: WorkerSettings = DEFAULT_WORKER_SETTINGS,
        run_sync: RunSync = run_inline,
    ) -> None:
        self.client, self.keypair, self.manifest = client, keypair, manifest
        self.run_id = manifest.run_id()
        self.data, self.progress, self.settings = data, progress, settings
        self._party, self._referee, self._reaudit = party, referee, reaudit
        self._run_sync = run_sync
        self._desks = {"auditor": _Desk(), "referee": _Desk()}

    # -- the loops --------------------------------------------------------------------------

    async def run_party(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> NoReturn:
        """Answer the disputes against this auditor's verdicts until cancelled."""
        task_status.started()
        async for _ in periodic(self.settings.dispute_poll_interval):
            await self._pass("answering disputes", self.answer_disputes)
        raise AssertionError("unreachable")  # pragma: no cover (periodic never ends)

    async def run_referee(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> NoReturn:
        """Referee the run's other disputes until cancelled."""
        task_status.started()
        async for _ in periodic(self.settings.dispute_poll_interval):
            await self._pass("refereeing", self.referee_disputes)
        raise AssertionError("unreachable")  # pragma: no cover (periodic never ends)

    async def _pass(self, what: str, run: Callable[[], Awaitable[object]]) -> None:
        try:
            await run()
        except Unreachable as e:
            self.progress.note(f"coordinator unreachable ({e}); {what} again later")
        except AuditorFatal:
            raise
        except Exception:  # a bug must not end the service: logged, the next poll goes on
            logger.exception("%s: unexpected failure", what)

    async def answer_disputes(self) -> list[DisputeReport]:
        """One party pass (module docstring): the reports of what it did."""
        views = await self._views("auditor", party=self.keypair.ss58, state="open")
        return await self._each(views, "auditor", self._answer)

    async def referee_disputes(self) -> list[DisputeReport]:
        """One referee pass (module docstring): the reports of what it did."""
        views = await self._views("referee", referee=True)
        return await self._each(views, "referee", self._rule)

    # -- one pass ---------------------------------------------------------------------------

    async def _views(
        self, role: DisputeRole, *, party: str | None = None, state: str | None = None,
        referee: bool = False,
    ) -> list[DisputeView]:  # fmt: skip
        try:
            items = await self.client.disputes(
                self.run_id, party=party, state=state, referee=referee
            )
        except ApiError as e:
            raise refusal(e, Unreachable(f"disputes: {e}")) from e
        views = []
        for item in items:
            try:
                views.append(read_dispute(item))
            except DisputeError as e:
                logger.warning("%s", e)
        self._desks[role].keep(views)
        return views

    async def _each(
        self, views: list[DisputeView], role: DisputeRole, act: Act
    ) -> list[DisputeReport]:
        desk = self._desks[role]
        reports = []
        for view in views:
            key = (view.dispute_id, view.stage if role == "auditor" else view.referee)
            if key in desk.done:
                continue
            report = await self._guarded(view, role, act)
            if report is None:
                continue
            if report.state in _FINAL or report.retry is False:
                desk.done.add(key)
            reports.append(report)
        return reports

    async def _guarded(
        self, view: DisputeView, role: DisputeRole, act: Act
    ) -> DisputeReport | None:
        began = trio.current_time()
        try:
            return await act(view, began)
        except (Unreachable, AuditorFatal):
            raise
        except (BadJob, DisputeError) as e:
            # a party's stage cannot come right by itself; a referee's case must be ruled in
            # the end (nobody else may be there to rule it): the next poll tries again
            retry = role == "referee"
            return self._report(view, role, "failed", began, retry=retry, reason=str(e))
        except JobFailed as e:  # FetchFailed, NotReady: the next poll tries again
            return self._report(view, role, "failed", began, retry=True, reason=str(e))
        except ApiError as e:
            raise refusal(e, e) from e
        except Exception as e:  # a bug: logged, the next dispute goes on
            logger.exception("dispute %s: unexpected failure as %s", view.dispute_id, role)
            reason = f"auditor error: {type(e).__name__}: {e}"
            return self._report(view, role, "failed", began, retry=True, reason=reason)

    def _report(
        self,
        view: DisputeView,
        role: DisputeRole,
        state: DisputeState,
        began: float,
        **info: object,
    ) -> DisputeReport:
        report = DisputeReport(
            dispute=view.dispute_id,
            run_id=view.run_id,
            role=role,
            state=state,
            seconds=round(trio.current_time() - began, 3),
            w=view.w,
            miner=view.miner,
            **info,  # type: ignore[arg-type]
        )
        self.progress.dispute(report)
        return report

    # -- the party --------------------------------------------------------------------------

    async def _answer(self, view: DisputeView, began: float) -> DisputeReport | None:
        stage = owed_stage(view, self.keypair.ss58, self.manifest.model.n_layers)
        if stage is None:
            return None
        recomputation = await self._recomputation("auditor", view, self._party)
        hashes = await self._run_sync(recomputation.hashes, stage)
        envelope = seal_bisect(self.keypair, view, stage, hashes)
        where = {"level": stage.level, "interval": (stage.a, stage.b), "N": stage.n}
        try:
            await self.client.bisect(self.run_id, envelope.to_json())
        except ApiError as e:
            if e.status in (401, 403):
                raise refusal(e, e) from e
            return self._report(view, "auditor", "refused", began, **where, reason=str(e))
        return self._report(view, "auditor", "bisect", began, **where)

    # -- the referee ------------------------------------------------------------------------

    async def _rule(self, view: DisputeView, began: float) -> DisputeReport | None:
        case = owed_ruling(view, self.keypair.ss58)
        if case is None:
            if view.auditor == self.keypair.ss58 and view.referee is not None:
                self.progress.note(
                    f"dispute {view.dispute_id} waits for a referee; this auditor is its"
                    " disputed auditor, another auditor of the run must rule"
                )
                self._desks["referee"].done.add((view.dispute_id, view.referee))
            return None
        if case.kind == "verdict":
            ruling, output_hash = await self._audit_again(view)
        else:
            inputs = await self._inputs("referee", view)
            leaf = committed_leaf(view, inputs.job, case)
            recomputation = await self._recomputation("referee", view, self._referee)
            ruling, output_hash = await self._run_sync(recomputation.judge, case, leaf)
        envelope = seal_resolution(self.keypair, view, case, ruling, output_hash)
        logger.info(
            "dispute %s: %s: the %s loses: %s", view.dispute_id, case.op_spec, ruling.loser,
            ruling.reason,
        )  # fmt: skip
        ruled = {"loser": ruling.loser, "op_spec": case.op_spec}
        try:
            await self.client.resolution(self.run_id, envelope.to_json())
        except ApiError as e:
            if e.status in (401, 403):
                raise refusal(e, e) from e
            if e.status == 409:
                reason = f"resolved by another referee first ({e.detail})"
                return self._report(view, "referee", "taken", began, **ruled, reason=reason)
            return self._report(view, "referee", "refused", began, **ruled, reason=str(e))
        return self._report(view, "referee", "ruled", began, **ruled, reason=ruling.reason)

    async def _audit_again(self, view: DisputeView) -> tuple[Ruling, str]:
        """A contest with nothing to bisect: audit the round again, honestly; a MATCH makes
        the auditor the loser, anything else the miner (the new audit's root is the output)."""
        if self._reaudit is None:
            raise DisputeError(view.dispute_id, "this auditor cannot audit a round again")
        job = await self._job(view)
        outcome = await self._reaudit(job)
        if outcome.result == "MATCH":
            ruling = Ruling("auditor", "a new audit of the round is a MATCH")
        else:
            why = f"a new audit of the round is {outcome.result} too ({outcome.reason})"
            ruling = Ruling("miner", why)
        return ruling, outcome.recomputed_leaves_root

    async def _job(self, view: DisputeView) -> AuditJob:
        try:
            data = await self.client.job(view.job_id)
        except ApiError as e:
            raise refusal(e, DisputeError(view.dispute_id, f"job {view.job_id}: {e}")) from e
        job = read_job(data, leased=False)
        check_job(job)
        check_job_of(view, job)
        return job

    # -- the inputs -------------------------------------------------------------------------

    async def _recomputation(
        self, role: DisputeRole, view: DisputeView, recomputer: Callable[[], Recomputer]
    ) -> Recomputation:
        desk = self._desks[role]
        found = desk.recomputations.get(view.dispute_id)
        if found is None:
            inputs = await self._inputs(role, view)
            found = await self._run_sync(
                recomputer().recompute, inputs.job, inputs.start, inputs.samples
            )
            desk.recomputations[view.dispute_id] = found
        return found

    async def _inputs(self, role: DisputeRole, view: DisputeView) -> _Inputs:
        desk = self._desks[role]
        key = (view.job_id, view.first_bad_leaf)
        found = desk.inputs.get(key)
        if found is not None:
            return found
        job = await self._job(view)
        blobs = {sha: await self._object(sha) for sha in start_blob_shas(view, job)}
        start = recompute_start(view, job, blobs)
        if job.dataset_sha256 is None:
            raise DisputeError(view.dispute_id, "the run has no registered dataset")
        try:
            dataset = await self.data.ensure(
                job.dataset_sha256, job.manifest, job.assignment.sample_ids
            )
        except DatasetError as e:
            raise FetchFailed(f"dataset: {e}") from e
        found = _Inputs(job, start, dataset.samples)
        desk.inputs[key] = found
        return found

    async def _object(self, sha256: str) -> bytes:
        try:
            return await self.client.get_object(sha256)
        except ApiError as e:
            if e.status == 404:
                raise BadJob(f"object {sha256} is not stored") from e
            raise refusal(e, FetchFailed(f"object {sha256}: {e}")) from e
