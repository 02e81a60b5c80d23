"""Sandbox escape attempts (spec/compute-network.md section 6, scenario 38).

The worker's test-only hostile challenges (:mod:`hypertrain.scoring.hostile`, enabled by
``HYPERTRAIN_SCORING_TEST_HOSTILE=1`` which only these tests pass) each try one escape after
the sandbox is armed. Every attempt must be refused (``crash`` naming the audit event) or
killed (``timeout``/``oom``), leave no process behind, and a following honest job must succeed.
"""

from __future__ import annotations

import os
from pathlib import Path

import attrs
import pytest
import trio

from hypertrain.scoring.hostile import HOSTILE_ENV
from hypertrain.scoring.outcome import ScoreOutcome
from hypertrain.scoring.registry import DELTA_LOSS, Challenge
from hypertrain.scoring.sandbox import run_scorer

DEADLINE = 90.0
HOSTILE = {HOSTILE_ENV: "1"}

REFUSED = {
    "read": "sandbox refused open: open of '/etc/passwd'",
    "read-home": "sandbox refused open",
    "write": "sandbox refused open",
    "append-input": "for writing",
    "remove-input": "sandbox refused os.remove",
    "spawn": "sandbox refused subprocess.Popen",
    "system": "sandbox refused os.system",
    "fork": "sandbox refused os.fork",
    "socket": "sandbox refused socket.__new__",
    "ctypes": "sandbox refused ctypes.dlopen",
    "import": "sandbox refused import: 'antigravity'",
    "import-lib": "sandbox refused open",
}


def _hostile(what: str, **limits: int) -> Challenge:
    return attrs.evolve(DELTA_LOSS, id=f"test-hostile-{what}", inputs=("model.json",), **limits)


def _our_leftovers() -> list[str]:
    """Processes still running a worker or a command a hostile action would start."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if b"hypertrain.scoring.worker" in cmdline or cmdline.startswith(b"sleep 60"):
            found.append(f"{entry.name}: {cmdline.decode(errors='replace')}")
    return found


def _no_leftovers() -> bool:
    """No worker or hostile child process, no file written by a hostile action."""
    assert _our_leftovers() == []
    assert not list(Path("/tmp").glob("hypertrain-hostile-*"))
    assert not list(Path("/tmp").glob("hypertrain-score-*"))
    return True


async def _run_all(jobs: dict[str, Challenge], inputs: dict[str, Path]) -> dict[str, ScoreOutcome]:
    limiter = trio.CapacityLimiter(2)
    out: dict[str, ScoreOutcome] = {}

    async def one(what: str, challenge: Challenge) -> None:
        async with limiter:
            out[what] = await run_scorer(challenge, inputs, extra_env=HOSTILE)

    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            for what, challenge in jobs.items():
                nursery.start_soon(one, what, challenge)
    return out


async def _honest_job_succeeds(job: dict[str, Path]) -> None:
    with trio.fail_after(DEADLINE):
        honest = await run_scorer(DELTA_LOSS, job)
    assert honest.ok, honest


@pytest.mark.slow
async def test_escape_attempts_are_refused(job: dict[str, Path]) -> None:
    model_json = {"model.json": job["model.json"]}
    before = job["model.json"].read_bytes()
    outcomes = await _run_all({what: _hostile(what) for what in REFUSED}, model_json)
    for what, expected in REFUSED.items():
        outcome = outcomes[what]
        assert (outcome.ok, outcome.failure) == (False, "crash"), (what, outcome)
        assert expected in outcome.error, (what, outcome.error)
    assert job["model.json"].read_bytes() == before
    assert _no_leftovers()
    await _honest_job_succeeds(job)


@pytest.mark.slow
async def test_runaway_workers_are_killed(job: dict[str, Path]) -> None:
    jobs = {
        "memory": _hostile("memory"),
        "loop": _hostile("loop", kill_after_ms=20_000, step_budget_ms=5_000),
        "sleep": _hostile("sleep", kill_after_ms=7_000, step_budget_ms=6_000),
    }
    outcomes = await _run_all(jobs, {"model.json": job["model.json"]})
    assert outcomes["memory"].failure == "oom", outcomes["memory"]
    assert outcomes["loop"].failure == "timeout", outcomes["loop"]
    assert outcomes["loop"].error == "scorer killed after its CPU limit"
    assert outcomes["sleep"].failure == "timeout", outcomes["sleep"]
    assert outcomes["sleep"].error == "scorer killed after 7000 ms"
    assert 7_000 <= outcomes["sleep"].wall_ms < 7_000 + 5_000
    assert _no_leftovers()
    await _honest_job_succeeds(job)


async def test_hostile_challenges_need_the_test_switch(job: dict[str, Path]) -> None:
    with trio.fail_after(DEADLINE):
        outcome = await run_scorer(_hostile("read"), {"model.json": job["model.json"]})
    assert outcome.failure == "bad-input"
    assert "unknown challenge 'test-hostile-read'" in outcome.error
