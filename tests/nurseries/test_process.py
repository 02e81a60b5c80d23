"""run_process against real children: each test has an absolute deadline (real time)."""

from __future__ import annotations

import resource
import signal
import sys
import textwrap
from pathlib import Path

import pytest
import trio

from nurseries._process import Limits, ProcessResult, run_process

PY = sys.executable
NO_LIMITS = Limits()
TEST_DEADLINE = 20.0  # real seconds; every test must finish well inside this


def py(code: str) -> list[str]:
    return [PY, "-I", "-S", "-c", textwrap.dedent(code)]


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (PID 1 here may not reap orphans)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    state = stat.rsplit(")", 1)[1].split()[0]
    return state not in ("Z", "X")


async def wait_dead(pid: int, within: float = 5.0) -> None:
    with trio.fail_after(within):
        while alive(pid):  # noqa: ASYNC110 - polling /proc: there is no event to wait on
            await trio.sleep(0.02)


async def run(argv: list[str], **kwargs: object) -> ProcessResult:
    options: dict[str, object] = {
        "env": {},
        "limits": NO_LIMITS,
        "timeout": 10.0,
        "output_cap": 1 << 20,
    }
    options.update(kwargs)
    with trio.fail_after(TEST_DEADLINE):
        return await run_process(argv, **options)  # type: ignore[arg-type]


async def test_exit_code_and_output_are_returned() -> None:
    result = await run(py("import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"))
    assert result.returncode == 3
    assert result.stdout == b"out\n"
    assert result.stderr == b"err\n"
    assert not result.stdout_truncated
    assert not result.stderr_truncated
    assert not result.killed_for_time
    assert not result.killed_for_memory
    assert not result.cpu_limit_hit
    assert 0 < result.wall_seconds < 10


async def test_death_by_signal_is_a_negative_returncode() -> None:
    result = await run(py("import os, signal; os.kill(os.getpid(), signal.SIGTERM)"))
    assert result.returncode == -signal.SIGTERM
    assert not result.killed_for_time


async def test_environment_is_exactly_what_is_passed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HT_PARENT_SECRET", "leak")
    result = await run(["/usr/bin/env"], env={"ONLY": "this", "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0
    assert sorted(result.stdout.decode().splitlines()) == ["ONLY=this", "PATH=/usr/bin:/bin"]


async def test_empty_environment_is_empty() -> None:
    result = await run(["/usr/bin/env"], env={})
    assert result.returncode == 0
    assert result.stdout == b""


async def test_missing_program_raises() -> None:
    with pytest.raises(FileNotFoundError):
        await run(["definitely-not-a-program-here"], env={"PATH": "/usr/bin:/bin"})


async def test_stdin_is_delivered_and_closed() -> None:
    result = await run(["/usr/bin/cat"], stdin=b"hello\x00world")
    assert result.returncode == 0
    assert result.stdout == b"hello\x00world"


async def test_without_stdin_the_child_reads_eof() -> None:
    result = await run(py("import sys; print(len(sys.stdin.buffer.read()))"))
    assert result.stdout == b"0\n"


async def test_output_is_capped_and_the_child_is_never_blocked() -> None:
    # 4 MiB on each stream is far more than a pipe buffer: without draining, the child blocks.
    code = """
        import sys
        block = b"x" * 65536
        for _ in range(64):
            sys.stdout.buffer.write(block)
            sys.stderr.buffer.write(block)
        sys.stdout.buffer.flush()
        sys.stderr.buffer.flush()
        sys.exit(7)
    """
    result = await run(py(code), output_cap=1000, timeout=15.0)
    assert result.returncode == 7
    assert not result.killed_for_time
    assert result.stdout == b"x" * 1000
    assert result.stdout_truncated
    assert result.stderr == b"x" * 1000
    assert result.stderr_truncated


async def test_output_exactly_at_the_cap_is_not_truncated() -> None:
    result = await run(py("import sys; sys.stdout.write('a' * 100)"), output_cap=100)
    assert result.stdout == b"a" * 100
    assert not result.stdout_truncated


async def test_deadline_kills_the_whole_process_group(tmp_path: Path) -> None:
    code = f"""
        import subprocess, sys, time
        grandchild = subprocess.Popen([{PY!r}, "-I", "-S", "-c", "import time; time.sleep(60)"])
        print(grandchild.pid, flush=True)
        time.sleep(60)
    """
    start = trio.current_time()
    result = await run(py(code), timeout=1.5)
    elapsed = trio.current_time() - start
    assert result.killed_for_time
    assert not result.cpu_limit_hit
    assert not result.killed_for_memory
    assert result.returncode == -signal.SIGKILL
    assert 1.5 <= result.wall_seconds < 1.5 + 3.0
    assert elapsed < 1.5 + 3.0
    grandchild = int(result.stdout.split()[0])
    await wait_dead(grandchild)


async def test_leftovers_in_the_group_are_killed_after_a_normal_exit() -> None:
    code = f"""
        import subprocess
        p = subprocess.Popen([{PY!r}, "-I", "-S", "-c", "import time; time.sleep(60)"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        print(p.pid, flush=True)
    """
    result = await run(py(code))
    assert result.returncode == 0
    assert not result.killed_for_time
    await wait_dead(int(result.stdout))


async def test_cancelling_the_caller_kills_the_group(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    code = f"""
        import os, subprocess, time
        g = subprocess.Popen([{PY!r}, "-I", "-S", "-c", "import time; time.sleep(60)"])
        with open({str(pids)!r} + ".tmp", "w") as f:
            f.write(f"{{os.getpid()}} {{g.pid}}")
        os.rename({str(pids)!r} + ".tmp", {str(pids)!r})
        time.sleep(60)
    """
    with trio.fail_after(TEST_DEADLINE):
        async with trio.open_nursery() as nursery:

            async def runner() -> None:
                await run_process(py(code), env={}, limits=NO_LIMITS, timeout=60.0, output_cap=100)
                pytest.fail("run_process returned although it was cancelled")

            nursery.start_soon(runner)
            while not pids.exists():  # noqa: ASYNC110 - the child writes a file
                await trio.sleep(0.02)
            child, grandchild = map(int, pids.read_text().split())
            assert alive(child)
            assert alive(grandchild)
            cancelled_at = trio.current_time()
            nursery.cancel_scope.cancel()
        assert trio.current_time() - cancelled_at < 2.0
    assert not alive(child)  # reaped by run_process before it re-raised Cancelled
    await wait_dead(grandchild)


async def test_memory_limit_is_detected_for_a_python_child() -> None:
    code = """
        blocks = []
        for _ in range(64):
            blocks.append(bytearray(64 << 20))
    """
    limits = Limits(address_space_bytes=512 << 20)
    result = await run(py(code), limits=limits)
    assert result.returncode == 1
    assert b"MemoryError" in result.stderr
    assert result.killed_for_memory
    assert not result.killed_for_time


async def test_the_same_failure_without_a_memory_limit_is_not_called_memory() -> None:
    result = await run(py("raise MemoryError"))
    assert result.returncode == 1
    assert not result.killed_for_memory


async def test_memory_heuristic_reads_the_tail_of_truncated_stderr() -> None:
    code = """
        import sys
        sys.stderr.write("noise\\n" * 10000)
        sys.stderr.flush()
        x = bytearray(1 << 33)
    """
    result = await run(py(code), limits=Limits(address_space_bytes=512 << 20), output_cap=100)
    assert result.stderr_truncated
    assert b"MemoryError" not in result.stderr
    assert result.killed_for_memory


async def test_memory_limit_allows_what_fits() -> None:
    result = await run(py("x = bytearray(16 << 20)"), limits=Limits(address_space_bytes=512 << 20))
    assert result.returncode == 0
    assert not result.killed_for_memory


async def test_cpu_limit_ends_a_busy_child() -> None:
    start = trio.current_time()
    result = await run(py("while True: pass"), limits=Limits(cpu_seconds=1), timeout=15.0)
    assert result.returncode == -signal.SIGXCPU
    assert result.cpu_limit_hit
    assert result.killed_for_time
    assert not result.killed_for_memory
    assert trio.current_time() - start < 10.0  # the CPU limit, not the 15 s deadline


async def test_cpu_limit_hard_kill_when_sigxcpu_is_ignored() -> None:
    code = """
        import signal
        signal.signal(signal.SIGXCPU, signal.SIG_IGN)
        while True: pass
    """
    result = await run(py(code), limits=Limits(cpu_seconds=1), timeout=15.0)
    assert result.returncode == -signal.SIGKILL
    assert result.cpu_limit_hit
    assert result.killed_for_time


async def test_sleeping_does_not_hit_the_cpu_limit() -> None:
    result = await run(py("import time; time.sleep(1.5)"), limits=Limits(cpu_seconds=1))
    assert result.returncode == 0
    assert not result.cpu_limit_hit
    assert not result.killed_for_time


async def test_open_files_limit_applies() -> None:
    code = """
        import resource
        print(resource.getrlimit(resource.RLIMIT_NOFILE))
        fds = [open("/dev/null") for _ in range(100)]
    """
    result = await run(py(code), limits=Limits(open_files=32))
    assert result.stdout == b"(32, 32)\n"
    assert result.returncode == 1
    assert b"Too many open files" in result.stderr


async def test_file_size_limit_applies(tmp_path: Path) -> None:
    code = """
        with open("big", "wb") as f:
            f.write(b"x" * 10000)
    """
    result = await run(py(code), limits=Limits(file_size_bytes=4096), cwd=tmp_path)
    assert result.returncode == 1
    assert b"File too large" in result.stderr
    assert (tmp_path / "big").stat().st_size == 4096


async def test_limits_do_not_leak_into_the_parent() -> None:
    before = resource.getrlimit(resource.RLIMIT_NOFILE), resource.getrlimit(resource.RLIMIT_AS)
    await run(py("pass"), limits=Limits(open_files=16, address_space_bytes=1 << 30))
    after = resource.getrlimit(resource.RLIMIT_NOFILE), resource.getrlimit(resource.RLIMIT_AS)
    assert before == after


def test_limits_become_rlimit_pairs() -> None:
    limits = Limits(address_space_bytes=1, cpu_seconds=2, open_files=3, file_size_bytes=4)
    assert limits.rlimits() == (
        (resource.RLIMIT_AS, (1, 1)),
        (resource.RLIMIT_CPU, (2, 3)),
        (resource.RLIMIT_NOFILE, (3, 3)),
        (resource.RLIMIT_FSIZE, (4, 4)),
    )
    assert Limits().rlimits() == ()


async def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="timeout"):
        await run_process(["true"], env={}, limits=NO_LIMITS, timeout=0, output_cap=1)
