"""``python -m hypertrain.scoring.forkserver``: the warm scorer, a fork server of scoring workers.

Started by :func:`hypertrain.scoring.warm.open_warm_scorer` (through
:func:`nurseries.open_fork_server`), with the same scrubbed environment and interpreter flags
as a cold worker (:mod:`hypertrain.scoring.sandbox`). It:

1. runs :func:`hypertrain.scoring.worker.prepare` once: applies
   :data:`~hypertrain.scoring.jobs.SCORING_ENV`, imports torch, makes it deterministic with one
   thread, imports every scorer and generates the converter's hooks. It runs no torch operation
   (so no pool thread exists to be lost in a fork; the settings are process state every child
   inherits, the same as a cold worker's);
2. runs one pass of each challenge on synthetic inputs in memory
   (:func:`hypertrain.scoring.warmup.warm_up`), so that every child inherits the first calls'
   one-time work done; the pass starts no thread (``serve_forks`` would refuse to fork one);
3. freezes the garbage collector's view of everything loaded so far (``gc.freeze``, after a
   collection), so a child's collections do not walk, and so copy, the pages of torch's
   Python objects;
4. serves fork requests forever (:func:`nurseries.serve_forks`): each child is forked ahead
   of its job and, while it waits for it, runs one more pass on one row
   (:func:`~hypertrain.scoring.warmup.warm_spare`) so that the pages a job writes are its own
   before the job comes; once its request is there it applies its sandbox (own session
   and process group, rlimits, exactly the job's environment, its own scratch directory as
   working directory, no descriptor but its streams, its end pipe and the lifeline),
   then runs :func:`hypertrain.scoring.worker.run_job` on the request, which checks it, arms
   the audit hook and only then opens the inputs.

A child that the lifeline outlives exits with the worker's
:data:`~hypertrain.scoring.worker.EXIT_CRASH`, as a cold worker does.
"""

from __future__ import annotations

import gc
from typing import NoReturn

from hypertrain.scoring.worker import EXIT_CRASH, prepare, run_job
from nurseries import serve_forks

__all__ = ["main"]


def main() -> NoReturn:
    """Prepare and warm up once, then fork a worker per request (module doc)."""
    prepare()
    from hypertrain.scoring.warmup import warm_spare, warm_up  # torch: after prepare

    warm_up()
    warm_spare()  # the spares' inputs are built once, here
    gc.collect()
    gc.freeze()
    serve_forks(run_job, lifeline_exit=EXIT_CRASH, prepare_spare=warm_spare)


if __name__ == "__main__":
    main()
