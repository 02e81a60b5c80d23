"""The fork server against real processes (``tests.nurseries.forkjob``, no torch): each child is
forked ahead of its job (between jobs, prepared) and sandboxed before its job runs, a spare that
died or failed to prepare does not lose a job, nothing a job does reaches the server, a job that
says it ended is not waited for, and nothing outlives a SIGKILLed client. Real time: every test
has an absolute deadline."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Mapping
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
    serve_forks,
)
from tests.nurseries.test_process import alive, wait_dead
from tests.process_support import readline_within

REPO = Path(__file__).resolve().parents[2]
DEADLINE = 30.0
SECRET = "HYPERTRAIN_TEST_SERVER_SECRET"
SERVER_ENV = {"PYTHONPATH": str(REPO), SECRET: "the server's own"}
ROOT = Path("/")
"""The server's working directory, where its spares wait."""
ARGV = [sys.executable, "-m", "tests.nurseries.forkjob"]
LIMITS = Limits(address_space_bytes=1 << 30, cpu_seconds=1, open_files=32, file_size_bytes=0)


@asynccontextmanager
async def _server(env: Mapping[str, str] = SERVER_ENV) -> AsyncIterator[ForkServer]:
    with trio.fail_after(DEADLINE):
        async with open_fork_server(ARGV, env=env, start_timeout=DEADLINE) as server:
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


async def test_a_child_is_forked_ahead_and_sandboxed_before_its_job_runs(tmp_path: Path) -> None:
    async with _server() as server:
        spares = _children_of(server.server_pid)  # forked before the server said it was ready
        seen = await _report(server, tmp_path)
    assert spares == [seen["pid"]]  # the job ran in the spare that waited for it
    assert seen["prepared"]  # which ran prepare_spare before it
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
    # stdin, stdout, stderr, the lifeline, the end pipe, listdir's own descriptor: no socket
    fds = seen["fds"]
    assert isinstance(fds, dict)
    assert sorted(int(fd) for fd in fds)[:3] == [0, 1, 2]
    assert len(fds) == 6
    assert [link.split(":")[0] for link in fds.values()].count("pipe") == 4, fds
    assert not any(link.startswith("socket:") for link in fds.values()), fds


async def test_misbehaving_jobs_never_reach_the_server(tmp_path: Path) -> None:
    async with _server() as server:
        first = await _report(server, tmp_path)
        outcomes = {what: await _run(server, what, tmp_path) for what in ("exit", "segv")}
        outcomes["raise"] = await _run(server, "raise", tmp_path)
        outcomes["return"] = await _run(server, "return", tmp_path)
        outcomes["loop"] = await _run(server, "loop", tmp_path)
        outcomes["sleep"] = await _run(server, "sleep", tmp_path, timeout=0.5)
        outcomes["noise"] = await _run(server, "noise", tmp_path)
        outcomes["end"] = await _run(server, "end", tmp_path)
        outcomes["end-garbage"] = await _run(server, "end-garbage", tmp_path)
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
    assert (outcomes["end"].returncode, outcomes["end"].stdout) == (4, b"ended\n")
    assert outcomes["end-garbage"].returncode == 6  # not a status: the kernel's counts
    assert first["env"] == last["env"] == {"JOB": "1"}


async def test_a_job_that_says_it_ended_is_not_waited_for(tmp_path: Path) -> None:
    """``end-linger`` announces status 5 on its end pipe and sleeps on: the result comes at
    once with that status (without the announcement it would come at the kill, 10 s later,
    as a timeout), and its group is killed."""
    async with _server() as server:
        result = await _run(server, "end-linger", tmp_path, timeout=10.0)
        assert (result.returncode, result.killed_for_time) == (5, False), result
        await wait_dead(int(result.stdout))
        assert not server.gone


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


def _cwd_of(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return ""


async def _wait_child(server: ForkServer, cwd: Path) -> int:
    """The server's child working in ``cwd``, once there is one: a job in its scratch
    directory, or a spare in the server's working directory (/)."""
    while True:
        children = [p for p in _children_of(server.server_pid) if _cwd_of(p) == str(cwd)]
        if children:
            return children[0]
        await trio.sleep(0.02)


@asynccontextmanager
async def _sleeping_job(
    server: ForkServer, cwd: Path
) -> AsyncIterator[tuple[int, trio.CancelScope]]:
    """A job sleeping in ``cwd``: its pid once it runs, and the scope that cancels its caller
    (cancelled when the block exits)."""
    async with trio.open_nursery() as nursery:
        cancel = trio.CancelScope()

        async def sleeper() -> None:
            with cancel:
                await _run(server, "sleep", cwd, timeout=DEADLINE)

        nursery.start_soon(sleeper)
        yield await _wait_child(server, cwd), cancel
        cancel.cancel()


async def test_a_cancelled_caller_kills_its_job(tmp_path: Path) -> None:
    async with _server() as server:
        async with _sleeping_job(server, tmp_path) as (job, cancel):
            cancel.cancel()
            await wait_dead(job)
        assert not server.gone
        assert (await _report(server, tmp_path))["env"] == {"JOB": "1"}


async def test_spares_are_forked_between_jobs_and_one_forked_on_the_spot_is_not_prepared(
    tmp_path: Path,
) -> None:
    """No spare is forked while a job runs; a request meanwhile gets a child forked on the
    spot, which skips prepare_spare; once the job is reaped a prepared spare waits again."""
    sleeping, reporting = tmp_path / "sleeping", tmp_path / "reporting"
    sleeping.mkdir()
    reporting.mkdir()
    async with _server() as server:
        async with _sleeping_job(server, sleeping) as (job, cancel):
            beside_the_job = _children_of(server.server_pid)
            on_the_spot = await _report(server, reporting)
            cancel.cancel()
            await wait_dead(job)
        await _wait_child(server, ROOT)
        ahead = await _report(server, reporting)
    assert beside_the_job == [job]
    assert (on_the_spot["prepared"], ahead["prepared"]) == (False, True)
    assert on_the_spot["env"] == ahead["env"] == {"JOB": "1"}


async def test_a_spare_that_died_before_its_job_is_replaced(tmp_path: Path) -> None:
    async with _server() as server:
        spare = await _wait_child(server, ROOT)
        os.kill(spare, signal.SIGKILL)
        await wait_dead(spare)
        seen = await _report(server, tmp_path)
        assert not server.gone
    assert seen["pid"] != spare
    assert seen["env"] == {"JOB": "1"}


async def test_a_spare_that_fails_to_prepare_still_runs_its_job(tmp_path: Path) -> None:
    async with _server(SERVER_ENV | {"FORKJOB_PREPARE": "raise"}) as server:
        spare = await _wait_child(server, ROOT)
        seen = await _report(server, tmp_path)
    assert seen["pid"] == spare  # the spare that failed to prepare waited on and ran it
    assert not seen["prepared"]
    assert seen["env"] == {"JOB": "1"}


def test_a_process_with_two_threads_does_not_serve(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fork copies one thread only; serve_forks refuses before it touches its socket."""
    monkeypatch.delenv("NURSERIES_FORK_SERVER_FD", raising=False)
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, args=(DEADLINE,))
    thread.start()
    try:
        with pytest.raises(RuntimeError, match="must have one thread"):
            serve_forks(lambda payload: None)
    finally:
        stop.set()
        thread.join(DEADLINE)


async def test_a_server_that_dies_fails_its_jobs_and_kills_them(tmp_path: Path) -> None:
    async with _server() as server:
        pids: list[int] = []

        async def sleeper() -> None:
            with pytest.raises(ForkServerGone):
                await _run(server, "sleep", tmp_path, timeout=DEADLINE)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(sleeper)
            await _wait_child(server, tmp_path)
            pids = _children_of(server.server_pid)  # the job: a spare is forked after it
            os.kill(server.server_pid, signal.SIGKILL)
        assert len(pids) == 1
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


_PARENT = """
import sys
from functools import partial
import trio
from nurseries import Limits, open_fork_server

async def main() -> None:
    argv = [sys.executable, "-m", "tests.nurseries.forkjob"]
    async with open_fork_server(argv, env={"PYTHONPATH": sys.argv[1]}, start_timeout=30) as server:
        print(server.server_pid, flush=True)
        limits = Limits()
        run = partial(server.run, limits=limits, timeout=3600, output_cap=9, cwd="/")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(partial(run, b"sleep-said", env={"PID_FIFO": sys.argv[2]}))
            await trio.to_thread.run_sync(sys.stdin.readline)  # the test has the job's pid
            await run(b"exit", env={})  # forked on the spot; a spare follows its reaping

trio.run(main)
"""


def _wait_children(pid: int, count: int) -> list[int]:
    """The ``count`` live children of ``pid``, once it has them (real time, bounded)."""
    deadline = time.monotonic() + DEADLINE
    while len(children := _children_of(pid)) != count:
        assert time.monotonic() < deadline, children
        time.sleep(0.02)
    return children


def test_nothing_outlives_a_sigkilled_client(tmp_path: Path) -> None:
    """A client killed with SIGKILL cannot stop its server or kill its jobs' groups: the
    lifeline ends the server, its spare (forked after a second job) and a job that is sleeping
    (it said so), each seen to exit on a pidfd within a bound."""
    fifo = tmp_path / "job.pid"
    os.mkfifo(fifo)
    # Opened before the job can open it for writing, so the read below waits for its line.
    job_said = os.fdopen(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK), "r")
    os.set_blocking(job_said.fileno(), True)
    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT, str(REPO), str(fifo)],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    pidfds: list[int] = []
    try:
        assert parent.stdout is not None
        assert parent.stdin is not None
        server = int(readline_within(parent.stdout, DEADLINE))
        with job_said:
            job = int(readline_within(job_said, DEADLINE))
        parent.stdin.write("\n")
        parent.stdin.flush()
        family = [server, *_wait_children(server, 2)]  # the server, the job, the next spare
        assert job in family
        pidfds = [os.pidfd_open(pid) for pid in family]
        assert all(alive(pid) for pid in family)
        parent.kill()
        parent.wait(timeout=DEADLINE)
        for pid, pidfd in zip(family, pidfds, strict=True):
            ready, _, _ = select.select([pidfd], [], [], DEADLINE)
            assert ready, f"{pid} ({'job' if pid == job else 'server or spare'}) outlived it"
    finally:
        parent.kill()
        parent.wait(timeout=DEADLINE)
        for stream in (parent.stdout, parent.stdin):
            if stream is not None:
                stream.close()
        for pidfd in pidfds:
            with contextlib.suppress(ProcessLookupError):  # a survivor: the test failed
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            os.close(pidfd)
