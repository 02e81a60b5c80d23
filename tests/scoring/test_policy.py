"""The audit-hook policy and the classification of finished workers (pure, no processes)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from hypertrain.scoring.audit import refusal
from hypertrain.scoring.outcome import classify
from hypertrain.scoring.registry import DELTA_LOSS, STEP_THROUGHPUT
from nurseries import ProcessResult


def test_open_policy(tmp_path: Path) -> None:
    allowed = tmp_path / "trace.u16"
    allowed.write_bytes(b"")
    link = tmp_path / "link"
    link.symlink_to(allowed)
    readable = frozenset({str(allowed.resolve())})
    assert refusal("open", (str(allowed), "r", os.O_RDONLY), readable) is None
    assert refusal("open", (link, "r", os.O_RDONLY), readable) is None
    assert refusal("open", (str(allowed).encode(), None, os.O_RDONLY), readable) is None
    for args in [
        ("/etc/passwd", "r", os.O_RDONLY),
        (str(allowed), "w", os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
        (str(allowed), "r+", os.O_RDWR),
        (str(allowed), None, os.O_APPEND),
        (3, "r", os.O_RDONLY),
        (str(tmp_path / ".." / "trace.u16"), "r", os.O_RDONLY),
    ]:
        assert refusal("open", args, readable) is not None, args


@pytest.mark.parametrize(
    "event",
    [
        "import",
        "subprocess.Popen",
        "os.system",
        "os.fork",
        "os.posix_spawn",
        "socket.__new__",
        "socket.connect",
        "ctypes.dlopen",
        "os.remove",
        "shutil.rmtree",
        "os.kill",
        "os.listdir",
    ],
)
def test_refused_events(event: str) -> None:
    assert refusal(event, ("x",), frozenset()) is not None


@pytest.mark.parametrize("event", ["exec", "compile", "object.__getattr__", "sys._getframe"])
def test_allowed_events(event: str) -> None:
    assert refusal(event, ("x",), frozenset()) is None


def _proc(stdout: bytes = b"", returncode: int = 0, **flags: bool) -> ProcessResult:
    return ProcessResult(
        returncode=returncode,
        stdout=stdout,
        stderr=b"some diagnostics",
        stdout_truncated=flags.get("stdout_truncated", False),
        stderr_truncated=False,
        killed_for_time=flags.get("killed_for_time", False),
        killed_for_memory=flags.get("killed_for_memory", False),
        cpu_limit_hit=flags.get("cpu_limit_hit", False),
        wall_seconds=1.5,
    )


GOOD = {"loss": "0344b240", "fingerprint": "ab" * 32, "sequences": 3}


def _line(body: object) -> bytes:
    return json.dumps(body).encode() + b"\n"


def test_classify_success_and_worker_failures() -> None:
    ok = classify(DELTA_LOSS, _proc(_line({"ok": True, "result": GOOD})))
    assert (ok.ok, ok.result, ok.failure, ok.wall_ms) == (True, GOOD, None, 1500)
    bad = classify(
        DELTA_LOSS, _proc(_line({"ok": False, "class": "bad-input", "error": "x: y"}), 3)
    )
    assert (bad.ok, bad.failure, bad.error) == (False, "bad-input", "x: y")
    oom = classify(DELTA_LOSS, _proc(_line({"ok": False, "class": "oom", "error": "e"}), 1))
    assert oom.failure == "oom"


@pytest.mark.parametrize(
    ("proc", "failure"),
    [
        (_proc(killed_for_time=True, returncode=-9), "timeout"),
        (_proc(killed_for_time=True, cpu_limit_hit=True, returncode=-24), "timeout"),
        (_proc(_line({"ok": True, "result": GOOD}), killed_for_memory=True), "oom"),
        (_proc(b"", -signal.SIGSEGV), "crash"),
        (_proc(b"not json\n", 0), "crash"),
        (_proc(_line({"ok": True, "result": GOOD}) * 2, 0), "crash"),
        (_proc(_line({"ok": True, "result": GOOD}), 1), "crash"),
        (_proc(_line({"ok": True, "result": GOOD}), 0, stdout_truncated=True), "crash"),
        (_proc(_line({"ok": True, "result": GOOD | {"loss": 5.5}}), 0), "crash"),
        (_proc(_line({"ok": True, "result": {"escaped": "read"}}), 0), "crash"),
        (_proc(_line({"ok": False, "class": "bad-input", "error": "e"}), 1), "crash"),
        (_proc(_line({"ok": False, "class": "timeout", "error": "e"}), 1), "crash"),
    ],
)
def test_classify_failures(proc: ProcessResult, failure: str) -> None:
    outcome = classify(DELTA_LOSS, proc)
    assert (outcome.ok, outcome.failure) == (False, failure)


def test_timing_objective_must_be_a_finite_positive_number() -> None:
    good = {"tokens_per_s": 1234.5, "fingerprint": "cd" * 32}
    assert classify(STEP_THROUGHPUT, _proc(_line({"ok": True, "result": good}))).ok
    for value in (0, -1.0, "12", True, None):
        result = good | {"tokens_per_s": value}
        assert not classify(STEP_THROUGHPUT, _proc(_line({"ok": True, "result": result}))).ok
