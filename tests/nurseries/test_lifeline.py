"""The lifeline: a child shuts down as on SIGHUP once the program that started it is gone.

Virtual time for the supervisor's reaction (the parent's end is closed by a task at a known
instant); one real child process for what only the kernel can show: the read end is inherited
through ``pass_fds`` and reads end-of-file when the parent's end is closed.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio
import trio.testing

from nurseries import (
    LIFELINE_ENV,
    Lifeline,
    lifeline_from_env,
    open_lifeline,
    open_supervisor,
    wait_lifeline_cut,
)
from tests.process_support import readline_within

REPO = Path(__file__).resolve().parents[2]
HANG = 10_000.0
"""Virtual seconds after which a wait that the cut should have ended fails the test."""
REAL_BOUND = 60.0
"""Seconds a real child gets to start Python and then to notice the cut."""


def _child_end(lifeline: Lifeline) -> int:
    fd = lifeline_from_env(lifeline.env)
    assert fd is not None
    return fd


async def test_cutting_the_lifeline_shuts_down_as_sighup(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[tuple[str, float]] = []
    t0 = trio.current_time()

    async def forever() -> None:
        try:
            await trio.sleep_forever()
        finally:
            log.append(("work cancelled", trio.current_time() - t0))

    with open_lifeline() as lifeline:
        # In one process the child's end is our read end: closing only the write end is what
        # the kernel does when the parent dies.
        read_fd = _child_end(lifeline)

        async def die_at(seconds: float) -> None:
            await trio.sleep_until(t0 + seconds)
            os.close(lifeline._write)
            lifeline._write = -1
            log.append(("parent gone", trio.current_time() - t0))

        with trio.fail_after(HANG):
            async with open_supervisor(
                grace=4.0,
                signals=(),
                lifeline=read_fd,
                on_shutdown=lambda: log.append(("hook", trio.current_time() - t0)),
            ) as sup:
                sup.nursery.start_soon(forever)
                sup.nursery.start_soon(die_at, 3.0)
    assert log == [("parent gone", 3.0), ("hook", 3.0), ("work cancelled", 7.0)]
    assert sup.shutdown_signal is signal.SIGHUP


async def test_a_live_lifeline_holds_nothing_up(autojump_clock: trio.testing.MockClock) -> None:
    with open_lifeline() as lifeline, trio.fail_after(HANG):
        async with open_supervisor(grace=1.0, signals=(), lifeline=_child_end(lifeline)) as sup:
            await trio.sleep(5.0)
        assert not sup.shutdown_requested


async def test_wait_lifeline_cut_waits_until_the_write_end_closes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with open_lifeline() as lifeline:
        read_fd = _child_end(lifeline)
        with trio.move_on_after(100.0) as waited:
            await wait_lifeline_cut(read_fd)
        assert waited.cancelled_caught
        os.close(lifeline._write)
        lifeline._write = -1
        with trio.fail_after(1.0):
            await wait_lifeline_cut(read_fd)


@pytest.mark.parametrize("value", ["x", "-1", "999999", " 3", "FILE"])
def test_a_stray_value_is_ignored_with_a_warning(
    value: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="nurseries._lifeline")
    with (tmp_path / "f").open("w") as f:  # "FILE": an open descriptor, but not a pipe
        value = str(f.fileno()) if value == "FILE" else value
        assert lifeline_from_env({LIFELINE_ENV: value}) is None
    assert any(LIFELINE_ENV in r.getMessage() for r in caplog.records)


def test_no_variable_means_no_lifeline() -> None:
    assert lifeline_from_env({}) is None


def test_the_childs_end_is_not_handed_on() -> None:
    with open_lifeline() as lifeline:
        os.set_inheritable(lifeline.pass_fds[0], True)
        fd = _child_end(lifeline)
        assert not os.get_inheritable(fd)


def test_close_is_idempotent() -> None:
    lifeline = Lifeline()
    lifeline.close()
    lifeline.close()
    assert lifeline.pass_fds == (-1,)


_CHILD = """
import os, sys, trio
from nurseries import lifeline_from_env, open_supervisor

async def main():
    async with open_supervisor(grace=1.0, lifeline=lifeline_from_env(os.environ)) as sup:
        print("ready", flush=True)
        sup.nursery.start_soon(trio.sleep_forever)
    print(sup.shutdown_signal.name, flush=True)

trio.run(main)
"""


def _cut_under(program: str) -> tuple[int, str]:
    """Start ``python -c program`` holding a lifeline, wait for its ``ready`` line, cut the
    lifeline; the child's exit status and what it printed after ``ready``."""
    with open_lifeline() as lifeline:
        child = subprocess.Popen(
            [sys.executable, "-c", program],
            env={**os.environ, "PYTHONPATH": str(REPO), **lifeline.env},
            pass_fds=lifeline.pass_fds,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert child.stdout is not None
            assert readline_within(child.stdout, REAL_BOUND) == "ready\n"
            lifeline.close()
            out, _ = child.communicate(timeout=REAL_BOUND)
        finally:
            child.kill()
            child.wait()
    return child.returncode, out


def test_a_real_child_stops_when_its_parent_end_is_closed() -> None:
    """The kernel's part: inheritance through pass_fds, end-of-file on the last close."""
    assert _cut_under(_CHILD) == (0, "SIGHUP\n")


_SYNC_CHILD = """
import os, time
from nurseries import exit_when_lifeline_cut, lifeline_from_env

exit_when_lifeline_cut(lifeline_from_env(os.environ), 7)
print("ready", flush=True)
time.sleep(3600)  # a long computation: only the watching thread can end the process
"""


def test_a_synchronous_child_exits_when_its_parent_end_is_closed() -> None:
    assert _cut_under(_SYNC_CHILD) == (7, "")
