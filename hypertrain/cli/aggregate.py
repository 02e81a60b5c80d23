"""``hypertrain aggregate``: merge a run's rounds on this machine (:mod:`hypertrain.aggregator.
remote`), for a daemon started with ``aggregator = "external"``.

``hypertrain aggregate --api URL --run-id ID --admin-token-file F --coord-key F [--once
[--once-wait S]] [--state-dir D] [--no-finalize]`` prints one JSON line per merged round
``{w, tape_key, theta_hash, update_norm, clipped, opened[, note]}`` and one per round it
finalises ``{w, state: "FINAL", included, counts, verdicts[, note]}`` (``included``: how many
miners are paid, ``counts``: how many got each verdict). Without ``--once`` it runs until the
run's last round is merged and every round is final (forever for a run without
``total_rounds``); with it, it merges the newest round once it is due, finalises what the
daemon accepts then, and exits; it waits at most ``--once-wait`` seconds (default
:data:`ONCE_WAIT`) for that round to become due (a paused run, D short of ``d_upload``), then
gives up with exit 3.
``--no-finalize`` merges only (someone else posts the Finalizes).

Exit status: 0 ok; 1 the daemon refused a request (its detail is printed) or the previous
OuterState is unknown; 2 usage, an unreadable key or token file, a key that is not the run's
K_coord, or a token the daemon refuses (401); 3 the daemon unreachable after the retries
(network errors and 502/503/504 are retried for a minute per call), or ``--once`` given up
after its wait.
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path
from typing import Any, Final

import httpx
import trio

from hypertrain.aggregator.remote import NotDue, RemoteAggregator, RemoteConfig, StateUnknown
from hypertrain.aggregator.remote_client import (
    DEFAULT_RETRY,
    AggregatorClient,
    DaemonUnreachable,
    Refused,
    Retry,
    TokenRefused,
)
from hypertrain.aggregator.remote_plan import KeyMismatch, Report
from hypertrain.cli.common import (
    EXIT_INVALID,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    OneLineParser,
    Subparsers,
    api_arg,
    fail,
    hex64_arg,
    print_json,
    read_token_file,
)
from hypertrain.protocol.converter import unstructure
from hypertrain.protocol.errors import KeyfileError, ProtocolError
from hypertrain.protocol.keys import load_keypair

__all__ = [
    "DEFAULT_STATE_DIR",
    "EXIT_UNREACHABLE",
    "ONCE_WAIT",
    "aggregate_main",
    "register",
]

EXIT_UNREACHABLE: Final = 3
ONCE_WAIT: Final = 600.0
"""Seconds ``--once`` waits for the newest round to become due, by default."""
DEFAULT_STATE_DIR: Final = "aggregator-state"


def _report(report: Report) -> None:
    print_json(unstructure(report))
    sys.stdout.flush()


async def _run(args: argparse.Namespace, client: AggregatorClient) -> int:
    config = RemoteConfig(
        run_id=args.run_id,
        coord=load_keypair(args.coord_key),
        state_dir=Path(args.state_dir),
        finalize=not args.no_finalize,
    )
    aggregator = RemoteAggregator(config, client, _report)
    if not args.once:
        await aggregator.run()
        return EXIT_OK
    give_up_at = trio.current_time() + args.once_wait
    if await aggregator.merge_next(give_up_at=give_up_at) is None:
        sys.stderr.write("hypertrain: nothing to merge: the run's last round is merged\n")
    await aggregator.finalize_due()
    return EXIT_OK


async def aggregate_main(
    args: argparse.Namespace,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    retry: Retry = DEFAULT_RETRY,
) -> int:
    """Run the command for parsed ``args``; every failure is one line on stderr and an exit
    status (module doc). Tests pass an in-process ``transport``."""
    try:
        token = read_token_file("--admin-token-file", args.admin_token_file)
        client = AggregatorClient(args.api, token, transport=transport, retry=retry)
        try:
            return await _run(args, client)
        finally:
            await client.aclose()
    except CliError as e:
        return fail(str(e), e.code)
    except KeyfileError as e:
        return fail(f"--coord-key {args.coord_key}: {e.detail}", EXIT_USAGE)
    except KeyMismatch as e:
        return fail(str(e), EXIT_USAGE)
    except TokenRefused as e:
        return fail(f"the daemon refused the admin token ({e})", EXIT_USAGE)
    except Refused as e:
        return fail(f"refused: {e}", EXIT_INVALID)
    except StateUnknown as e:
        return fail(str(e), EXIT_INVALID)
    except DaemonUnreachable as e:
        return fail(f"daemon unreachable: {e}", EXIT_UNREACHABLE)
    except NotDue as e:
        return fail(f"--once gave up after {args.once_wait:g} s: {e}", EXIT_UNREACHABLE)
    except ProtocolError as e:
        return fail(f"{type(e).__name__}: {e.detail}", EXIT_INVALID)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (0.0 <= value <= 1e6):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds in 0..1e6")
    return value


def _aggregate(args: argparse.Namespace) -> int:
    return trio.run(partial(aggregate_main, args))


def register(subparsers: Subparsers[Any]) -> None:
    """Add ``aggregate``."""
    parser: OneLineParser = subparsers.add_parser(
        "aggregate",
        help="merge a run's rounds on this machine (daemon with aggregator = external)",
        description="Merge each round of a run at d_upload and open the next, and finalise "
        "each round once the daemon accepts it, from outside the daemon. Exit status: 0 ok, "
        "1 refused by the daemon, 2 usage/key/token problem, 3 daemon unreachable (or --once "
        "not due within --once-wait).",
    )
    parser.add_argument("--api", required=True, type=api_arg, metavar="URL", help="daemon URL")
    parser.add_argument("--run-id", required=True, type=hex64_arg, metavar="ID", help="run id")
    parser.add_argument(
        "--admin-token-file", required=True, metavar="F", help="file holding the admin token"
    )
    parser.add_argument(
        "--coord-key", required=True, metavar="F", help="K_coord seed file (the run's)"
    )
    parser.add_argument(
        "--once",
        action="store_true",
        help="merge the newest round once it is due, finalise what is due, then exit",
    )
    parser.add_argument(
        "--once-wait",
        type=_seconds,
        default=ONCE_WAIT,
        metavar="S",
        help=f"with --once: give up (exit 3) when the newest round is not due within S seconds"
        f" (a paused run; default {ONCE_WAIT:g})",
    )
    parser.add_argument(
        "--no-finalize", action="store_true", help="merge only: never post a Finalize"
    )
    parser.add_argument(
        "--state-dir",
        default=DEFAULT_STATE_DIR,
        metavar="D",
        help=f"where merged states and tapes are kept (default ./{DEFAULT_STATE_DIR})",
    )
    parser.set_defaults(handler=_aggregate)
