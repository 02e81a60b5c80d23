"""The auditor (``hypertrain-auditor``, spec 6.3): lease audit jobs, replay, sign verdicts.

Importing this package does not import torch: :mod:`~hypertrain.auditor.replayer` (the only
module that does) is imported lazily, after ``trainer.determinism.configure``.

Pure (no trio, no httpx; tested synchronously on real CPU training):

- :mod:`~hypertrain.auditor.errors`: the auditor's one error tree;
- :mod:`~hypertrain.auditor.job`: the leased job, typed, and its coherence (signatures,
  deadlines, beacon hash, assignment, mode and the derived segment windows);
- :mod:`~hypertrain.auditor.checks`: BAD_PROOF, ASSIGNMENT_VIOLATION and WITHHELD checks;
- :mod:`~hypertrain.auditor.verdict`: the spec's order, the replay comparison and delta
  rebuild, the sealed ReplayVerdict;
- :mod:`~hypertrain.auditor.replayer`: the torch side of a replay (imports torch).

The Trio/HTTP shell:

- :mod:`~hypertrain.auditor.client`: the worker routes (bearer token, bounded retries,
  hash-checked objects);
- :mod:`~hypertrain.auditor.datacache`: the dataset cache under ``--data-dir``;
- :mod:`~hypertrain.auditor.progress`: one line (or JSON object) per job;
- :mod:`~hypertrain.auditor.worker`: lease -> heartbeat -> audit -> complete/fail;
- :mod:`~hypertrain.auditor.session`: :func:`run_auditor`, the composition root;
- :mod:`~hypertrain.auditor.main`: the command line.
"""

from hypertrain.auditor.client import AuditorClient, ClientSettings
from hypertrain.auditor.datacache import DatasetCache
from hypertrain.auditor.errors import (
    ApiError,
    AuditorError,
    AuditorFatal,
    BadJob,
    FetchFailed,
    JobFailed,
    LeaseLost,
    NotReady,
    Unreachable,
)
from hypertrain.auditor.job import AuditJob, check_job, read_job
from hypertrain.auditor.progress import JobReport, Progress
from hypertrain.auditor.session import Options, run_auditor
from hypertrain.auditor.verdict import (
    Evidence,
    Outcome,
    Prepared,
    Replayed,
    Replayer,
    decide,
    prepare,
    replay_outcome,
    seal_verdict,
)
from hypertrain.auditor.worker import AuditorWorker, WorkerSettings

__all__ = [
    "ApiError",
    "AuditJob",
    "AuditorClient",
    "AuditorError",
    "AuditorFatal",
    "AuditorWorker",
    "BadJob",
    "ClientSettings",
    "DatasetCache",
    "Evidence",
    "FetchFailed",
    "JobFailed",
    "JobReport",
    "LeaseLost",
    "NotReady",
    "Options",
    "Outcome",
    "Prepared",
    "Progress",
    "Replayed",
    "Replayer",
    "Unreachable",
    "WorkerSettings",
    "check_job",
    "decide",
    "prepare",
    "read_job",
    "replay_outcome",
    "run_auditor",
    "seal_verdict",
]
