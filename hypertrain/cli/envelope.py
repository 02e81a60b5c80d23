"""``hypertrain envelope``: seal a message body into a signed ``ht/1`` envelope, or verify one."""

from __future__ import annotations

import argparse
from typing import Any

from hypertrain.cli.common import (
    EXIT_INVALID,
    EXIT_OK,
    CliError,
    Subparsers,
    hex64_arg,
    positive_int_arg,
    print_json,
    read_json,
)
from hypertrain.protocol.envelope import seal, verify
from hypertrain.protocol.errors import ProtocolError
from hypertrain.protocol.keys import load_keypair
from hypertrain.protocol.messages import MESSAGE_TYPES

__all__ = ["register"]


def _seal(args: argparse.Namespace) -> int:
    keypair = load_keypair(args.key)
    body = read_json(args.body)
    if not isinstance(body, dict):
        raise CliError("body: expected a JSON object", EXIT_INVALID)
    envelope = seal(keypair, args.type, args.run_id, body, args.exp)
    print_json(envelope.to_json())
    return EXIT_OK


def _verify(args: argparse.Namespace) -> int:
    raw = read_json(args.input)
    try:
        verified = verify(raw, expected_run_id=args.run_id, now_round=args.now)
    except ProtocolError as e:
        raise CliError(f"invalid envelope: {type(e).__name__}: {e.detail}", EXIT_INVALID) from e
    envelope = verified.envelope
    print_json(
        {
            "valid": True,
            "type": envelope.type,
            "run_id": envelope.run_id,
            "signer": envelope.signer,
            "exp_drand": envelope.exp_drand,
            "body_digest": verified.body_digest,
            "replay_key": list(verified.replay_key),
        }
    )
    return EXIT_OK


def register(subparsers: Subparsers[Any]) -> None:
    """Add ``envelope seal`` and ``envelope verify``."""
    group = subparsers.add_parser("envelope", help="seal and verify signed envelopes")
    commands = group.add_subparsers(title="envelope commands", metavar="COMMAND", required=True)

    sealer = commands.add_parser("seal", help="validate a body and print its signed envelope")
    sealer.add_argument("--key", required=True, metavar="PATH", help="signer's key file")
    sealer.add_argument("--type", required=True, choices=sorted(MESSAGE_TYPES), metavar="TYPE")
    sealer.add_argument("--run-id", required=True, type=hex64_arg, metavar="HEX")
    sealer.add_argument(
        "--exp",
        required=True,
        type=positive_int_arg,
        metavar="N",
        help="exp_drand: last drand round at which the envelope is valid",
    )
    sealer.add_argument("--body", required=True, metavar="FILE", help="JSON body, or - for stdin")
    sealer.set_defaults(handler=_seal)

    verifier = commands.add_parser("verify", help="verify an envelope (exit 0 valid, 1 invalid)")
    verifier.add_argument("input", metavar="FILE", help="envelope JSON file, or - for stdin")
    verifier.add_argument(
        "--now", type=positive_int_arg, metavar="N", help="current drand round, to check expiry"
    )
    verifier.add_argument(
        "--run-id", type=hex64_arg, metavar="HEX", help="refuse envelopes signed for another run"
    )
    verifier.set_defaults(handler=_verify)
