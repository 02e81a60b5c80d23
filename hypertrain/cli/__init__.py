"""The ``hypertrain`` umbrella command line (console script and ``python -m hypertrain``).

Each command group lives in its own module of this package exposing ``register(subparsers)``,
which adds its parsers and sets ``handler`` (``(argparse.Namespace) -> int``) on each leaf
command. To add a group, write the module and append it to :data:`GROUPS`.

Exit status: 0 success, 1 the input data is invalid (a refused envelope or body, bad JSON, a
damaged ledger journal, a checkpoint that fails verification), 2 usage, configuration or key
file errors; ``aggregate``, ``verify-checkpoint --api`` and ``checkpoint fetch`` add 3, the
daemon unreachable. Every error is one line on stderr, never a traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from hypertrain.cli import (
    aggregate,
    beacon,
    checkpoint,
    datasets,
    envelope,
    jcs,
    keys,
    ledger,
    manifest,
    model,
)
from hypertrain.cli.common import (
    EXIT_INVALID,
    EXIT_USAGE,
    CliError,
    CliGroup,
    OneLineParser,
    fail,
)
from hypertrain.protocol.errors import KeyfileError, ProtocolError

__all__ = ["GROUPS", "build_parser", "main"]

GROUPS: tuple[CliGroup, ...] = (
    keys,
    envelope,
    jcs,
    beacon,
    manifest,
    datasets,
    aggregate,
    ledger,
    checkpoint,
    model,
)
"""The command groups, in help order."""


def build_parser() -> OneLineParser:
    """The full argument parser with every group registered."""
    parser = OneLineParser(
        prog="hypertrain",
        description="hypertrain: verifiable decentralised training (umbrella command).",
        epilog="exit status: 0 ok, 1 invalid input data, 2 usage/config/key error,"
        " 3 daemon unreachable (aggregate, verify-checkpoint --api, checkpoint fetch)",
    )
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    for group in GROUPS:
        group.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status instead of exiting."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    try:
        code: int = args.handler(args)
    except CliError as e:
        return fail(str(e), e.code)
    except KeyfileError as e:
        return fail(e.detail, EXIT_USAGE)
    except ProtocolError as e:
        return fail(f"{type(e).__name__}: {e.detail}", EXIT_INVALID)
    except KeyboardInterrupt:
        return fail("interrupted", 130)
    sys.stdout.flush()
    return code
