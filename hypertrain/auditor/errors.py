"""The errors of the auditor program, one tree, and what each one does to a job or the process.

::

    AuditorError              root of everything the auditor raises on purpose
    ├── AuditorFatal          the auditor cannot work for this run: key, token, manifest,
    │                         determinism env, a refused token (401/403)          exit 2
    ├── JobFailed             this job cannot get a verdict now; ``retry`` says whether the
    │   │                     job goes back to the queue (``POST .../fail`` with it)
    │   ├── NotReady          a needed StateServe is missing before serve_deadline  retry
    │   ├── BadJob            the coordinator's job contradicts itself or the derivation
    │   │                     (segments, mode, beacon hash, signatures, start state) no retry
    │   ├── Unreachable       network errors / 5xx after the bounded retries        retry
    │   └── FetchFailed       an object that does not hash to its sha256, or that
    │                         cannot be fetched                                     retry
    ├── ApiError              a non-2xx answer the route's contract does not expect:
    │                         ``status``, ``detail`` (-> Unreachable for 5xx, BadJob for
    │                         a 404 of a named object, AuditorFatal for 401/403)
    ├── LeaseLost             the lease is no longer ours (409/404 on heartbeat or
    │                         complete): the job is dropped without a verdict
    └── DisputeError          a dispute this auditor cannot take part in now (a view that
                              does not parse, a job that is not the dispute's, a start
                              state that is not served): logged, the dispute skipped

``->`` marks errors re-raised as another with ``raise ... from e`` (the cause stays attached).
A verdict (MATCH, MISMATCH, WITHHELD, BAD_PROOF, ASSIGNMENT_VIOLATION) is never an error: the
pure checks return it as a value (:class:`hypertrain.auditor.verdict.Outcome`).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ApiError",
    "AuditorError",
    "AuditorFatal",
    "BadJob",
    "DisputeError",
    "FetchFailed",
    "JobFailed",
    "LeaseLost",
    "NotReady",
    "Unreachable",
    "refusal",
]


class AuditorError(Exception):
    """Root of the errors the auditor raises on purpose (module docstring)."""


class AuditorFatal(AuditorError):
    """A configuration, key, token, manifest or determinism problem: exit 2."""


class JobFailed(AuditorError):
    """The job ends without a verdict; ``retry`` is what ``POST .../fail`` sends."""

    retry: bool = True

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class NotReady(JobFailed):
    """A needed StateServe is missing and serve_deadline has not passed: try again later."""

    retry = True


class BadJob(JobFailed):
    """The job contradicts itself or what the auditor derives: no retry."""

    retry = False


class Unreachable(JobFailed):
    """The coordinator did not answer usefully within the bounded retries."""

    retry = True


class FetchFailed(JobFailed):
    """An object could not be fetched, or its bytes do not hash to its sha256."""

    retry = True


class ApiError(AuditorError):
    """A non-2xx answer: ``status``, the ``detail`` string and the parsed ``body``."""

    def __init__(self, method: str, path: str, status: int, body: Any) -> None:
        detail = body.get("detail") if isinstance(body, dict) else None
        self.status, self.body = status, body
        self.detail = str(detail) if detail is not None else str(body)[:200]
        super().__init__(f"{method} {path}: HTTP {status}: {self.detail}")


class LeaseLost(AuditorError):
    """The lease of job ``job_id`` is not current any more (expired and requeued)."""

    def __init__(self, job_id: str, why: str) -> None:
        super().__init__(f"job {job_id}: lease lost ({why})")
        self.job_id = job_id


class DisputeError(AuditorError):
    """A dispute the auditor cannot answer or rule on (module docstring)."""

    def __init__(self, dispute_id: str, why: str) -> None:
        super().__init__(f"dispute {dispute_id}: {why}")
        self.dispute_id, self.why = dispute_id, why


def refusal(e: ApiError, other: Exception) -> Exception:
    """What an ApiError becomes: AuditorFatal for a refused token (401/403), else ``other``."""
    if e.status in (401, 403):
        return AuditorFatal(f"the coordinator refuses this auditor: {e}")
    return other
