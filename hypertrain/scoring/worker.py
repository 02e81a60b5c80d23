"""``python -m hypertrain.scoring.worker``: run one scoring job in a sandboxed process.

Protocol: stdin holds one JSON object (at most :data:`REQUEST_MAX` bytes)::

    {"challenge": "<id>", "version": <int>, "inputs": {"<name>": "<absolute path>", ...}}

and stdout gets exactly one JSON line, with the exit status:

- ``{"ok": true, "result": {...}}`` -> 0;
- ``{"ok": false, "class": "bad-input", "error": "..."}`` -> 3: a malformed request, an unknown
  challenge, a ``version`` other than this worker's registry entry, input names or files that
  break :func:`~hypertrain.scoring.jobs.check_job_inputs`, or a file its parser refuses;
- ``{"ok": false, "class": "oom", "error": "..."}`` -> 1: an allocation failed under the
  address-space limit (``MemoryError``, torch's "can't allocate memory"); the message is also
  written to stderr, where the parent's memory heuristic finds it;
- ``{"ok": false, "class": "crash", "error": "..."}`` -> 1: anything else, including every
  :class:`~hypertrain.scoring.audit.SandboxViolation` (the error names the refused event).

Order of work (a promise: it is what keeps the sandbox tight):

0. take the lifeline its parent passed (:func:`nurseries.lifeline_from_env`): once the parent
   is gone, however it ended, the worker exits at once with :data:`EXIT_CRASH`
   (:func:`nurseries.exit_when_lifeline_cut`), whatever it was doing;
1. apply :data:`~hypertrain.scoring.jobs.SCORING_ENV` and import torch
   (:func:`hypertrain.trainer.determinism.configure`), then import every scorer and generate
   the wire converter's ``ModelSpec`` hook, so that nothing is loaded from disk later;
2. read and check the request (no input file is opened yet);
3. :func:`~hypertrain.scoring.audit.arm` the audit hook, readable paths = the job's inputs;
4. read, parse and score the inputs (:func:`~hypertrain.scoring.scorers.run_challenge`);
5. print the line, flush, and leave with ``os._exit`` (no interpreter teardown or ``atexit``
   handler runs in the armed process), through :func:`nurseries.end_job`: in a child of the
   fork server it first closes stdout and stderr and tells the parent its status, so the
   parent need not wait for the process to be torn down.

Step 1 is :func:`prepare` and steps 2-5 are :func:`run_job`: the warm fork server
(:mod:`hypertrain.scoring.forkserver`) runs :func:`prepare` once and :func:`run_job` in each
child it forks, after the child's sandbox is applied (in place of step 0, the child watches the
server's lifeline; the request comes with the fork, not on stdin).

Errors never carry tracebacks (formatting one would read source files); the text is
``<ExceptionType>: <message>``, at most :data:`ERROR_MAX` characters.

TEST ONLY: with ``HYPERTRAIN_SCORING_TEST_HOSTILE=1`` in its environment the worker also
accepts the challenge ids ``test-hostile-<action>`` of :mod:`hypertrain.scoring.hostile`
(any version, the inputs it is given); the parent never passes that variable unless a test
asks for it.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, NoReturn

from hypertrain.protocol.errors import Malformed
from hypertrain.protocol.jcs import parse_json
from hypertrain.scoring.audit import arm
from hypertrain.scoring.hostile import ACTIONS, HOSTILE_ENV, HOSTILE_PREFIX, run_hostile
from hypertrain.scoring.inputs import BadInput
from hypertrain.scoring.jobs import SCORING_ENV, check_job_inputs
from hypertrain.scoring.outcome import ERROR_MAX
from hypertrain.scoring.registry import Challenge, UnknownChallenge, get_challenge
from hypertrain.trainer.determinism import configure
from nurseries import end_job, exit_when_lifeline_cut, lifeline_from_env

__all__ = [
    "ERROR_MAX",
    "EXIT_BAD_INPUT",
    "EXIT_CRASH",
    "EXIT_OK",
    "REQUEST_MAX",
    "main",
    "prepare",
    "run_job",
]

EXIT_OK: Final = 0
EXIT_CRASH: Final = 1
EXIT_BAD_INPUT: Final = 3
REQUEST_MAX: Final = 64 * 1024


def _emit(body: Mapping[str, Any], code: int) -> NoReturn:
    sys.stdout.write(json.dumps(body, separators=(",", ":"), allow_nan=False) + "\n")
    end_job(code)


def _fail(failure: str, error: str, code: int) -> NoReturn:
    _emit({"ok": False, "class": failure, "error": error[:ERROR_MAX]}, code)


def _describe(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def parse_request(data: bytes) -> tuple[str, int, dict[str, str]]:
    """``(challenge id, version, {name: path})`` of a request; :class:`BadInput` if malformed."""
    if len(data) > REQUEST_MAX:
        raise BadInput(f"request: more than {REQUEST_MAX} bytes")
    try:
        body = parse_json(data)
    except Malformed as e:
        raise BadInput(f"request: not JSON ({e.detail[:200]})") from None
    if not isinstance(body, dict) or set(body) != {"challenge", "version", "inputs"}:
        raise BadInput("request: must be an object with exactly challenge, version, inputs")
    challenge, version, inputs = body["challenge"], body["version"], body["inputs"]
    if not isinstance(challenge, str) or type(version) is not int:
        raise BadInput("request: challenge must be a string and version an int")
    if not isinstance(inputs, dict) or not all(isinstance(v, str) for v in inputs.values()):
        raise BadInput("request: inputs must map names to path strings")
    return challenge, version, inputs


def _hostile_action(challenge_id: str) -> str | None:
    """The test-only hostile action a request names, when this process allows them."""
    if not challenge_id.startswith(HOSTILE_PREFIX) or os.environ.get(HOSTILE_ENV) != "1":
        return None
    what = challenge_id.removeprefix(HOSTILE_PREFIX)
    if what not in ACTIONS:
        raise BadInput(f"request: unknown hostile action {what[:80]!r}")
    return what


def _resolve(
    challenge_id: str, version: int, inputs: dict[str, str]
) -> tuple[Challenge, dict[str, Path]]:
    """The challenge and the checked input paths, or :class:`BadInput`."""
    if _hostile_action(challenge_id) is not None:
        challenge = Challenge(
            id=challenge_id,
            kind="deterministic",
            objective="escaped",
            tools=(),
            kill_after_ms=1,
            memory_bytes=0,
            step_budget_ms=0,
            inputs=tuple(inputs),
            version=version,
        )
        return challenge, check_job_inputs(challenge, inputs)
    try:
        challenge = get_challenge(challenge_id)
    except UnknownChallenge:
        raise BadInput(f"request: unknown challenge {challenge_id[:80]!r}") from None
    if version != challenge.version:
        raise BadInput(
            f"request: {challenge.id} version {version}, this worker runs {challenge.version}"
        )
    return challenge, check_job_inputs(challenge, inputs)


def _is_oom(e: BaseException) -> bool:
    return isinstance(e, MemoryError) or (
        isinstance(e, RuntimeError) and "can't allocate memory" in str(e)
    )


def prepare() -> None:
    """Step 1 (module doc): everything a job needs loaded before the sandbox is armed.

    The fork server (:mod:`hypertrain.scoring.forkserver`) runs it once, before it forks.
    """
    configure(SCORING_ENV)
    from hypertrain.protocol.converter import converter
    from hypertrain.protocol.manifest import ModelSpec
    from hypertrain.scoring import scorers  # noqa: F401 - loaded now, used by run_job

    converter.get_structure_hook(ModelSpec)  # cattrs generates code on first use


def run_job(request: bytes) -> NoReturn:
    """Steps 2-5 (module doc) for one request, in a process where :func:`prepare` ran."""
    from hypertrain.scoring import scorers

    try:
        challenge_id, version, inputs = parse_request(request)
        hostile = _hostile_action(challenge_id)
        challenge, paths = _resolve(challenge_id, version, inputs)
    except BadInput as e:
        _fail("bad-input", str(e), EXIT_BAD_INPUT)
    except BaseException as e:
        _fail("crash", f"worker setup: {_describe(e)}", EXIT_CRASH)
    try:
        arm(str(p) for p in paths.values())
        if hostile is not None:
            result = run_hostile(hostile, paths)
        else:
            result = scorers.run_challenge(challenge, paths)
    except BadInput as e:
        _fail("bad-input", str(e), EXIT_BAD_INPUT)
    except BaseException as e:
        if _is_oom(e):
            sys.stderr.write(f"MemoryError: {_describe(e)[:ERROR_MAX]}\n")
            sys.stderr.flush()
            _fail("oom", _describe(e), EXIT_CRASH)
        _fail("crash", _describe(e), EXIT_CRASH)
    _emit({"ok": True, "result": result}, EXIT_OK)


def main() -> NoReturn:
    """Run one job (module doc): the cold worker, one process per job."""
    lifeline = lifeline_from_env(os.environ)
    if lifeline is not None:
        exit_when_lifeline_cut(lifeline, EXIT_CRASH)
    try:
        prepare()
        request = sys.stdin.buffer.read(REQUEST_MAX + 1)
    except BaseException as e:
        _fail("crash", f"worker setup: {_describe(e)}", EXIT_CRASH)
    run_job(request)


if __name__ == "__main__":
    main()
