"""The warm scorer (a fork server of scoring workers) against real processes.

One test, one server start for all of it (each start imports torch: seconds of CPU on a busy
machine), in this order: its results (``delta-loss`` and ``step-throughput``'s fingerprint, after
the server's and each spare's warm-up passes) equal inline scoring's in a configured process bit
for bit (and so a cold worker's, which ``test_worker`` checks against the same); the test switch
set in
the server's own environment does not reach a child; the escape attempts of ``test_escape`` are
refused or killed in its children just as in cold workers; none of that harms the server (the
next honest job runs on the same one, same bits); then a server that dies while a job runs is
replaced and its job runs cold. Real time: a deadline for the whole.
"""

from __future__ import annotations

import os
import resource
import signal
from pathlib import Path

import attrs
import trio

from hypertrain.scoring.outcome import ScoreOutcome
from hypertrain.scoring.registry import DELTA_LOSS, STEP_THROUGHPUT
from hypertrain.scoring.warm import WarmScorer, WarmStatistics, open_warm_scorer
from tests.scoring.test_escape import HOSTILE, REFUSED, _hostile
from tests.scoring.test_worker import _inline_in_a_configured_process

DEADLINE = 180.0
"""Real seconds: two server starts and a cold worker (each ~3 s of CPU importing torch) on a
busy machine, then jobs of about 0.1 s each."""


async def test_one_warm_server_scores_refuses_survives_and_is_replaced(
    job: dict[str, Path],
) -> None:
    model_json = {"model.json": job["model.json"]}
    before = job["model.json"].read_bytes()
    runaways = {
        "memory": _hostile("memory"),
        "loop": _hostile("loop", kill_after_ms=60_000, step_budget_ms=1_000),
        "sleep": _hostile("sleep", kill_after_ms=1_500, step_budget_ms=1_000),
    }
    steps_job = {name: path for name, path in job.items() if name != "delta.bin"}
    inline: list[dict[str, object]] = []
    with trio.fail_after(DEADLINE):
        async with (
            trio.open_nursery() as nursery,
            open_warm_scorer(server_env=HOSTILE, max_starts=2) as scorer,
        ):

            async def score_inline_meanwhile() -> None:  # while the server imports torch
                inline.append(await trio.to_thread.run_sync(_inline_in_a_configured_process, job))
                inline.append(
                    await trio.to_thread.run_sync(
                        _inline_in_a_configured_process, steps_job, STEP_THROUGHPUT
                    )
                )

            nursery.start_soon(score_inline_meanwhile)
            first = await scorer.score(DELTA_LOSS, job)
            second = await scorer.score(DELTA_LOSS, job)
            steps = await scorer.score(STEP_THROUGHPUT, steps_job)
            switch_on_the_server = await scorer.score(_hostile("read"), model_json)
            refused = {
                w: await scorer.score(_hostile(w), model_json, extra_env=HOSTILE) for w in REFUSED
            }
            killed = {
                w: await scorer.score(c, model_json, extra_env=HOSTILE) for w, c in runaways.items()
            }
            honest = await scorer.score(DELTA_LOSS, job)
            statistics = scorer.statistics()
            server = await scorer.server()
            assert server is not None
            # Its stderr is this process's (pytest's capture file here, a log file under the
            # demo): a file-size limit of its own would make its first line there fail.
            server_file_size = resource.prlimit(server.server_pid, resource.RLIMIT_FSIZE)
            lost = await _kill_the_server_during_a_job(scorer, model_json)
            after = await scorer.score(DELTA_LOSS, job)
            replaced = scorer.statistics()

    assert first.ok, first
    assert first.result == second.result == inline[0] == honest.result
    assert steps.result is not None
    assert steps.result["fingerprint"] == inline[1]["fingerprint"]
    assert switch_on_the_server.failure == "bad-input"
    assert "unknown challenge 'test-hostile-read'" in switch_on_the_server.error
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
    assert job["model.json"].read_bytes() == before
    assert not _hostile_files()
    jobs = 4 + len(REFUSED) + len(runaways) + 1
    assert statistics == WarmStatistics(jobs, 0, 1)  # every job on the first server
    assert server_file_size == (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
    assert lost.failure == "timeout"  # the cold rerun's own outcome
    assert after.ok, after
    assert after.result == first.result
    assert replaced == WarmStatistics(jobs + 1, 1, 2)


async def _kill_the_server_during_a_job(
    scorer: WarmScorer, model_json: dict[str, Path]
) -> ScoreOutcome:
    """SIGKILL the server once a sleeping job's child runs; the job's outcome (run cold)."""
    server = await scorer.server()
    assert server is not None
    sleeper = attrs.evolve(_hostile("sleep"), kill_after_ms=3_000, step_budget_ms=2_000)
    async with trio.open_nursery() as nursery:

        async def kill_server_once_its_job_runs() -> None:
            while not _job_children(server.server_pid):  # noqa: ASYNC110 - /proc
                await trio.sleep(0.02)
            os.kill(server.server_pid, signal.SIGKILL)

        nursery.start_soon(kill_server_once_its_job_runs)
        return await scorer.score(sleeper, model_json, extra_env=HOSTILE)


def _hostile_files() -> list[Path]:
    return list(Path("/tmp").glob("hypertrain-hostile-*"))


def _job_children(pid: int) -> list[int]:
    """Children of ``pid`` running a job: in their scratch directory (a spare waits in /)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if (
                proc.name.isdigit()
                and (proc / "stat").read_text().rsplit(")", 1)[1].split()[1] == str(pid)
                and os.readlink(proc / "cwd") != "/"
            ):
                found.append(int(proc.name))
        except (OSError, IndexError):
            continue
    return found
