"""The auditor's loop in Trio: lease a job, audit it under a heartbeat, post the verdict.

:meth:`AuditorWorker.audit_next` handles one lease:

1. ``POST /v1/worker/lease {"run_id"}``; 204 -> None (idle);
2. a job of another run is handed back (``fail`` with ``retry=true``);
3. the job is read and checked (:func:`~hypertrain.auditor.job.check_job`); every blob it names
   is fetched hash-checked; in segments mode, when a challenged window start has no serve in
   the job, ``GET .../serves?lease=`` brings the serves stored since and the beacon round now;
4. :func:`~hypertrain.auditor.verdict.prepare` decides BAD_PROOF, ASSIGNMENT_VIOLATION or
   WITHHELD, or hands back the replay's inputs; then the dataset's needed shards are fetched
   (:class:`~hypertrain.auditor.datacache.DatasetCache`) and
   :func:`~hypertrain.auditor.verdict.replay_outcome` runs through ``run_sync`` (a worker
   thread in production, so the heartbeat keeps beating; inline under virtual time);
5. the verdict is sealed with the auditor's key and posted (``complete``).

While steps 3-5 run, a heartbeat task posts ``heartbeat`` every ``heartbeat_interval`` seconds
(the lease lasts 600 beacon rounds); a 404/409 answer means the lease is lost: the job's work
is cancelled and nothing more is posted. Job failures (:class:`~hypertrain.auditor.errors.
JobFailed`) post ``fail`` with their ``retry``; an unexpected exception (a bug) posts ``fail``
with retry and is logged with its traceback. A 401/403 raises
:class:`~hypertrain.auditor.errors.AuditorFatal`. Cancelled while holding a lease (shutdown),
the job is handed back (``fail`` with retry) under a shielded, bounded cleanup.

:meth:`AuditorWorker.run` is the forever-service: lease after lease, ``poll_interval`` seconds
after an idle answer, an unreachable coordinator or a job that failed with retry.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final, NoReturn

import attrs
import trio

from hypertrain.auditor.checks import serve_blob_shas
from hypertrain.auditor.client import AuditorClient
from hypertrain.auditor.datacache import DatasetCache
from hypertrain.auditor.errors import (
    ApiError,
    AuditorFatal,
    BadJob,
    FetchFailed,
    JobFailed,
    LeaseLost,
    Unreachable,
    refusal,
)
from hypertrain.auditor.job import AuditJob, JobHandle, check_job, read_handle, read_job
from hypertrain.auditor.progress import JobReport, JobState, Progress
from hypertrain.auditor.verdict import (
    Evidence,
    Outcome,
    Replayer,
    prepare,
    replay_outcome,
    seal_verdict,
)
from hypertrain.datasets.errors import DatasetError
from hypertrain.protocol.keys import Keypair
from nurseries import RunSync, cleanup_scope, periodic, run_inline

__all__ = ["DEFAULT_WORKER_SETTINGS", "AuditorWorker", "WorkerSettings"]

logger = logging.getLogger(__name__)


@attrs.frozen
class WorkerSettings:
    """Named intervals (seconds of Trio time)."""

    poll_interval: float = 10.0
    """Wait after an idle lease answer, an unreachable coordinator or a retried failure."""
    dispute_poll_interval: float = 10.0
    """Between two polls of the disputes, as a party and as a referee (a dispute's level
    lasts ``verify.T.dispute_per_level`` beacon rounds)."""
    heartbeat_interval: float = 60.0
    """Between heartbeats; the lease lasts 600 beacon rounds (30 minutes of quicknet)."""
    cleanup_timeout: float = 10.0
    """Bound of the shielded hand-back when the auditor is stopped holding a lease."""


DEFAULT_WORKER_SETTINGS: Final = WorkerSettings()


@attrs.define
class _Lease:
    lost: bool = False


def _default_replayer() -> Replayer:
    from hypertrain.auditor.replayer import TorchReplayer  # torch: only after configure

    return TorchReplayer()


class AuditorWorker:
    """Audits the jobs of run ``run_id`` (module docstring)."""

    def __init__(
        self,
        *,
        client: AuditorClient,
        keypair: Keypair,
        run_id: str,
        data: DatasetCache,
        progress: Progress,
        settings: WorkerSettings = DEFAULT_WORKER_SETTINGS,
        run_sync: RunSync = run_inline,
        replayer: Callable[[], Replayer] = _default_replayer,
    ) -> None:
        self.client, self.keypair, self.run_id = client, keypair, run_id
        self.data, self.progress, self.settings = data, progress, settings
        self._run_sync, self._replayer = run_sync, replayer

    # -- the loop ---------------------------------------------------------------------------

    async def run(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> NoReturn:
        """Audit job after job until cancelled; AuditorFatal ends it."""
        task_status.started()
        while True:
            try:
                report = await self.audit_next()
            except Unreachable as e:
                self.progress.note(f"coordinator unreachable ({e}); leasing again later")
                report = None
            if report is None or report.retry:
                await trio.sleep(self.settings.poll_interval)

    async def audit_next(self) -> JobReport | None:
        """One lease (module docstring); None when idle. Raises Unreachable when the lease
        call itself fails, AuditorFatal on a refused token."""
        try:
            data = await self.client.lease(self.run_id)
        except ApiError as e:
            raise self._fatal_or(e, Unreachable(f"lease refused: {e}")) from e
        if data is None:
            return None
        began = trio.current_time()
        try:
            handle = read_handle(data)
        except BadJob as e:  # no id and lease to answer with: the lease expires on its own
            return self._report(None, "failed", began, reason=e.reason)
        if handle.run_id != self.run_id:
            await self._hand_back(handle, f"job of run {handle.run_id}, not {self.run_id}")
            return self._report(handle, "handed-back", began, retry=True)
        return await self._leased(handle, data, began)

    # -- one job ----------------------------------------------------------------------------

    def _report(
        self,
        handle: JobHandle | None,
        state: JobState,
        began: float,
        job: AuditJob | None = None,
        **info: object,
    ) -> JobReport:
        known = {"w": job.w, "target": job.target, "mode": job.challenge.mode} if job else {}
        report = JobReport(
            job="?" if handle is None else handle.id,
            run_id="?" if handle is None else handle.run_id,
            state=state,
            seconds=round(trio.current_time() - began, 3),
            **known,  # type: ignore[arg-type]
            **info,  # type: ignore[arg-type]
        )
        self.progress.job(report)
        return report

    def _fatal_or(self, e: ApiError, other: Exception) -> Exception:
        return refusal(e, other)

    async def _hand_back(self, handle: JobHandle, reason: str) -> None:
        try:
            await self.client.fail(handle.id, handle.lease, reason, retry=True)
        except (ApiError, Unreachable) as e:
            logger.warning("job %s: could not hand it back: %s", handle.id, e)

    async def _leased(self, handle: JobHandle, data: object, began: float) -> JobReport:
        lease = _Lease()
        reports: list[JobReport] = []  # empty: cancelled (shutdown, or the lease was lost)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._heartbeat, handle, lease, nursery.cancel_scope)
                try:
                    reports.append(await self._audit(handle, data, began))
                finally:
                    nursery.cancel_scope.cancel()
        finally:
            if not reports and not lease.lost:
                with cleanup_scope(self.settings.cleanup_timeout, what="job hand-back"):
                    await self._hand_back(handle, "the auditor stopped")
        if not reports:  # the heartbeat lost the lease and cancelled the work
            return self._report(handle, "lease-lost", began, reason="the lease expired")
        return reports[0]

    async def _heartbeat(self, handle: JobHandle, lease: _Lease, work: trio.CancelScope) -> None:
        interval = self.settings.heartbeat_interval
        async for _ in periodic(interval, start=trio.current_time() + interval):
            try:
                await self.client.heartbeat(handle.id, handle.lease)
            except ApiError as e:
                if e.status in (404, 409):
                    lease.lost = True
                    work.cancel()
                    return
                logger.warning("job %s: heartbeat refused: %s", handle.id, e)
            except Unreachable as e:
                logger.warning("job %s: heartbeat failed: %s", handle.id, e)

    async def _audit(self, handle: JobHandle, data: object, began: float) -> JobReport:
        job: AuditJob | None = None
        try:
            job = read_job(data)
            check_job(job)
            outcome = await self._outcome(job, handle.lease)
            envelope = seal_verdict(self.keypair, job, outcome)
            await self.client.complete(job.id, handle.lease, envelope.to_json())
        except JobFailed as e:
            await self._post_failure(handle, e.reason, retry=e.retry)
            return self._report(handle, "failed", began, job, retry=e.retry, reason=e.reason)
        except LeaseLost as e:
            return self._report(handle, "lease-lost", began, job, reason=str(e))
        except ApiError as e:
            if e.status in (401, 403):
                raise self._fatal_or(e, e) from e
            if e.status in (404, 409):
                return self._report(handle, "lease-lost", began, job, reason=str(e))
            await self._post_failure(handle, str(e), retry=True)
            return self._report(handle, "failed", began, job, retry=True, reason=str(e))
        except AuditorFatal:
            raise
        except Exception as e:  # a bug must not end the service: the job goes back, logged
            logger.exception("job %s: unexpected failure", handle.id)
            reason = f"auditor error: {type(e).__name__}: {e}"
            await self._post_failure(handle, reason, retry=True)
            return self._report(handle, "failed", began, job, retry=True, reason=reason)
        return self._report(
            handle,
            "done",
            began,
            job,
            result=outcome.result,
            first_bad_leaf=outcome.first_bad_leaf,
            reason=outcome.reason,
        )

    async def _post_failure(self, handle: JobHandle, reason: str, *, retry: bool) -> None:
        try:
            await self.client.fail(handle.id, handle.lease, reason, retry=retry)
        except ApiError as e:
            if e.status in (401, 403):
                raise self._fatal_or(e, e) from e
            logger.warning("job %s: fail was refused: %s", handle.id, e)
        except Unreachable as e:
            logger.warning("job %s: fail could not be posted: %s", handle.id, e)

    async def _object(self, sha256: str) -> bytes:
        try:
            return await self.client.get_object(sha256)
        except ApiError as e:
            if e.status == 404:
                raise BadJob(f"object {sha256} is not stored") from e
            raise self._fatal_or(e, FetchFailed(f"object {sha256}: {e}")) from e

    async def _serves(
        self, job: AuditJob, lease: str | None
    ) -> tuple[list[dict[str, object]], int | None]:
        """The serve envelopes to check, and the beacon round when they were asked for."""
        serves = list(job.state_serves)
        if job.challenge.mode != "segments":
            return serves, None
        J = job.manifest.inner.J  # noqa: N806 (spec name)
        have = {s.get("body", {}).get("t") for s in serves if isinstance(s.get("body"), dict)}
        if all(a * J in have for a, _ in job.challenge.segments):
            return serves, None
        if lease is None:  # a stored job (a re-audit): its serves are all it will ever have
            raise BadJob(f"job {job.id}: a challenged window's state was never served")
        try:
            answer = await self.client.serves(job.id, lease)
        except ApiError as e:
            if e.status in (404, 409):
                raise LeaseLost(job.id, str(e)) from e
            raise
        return [item.serve for item in answer.serves], answer.now_round

    async def reaudit(self, job: AuditJob) -> Outcome:
        """The audit of a stored job (``GET /v1/worker/jobs/{id}``, no lease): what a referee
        decides a contest with nothing to bisect by."""
        return await self._outcome(job, None)

    async def _outcome(self, job: AuditJob, lease: str | None) -> Outcome:
        blobs = {job.theta_start_sha256: await self._object(job.theta_start_sha256)}
        if job.ef_in_sha256 is not None:
            blobs[job.ef_in_sha256] = await self._object(job.ef_in_sha256)
        serves, now_round = await self._serves(job, lease)
        for sha in serve_blob_shas(serves):
            blobs[sha] = await self._object(sha)
        prepared = prepare(job, Evidence(blobs, tuple(serves), now_round))
        if isinstance(prepared, Outcome):
            return prepared
        if job.dataset_sha256 is None:
            raise FetchFailed("the run has no registered dataset to replay with")
        dataset = await self.data.ensure(
            job.dataset_sha256, job.manifest, job.assignment.sample_ids
        )
        try:
            outcome: Outcome = await self._run_sync(
                replay_outcome, job, prepared, self._replayer(), dataset.samples
            )
        except DatasetError as e:
            raise FetchFailed(f"dataset: {e}") from e
        return outcome
