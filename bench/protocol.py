"""Envelope throughput: seals/s and full verifies/s for a Commit body, next to raw pynacl.

Full verify = shape, run id, ed25519 signature, expiry, cattrs structuring with every
validator, canonical-form check and replay key (``hypertrain.protocol.envelope.verify``).
The raw rows sign/verify the same signed bytes with pynacl alone, so the difference is our
overhead (canonical JSON, digest, validation). Each row runs for about ``--seconds`` seconds.

    .venv/bin/python bench/protocol.py [--seconds 2]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

import nacl.signing
from _timing import rate

from hypertrain.protocol.converter import structure, unstructure
from hypertrain.protocol.envelope import seal, signed_bytes, verify
from hypertrain.protocol.example import example_bodies, example_manifest
from hypertrain.protocol.jcs import canonical_json, parse_json
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.messages import Commit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="time per row")
    args = parser.parse_args()

    miner = Keypair.from_seed(bytes([7]) * 32)
    run_id = example_manifest().run_id()
    body = dict(example_bodies(miner.ss58, miner.ss58)["Commit"])
    message = structure(Commit, body)
    envelope = seal(miner, "Commit", run_id, body, 2**40)
    wire = envelope.encode()
    raw = envelope.to_json()
    payload = signed_bytes("Commit", body, 2**40, run_id)
    nacl_key = nacl.signing.SigningKey(bytes([7]) * 32)
    nacl_sig = nacl_key.sign(payload).signature
    nacl_verify = nacl_key.verify_key

    rows: list[tuple[str, Callable[[], object]]] = [
        (
            "seal (dict body: validate + JCS + sign)",
            lambda: seal(miner, "Commit", run_id, body, 2**40),
        ),
        ("seal (Commit instance)", lambda: seal(miner, "Commit", run_id, message, 2**40)),
        (
            "verify (full path, parsed dict)",
            lambda: verify(raw, expected_run_id=run_id, now_round=1),
        ),
        ("parse_json + verify (from wire bytes)", lambda: verify(parse_json(wire), now_round=1)),
        ("  of which structure(Commit)", lambda: structure(Commit, body)),
        ("  of which unstructure + JCS", lambda: canonical_json(unstructure(message))),
        ("raw pynacl sign", lambda: nacl_key.sign(payload)),
        ("raw pynacl verify", lambda: nacl_verify.verify(payload, nacl_sig)),
    ]
    print(f"Commit envelope: {len(wire)} bytes on the wire, body {len(json.dumps(body))} bytes")
    results = {}
    for name, fn in rows:
        results[name] = rate(fn, args.seconds, batch=100)
        print(f"{name:<42} {results[name]:>10,.0f} /s  {1e6 / results[name]:>8.1f} us")
    overhead = results["verify (full path, parsed dict)"] / results["raw pynacl verify"]
    print(f"full verify runs at {overhead:.0%} of raw pynacl verify throughput")


if __name__ == "__main__":
    main()
