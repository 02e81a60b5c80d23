"""Per-job wall time of a sandboxed ``delta-loss`` job: cold worker, warm scorer, inline; one run.

The CPU test-mode job of the scoring tests (2 layers, d 64, vocab 259, 12 trace rows).

- **before**: :func:`hypertrain.scoring.sandbox.run_scorer`, a new worker process per job
  (imports torch and makes it deterministic every time);
- **after**: :class:`hypertrain.scoring.warm.WarmScorer`, each job in a sandboxed child forked
  from one warm server (its one-time start is printed apart);
- **inline**: :func:`hypertrain.scoring.sandbox.score_inline` in this process (configured with
  ``SCORING_ENV`` first), no sandbox, no process: the floor.

Inline and warm jobs alternate (the same load on a shared machine), each after a pause
(``--pause-ms``) in which the work a previous job left behind ends: the teardown of its process
and the fork of the server's next spare run beside the job that follows, never inside the
measured one. Printed: the median and 90th percentile of each, their ratios, and the median of
the per-pair ratios (a warm job over the inline job just before it: the most stable figure on a
busy machine); then the CPU per job: inline in this process, warm in this process (the client)
and in the server and its children (forks, jobs and teardowns), read from ``/proc``. The goal
(issue 17): warm / inline at most 1.5. Last, warm jobs back to back (no pause): a job that
comes before the server reaped the one before it has no spare waiting and pays a fork.

    .venv/bin/python bench/scoring.py [--jobs N] [--cold-jobs N] [--pause-ms MS]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import attrs
import trio

# Run as a script (sys.path[0] is bench/): the repository root too, for ``tests.scoring``.
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

from hypertrain.scoring.jobs import SCORING_ENV
from hypertrain.scoring.outcome import ScoreOutcome
from hypertrain.scoring.registry import DELTA_LOSS
from hypertrain.scoring.sandbox import run_scorer, score_inline
from hypertrain.scoring.warm import open_warm_scorer
from hypertrain.trainer.determinism import configure
from tests.scoring.helpers import write_job


def _check(outcome: ScoreOutcome, expected: dict[str, object] | None) -> None:
    if not outcome.ok or (expected is not None and outcome.result != expected):
        raise SystemExit(f"a job gave another answer: {outcome}")


@attrs.frozen
class Timed:
    """One job: wall and CPU (this process) milliseconds."""

    wall: float
    cpu: float


def _inline(job: dict[str, Path], expected: dict[str, object] | None) -> Timed:
    start, cpu = time.perf_counter(), time.process_time()
    _check(score_inline(DELTA_LOSS, job), expected)
    return Timed((time.perf_counter() - start) * 1000, (time.process_time() - cpu) * 1000)


async def _one(score: Callable[[], Awaitable[ScoreOutcome]], expected: dict[str, object]) -> Timed:
    start, cpu = time.perf_counter(), time.process_time()
    _check(await score(), expected)
    return Timed((time.perf_counter() - start) * 1000, (time.process_time() - cpu) * 1000)


def _cpu_ms_with_children(pid: int) -> float:
    """utime + stime + cutime + cstime of ``pid`` (its reaped children's CPU included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) * 1000 / os.sysconf("SC_CLK_TCK")


@attrs.frozen
class Measured:
    inline: list[Timed]
    warm: list[Timed]
    cold: list[Timed]
    start_ms: float
    server_cpu_ms: float
    """CPU of the server and its reaped children over the warm jobs, per job."""
    back_to_back: list[Timed]


async def measure(job: dict[str, Path], jobs: int, cold_jobs: int, pause: float) -> Measured:
    """Inline, warm and cold jobs (module doc)."""
    configure(SCORING_ENV)
    first = score_inline(DELTA_LOSS, job)  # warms this process's caches up
    _check(first, None)
    expected = first.result
    assert expected is not None
    cold = [await _one(lambda: run_scorer(DELTA_LOSS, job), expected) for _ in range(cold_jobs)]
    start = time.perf_counter()
    async with open_warm_scorer() as scorer:
        server = await scorer.server()
        assert server is not None
        started = (time.perf_counter() - start) * 1000
        await trio.sleep(pause)
        server_cpu = _cpu_ms_with_children(server.server_pid)
        inline, warm = [], []
        for _ in range(jobs):
            await trio.sleep(pause)
            inline.append(_inline(job, expected))
            await trio.sleep(pause)
            warm.append(await _one(lambda: scorer.score(DELTA_LOSS, job), expected))
        await trio.sleep(pause)
        server_cpu = _cpu_ms_with_children(server.server_pid) - server_cpu
        back_to_back = [
            await _one(lambda: scorer.score(DELTA_LOSS, job), expected) for _ in range(jobs)
        ]
        if scorer.statistics().cold_jobs:
            raise SystemExit(f"the warm scorer ran jobs cold: {scorer.statistics()}")
    return Measured(inline, warm, cold, started, server_cpu / jobs, back_to_back)


def _p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10)[-1] if len(values) > 1 else values[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=40, help="warm and inline jobs (40)")
    parser.add_argument("--cold-jobs", type=int, default=3, help="cold worker jobs (3)")
    parser.add_argument("--pause-ms", type=float, default=100, help="pause before a job (100)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        job = write_job(Path(tmp) / "job")
        m = trio.run(measure, job, args.jobs, args.cold_jobs, args.pause_ms / 1000)
    inline = [t.wall for t in m.inline]
    warm = [t.wall for t in m.warm]
    cold = statistics.median(t.wall for t in m.cold)
    pairs = statistics.median(w / i for w, i in zip(warm, inline, strict=True))
    mi, mw = statistics.median(inline), statistics.median(warm)
    n, cold_n = args.jobs, args.cold_jobs
    print(f"delta-loss job: {n} inline, {n} warm alternating, {cold_n} cold")
    print("                                     median        p90   median/inline")
    print(f"  inline (in process, no sandbox) {mi:8.1f} ms {_p90(inline):8.1f} ms")
    print(f"  before: cold worker per job     {cold:8.1f} ms {'':11} {cold / mi:8.1f}x")
    print(f"  after:  warm scorer per job     {mw:8.1f} ms {_p90(warm):8.1f} ms {mw / mi:8.2f}x")
    print(f"  after / inline, median of the pairs {pairs:27.2f}x  (goal <= 1.5)")
    print(f"  before / after                  {cold / mw:8.1f}x")
    print(f"  warm scorer's one-time start    {m.start_ms:8.1f} ms")
    inline_cpu = statistics.median(t.cpu for t in m.inline)
    client_cpu = statistics.median(t.cpu for t in m.warm)
    print(
        f"  CPU per job: inline {inline_cpu:.1f} ms; warm {client_cpu:.1f} ms here (median) + "
        f"{m.server_cpu_ms:.1f} ms in the server and its children (mean)"
    )
    b2b = [t.wall for t in m.back_to_back]
    mb = statistics.median(b2b)
    print(f"  warm, {n} back to back (no pause) {mb:8.1f} ms {_p90(b2b):8.1f} ms {mb / mi:8.2f}x")


if __name__ == "__main__":
    main()
