"""``hypertrain jcs``: print the RFC 8785 canonical form of a JSON document."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from hypertrain.cli.common import EXIT_OK, Subparsers, read_json
from hypertrain.protocol.jcs import canonical_json

__all__ = ["register"]


def _jcs(args: argparse.Namespace) -> int:
    data = canonical_json(read_json(args.input))
    sys.stdout.flush()
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()
    return EXIT_OK


def register(subparsers: Subparsers[Any]) -> None:
    """Add ``jcs``."""
    parser = subparsers.add_parser(
        "jcs",
        help="canonical JSON (RFC 8785) of a file, exact bytes, no trailing newline",
    )
    parser.add_argument("input", metavar="FILE", help="JSON file, or - for stdin")
    parser.set_defaults(handler=_jcs)
