"""TEST ONLY: misbehaving "scorers" that prove the worker's sandbox holds (spec 6, scenario 38).

The worker runs these only when its challenge id is ``test-hostile-<what>`` **and** its
environment has ``HYPERTRAIN_SCORING_TEST_HOSTILE=1`` (:data:`HOSTILE_ENV`). The parent passes
its child a scrubbed environment, so only a test that asks for it with
``run_scorer(..., extra_env={HOSTILE_ENV: "1"})`` can enable them; production never sets it.
Each action runs after the sandbox is armed, exactly where a real scorer would run, and returns
``{"escaped": what}`` if it was *not* stopped (a test failure).

Actions (:data:`ACTIONS`): ``read`` (``/etc/passwd``), ``read-home`` (``~/.ssh`` and the node
key file), ``write`` (a new file in ``/tmp``), ``append-input`` (open an input file for
appending), ``remove-input``, ``spawn`` (``subprocess.Popen(["sh", ...])``), ``system``
(``os.system``), ``fork``, ``socket`` (a TCP socket to 127.0.0.1), ``ctypes`` (load libc),
``import`` (``__import__`` of a module not loaded before arming), ``import-lib`` (the same
through ``importlib``, which raises no ``import`` event: reading its file is refused),
``memory`` (allocate 8 GiB), ``loop`` (spin forever: the CPU limit or the kill ends it),
``sleep`` (say ``sleeping <pid>`` on stderr, then block forever: the kill ends it).
"""

from __future__ import annotations

import ctypes
import importlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

__all__ = ["ACTIONS", "HOSTILE_ENV", "HOSTILE_PREFIX", "run_hostile"]

HOSTILE_ENV: Final = "HYPERTRAIN_SCORING_TEST_HOSTILE"
HOSTILE_PREFIX: Final = "test-hostile-"


def _read(_: Mapping[str, Path]) -> None:
    with open("/etc/passwd", "rb") as f:
        f.read()


def _read_home(_: Mapping[str, Path]) -> None:
    home = os.environ.get("HOME", "/root")
    for path in (f"{home}/.ssh/id_ed25519", f"{home}/.hypertrain/node/node.json", home):
        with open(path, "rb") as f:
            f.read()


def _write(_: Mapping[str, Path]) -> None:
    with open(f"/tmp/hypertrain-hostile-{os.getpid()}", "w") as f:
        f.write("pwned")


def _append_input(inputs: Mapping[str, Path]) -> None:
    with open(next(iter(inputs.values())), "ab") as f:
        f.write(b"x")


def _remove_input(inputs: Mapping[str, Path]) -> None:
    os.remove(next(iter(inputs.values())))


def _spawn(_: Mapping[str, Path]) -> None:
    subprocess.Popen(["sh", "-c", "sleep 60"]).wait()


def _system(_: Mapping[str, Path]) -> None:
    os.system("sleep 60")


def _fork(_: Mapping[str, Path]) -> None:
    if os.fork() == 0:  # pragma: no cover - the sandbox refuses the fork
        time.sleep(60)
        os._exit(0)


def _socket(_: Mapping[str, Path]) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.connect(("127.0.0.1", 9))


def _ctypes(_: Mapping[str, Path]) -> None:
    ctypes.CDLL("libc.so.6").system(b"sleep 60")


def _import(_: Mapping[str, Path]) -> None:
    __import__("antigravity")


def _import_lib(_: Mapping[str, Path]) -> None:
    importlib.import_module("antigravity")  # raises no import event: the open rule stops it


def _memory(_: Mapping[str, Path]) -> None:
    block = bytearray(8 << 30)
    block[-1] = 1


def _loop(_: Mapping[str, Path]) -> None:
    n = 0
    while True:
        n += 1


def _sleep(_: Mapping[str, Path]) -> None:
    sys.stderr.write(f"sleeping {os.getpid()}\n")  # so a test knows the worker got this far
    sys.stderr.flush()
    time.sleep(3600)


ACTIONS: Final[Mapping[str, Callable[[Mapping[str, Path]], None]]] = {
    "read": _read,
    "read-home": _read_home,
    "write": _write,
    "append-input": _append_input,
    "remove-input": _remove_input,
    "spawn": _spawn,
    "system": _system,
    "fork": _fork,
    "socket": _socket,
    "ctypes": _ctypes,
    "import": _import,
    "import-lib": _import_lib,
    "memory": _memory,
    "loop": _loop,
    "sleep": _sleep,
}


def run_hostile(what: str, inputs: Mapping[str, Path]) -> dict[str, Any]:
    """Run action ``what``; ``{"escaped": what}`` when the sandbox did not stop it."""
    ACTIONS[what](inputs)
    return {"escaped": what}
