"""The fork server against real processes (``tests.nurseries.forkjob``, no torch): each child is
sandboxed before its job runs, and nothing a job does reaches the server. Real time: every test
has an absolute deadline."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from nurseries import (
    EXIT_JOB_RETURNED,
    ForkServer,
    ForkServerGone,
    Limits,
    ProcessResult,
    open_fork_server,
)
from tests.nurseries.test_process import alive, wait_dead

REPO = Path(__file__).resolve().parents[2]
DEADLINE = 30.0
SECRET = "HYPERTRAIN_TEST_SERVER_SECRET"
SERVER_ENV = {"PYTHONPATH": str(REPO), SECRET: "the server's own"}
ARGV = [sys.executable, "-m", "tests.nurseries.forkjob"]
LIMITS = Limits(address_space_bytes=1 << 30, cpu_seconds=1, open_files=32, file_size_bytes=0)


@asynccontextmanager
async def _server() -> AsyncIterator[ForkServer]:
    with trio.fail_after(DEADLINE):
        async with open_fork_server(ARGV, env=SERVER_ENV, start_timeout=DEADLINE) as server:
            yield server


async def _run(
    server: ForkServer,
    what: str,
    cwd: Path,
    *,
    timeout: float = 10.0,  # noqa: ASYNC109 - the job's kill time
    limits: Limits = LIMITS,
) -> ProcessResult:
    return await server.run(
        what.encode(),
        env={"JOB": "1"},
        limits=limits,
        timeout=timeout,
        output_cap=4096,
        cwd=str(cwd),
    )


async def _report(server: ForkServer, cwd: Path) -> dict[str, object]:
    result = await _run(server, "report", cwd)
    assert result.returncode == 0, result
    seen: dict[str, object] = json.loads(result.stdout)
    return seen


async def test_a_child_is_sandboxed_before_its_job_runs(tmp_path: Path) -> None:
    async with _server() as server:
        seen = await _report(server, tmp_path)
    assert seen["env"] == {"JOB": "1"}  # nothing of the server's: not its secret, not its fds
    assert seen["limits"] == {
        "as": [1 << 30, 1 << 30],
        "cpu": [1, 2],
        "nofile": [32, 32],
        "fsize": [0, 0],
    }
    assert seen["cwd"] == str(tmp_path)
    assert seen["sid"] == seen["pgid"] == seen["pid"]  # its own session and group
    assert seen["pid"] != server.server_pid
    assert seen["stdin"] == "/dev/null"
    # stdin, stdout, stderr, the lifeline, and listdir's own descriptor: no control socket
    fds = seen["fds"]
    assert isinstance(fds, list)
    assert fds[:3] == [0, 1, 2]
    assert len(fds) == 5


async def test_misbehaving_jobs_never_reach_the_server(tmp_path: Path) -> None:
    async with _server() as server:
        first = await _report(server, tmp_path)
        outcomes = {what: await _run(server, what, tmp_path) for what in ("exit", "segv")}
        outcomes["raise"] = await _run(server, "raise", tmp_path)
        outcomes["return"] = await _run(server, "return", tmp_path)
        outcomes["loop"] = await _run(server, "loop", tmp_path)
        outcomes["sleep"] = await _run(server, "sleep", tmp_path, timeout=0.5)
        outcomes["noise"] = await _run(server, "noise", tmp_path)
        last = await _report(server, tmp_path)
        assert not server.gone
    assert outcomes["exit"].returncode == 7
    assert outcomes["segv"].returncode == -signal.SIGSEGV
    assert outcomes["raise"].returncode == EXIT_JOB_RETURNED
    assert b"ZeroDivisionError" in outcomes["raise"].stderr
    assert outcomes["return"].returncode == EXIT_JOB_RETURNED
    assert outcomes["loop"].cpu_limit_hit
    assert outcomes["loop"].killed_for_time
    assert outcomes["sleep"].killed_for_time
    assert not outcomes["sleep"].cpu_limit_hit
    assert outcomes["sleep"].returncode == -signal.SIGKILL
    assert outcomes["noise"].stdout_truncated
    assert len(outcomes["noise"].stdout) == 4096
    assert first["env"] == last["env"] == {"JOB": "1"}


async def test_what_a_job_started_dies_with_it(tmp_path: Path) -> None:
    async with _server() as server:
        result = await _run(server, "fork", tmp_path)
        assert result.returncode == 0
        grandchild = int(result.stdout)
        await wait_dead(grandchild)
        assert (await _report(server, tmp_path))["env"] == {"JOB": "1"}


def _ppid(proc: Path) -> str:
    try:
        return proc.joinpath("stat").read_text().rsplit(")", 1)[1].split()[1]
    except (OSError, IndexError):
        return ""


def _children_of(pid: int) -> list[int]:
    procs = (p for p in Path("/proc").iterdir() if p.name.isdigit())
    return [int(p.name) for p in procs if _ppid(p) == str(pid) and alive(int(p.name))]


async def _wait_children(server: ForkServer) -> list[int]:
    while not (pids := _children_of(server.server_pid)):  # noqa: ASYNC110 - polling /proc
        await trio.sleep(0.02)
    return pids


async def test_a_cancelled_caller_kills_its_job(tmp_path: Path) -> None:
    async with _server() as server, trio.open_nursery() as nursery:
        cancel = trio.CancelScope()

        async def sleeper() -> None:
            with cancel:
                await _run(server, "sleep", tmp_path, timeout=DEADLINE)

        nursery.start_soon(sleeper)
        pids = await _wait_children(server)
        cancel.cancel()
        for pid in pids:
            await wait_dead(pid)
        assert not server.gone
        assert (await _report(server, tmp_path))["env"] == {"JOB": "1"}


async def test_a_server_that_dies_fails_its_jobs_and_kills_them(tmp_path: Path) -> None:
    async with _server() as server:
        pids: list[int] = []

        async def sleeper() -> None:
            with pytest.raises(ForkServerGone):
                await _run(server, "sleep", tmp_path, timeout=DEADLINE)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(sleeper)
            pids = await _wait_children(server)
            os.kill(server.server_pid, signal.SIGKILL)
        assert pids
        for pid in pids:
            await wait_dead(pid)
        assert server.gone
        with pytest.raises(ForkServerGone):
            await _run(server, "report", tmp_path)


async def test_a_server_that_never_gets_ready_is_reported() -> None:
    argv = [sys.executable, "-c", "import sys; sys.exit(3)"]
    with trio.fail_after(DEADLINE), pytest.raises(ForkServerGone):
        async with open_fork_server(argv, env={}, start_timeout=DEADLINE):
            pass  # pragma: no cover
