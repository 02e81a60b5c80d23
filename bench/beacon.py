"""Beacon throughput: BLS round verifications/s (quicknet and local rounds), local signatures/s.

Verify = :func:`hypertrain.beacon.bls.check_round` (hex checks, sha256 randomness, subgroup-
checked parse, hash-to-G1, two pairings). The raw row is the two pairings alone, so the
difference is our overhead. Signing is the local chain's double-and-add over blspy point
addition (no scalar multiplication in blspy), with a fresh round each call, so no cache helps.
Each row runs for about ``--seconds`` seconds (default 2; the whole run stays well under 30 s).

    .venv/bin/python bench/beacon.py [--seconds 2]
"""

from __future__ import annotations

import argparse
import itertools
import time
from collections.abc import Callable

import blspy
from _timing import rate

from hypertrain.beacon.bls import LocalSigner, check_round, hash_to_g1, round_message
from hypertrain.beacon.chain import QUICKNET, ChainInfo
from hypertrain.beacon.check import QUICKNET_VECTORS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="time per row")
    args = parser.parse_args()

    signer = LocalSigner.from_seed(bytes([7]) * 32)
    local = ChainInfo(public_key=signer.public_key_hex, period_ms=250, genesis_ms=0, hash="0" * 64)
    local_rounds = [signer.sign_round(r) for r in range(1, 65)]
    quicknet = itertools.cycle(QUICKNET_VECTORS)
    local_cycle = itertools.cycle(local_rounds)
    next_round = itertools.count(1_000_000)
    pk = blspy.G2Element.from_bytes(bytes.fromhex(QUICKNET.public_key))
    g2 = blspy.G2Element.generator()
    sig = blspy.G1Element.from_bytes(QUICKNET_VECTORS[0].signature_bytes)
    h = hash_to_g1(round_message(QUICKNET_VECTORS[0].round))

    rows: list[tuple[str, Callable[[], object]]] = [
        ("verify quicknet round (check_round)", lambda: check_round(QUICKNET, next(quicknet))),
        ("verify local round (check_round)", lambda: check_round(local, next(local_cycle))),
        ("  raw: two pairings + compare", lambda: sig.pair(g2) == h.pair(pk)),
        ("  raw: hash_to_G1", lambda: hash_to_g1(round_message(1000000))),
        ("sign local round (double-and-add)", lambda: signer.sign_round(next(next_round))),
    ]
    results = {}
    started = time.perf_counter()
    for name, fn in rows:
        results[name] = rate(fn, args.seconds)
        print(f"{name:<40} {results[name]:>10,.0f} /s  {1e3 / results[name]:>8.3f} ms")
    print(f"total {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
