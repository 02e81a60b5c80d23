"""``hypertrain-auditor``: the auditor's command line.

::

    hypertrain-auditor --api URL --run-id ID --token-file F --keyfile F
                       [--data-dir DIR] [--poll-seconds S] [--once] [--json]

Leases the audit jobs of run ``ID`` (``--token-file``: the worker bearer token; ``--keyfile``:
the seed of a key listed in the manifest's ``auditors``), replays them on CPU and posts signed
verdicts. ``--once`` audits one job, or exits when there is none; otherwise it runs until
SIGINT/SIGTERM/SIGHUP (a job in hand is then handed back). ``--data-dir`` holds the dataset cache
(default ``$XDG_STATE_HOME/hypertrain/auditor``, i.e. ``~/.local/state/hypertrain/auditor``).
``--poll-seconds`` (default 10) is the wait between asking for work, and between looks at the
disputes it is a party to or may referee (those loops run beside the audits, not with
``--once``).
Progress: one line per job on stderr; with ``--json`` one JSON object per job on stdout.

Exit status: 0 a normal end (a signal, or with ``--once`` a verdict posted or nothing to do);
1 with ``--once`` the job failed, or the coordinator unreachable; 2 a usage, key, token,
manifest or determinism-env error (one line on stderr, no traceback). Torch is imported only
once the manifest's ``reference_spec.env`` is applied.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

import attrs
import httpx
import trio

from hypertrain.auditor.errors import AuditorFatal, Unreachable
from hypertrain.auditor.session import Configure, Options, default_configure, run_auditor
from hypertrain.auditor.worker import DEFAULT_WORKER_SETTINGS, WorkerSettings
from hypertrain.cli.common import (
    EXIT_INVALID,
    EXIT_USAGE,
    CliError,
    OneLineParser,
    exception_leaves,
    hex64_arg,
    read_token_file,
)
from hypertrain.protocol.errors import KeyfileError
from hypertrain.protocol.keys import load_keypair
from nurseries import lifeline_from_env, open_supervisor

__all__ = ["SHUTDOWN_GRACE_SECONDS", "build_parser", "default_data_dir", "main"]

SHUTDOWN_GRACE_SECONDS: Final = 10.0
"""After SIGINT/SIGTERM/SIGHUP, how long the hand-back of a job in progress may take."""
_PROG: Final = "hypertrain-auditor"


def _fail(message: str, code: int) -> int:
    sys.stderr.write(f"{_PROG}: {' '.join(str(message).split())}\n")
    return code


def default_data_dir() -> Path:
    """``$XDG_STATE_HOME/hypertrain/auditor`` (``~/.local/state/...`` when unset)."""
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "hypertrain" / "auditor"


def _api_arg(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise argparse.ArgumentTypeError(f"{value!r} is not an http(s) URL")
    return value.rstrip("/")


def _seconds_arg(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = float("nan")
    if not 0.1 <= seconds <= 3600:  # nan fails too
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds in [0.1, 3600]")
    return seconds


def build_parser() -> argparse.ArgumentParser:
    """The ``hypertrain-auditor`` argument parser."""
    parser = OneLineParser(
        prog=_PROG, description="The hypertrain auditor: replay audit jobs, sign verdicts."
    )
    parser.add_argument("--api", required=True, type=_api_arg, help="the challenge API base URL")
    parser.add_argument("--run-id", required=True, type=hex64_arg, help="the run (64 hex chars)")
    parser.add_argument("--token-file", required=True, help="file holding the worker token")
    parser.add_argument("--keyfile", required=True, help="the auditor's seed file")
    parser.add_argument(
        "--data-dir", type=Path, default=None, help="dataset cache (default: user state dir)"
    )
    parser.add_argument(
        "--poll-seconds",
        type=_seconds_arg,
        default=DEFAULT_WORKER_SETTINGS.poll_interval,
        metavar="S",
        help="wait between asking for work and between dispute checks (default"
        f" {DEFAULT_WORKER_SETTINGS.poll_interval:g})",
    )
    parser.add_argument("--once", action="store_true", help="audit one job (or none) and exit")
    parser.add_argument("--json", action="store_true", help="one JSON line per job on stdout")
    return parser


async def _supervised(
    options: Options,
    transport: httpx.AsyncBaseTransport | None,
    configure: Configure,
    settings: WorkerSettings,
) -> int:
    status: list[int] = []

    async def work() -> None:
        status.append(
            await run_auditor(
                options,
                stop=supervisor.wait_shutdown_requested,
                transport=transport,
                configure=configure,
                settings=settings,
            )
        )

    lifeline = lifeline_from_env(os.environ)
    async with open_supervisor(grace=SHUTDOWN_GRACE_SECONDS, lifeline=lifeline) as supervisor:
        supervisor.nursery.start_soon(work, name="auditor")
    return status[0] if status else 0


def _classify(exc: BaseException) -> int:
    leaves = exception_leaves(exc)
    for leaf in leaves:
        if isinstance(leaf, AuditorFatal):
            return _fail(str(leaf), EXIT_USAGE)
    for leaf in leaves:
        if isinstance(leaf, Unreachable | httpx.HTTPError):
            return _fail(f"the coordinator is unreachable: {leaf}", EXIT_INVALID)
        if isinstance(leaf, KeyboardInterrupt):
            return _fail("interrupted", EXIT_INVALID)
    raise exc


def main(
    argv: Sequence[str] | None = None,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    configure: Configure = default_configure,
) -> int:
    """Console entry point: returns the exit status (tests pass ``transport``/``configure``)."""
    args = build_parser().parse_args(argv)
    try:
        token = read_token_file("--token-file", args.token_file)
        keypair = load_keypair(args.keyfile)
    except CliError as e:
        return _fail(str(e), e.code)
    except KeyfileError as e:
        return _fail(f"--keyfile {args.keyfile}: {e.detail}", EXIT_USAGE)
    options = Options(
        api=args.api,
        run_id=args.run_id,
        token=token,
        keypair=keypair,
        data_dir=args.data_dir or default_data_dir(),
        once=args.once,
        json_lines=args.json,
    )
    poll = args.poll_seconds
    settings = attrs.evolve(DEFAULT_WORKER_SETTINGS, poll_interval=poll, dispute_poll_interval=poll)
    try:
        return trio.run(_supervised, options, transport, configure, settings)
    except BaseException as e:  # the process boundary: one line, classified
        return _classify(e)


if __name__ == "__main__":
    sys.exit(main())
