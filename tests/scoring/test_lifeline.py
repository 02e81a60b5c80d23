"""A scorer worker does not outlive the program that started it, even one killed with SIGKILL.

A real parent (``python -c``, calling :func:`~hypertrain.scoring.sandbox.run_scorer` as the node
and the daemon's scorer pool do) starts a real worker on the test-only hostile challenge
``sleep``, which says ``sleeping <pid>`` on stderr and then blocks for an hour. The worker's
interpreter is a wrapper that execs Python with stderr sent to a FIFO the test reads (a line,
with a deadline), so the test knows, without polling, that the worker is alive and asleep (not
starting, not dead of its own accord) and that it is the scorer worker (its command line). The
parent is then SIGKILLed: it cannot kill the worker's group, so only the lifeline can end the
worker. Its exit is awaited on a pidfd, with a deadline.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

from hypertrain.scoring.hostile import HOSTILE_ENV
from hypertrain.scoring.sandbox import WORKER_MODULE
from tests.process_support import readline_within

REPO = Path(__file__).resolve().parents[2]
BOUND = 30.0
"""Real seconds for the parent to start its worker, and for the worker to notice the cut (both
take well under a second on an idle machine; the bound is for a busy shared one)."""
FIFO_ENV = "HYPERTRAIN_TEST_WORKER_STDERR_FIFO"

_WRAPPER = """#!/bin/sh
exec {python} "$@" 2>"${fifo_env}"
"""

_PARENT = """
import sys
from pathlib import Path

import attrs
import trio

from hypertrain.scoring.registry import DELTA_LOSS
from hypertrain.scoring.sandbox import run_scorer

python, model, fifo, hostile_env = sys.argv[1:]
sleeper = attrs.evolve(
    DELTA_LOSS, id="test-hostile-sleep", inputs=("model.json",),
    kill_after_ms=3_600_000, step_budget_ms=3_000_000,
)
extra = {hostile_env: "1", "FIFO_ENV": fifo}
trio.run(lambda: run_scorer(sleeper, {"model.json": Path(model)}, python=python, extra_env=extra))
""".replace("FIFO_ENV", FIFO_ENV)


def _exited_within(pidfd: int, seconds: float) -> bool:
    """Whether the process of ``pidfd`` ends within ``seconds`` (a pidfd becomes readable when
    its process exits, whoever its parent is)."""
    ready, _, _ = select.select([pidfd], [], [], seconds)
    return bool(ready)


def test_a_worker_stops_when_its_parent_is_killed(tmp_path: Path) -> None:
    model = tmp_path / "model.json"
    model.write_text("{}")
    fifo = tmp_path / "worker.stderr"
    os.mkfifo(fifo)
    wrapper = tmp_path / "python"
    wrapper.write_text(_WRAPPER.format(fifo_env=FIFO_ENV, python=sys.executable))
    wrapper.chmod(0o755)
    # Opened before the worker can open it for writing; a FIFO that no writer has opened yet
    # is not readable, so the wait below is for the worker's line.
    reader = os.fdopen(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK), "r")
    os.set_blocking(reader.fileno(), True)
    with (tmp_path / "parent.err").open("wb") as stderr:  # read when the test fails
        parent = subprocess.Popen(
            [sys.executable, "-c", _PARENT, str(wrapper), str(model), str(fifo), HOSTILE_ENV],
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    pidfd = -1
    try:
        with reader:
            line = readline_within(reader, BOUND)
        assert line.startswith("sleeping "), f"the worker did not get to sleep: {line!r}"
        pid = int(line.split()[1])
        pidfd = os.pidfd_open(pid)  # ProcessLookupError: it died on its own
        assert WORKER_MODULE in Path(f"/proc/{pid}/cmdline").read_text()
        parent.kill()
        parent.wait(timeout=BOUND)
        assert _exited_within(pidfd, BOUND), "the worker outlived its SIGKILLed parent"
    finally:
        parent.kill()
        parent.wait(timeout=BOUND)
        if pidfd >= 0:
            with contextlib.suppress(ProcessLookupError):  # a survivor: the test failed
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            os.close(pidfd)
