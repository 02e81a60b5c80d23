"""The warm scorer (a fork server of scoring workers) against real processes.

Its results equal a cold worker's and inline scoring's bit for bit; the escape attempts of
``test_escape`` are refused or killed in its children just as in cold workers; a job that
misbehaves never harms the server (the next job runs on the same one, with no cold start);
a server that dies is replaced and its job runs cold. Real time: each test has a deadline.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import attrs
import trio

from hypertrain.scoring.registry import DELTA_LOSS
from hypertrain.scoring.sandbox import run_scorer
from hypertrain.scoring.warm import WarmStatistics, open_warm_scorer
from tests.scoring.test_escape import HOSTILE, REFUSED, _hostile
from tests.scoring.test_worker import _inline_in_a_configured_process

DEADLINE = 180.0
"""Real seconds: the server's start (~3 s of CPU importing torch) and a cold worker on a busy
machine, then jobs of about 0.1 s each."""


async def test_warm_results_equal_a_cold_worker_and_inline_scoring(job: dict[str, Path]) -> None:
    with trio.fail_after(DEADLINE):
        async with open_warm_scorer() as scorer:
            first = await scorer.score(DELTA_LOSS, job)
            second = await scorer.score(DELTA_LOSS, job)
            assert scorer.statistics() == WarmStatistics(2, 0, 1)
        cold = await run_scorer(DELTA_LOSS, job)
    assert first.ok, first
    assert first.result == second.result == cold.result
    inline = await trio.to_thread.run_sync(_inline_in_a_configured_process, job)
    assert inline == first.result


async def test_escape_attempts_and_runaways_never_reach_the_server(job: dict[str, Path]) -> None:
    model_json = {"model.json": job["model.json"]}
    before = job["model.json"].read_bytes()
    runaways = {
        "memory": _hostile("memory"),
        "loop": _hostile("loop", kill_after_ms=60_000, step_budget_ms=1_000),
        "sleep": _hostile("sleep", kill_after_ms=1_500, step_budget_ms=1_000),
    }
    with trio.fail_after(DEADLINE):
        async with open_warm_scorer() as scorer:
            refused = {
                w: await scorer.score(_hostile(w), model_json, extra_env=HOSTILE) for w in REFUSED
            }
            killed = {
                w: await scorer.score(c, model_json, extra_env=HOSTILE) for w, c in runaways.items()
            }
            honest = await scorer.score(DELTA_LOSS, job)
            statistics = scorer.statistics()
    for what, expected in REFUSED.items():
        outcome = refused[what]
        assert (outcome.ok, outcome.failure) == (False, "crash"), (what, outcome)
        assert expected in outcome.error, (what, outcome.error)
    assert killed["memory"].failure == "oom", killed["memory"]
    assert killed["loop"].failure == "timeout", killed["loop"]
    assert killed["loop"].error == "scorer killed after its CPU limit"
    assert (killed["sleep"].failure, killed["sleep"].error) == (
        "timeout",
        "scorer killed after 1500 ms",
    )
    assert honest.ok, honest
    assert job["model.json"].read_bytes() == before
    assert not _hostile_files()
    assert statistics == WarmStatistics(len(REFUSED) + len(runaways) + 1, 0, 1)


async def test_the_switch_stays_with_the_job_not_the_server(job: dict[str, Path]) -> None:
    """The server's own environment never reaches a child: the test switch set on the server
    does not enable hostile challenges."""
    with trio.fail_after(DEADLINE):
        async with open_warm_scorer(server_env=HOSTILE) as scorer:
            outcome = await scorer.score(_hostile("read"), {"model.json": job["model.json"]})
    assert outcome.failure == "bad-input"
    assert "unknown challenge 'test-hostile-read'" in outcome.error


async def test_a_dead_server_is_replaced_and_its_job_runs_cold(job: dict[str, Path]) -> None:
    sleeper = attrs.evolve(_hostile("sleep"), kill_after_ms=60_000, step_budget_ms=50_000)
    with trio.fail_after(DEADLINE):
        async with open_warm_scorer(max_starts=2) as scorer:
            server = await scorer.server()
            assert server is not None
            async with trio.open_nursery() as nursery:

                async def kill_server_once_its_child_runs() -> None:
                    while not _has_children(server.server_pid):  # noqa: ASYNC110 - /proc
                        await trio.sleep(0.02)
                    os.kill(server.server_pid, signal.SIGKILL)

                nursery.start_soon(kill_server_once_its_child_runs)
                cut_short = attrs.evolve(sleeper, kill_after_ms=3_000, step_budget_ms=2_000)
                lost = await scorer.score(
                    cut_short, {"model.json": job["model.json"]}, extra_env=HOSTILE
                )
            after = await scorer.score(DELTA_LOSS, job)
            statistics = scorer.statistics()
    assert lost.failure == "timeout"  # the cold rerun's own outcome
    assert after.ok, after
    assert statistics == WarmStatistics(1, 1, 2)


def _hostile_files() -> list[Path]:
    return list(Path("/tmp").glob("hypertrain-hostile-*"))


def _has_children(pid: int) -> bool:
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and (proc / "stat").read_text().rsplit(")", 1)[1].split()[
                1
            ] == str(pid):
                return True
        except (OSError, IndexError):
            continue
    return False
