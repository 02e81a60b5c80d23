"""Sandbox escape attempts (spec/compute-network.md section 6, scenario 38).

The worker's test-only hostile challenges (:mod:`hypertrain.scoring.hostile`, enabled by
``HYPERTRAIN_SCORING_TEST_HOSTILE=1`` which only these tests pass) each try one escape after
the sandbox is armed. Every attempt must be refused (``crash`` naming the audit event) or
killed (``timeout``/``oom``), leave no process behind, and a following honest job must succeed.

The machine is shared (other test runs score jobs at the same time), so "no process behind"
looks only at this test's processes: its workers carry a marker variable of their own in their
environment, which whatever they start inherits, and their scratch directories are made in the
test's own temporary directory.
"""

from __future__ import annotations

import os
import secrets
import tempfile
from pathlib import Path

import attrs
import pytest
import trio

from hypertrain.scoring.hostile import HOSTILE_ENV
from hypertrain.scoring.outcome import ScoreOutcome
from hypertrain.scoring.registry import DELTA_LOSS, Challenge
from hypertrain.scoring.sandbox import run_scorer

DEADLINE = 180.0
"""Real seconds for one batch: twelve workers, two at a time, each ~2.7 s of CPU before it is
armed (the import of torch); 180 s leaves the two a tenth of a core each on a busy machine."""
MARK_ENV = "HYPERTRAIN_TEST_ESCAPE_MARK"
"""Names this test run's workers (and what they start) among the machine's processes."""
HOSTILE = {HOSTILE_ENV: "1", MARK_ENV: secrets.token_hex(16)}

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


@pytest.fixture(autouse=True)
def scratch_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """run_scorer's scratch directories go here, not to the /tmp other runs share."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


def _our_leftovers() -> list[str]:
    """Live processes of this run's workers: each one with the marker in its environment."""
    mark = f"{MARK_ENV}={HOSTILE[MARK_ENV]}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if mark in environ:
            found.append(f"{entry.name}: {cmdline.decode(errors='replace')}")
    return found


def _no_leftovers(scratch_root: Path) -> bool:
    """No worker or hostile child process, no file written by a hostile action."""
    assert _our_leftovers() == []
    assert not list(Path("/tmp").glob("hypertrain-hostile-*"))
    assert not list(scratch_root.glob("hypertrain-score-*"))
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
async def test_escape_attempts_are_refused(job: dict[str, Path], scratch_root: Path) -> None:
    model_json = {"model.json": job["model.json"]}
    before = job["model.json"].read_bytes()
    outcomes = await _run_all({what: _hostile(what) for what in REFUSED}, model_json)
    for what, expected in REFUSED.items():
        outcome = outcomes[what]
        assert (outcome.ok, outcome.failure) == (False, "crash"), (what, outcome)
        assert expected in outcome.error, (what, outcome.error)
    assert job["model.json"].read_bytes() == before
    assert _no_leftovers(scratch_root)
    await _honest_job_succeeds(job)


@pytest.mark.slow
async def test_runaway_workers_are_killed(job: dict[str, Path], scratch_root: Path) -> None:
    jobs = {
        "memory": _hostile("memory"),
        # The CPU limit (5 s, the import of torch's ~2.7 s included) must end it before the
        # wall deadline does: 60 s leaves the worker a twelfth of a core on a busy machine.
        "loop": _hostile("loop", kill_after_ms=60_000, step_budget_ms=5_000),
        "sleep": _hostile("sleep", kill_after_ms=7_000, step_budget_ms=6_000),
    }
    outcomes = await _run_all(jobs, {"model.json": job["model.json"]})
    assert outcomes["memory"].failure == "oom", outcomes["memory"]
    assert outcomes["loop"].failure == "timeout", outcomes["loop"]
    assert outcomes["loop"].error == "scorer killed after its CPU limit"
    assert outcomes["sleep"].failure == "timeout", outcomes["sleep"]
    assert outcomes["sleep"].error == "scorer killed after 7000 ms"
    assert 7_000 <= outcomes["sleep"].wall_ms < 7_000 + 5_000
    assert _no_leftovers(scratch_root)
    await _honest_job_succeeds(job)


async def test_hostile_challenges_need_the_test_switch(job: dict[str, Path]) -> None:
    with trio.fail_after(DEADLINE):
        outcome = await run_scorer(_hostile("read"), {"model.json": job["model.json"]})
    assert outcome.failure == "bad-input"
    assert "unknown challenge 'test-hostile-read'" in outcome.error
