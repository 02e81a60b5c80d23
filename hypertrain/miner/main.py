"""``hypertrain-miner``: the miner client's command line.

::

    hypertrain-miner join --api URL --run-id ID --keyfile F [--hardware JSON]
    hypertrain-miner run --config miner.toml [--rounds N] [--start W] [--start-wait S]
                         [--honeypot honest|fabricate|last_step|noise]

``join`` prints ``{run_id, hotkey, hardware, sig}`` (sig: ed25519 over
:func:`~hypertrain.protocol.hashes.join_request_bytes`, hex) for the operator, who admits the
miner with ``PUT /v1/admin/runs/{id}/roster/{hotkey}`` (no public join route in contract v1).

``run`` prints one progress line per phase on stderr and a JSON summary on stdout. Exit status:
0 every asked round reached UPLOADED; 1 otherwise (skipped, aborted, excluded, failed, the
daemon unreachable or answering 5xx through ``--start-wait`` seconds at the start, or
interrupted by SIGINT/SIGTERM/SIGHUP); 2 a config, key, dataset, determinism or protocol error
(one line on stderr, no traceback). The error tree and the exit status of each error are
:mod:`hypertrain.miner.errors`'. Torch is imported only once the manifest's
``reference_spec.env`` is applied.

Test only: with ``HYPERTRAIN_TEST_MINER_PAUSE_AT=POINT`` in the environment, ``run`` writes
``hypertrain-miner: round W: test-pause at POINT`` on stderr when it reaches the hook point
``POINT`` (a journal phase such as ``accepted`` or ``committed``, ``commit_posted``,
``put_done``, ``serve_posted`` after a StateServe was stored, or ``step`` after an inner
step) and then blocks there for :data:`TEST_PAUSE_SECONDS`, so a test can ``kill -9`` it at
exactly that point (tests/e2e). With ``HYPERTRAIN_TEST_MINER_HOLD_DIR=DIR`` it holds at any
hook point ``POINT`` of round ``W`` for which the file ``DIR/W.POINT`` exists: it writes
``hypertrain-miner: round W: test-hold at POINT`` and blocks until the test deletes the file
(at most :data:`TEST_PAUSE_SECONDS`), so a test can act (stop the daemon) before the miner's
next step (the fault suite's outages in each phase; ``assigned`` is a point too). With
``HYPERTRAIN_TEST_MINER_FAULT=step=T;layer=L;op=NAME`` the miner trains that op wrong on
purpose and stands by it (:mod:`hypertrain.miner.faults`): the demo's dispute drill
(``--dispute``); a malformed value is a usage error.
(Not ``HYPERTRAIN_MINER_*``: that prefix is the miner.toml overrides'.)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import attrs
import httpx
import trio

from hypertrain.cli.common import (
    EXIT_INVALID,
    EXIT_OK,
    EXIT_USAGE,
    OneLineParser,
    exception_leaves,
    print_json,
)
from hypertrain.miner.config import MinerConfig, load_config
from hypertrain.miner.errors import ApiError, ConfigError, MinerFatal
from hypertrain.miner.faults import TEST_FAULT_ENV, faults_from_env
from hypertrain.miner.honeypot import HoneypotMode
from hypertrain.miner.round import DEFAULT_SETTINGS, Hook, RoundSettings
from hypertrain.miner.session import Summary, run_miner
from hypertrain.protocol.errors import HypertrainError, KeyfileError
from hypertrain.protocol.hashes import join_request_bytes
from hypertrain.protocol.keys import load_keypair
from hypertrain.protocol.validators import is_hex64
from nurseries import lifeline_from_env, open_supervisor

__all__ = [
    "SHUTDOWN_GRACE_SECONDS",
    "TEST_HOLD_ENV",
    "TEST_PAUSE_ENV",
    "TEST_PAUSE_SECONDS",
    "build_parser",
    "main",
    "pause_hook_from_env",
    "round_settings",
]

SHUTDOWN_GRACE_SECONDS: Final = 10.0
"""After SIGINT/SIGTERM/SIGHUP, how long the current HTTP call may finish before it is cancelled."""
MAX_START_WAIT: Final = 86400.0
"""The longest ``--start-wait`` (a day)."""
TEST_PAUSE_ENV: Final = "HYPERTRAIN_TEST_MINER_PAUSE_AT"
TEST_PAUSE_SECONDS: Final = 60.0
"""How long the test-only pause or hold (module docstring) blocks before the miner goes on."""
TEST_HOLD_ENV: Final = "HYPERTRAIN_TEST_MINER_HOLD_DIR"
_HOLD_POLL_SECONDS: Final = 0.01
_PROG: Final = "hypertrain-miner"


def _fail(message: str, code: int) -> int:
    sys.stderr.write(f"{_PROG}: {' '.join(str(message).split())}\n")
    return code


def build_parser() -> argparse.ArgumentParser:
    """The ``hypertrain-miner`` argument parser."""
    parser = OneLineParser(prog=_PROG, description="The hypertrain miner client (spec 5.6).")
    sub = parser.add_subparsers(dest="command", required=True)
    join = sub.add_parser("join", help="print a signed join request for the operator")
    join.add_argument("--api", required=True, help="the challenge API base URL")
    join.add_argument("--run-id", required=True, help="the run to join (64 hex chars)")
    join.add_argument("--keyfile", required=True, help="the miner's seed file")
    join.add_argument("--hardware", default="{}", help="a JSON object describing the hardware")
    run = sub.add_parser("run", help="mine rounds of a run")
    run.add_argument("--config", required=True, help="the miner.toml file")
    run.add_argument("--rounds", type=int, default=1, help="how many rounds to mine (default 1)")
    run.add_argument("--start", type=int, default=None, help="the first round (default: resume)")
    run.add_argument(
        "--honeypot",
        choices=[m.value for m in HoneypotMode],
        default=HoneypotMode.HONEST.value,
        help="operator honeypot mode (spec 6.5); miners leave it at honest",
    )
    run.add_argument(
        "--start-wait",
        type=float,
        default=DEFAULT_SETTINGS.start_wait_seconds,
        metavar="S",
        help="seconds to keep trying to reach the daemon at the start"
        f" (default {DEFAULT_SETTINGS.start_wait_seconds:g})",
    )
    return parser


def _join(args: argparse.Namespace) -> int:
    if not is_hex64(args.run_id):
        return _fail(f"--run-id {args.run_id!r} is not 64 lowercase hex chars", EXIT_USAGE)
    try:
        hardware = json.loads(args.hardware)
    except ValueError as e:
        return _fail(f"--hardware is not JSON: {e}", EXIT_USAGE)
    if not isinstance(hardware, dict):
        return _fail("--hardware must be a JSON object", EXIT_USAGE)
    try:
        keypair = load_keypair(args.keyfile)
        message = join_request_bytes(args.run_id, keypair.ss58, hardware)
    except HypertrainError as e:
        return _fail(getattr(e, "detail", str(e)), EXIT_USAGE)
    sig = keypair.sign(message).hex()
    print_json({"run_id": args.run_id, "hotkey": keypair.ss58, "hardware": hardware, "sig": sig})
    return EXIT_OK


def pause_hook_from_env(environ: Mapping[str, str]) -> Hook | None:
    """The test-only pause and hold hooks of ``HYPERTRAIN_TEST_MINER_PAUSE_AT`` and
    ``HYPERTRAIN_TEST_MINER_HOLD_DIR`` (module docstring)."""
    point = environ.get(TEST_PAUSE_ENV, "")
    holds = environ.get(TEST_HOLD_ENV, "")
    if not point and not holds:
        return None

    def hook(at: str, w: int) -> None:
        # Both block the loop on purpose: a frozen process, whatever it had in flight waits.
        if at == point:
            _say(f"round {w}: test-pause at {at}")
            time.sleep(TEST_PAUSE_SECONDS)
        elif holds and (hold := Path(holds) / f"{w}.{at}").exists():
            _say(f"round {w}: test-hold at {at}")
            deadline = time.monotonic() + TEST_PAUSE_SECONDS
            while hold.exists() and time.monotonic() < deadline:
                time.sleep(_HOLD_POLL_SECONDS)

    return hook


def _say(line: str) -> None:
    sys.stderr.write(f"{_PROG}: {line}\n")
    sys.stderr.flush()


async def _run_supervised(kwargs: dict[str, Any]) -> Summary | None:
    result: list[Summary] = []

    async def work() -> None:
        result.append(await run_miner(**kwargs))

    lifeline = lifeline_from_env(os.environ)
    async with open_supervisor(grace=SHUTDOWN_GRACE_SECONDS, lifeline=lifeline) as supervisor:
        supervisor.nursery.start_soon(work, name="miner")
    return result[0] if result else None


def _run(args: argparse.Namespace) -> int:
    if args.rounds < 1 or (args.start is not None and args.start < 0):
        return _fail("--rounds must be >= 1 and --start >= 0", EXIT_USAGE)
    if not 0 <= args.start_wait <= MAX_START_WAIT:
        return _fail(f"--start-wait must be in [0, {MAX_START_WAIT:g}] seconds", EXIT_USAGE)
    try:
        config = load_config(args.config)
        keypair = load_keypair(config.keyfile)
    except ConfigError as e:
        return _fail(str(e), EXIT_USAGE)
    except KeyfileError as e:
        return _fail(e.detail, EXIT_USAGE)
    try:
        faults = faults_from_env(os.environ)
    except ValueError as e:
        return _fail(f"{TEST_FAULT_ENV}: {e}", EXIT_USAGE)
    if faults.fault is not None:  # never silent: this miner will be caught, on purpose
        sys.stderr.write(
            f"{_PROG}: {TEST_FAULT_ENV} is set: this miner trains {os.environ[TEST_FAULT_ENV]}"
            " wrong on purpose and will lose its disputes\n"
        )
    kwargs = {
        "config": config,
        "keypair": keypair,
        "rounds": args.rounds,
        "start": args.start,
        "mode": HoneypotMode(args.honeypot),
        "hook": pause_hook_from_env(os.environ),
        "faults": faults,
        "settings": round_settings(config, start_wait=args.start_wait),
    }
    try:
        summary = trio.run(_run_supervised, kwargs)
    except BaseException as e:  # the process boundary: one line, classified
        return _classify(e)
    if summary is None:
        return _fail("interrupted before the rounds finished", EXIT_INVALID)
    print_json(summary.to_json())
    return summary.exit_code


def round_settings(config: MinerConfig, *, start_wait: float) -> RoundSettings:
    """The round loop's settings for ``run``: the defaults, ``--start-wait`` and miner.toml's
    ``retry_max_seconds`` as the backoff's longest wait."""
    backoff = attrs.evolve(DEFAULT_SETTINGS.backoff, maximum=config.retry_max_seconds)
    return attrs.evolve(DEFAULT_SETTINGS, start_wait_seconds=start_wait, backoff=backoff)


def _classify(exc: BaseException) -> int:
    leaves = exception_leaves(exc)
    for leaf in leaves:
        if isinstance(leaf, MinerFatal):
            return _fail(str(leaf), EXIT_USAGE)
    for leaf in leaves:
        if isinstance(leaf, ApiError | httpx.HTTPError):
            return _fail(f"{type(leaf).__name__}: {leaf}", EXIT_INVALID)
        if isinstance(leaf, KeyboardInterrupt):
            return _fail("interrupted", EXIT_INVALID)
    raise exc


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point: returns the exit status."""
    args = build_parser().parse_args(argv)
    if args.command == "join":
        return _join(args)
    return _run(args)


if __name__ == "__main__":
    sys.exit(main())
