"""``hypertrain keys``: create and show ed25519 key files (mode 0600, 64 hex chars)."""

from __future__ import annotations

import argparse
from typing import Any

from hypertrain.cli.common import EXIT_OK, OneLineParser, Subparsers, print_json
from hypertrain.protocol.keys import Keypair, load_keypair, write_seed_file

__all__ = ["register"]


def _describe(keypair: Keypair) -> dict[str, str]:
    return {"ss58": keypair.ss58, "public_key": keypair.public_key.hex()}


def _new(args: argparse.Namespace) -> int:
    keypair = Keypair.generate()
    write_seed_file(args.out, keypair.seed)
    print_json(_describe(keypair))
    return EXIT_OK


def _show(args: argparse.Namespace) -> int:
    print_json(_describe(load_keypair(args.path)))
    return EXIT_OK


def register(subparsers: Subparsers[Any]) -> None:
    """Add ``keys new`` and ``keys show``."""
    group: OneLineParser = subparsers.add_parser("keys", help="create and show key files")
    commands = group.add_subparsers(title="keys commands", metavar="COMMAND", required=True)
    new = commands.add_parser("new", help="create a new key file (0600, never overwrites)")
    new.add_argument("--out", required=True, metavar="PATH", help="key file to create")
    new.set_defaults(handler=_new)
    show = commands.add_parser("show", help="print a key file's SS58 address and public key")
    show.add_argument("path", metavar="PATH", help="key file to read")
    show.set_defaults(handler=_show)
