"""A fork server for the tests (``python -m tests.nurseries.forkjob``): no torch, starts fast.

Each job's payload is one word of :data:`ACTIONS`; ``report`` prints what the child sees of its
sandbox as one JSON line and ends with `nurseries.end_job`, ``end-*`` use the end pipe in other
ways, ``sleep-said`` writes its pid to the FIFO its environment names (``PID_FIFO``) and then
sleeps, the others misbehave in one way each.

Each spare forked ahead runs :func:`_prepare` (``prepare_spare``): it notes its pid, which
``report`` then shows as ``prepared``, and leaves a descriptor open (the job must not see it);
with ``FORKJOB_PREPARE=raise`` in the server's environment it raises instead.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import time
from collections.abc import Callable
from typing import Final

import nurseries._forkserver
from nurseries import end_job, serve_forks

LIFELINE_EXIT: Final = 9
_LIMITS: Final = {
    "as": resource.RLIMIT_AS,
    "cpu": resource.RLIMIT_CPU,
    "nofile": resource.RLIMIT_NOFILE,
    "fsize": resource.RLIMIT_FSIZE,
}


_prepared_in: int | None = None
"""The pid of the spare that ran `_prepare` (a forked child inherits the server's None)."""


def _prepare() -> None:
    global _prepared_in
    if os.environ.get("FORKJOB_PREPARE") == "raise":
        raise ValueError("preparing failed on purpose")
    _prepared_in = os.getpid()
    os.open(os.devnull, os.O_WRONLY)  # left open on purpose: the job must not get it


def _report() -> None:
    seen = {
        "prepared": _prepared_in == os.getpid(),
        "env": dict(os.environ),
        "limits": {name: list(resource.getrlimit(r)) for name, r in _LIMITS.items()},
        "cwd": os.getcwd(),
        "pid": os.getpid(),
        "sid": os.getsid(0),
        "pgid": os.getpgid(0),
        "fds": {int(fd): _link(fd) for fd in os.listdir("/proc/self/fd")},
        "stdin": os.readlink("/proc/self/fd/0"),
    }
    print(json.dumps(seen))
    end_job(0)


def _link(fd: str) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:  # listdir's own descriptor, closed by now
        return ""


def _end_and_linger() -> None:
    """Say the job ended with status 5, and keep running: the client must not wait for it."""
    print(os.getpid(), flush=True)
    os.close(1)
    os.close(2)
    assert nurseries._forkserver._end_fd is not None
    os.write(nurseries._forkserver._end_fd, b"5\n")
    time.sleep(3600)


def _end_garbage() -> None:
    """Write something that is not a status on the end pipe: the kernel's status counts."""
    assert nurseries._forkserver._end_fd is not None
    os.write(nurseries._forkserver._end_fd, b"x0\n")
    os._exit(6)


def _sleep_said() -> None:
    with open(os.environ["PID_FIFO"], "w") as fifo:
        fifo.write(f"{os.getpid()}\n")
    time.sleep(3600)


def _fork() -> None:
    child = os.fork()
    if child == 0:
        time.sleep(3600)
        os._exit(0)
    print(child, flush=True)
    os._exit(0)


def _loop() -> None:
    while True:
        pass


ACTIONS: Final[dict[str, Callable[[], object]]] = {
    "report": _report,
    "exit": lambda: os._exit(7),
    "segv": lambda: signal.raise_signal(signal.SIGSEGV),
    "raise": lambda: 1 / 0,
    "return": lambda: None,
    "fork": _fork,
    "loop": _loop,
    "sleep": lambda: time.sleep(3600),
    "noise": lambda: (sys.stdout.write("x" * 100_000), sys.stdout.flush(), os._exit(0)),
    "end": lambda: (print("ended"), end_job(4)),
    "end-linger": _end_and_linger,
    "end-garbage": _end_garbage,
    "sleep-said": _sleep_said,
}


def _job(payload: bytes) -> None:
    ACTIONS[payload.decode()]()


if __name__ == "__main__":
    serve_forks(_job, lifeline_exit=LIFELINE_EXIT, prepare_spare=_prepare)
