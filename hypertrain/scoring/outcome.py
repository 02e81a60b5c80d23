"""What became of one scoring job, and how a finished worker process is classified (pure).

:class:`ScoreOutcome` is the node's view of a job: a result dict, or a failure class of
:data:`~hypertrain.scoring.registry.FAILURE_CLASSES` plus a diagnostic text (compared by
class only, never by text). :func:`classify` turns the worker's
:class:`~nurseries.ProcessResult` into one, first match wins:

1. killed at the deadline or for its CPU limit (``killed_for_time``) -> ``timeout``;
2. the memory heuristic of :func:`~nurseries.run_process` (``killed_for_memory``) -> ``oom``;
3. exactly one JSON line on stdout (:mod:`hypertrain.scoring.worker`'s protocol) with the
   matching exit status: ``{"ok": true, "result": {...}}`` and status 0 -> a result, if
   :func:`check_result` accepts it; ``{"ok": false, "class": c, "error": e}`` -> class ``c``
   (``bad-input`` with status 3; ``oom`` or ``crash`` with status 1);
4. anything else (no line, two lines, not JSON, truncated output, another status, a result
   that fails :func:`check_result`) -> ``crash``, with the exit status and the first
   :data:`STDERR_SHOWN` characters of stderr as the error.
"""

from __future__ import annotations

import json
import math
from typing import Any, Final

import attrs

from hypertrain.protocol.f32 import is_f32_hex
from hypertrain.protocol.validators import is_hex64
from hypertrain.scoring.registry import Challenge, FailureClass
from nurseries import ProcessResult

__all__ = ["ERROR_MAX", "STDERR_SHOWN", "ScoreOutcome", "check_result", "classify"]

ERROR_MAX: Final = 1000
"""The longest error text a scorer reports (the worker cuts to it; so does the parent)."""

STDERR_SHOWN: Final = 300
_WORKER_CLASSES: Final[dict[str, tuple[FailureClass, int]]] = {
    "bad-input": ("bad-input", 3),
    "oom": ("oom", 1),
    "crash": ("crash", 1),
}


@attrs.frozen(kw_only=True)
class ScoreOutcome:
    """One job's outcome: ``ok`` with ``result``, or a ``failure`` class with ``error``."""

    ok: bool
    result: dict[str, Any] | None = None
    failure: FailureClass | None = None
    error: str = ""
    wall_ms: int = 0

    @classmethod
    def success(cls, result: dict[str, Any], wall_ms: int) -> ScoreOutcome:
        return cls(ok=True, result=result, wall_ms=wall_ms)

    @classmethod
    def failed(cls, failure: FailureClass, error: str, wall_ms: int = 0) -> ScoreOutcome:
        return cls(ok=False, failure=failure, error=error, wall_ms=wall_ms)


def check_result(challenge: Challenge, result: object) -> str | None:
    """Why ``result`` is not a well-formed answer to ``challenge`` (``None``: it is).

    Every result is a JSON object holding the challenge's objective and a 64-hex
    ``fingerprint``; a deterministic objective is 8 lowercase hex chars (f32), a timing one a
    finite number above zero.
    """
    if not isinstance(result, dict):
        return "the result is not an object"
    if not is_hex64(result.get("fingerprint")):
        return "the result has no 64-hex fingerprint"
    objective = result.get(challenge.objective)
    if challenge.kind == "deterministic":
        if not is_f32_hex(objective):
            return f"objective {challenge.objective!r} is not 8 hex chars"
    elif (
        isinstance(objective, bool)
        or not isinstance(objective, int | float)
        or not math.isfinite(objective)
        or objective <= 0
    ):
        return f"objective {challenge.objective!r} is not a finite positive number"
    return None


def _stderr(proc: ProcessResult) -> str:
    return proc.stderr.decode("utf-8", "replace")[:STDERR_SHOWN].strip()


def _line(proc: ProcessResult) -> dict[str, Any] | None:
    if proc.stdout_truncated:
        return None
    lines = proc.stdout.decode("utf-8", "replace").splitlines()
    if len(lines) != 1:
        return None
    try:
        body = json.loads(lines[0])
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def classify(challenge: Challenge, proc: ProcessResult) -> ScoreOutcome:
    """The outcome of a finished worker (module doc)."""
    wall_ms = round(proc.wall_seconds * 1000)
    if proc.killed_for_time:
        limit = "its CPU limit" if proc.cpu_limit_hit else f"{challenge.kill_after_ms} ms"
        return ScoreOutcome.failed("timeout", f"scorer killed after {limit}", wall_ms)
    if proc.killed_for_memory:
        return ScoreOutcome.failed(
            "oom", f"scorer ran out of memory (exit {proc.returncode}): {_stderr(proc)}", wall_ms
        )
    body = _line(proc)
    if body is not None and body.get("ok") is True and proc.returncode == 0:
        result = body.get("result")
        why = check_result(challenge, result)
        if why is None and isinstance(result, dict):
            return ScoreOutcome.success(result, wall_ms)
        return ScoreOutcome.failed("crash", f"scorer gave a malformed result: {why}", wall_ms)
    if body is not None and body.get("ok") is False:
        failure = _WORKER_CLASSES.get(str(body.get("class")))
        error = body.get("error")
        if failure is not None and failure[1] == proc.returncode and isinstance(error, str):
            return ScoreOutcome.failed(failure[0], error[:ERROR_MAX], wall_ms)
    return ScoreOutcome.failed(
        "crash",
        f"scorer produced no result (exit {proc.returncode}): {_stderr(proc)}",
        wall_ms,
    )
