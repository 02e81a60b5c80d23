"""The ``hypertrain`` umbrella command line (console script and ``python -m hypertrain``).

Each command group lives in its own module of this package exposing ``register(subparsers)``,
which adds its parsers and sets ``handler`` (``(argparse.Namespace) -> int``) on each leaf
command. To add a group, write the module and add its top-level commands to :data:`COMMANDS`
(:data:`GROUPS` follows from it). The groups are imported lazily: a command imports its own.

Exit status: 0 success, 1 the input data is invalid (a refused envelope or body, bad JSON, a
damaged ledger journal, a checkpoint that fails verification), 2 usage, configuration or key
file errors; ``aggregate``, ``verify-checkpoint --api`` and ``checkpoint fetch`` add 3, the
daemon unreachable. Every error is one line on stderr, never a traceback.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Final, cast

from hypertrain.cli.common import (
    EXIT_INVALID,
    EXIT_USAGE,
    CliError,
    CliGroup,
    OneLineParser,
    fail,
)
from hypertrain.protocol.errors import KeyfileError, ProtocolError

__all__ = ["COMMANDS", "GROUPS", "build_parser", "group", "main"]


COMMANDS: Final[Mapping[str, str]] = {
    "keys": "keys",
    "envelope": "envelope",
    "jcs": "jcs",
    "beacon": "beacon",
    "manifest": "manifest",
    "datasets": "datasets",
    "aggregate": "aggregate",
    "ledger": "ledger",
    "verify-checkpoint": "checkpoint",
    "checkpoint": "checkpoint",
    "sample": "model",
    "export": "model",
}
"""Each top-level command and the group that registers it (a test holds this to the parser).

A command line naming one of them imports only that group: the groups import what they run
(httpx, trio, numpy, the aggregator, torch for ``model``), and ``hypertrain keys new`` has no
reason to pay for ``aggregate``'s imports (1.3 s of CPU at every start before this map)."""

GROUPS: Final[tuple[str, ...]] = tuple(dict.fromkeys(COMMANDS.values()))
"""The command groups (modules of this package), in help order: derived from :data:`COMMANDS`."""


def group(name: str) -> CliGroup:
    """The group module ``hypertrain.cli.<name>`` (imported on first use)."""
    if name not in GROUPS:
        raise ValueError(f"no command group {name!r}")
    return cast(CliGroup, importlib.import_module(f"{__name__}.{name}"))


def build_parser(groups: Iterable[str] = GROUPS) -> OneLineParser:
    """The argument parser with ``groups`` registered (by default every group)."""
    parser = OneLineParser(
        prog="hypertrain",
        description="hypertrain: verifiable decentralised training (umbrella command).",
        epilog="exit status: 0 ok, 1 invalid input data, 2 usage/config/key error,"
        " 3 daemon unreachable (aggregate, verify-checkpoint --api, checkpoint fetch)",
    )
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    for name in groups:
        group(name).register(subparsers)
    return parser


def _parser_for(argv: Sequence[str]) -> OneLineParser:
    """Only the named command's group when ``argv`` starts with a command; else every group
    (for ``--help``, a mistyped command and the list of choices in its error)."""
    name = COMMANDS.get(argv[0]) if argv else None
    return build_parser(GROUPS if name is None else (name,))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status instead of exiting."""
    args_in = sys.argv[1:] if argv is None else list(argv)
    parser = _parser_for(args_in)
    try:
        args = parser.parse_args(args_in)
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
