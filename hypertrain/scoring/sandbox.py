"""Run a scorer: sandboxed in a worker process (:func:`run_scorer`), or in-process for tests.

:func:`run_scorer` is the cold worker: ``hypertrain-node`` and the fallback evaluator use it with
``--cold-scorer`` / ``scorer = "cold"``, and the warm scorer (:mod:`hypertrain.scoring.warm`,
their default, whose children get the same environment and limits) falls back to it.
It promises:

- **Checks before spawning**: the inputs are exactly the challenge's input names, each a
  valid name and an absolute path to a regular file
  (:func:`~hypertrain.scoring.jobs.check_job_inputs`); otherwise a ``bad-input`` outcome,
  and no process is started.
- **One worker process per job**, ``python -P -s -B -m hypertrain.scoring.worker`` (no current
  directory or user site on ``sys.path``, no ``.pyc`` writes), started in ``/`` through
  :func:`nurseries.run_process`: its own session and process group, the whole group
  ``SIGKILL``-ed at ``kill_after_ms`` and whenever the caller is cancelled, and these limits:
  address space ``memory_bytes``, CPU ``ceil(step_budget_ms / 1000)`` seconds (the import of
  torch included), :data:`OPEN_FILES` descriptors, files of :data:`FILE_SIZE_BYTES` bytes
  (none: the worker writes nothing), :data:`OUTPUT_CAP` bytes of each output stream kept.
- **A lifeline** (:func:`nurseries.open_lifeline`, one per job): the worker holds the read end
  of a pipe whose write end only this process holds, and exits the moment it reads end-of-file
  (:func:`nurseries.exit_when_lifeline_cut`). So a worker does not outlive the node or daemon
  that started it, even when that one is killed with ``SIGKILL`` and cannot kill the group.
- **A scrubbed environment** (:func:`worker_env`): ``PATH``, ``PYTHONPATH`` = the directory
  holding the ``hypertrain`` package this process runs (so the worker runs the same code even
  from an uninstalled checkout), the thread variables of
  :data:`~hypertrain.scoring.jobs.SCORING_ENV`, and ``TORCHINDUCTOR_CACHE_DIR`` = a fresh
  empty scratch directory (mode 0700) that is removed when the job ends: importing torch
  otherwise probes the temporary directory by writing a file, which the file-size limit
  refuses, and creates its cache directory there. No ``HOME``, no keys, nothing else of ours.
- **Classification** by :func:`~hypertrain.scoring.outcome.classify`; ``timeout`` and ``oom``
  are inconclusive (the registry's ``INCONCLUSIVE``).

:func:`score_inline` runs the same scorer in the calling thread without any sandbox: for
virtual-time tests and the coordinator's own tests, never for untrusted jobs. Its bits equal the
worker's only in a process configured with ``SCORING_ENV`` before torch was imported.

Do not call :func:`run_scorer` under the autojump clock: the child runs in real time.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import hypertrain
from hypertrain.scoring.inputs import BadInput
from hypertrain.scoring.jobs import SCORING_ENV, check_job_inputs
from hypertrain.scoring.outcome import ScoreOutcome, check_result, classify
from hypertrain.scoring.registry import Challenge
from hypertrain.trainer.determinism import env_vars
from nurseries import Limits, open_lifeline, run_process

__all__ = [
    "FILE_SIZE_BYTES",
    "OPEN_FILES",
    "OUTPUT_CAP",
    "WORKER_MODULE",
    "run_scorer",
    "score_inline",
    "worker_argv",
    "worker_env",
    "worker_limits",
]

WORKER_MODULE: Final = "hypertrain.scoring.worker"
OUTPUT_CAP: Final = 64 * 1024
OPEN_FILES: Final = 64
FILE_SIZE_BYTES: Final = 0


def worker_argv(python: str) -> list[str]:
    """The worker's command line (module doc)."""
    return [python, "-P", "-s", "-B", "-m", WORKER_MODULE]


def worker_env(scratch: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The worker's whole environment (module doc); ``extra`` is for tests only."""
    root = Path(hypertrain.__file__).resolve().parent.parent
    env = {
        "PATH": os.environ.get("PATH", os.defpath),
        "PYTHONPATH": str(root),
        "TORCHINDUCTOR_CACHE_DIR": scratch,
    }
    env |= env_vars(SCORING_ENV)
    return env | dict(extra or {})


def worker_limits(challenge: Challenge) -> Limits:
    """The rlimits of the challenge's worker (module doc)."""
    return Limits(
        address_space_bytes=challenge.memory_bytes,
        cpu_seconds=max(1, math.ceil(challenge.step_budget_ms / 1000)),
        open_files=OPEN_FILES,
        file_size_bytes=FILE_SIZE_BYTES,
    )


async def run_scorer(
    challenge: Challenge,
    inputs: Mapping[str, Path],
    *,
    python: str = sys.executable,
    extra_env: Mapping[str, str] | None = None,
) -> ScoreOutcome:
    """Score one job in a sandboxed worker process (module doc).

    ``extra_env`` adds variables to the worker's environment; it exists for the test-only
    hostile challenges (:mod:`hypertrain.scoring.hostile`) and production never passes it.
    Raises `OSError` only when ``python`` cannot be started.
    """
    try:
        paths = check_job_inputs(challenge, inputs)
    except BadInput as e:
        return ScoreOutcome.failed("bad-input", str(e))
    request = {
        "challenge": challenge.id,
        "version": challenge.version,
        "inputs": {name: str(path) for name, path in paths.items()},
    }
    scratch = tempfile.mkdtemp(prefix="hypertrain-score-")
    try:
        with open_lifeline() as lifeline:
            proc = await run_process(
                worker_argv(python),
                env=worker_env(scratch, extra_env) | lifeline.env,
                limits=worker_limits(challenge),
                timeout=challenge.kill_after_ms / 1000,
                output_cap=OUTPUT_CAP,
                cwd="/",
                stdin=json.dumps(request).encode("utf-8"),
                pass_fds=lifeline.pass_fds,
            )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return classify(challenge, proc)


def score_inline(challenge: Challenge, inputs: Mapping[str, Path]) -> ScoreOutcome:
    """The same scorer in this thread, unsandboxed and untimed (module doc: tests only).

    Bad inputs give a ``bad-input`` outcome; other exceptions propagate. Imports torch.
    """
    from hypertrain.scoring.scorers import run_challenge  # torch: only when scoring inline

    started = time.monotonic()
    try:
        result = run_challenge(challenge, check_job_inputs(challenge, inputs))
    except BadInput as e:
        return ScoreOutcome.failed("bad-input", str(e))
    wall_ms = round((time.monotonic() - started) * 1000)
    why = check_result(challenge, result)
    if why is not None:
        raise AssertionError(f"{challenge.id}: the scorer gave a malformed result: {why}")
    return ScoreOutcome.success(result, wall_ms)
