"""The warm scorer: each job in a sandboxed child forked from one process that imported torch.

A cold worker (:func:`~hypertrain.scoring.sandbox.run_scorer`) spends about 3 s importing torch
and making it deterministic before a ~60 ms job. :func:`open_warm_scorer` starts one fork server
(:mod:`hypertrain.scoring.forkserver`) that pays that once; :meth:`WarmScorer.score` then runs
each job in a fresh child of it. ``hypertrain-node`` and the daemon's fallback pool use it (their
``score`` callable); ``--cold-scorer`` and ``scorer = "cold"`` turn it off.

Promises of :meth:`WarmScorer.score`, beyond :func:`~hypertrain.scoring.sandbox.run_scorer`'s
(same checks before any process is involved, same outcome contract, same classification):

- **The same sandbox, applied in the child before it reads its inputs**: its own session and
  process group (``SIGKILL``-ed at ``kill_after_ms``, when the caller is cancelled, and when
  the job ends), the same rlimits (:func:`~hypertrain.scoring.sandbox.worker_limits`; its CPU
  time counts from its fork, after which it did nothing but its sandbox, a warm-up pass on a
  built-in one-row sample (:mod:`hypertrain.scoring.warmup`, a few milliseconds where a cold
  worker's count includes seconds of importing torch) and an idle wait for the job), exactly
  the cold worker's scrubbed environment
  (:func:`~hypertrain.scoring.sandbox.worker_env`) and nothing of the server's, a fresh scratch
  directory (mode 0700, removed when the job ends) as its working directory and torch's cache
  directory, no inherited descriptor but its output pipes, its end pipe
  (:func:`nurseries.end_job`) and the lifeline, then the audit hook
  (:func:`hypertrain.scoring.audit.arm`). So the sandbox-escape tests hold for it unchanged.
- **The same bits** as a cold worker and as :func:`~hypertrain.scoring.sandbox.score_inline`
  in a configured process: the server applied the same settings the same way, and its warm-up
  passes (:mod:`hypertrain.scoring.warmup`) start no thread and change no setting a job reads.
- **The server writes where this program logs, whatever that is**: it inherits this
  program's stderr with no file-size limit of its own (a limit of 0, as its children get,
  made its first line to a log *file* fail with ``EFBIG``, losing the reason it ended); each
  child applies the job's rlimits itself after the fork.
- **A job never reaches the server**: a crash, a signal, an exit, a loop or a fork in a child
  ends only that child (another process, which has no way to the control socket); the next
  job runs on the same server.
- **One server for all slots**: a fork is cheap and shares torch's pages, so concurrent jobs
  (the fallback pool's slots) are concurrent children of one server; each slot does not pay
  ~300 MB and 3 s of its own.
- **A server that ends is replaced, boundedly**: the jobs in flight have their groups killed
  and each is run again in a cold worker (its outcome is the cold worker's), and the next job
  starts a new server; after :data:`MAX_STARTS` starts (or a start that fails or takes longer
  than :data:`START_TIMEOUT`) every later job runs in a cold worker. Each of these is logged.
  The server is started as soon as the scorer is opened, in the background.

Do not use it under the autojump clock: the children run in real time.
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Final

import attrs
import trio

from hypertrain.scoring.inputs import BadInput
from hypertrain.scoring.jobs import check_job_inputs
from hypertrain.scoring.outcome import ScoreOutcome, classify
from hypertrain.scoring.registry import Challenge
from hypertrain.scoring.sandbox import (
    OUTPUT_CAP,
    run_scorer,
    worker_env,
    worker_limits,
)
from nurseries import ForkServer, ForkServerGone, open_fork_server

__all__ = [
    "MAX_STARTS",
    "SERVER_MODULE",
    "START_TIMEOUT",
    "WarmScorer",
    "WarmStatistics",
    "open_warm_scorer",
    "server_argv",
]

log = logging.getLogger(__name__)

SERVER_MODULE: Final = "hypertrain.scoring.forkserver"
MAX_STARTS: Final = 5
"""Fork servers started over a scorer's life; then cold workers only."""
START_TIMEOUT: Final = 300.0
"""Seconds a fork server may take to import torch and say it is ready (3 s on an idle machine;
the bound is for a busy one)."""


def server_argv(python: str) -> list[str]:
    """The fork server's command line: the cold worker's interpreter flags."""
    return [python, "-P", "-s", "-B", "-m", SERVER_MODULE]


@attrs.frozen
class WarmStatistics:
    """What the scorer did: jobs forked from a server, jobs run cold, servers started."""

    warm_jobs: int
    cold_jobs: int
    servers_started: int


@attrs.define(eq=False)
class WarmScorer:
    """Scores jobs in children of a fork server (module doc); made by :func:`open_warm_scorer`."""

    _nursery: trio.Nursery
    _python: str
    _server_env: Mapping[str, str]
    _max_starts: int
    _server: ForkServer | None = attrs.field(default=None, init=False)
    _lock: trio.Lock = attrs.field(factory=trio.Lock, init=False)
    _starts: int = attrs.field(default=0, init=False)
    _warm_jobs: int = attrs.field(default=0, init=False)
    _cold_jobs: int = attrs.field(default=0, init=False)

    def statistics(self) -> WarmStatistics:
        return WarmStatistics(self._warm_jobs, self._cold_jobs, self._starts)

    async def _serve(self, scratch: str, *, task_status: trio.TaskStatus[ForkServer]) -> None:
        try:
            async with open_fork_server(
                server_argv(self._python),
                env=worker_env(scratch) | dict(self._server_env),
                start_timeout=START_TIMEOUT,
            ) as server:
                task_status.started(server)
                await server.wait_gone()
                log.warning("the warm scorer's fork server ended; the next job starts another")
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    async def server(self) -> ForkServer | None:
        """The running fork server, started if there is none and starts are left (module
        doc); ``None``: run the job cold."""
        async with self._lock:
            if self._server is not None and not self._server.gone:
                return self._server
            self._server = None
            if self._starts >= self._max_starts:
                return None
            self._starts += 1
            try:
                scratch = tempfile.mkdtemp(prefix="hypertrain-forkserver-")
                self._server = await self._nursery.start(self._serve, scratch)
            except (ForkServerGone, trio.TooSlowError, OSError) as e:
                log.warning("the warm scorer could not start its fork server: %s", e)
                if self._starts >= self._max_starts:
                    log.warning("the warm scorer gives up: every later job runs cold")
            return self._server

    async def score(
        self,
        challenge: Challenge,
        inputs: Mapping[str, Path],
        *,
        extra_env: Mapping[str, str] | None = None,
    ) -> ScoreOutcome:
        """Score one job in a child of the fork server (module doc); ``extra_env`` as for
        :func:`~hypertrain.scoring.sandbox.run_scorer` (tests only)."""
        try:
            paths = check_job_inputs(challenge, inputs)
        except BadInput as e:
            return ScoreOutcome.failed("bad-input", str(e))
        server = await self.server()
        if server is not None:
            request = {
                "challenge": challenge.id,
                "version": challenge.version,
                "inputs": {name: str(path) for name, path in paths.items()},
            }
            scratch = tempfile.mkdtemp(prefix="hypertrain-score-")
            try:
                proc = await server.run(
                    json.dumps(request).encode("utf-8"),
                    env=worker_env(scratch, extra_env),
                    limits=worker_limits(challenge),
                    timeout=challenge.kill_after_ms / 1000,
                    output_cap=OUTPUT_CAP,
                    cwd=scratch,
                )
                self._warm_jobs += 1
                return classify(challenge, proc)
            except (ForkServerGone, OSError) as e:
                log.warning("%s: the warm scorer lost the job (%s); it runs cold", challenge.id, e)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
        self._cold_jobs += 1
        return await run_scorer(challenge, paths, python=self._python, extra_env=extra_env)


@asynccontextmanager
async def open_warm_scorer(
    python: str = sys.executable,
    *,
    max_starts: int = MAX_STARTS,
    server_env: Mapping[str, str] | None = None,
) -> AsyncIterator[WarmScorer]:
    """A :class:`WarmScorer` whose fork server starts now in the background and is stopped
    (with every child) when the block exits. ``server_env`` adds variables to the server's own
    environment: tests only (a child must never see them)."""
    async with trio.open_nursery() as nursery:
        scorer = WarmScorer(nursery, python, dict(server_env or {}), max_starts)
        nursery.start_soon(scorer.server)
        yield scorer
        nursery.cancel_scope.cancel()
