"""Per-job wall time of a sandboxed ``delta-loss`` job: cold worker, warm scorer, inline; one run.

The CPU test-mode job of the scoring tests (2 layers, d 64, vocab 259, 12 trace rows).

- **before**: :func:`hypertrain.scoring.sandbox.run_scorer`, a new worker process per job
  (imports torch and makes it deterministic every time);
- **after**: :class:`hypertrain.scoring.warm.WarmScorer`, each job in a sandboxed child forked
  from one warm server (its one-time start is printed apart);
- **inline**: :func:`hypertrain.scoring.sandbox.score_inline` in this process (configured with
  ``SCORING_ENV`` first), no sandbox, no process: the floor.

Each figure is the median of its jobs, run one at a time; inline and warm jobs alternate (the
same load on a shared machine); the ratios are against inline from the same run. The goal
(issue 17): after / inline at most 1.5.

    .venv/bin/python bench/scoring.py [--jobs N] [--cold-jobs N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

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


def _inline_ms(job: dict[str, Path], expected: dict[str, object] | None) -> float:
    start = time.perf_counter()
    _check(score_inline(DELTA_LOSS, job), expected)
    return (time.perf_counter() - start) * 1000


async def _one_ms(
    score: Callable[[], Awaitable[ScoreOutcome]], expected: dict[str, object]
) -> float:
    start = time.perf_counter()
    _check(await score(), expected)
    return (time.perf_counter() - start) * 1000


async def measure(job: dict[str, Path], jobs: int, cold_jobs: int) -> dict[str, float]:
    """Medians in ms: ``inline``, ``cold``, ``warm``, and the warm server's ``start``. Inline
    and warm jobs alternate, so that both see the same load on a shared machine."""
    configure(SCORING_ENV)
    first = score_inline(DELTA_LOSS, job)  # warms this process's caches up
    _check(first, None)
    expected = first.result
    assert expected is not None
    cold = [await _one_ms(lambda: run_scorer(DELTA_LOSS, job), expected) for _ in range(cold_jobs)]
    start = time.perf_counter()
    async with open_warm_scorer() as scorer:
        await scorer.server()
        started = (time.perf_counter() - start) * 1000
        inline, warm = [], []
        for _ in range(jobs):
            inline.append(_inline_ms(job, expected))
            warm.append(await _one_ms(lambda: scorer.score(DELTA_LOSS, job), expected))
        if scorer.statistics().cold_jobs:
            raise SystemExit(f"the warm scorer ran jobs cold: {scorer.statistics()}")
    return {
        "inline": statistics.median(inline),
        "cold": statistics.median(cold),
        "warm": statistics.median(warm),
        "start": started,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20, help="warm and inline jobs (20)")
    parser.add_argument("--cold-jobs", type=int, default=3, help="cold worker jobs (3)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        job = write_job(Path(tmp) / "job")
        ms = trio.run(measure, job, args.jobs, args.cold_jobs)
    inline, cold, warm, started = ms["inline"], ms["cold"], ms["warm"], ms["start"]
    print(f"delta-loss job, medians: {args.jobs} inline, {args.jobs} warm, {args.cold_jobs} cold")
    print(f"  inline (in process, no sandbox)   {inline:8.1f} ms")
    print(f"  before: cold worker per job       {cold:8.1f} ms   {cold / inline:6.1f}x inline")
    print(f"  after:  warm scorer (fork) per job {warm:7.1f} ms   {warm / inline:6.2f}x inline")
    print(f"  warm scorer's one-time start      {started:8.1f} ms")
    print(f"  before / after                    {cold / warm:8.1f}x")


if __name__ == "__main__":
    main()
