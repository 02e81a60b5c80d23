"""``beacon check``: is the pinned chain right, and do the relays serve it?

- :func:`offline_check`: the pinned quicknet constants hash to quicknet's chain hash, the
  built-in test vectors (:data:`QUICKNET_VECTORS`, real quicknet rounds) verify, and a tampered
  vector is refused; for another chain, that its hash matches its info (drand's or the local
  chain formula).
- :func:`live_check`: fetch ``/info`` (must equal the pinned chain) and ``latest`` (must verify)
  from the relays, all within ``timeout`` seconds. The result is :data:`PASS` (exit 0),
  :data:`FAIL` (exit 1: relays disagree, serve another chain or an invalid round) or
  :data:`CENSORED` (exit 3: too few relays reachable, or out of time).
"""

from __future__ import annotations

from typing import Any, Final

import trio

from hypertrain.beacon.bls import drand_chain_hash, local_chain_hash, verify_round
from hypertrain.beacon.chain import QUICKNET, BeaconRound, ChainInfo
from hypertrain.beacon.errors import BeaconDisagreement, BeaconUnavailable
from hypertrain.beacon.relays import RelayClient

__all__ = [
    "CENSORED",
    "DEFAULT_CHECK_TIMEOUT",
    "EXIT_CENSORED",
    "EXIT_FAIL",
    "EXIT_PASS",
    "FAIL",
    "PASS",
    "QUICKNET_VECTORS",
    "chain_hash_matches",
    "live_check",
    "offline_check",
]

PASS: Final = "PASS"
FAIL: Final = "FAIL"
CENSORED: Final = "CENSORED(network)"
EXIT_PASS: Final = 0
EXIT_FAIL: Final = 1
EXIT_CENSORED: Final = 3
DEFAULT_CHECK_TIMEOUT: Final = 10.0
"""Seconds ``beacon check --live`` may take in all."""

QUICKNET_VECTORS: Final = (
    BeaconRound(
        round=1000000,
        signature=(
            "83ad29e4c409f9470fc2ef02f90214df49e02b441a1a241a"
            "82d622d9f608ef98fd8b11a029f1bee9d9e83b45088abe72"
        ),
        randomness="b22aad4794f7451896f7a371aa46106fd84d919f3f569acd5b2fddf1d1440af3",
    ),
    BeaconRound(
        round=20000000,
        signature=(
            "96892582a33552a7b67ba44ef09c3ccd535bbebe760c93ec"
            "f45be8958d0c0f06390c6d19d7bf492eb806af7eef6b125c"
        ),
        randomness="f39c98df5525968e6622e0c63edb3d1f9c5607cf780db78abdded36e4b3dba95",
    ),
)
"""Genuine quicknet rounds (spec/protocol.md section 4.2)."""


def chain_hash_matches(info: ChainInfo) -> bool:
    """Whether ``info.hash`` is the hash of its own fields (drand's or the local formula)."""
    try:
        public_key = bytes.fromhex(info.public_key)
        candidates = [
            local_chain_hash(
                period_ms=info.period_ms,
                genesis_ms=info.genesis_ms,
                public_key=public_key,
                scheme_id=info.scheme_id,
                beacon_id=info.beacon_id,
            )
        ]
        if info.period_ms % 1000 == 0 and info.genesis_ms % 1000 == 0:
            candidates.append(
                drand_chain_hash(
                    period_ms=info.period_ms,
                    genesis_ms=info.genesis_ms,
                    public_key=public_key,
                    group_hash=bytes.fromhex(info.group_hash),
                    beacon_id=info.beacon_id,
                )
            )
    except (ValueError, OverflowError):  # odd hex, a negative genesis, ...: cannot be ours
        return False
    return info.hash in candidates


def _tampered(rnd: BeaconRound) -> BeaconRound:
    return BeaconRound(round=rnd.round + 1, signature=rnd.signature, randomness=rnd.randomness)


def offline_check(chain: ChainInfo) -> tuple[int, dict[str, Any]]:
    """``(exit status, JSON report)`` of the checks that need no network."""
    checks: dict[str, bool] = {"chain_hash": chain_hash_matches(chain)}
    if chain == QUICKNET:
        checks["pinned_quicknet"] = chain_hash_matches(QUICKNET)
        for rnd in QUICKNET_VECTORS:
            checks[f"vector_{rnd.round}"] = verify_round(QUICKNET, rnd)
        checks["tampered_refused"] = not verify_round(QUICKNET, _tampered(QUICKNET_VECTORS[0]))
    ok = all(checks.values())
    report = {"result": PASS if ok else FAIL, "chain": chain.hash, "checks": checks}
    return (EXIT_PASS if ok else EXIT_FAIL), report


async def live_check(relays: RelayClient, *, budget: float) -> tuple[int, dict[str, Any]]:
    """``(exit status, JSON report)`` of fetching info and latest through ``relays``.

    Returns within ``budget`` seconds (Trio clock) whatever the relays do.
    """
    report: dict[str, Any] = {"chain": relays.chain.hash, "relays": list(relays.relays)}
    with trio.move_on_after(budget):
        try:
            await relays.info()
            latest = await relays.latest()
        except BeaconDisagreement as e:
            return EXIT_FAIL, {"result": FAIL, **report, "reason": e.detail}
        except BeaconUnavailable as e:
            return EXIT_CENSORED, {"result": CENSORED, **report, "reason": e.detail}
        return EXIT_PASS, {"result": PASS, **report, "round": latest.round, "verified": True}
    reason = f"no verdict within {budget:g} s"
    return EXIT_CENSORED, {"result": CENSORED, **report, "reason": reason}
