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
- :mod:`~hypertrain.auditor.dispute`: a dispute as the auditor sees it: the view, the stage it
  owes a Bisect for, the case it may referee, where its recomputation starts, the sealed
  Bisect and Resolution;
- :mod:`~hypertrain.auditor.replayer`: the torch side of a replay and of a dispute's
  recomputation (imports torch).

The Trio/HTTP shell:

- :mod:`~hypertrain.auditor.client`: the worker routes (bearer token, bounded retries,
  hash-checked objects);
- :mod:`~hypertrain.auditor.datacache`: the dataset cache under ``--data-dir``;
- :mod:`~hypertrain.auditor.progress`: one line (or JSON object) per job;
- :mod:`~hypertrain.auditor.worker`: lease -> heartbeat -> audit -> complete/fail;
- :mod:`~hypertrain.auditor.casework`: the dispute loops, as a party and as a referee;
- :mod:`~hypertrain.auditor.session`: :func:`run_auditor`, the composition root;
- :mod:`~hypertrain.auditor.main`: the command line.
"""

from hypertrain.auditor.casework import DisputeWorker
from hypertrain.auditor.client import AuditorClient, ClientSettings
from hypertrain.auditor.datacache import DatasetCache
from hypertrain.auditor.dispute import (
    DisputeView,
    Recomputation,
    Recomputer,
    RecomputeStart,
    owed_ruling,
    owed_stage,
    read_dispute,
    recompute_start,
)
from hypertrain.auditor.errors import (
    ApiError,
    AuditorError,
    AuditorFatal,
    BadJob,
    DisputeError,
    FetchFailed,
    JobFailed,
    LeaseLost,
    NotReady,
    Unreachable,
)
from hypertrain.auditor.job import AuditJob, check_job, read_job
from hypertrain.auditor.progress import DisputeReport, JobReport, Progress
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
    "DisputeError",
    "DisputeReport",
    "DisputeView",
    "DisputeWorker",
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
    "Recomputation",
    "RecomputeStart",
    "Recomputer",
    "Replayed",
    "Replayer",
    "Unreachable",
    "WorkerSettings",
    "check_job",
    "decide",
    "owed_ruling",
    "owed_stage",
    "prepare",
    "read_dispute",
    "read_job",
    "recompute_start",
    "replay_outcome",
    "run_auditor",
    "seal_verdict",
]
