"""BLS verification of drand rounds (scheme ``bls-unchained-g1-rfc9380``) and chain hashes.

Byte layouts (BLS12-381, ZCash compressed point encoding):

* signature: 48 bytes, a compressed G1 point; ``randomness = sha256(signature)`` (32 bytes);
* public key: 96 bytes, a compressed G2 point;
* message of round ``r``: ``m = sha256(u64be(r))`` (32 bytes), hashed to G1 with RFC 9380
  ``hash_to_curve`` (SSWU, random oracle) under :data:`~hypertrain.beacon.chain.DST_G1`;
* a round is genuine iff ``e(signature, g2) == e(H(m), public_key)``.

Points are parsed with blspy's ``from_bytes``, which checks that the point is on the curve and
in the r-order subgroup and that its encoding is canonical (x < p, flag bits consistent).
Tested on crafted inputs (``tests/beacon/test_bls.py``): it rejects off-curve points, points
outside the subgroup and non-canonical x; it *accepts* the point at infinity (``c0 00..``),
which we refuse explicitly, and we additionally require the re-encoded point to equal the input
bytes. Every parse failure is an :class:`~hypertrain.beacon.chain.InvalidRound`; no blspy
exception escapes.

Chain hashes, as in drand's ``chain.Info.Hash()`` (sha256)::

    drand: sha256(u32be(period_s) || i64be(genesis_s) || public_key || group_hash
                  || beacon_id)          -- beacon_id omitted when "" or "default";
                                            the scheme is not hashed
    local: sha256(b"hypertrain-local-chain-v1" || u64be(period_ms) || u64be(genesis_ms)
                  || public_key || u16be(len(scheme)) || scheme || u16be(len(beacon_id))
                  || beacon_id)

drand's formula holds whole seconds only; local development chains have millisecond periods
(0.25 s in tests), so they are named by the domain-separated local formula instead, which can
never collide with a drand chain hash by accident of layout.
"""

from __future__ import annotations

import functools
import hashlib
import re
from typing import Any, Final

import blspy

from hypertrain.beacon.chain import (
    DST_G1,
    SCHEME_UNCHAINED_G1,
    BeaconRound,
    ChainInfo,
    InvalidRound,
)

__all__ = [
    "BLS12_381_R",
    "LOCAL_CHAIN_DOMAIN",
    "LocalSigner",
    "check_round",
    "drand_chain_hash",
    "hash_to_g1",
    "local_chain_hash",
    "parse_g1",
    "parse_g2",
    "round_message",
    "verify_round",
]

LOCAL_CHAIN_DOMAIN: Final = b"hypertrain-local-chain-v1"
"""Domain prefix of :func:`local_chain_hash`."""

BLS12_381_R: Final = 0x73EDA753299D7D483339D80809A1D80553BDA402FFFE5BFEFFFFFFFF00000001
"""The order r of the BLS12-381 subgroups G1 and G2 (secret scalars live in [1, r))."""
_SIGNER_DOMAIN: Final = b"hypertrain-local-beacon|"

_SIG_HEX = re.compile(r"[0-9a-f]{96}")
_RANDOMNESS_HEX = re.compile(r"[0-9a-f]{64}")
_PK_HEX = re.compile(r"[0-9a-f]{192}")
_INFINITY_FLAG: Final = 0x40
_MAX_U64: Final = 2**64 - 1
_DEFAULT_BEACON_IDS: Final = frozenset({"", "default"})


def round_message(round_: int) -> bytes:
    """The 32 bytes signed for ``round_`` in the unchained schemes: ``sha256(u64be(round))``."""
    if not 0 <= round_ <= _MAX_U64:
        raise ValueError(f"round {round_} is not a u64")
    return hashlib.sha256(round_.to_bytes(8, "big")).digest()


def hash_to_g1(message: bytes) -> Any:
    """``H(message)``: RFC 9380 hash-to-G1 under ``DST_G1`` (a ``blspy.G1Element``)."""
    return blspy.G1Element.from_message(message, DST_G1)


def _parse_point(element: Any, size: int, group: str, data: bytes, what: str) -> Any:
    if len(data) != size:
        raise InvalidRound(f"{what}: a {group} point is {size} bytes, got {len(data)}")
    if data[0] & _INFINITY_FLAG:
        raise InvalidRound(f"{what}: the point at infinity is not allowed")
    try:
        point = element.from_bytes(data)
    except (ValueError, RuntimeError) as e:
        raise InvalidRound(f"{what}: not a valid {group} point ({e})") from None
    if bytes(point) != data:
        raise InvalidRound(f"{what}: non-canonical {group} encoding")
    return point


def parse_g1(data: bytes, what: str) -> Any:
    """A canonical, non-infinity, subgroup-checked G1 point, or :class:`InvalidRound`."""
    return _parse_point(blspy.G1Element, 48, "G1", data, what)


def parse_g2(data: bytes, what: str) -> Any:
    """A canonical, non-infinity, subgroup-checked G2 point, or :class:`InvalidRound`."""
    return _parse_point(blspy.G2Element, 96, "G2", data, what)


@functools.lru_cache(maxsize=64)
def _public_key(public_key_hex: str) -> Any:
    """The chain's parsed public key; parsed once per chain (failures are not cached)."""
    if not _PK_HEX.fullmatch(public_key_hex):
        raise InvalidRound("chain public key: expected 192 lowercase hex chars (G2, 96 bytes)")
    return parse_g2(bytes.fromhex(public_key_hex), "chain public key")


@functools.cache
def _g2_generator() -> Any:
    return blspy.G2Element.generator()


def check_round(info: ChainInfo, rnd: BeaconRound) -> None:
    """Raise :class:`InvalidRound` (naming the reason) unless ``rnd`` is a round of ``info``."""
    if info.scheme_id != SCHEME_UNCHAINED_G1:
        raise InvalidRound(f"unsupported scheme {info.scheme_id!r} (want {SCHEME_UNCHAINED_G1})")
    if type(rnd.round) is not int or not 1 <= rnd.round <= _MAX_U64:
        raise InvalidRound(f"round must be an integer in [1, 2^64), got {rnd.round!r}")
    if not isinstance(rnd.signature, str) or not _SIG_HEX.fullmatch(rnd.signature):
        raise InvalidRound("signature: expected 96 lowercase hex chars (G1, 48 bytes)")
    if not isinstance(rnd.randomness, str) or not _RANDOMNESS_HEX.fullmatch(rnd.randomness):
        raise InvalidRound("randomness: expected 64 lowercase hex chars")
    signature = bytes.fromhex(rnd.signature)
    if hashlib.sha256(signature).hexdigest() != rnd.randomness:
        raise InvalidRound(f"round {rnd.round}: randomness is not sha256(signature)")
    public_key = _public_key(info.public_key)
    sig = parse_g1(signature, f"round {rnd.round} signature")
    h = hash_to_g1(round_message(rnd.round))
    if sig.pair(_g2_generator()) != h.pair(public_key):
        raise InvalidRound(
            f"round {rnd.round}: BLS signature does not verify for chain {info.hash}"
        )


def verify_round(info: ChainInfo, rnd: BeaconRound) -> bool:
    """True iff :func:`check_round` accepts ``rnd``."""
    try:
        check_round(info, rnd)
    except InvalidRound:
        return False
    return True


def drand_chain_hash(
    *, period_ms: int, genesis_ms: int, public_key: bytes, group_hash: bytes, beacon_id: str
) -> str:
    """drand's chain hash (hex) of a chain with whole-second period and genesis.

    ``sha256(u32be(period_s) || i64be(genesis_s) || public_key || group_hash || beacon_id)``,
    the beacon id omitted when it is drand's default (``""`` or ``"default"``).
    """
    if period_ms % 1000 or genesis_ms % 1000:
        raise ValueError("drand chain hashes need whole-second period and genesis")
    h = hashlib.sha256()
    h.update((period_ms // 1000).to_bytes(4, "big"))
    h.update((genesis_ms // 1000).to_bytes(8, "big", signed=True))
    h.update(public_key)
    h.update(group_hash)
    if beacon_id not in _DEFAULT_BEACON_IDS:
        h.update(beacon_id.encode("utf-8"))
    return h.hexdigest()


def local_chain_hash(
    *, period_ms: int, genesis_ms: int, public_key: bytes, scheme_id: str, beacon_id: str
) -> str:
    """The chain hash (hex) of a hypertrain local chain (layout in the module docstring)."""
    if not 0 < period_ms <= _MAX_U64 or not 0 <= genesis_ms <= _MAX_U64:
        raise ValueError("local chain period_ms must be positive and genesis_ms non-negative")
    scheme = scheme_id.encode("utf-8")
    beacon = beacon_id.encode("utf-8")
    h = hashlib.sha256(LOCAL_CHAIN_DOMAIN)
    h.update(period_ms.to_bytes(8, "big"))
    h.update(genesis_ms.to_bytes(8, "big"))
    h.update(public_key)
    h.update(len(scheme).to_bytes(2, "big") + scheme)
    h.update(len(beacon).to_bytes(2, "big") + beacon)
    return h.hexdigest()


def _scalar_mul(point: Any, scalar: int) -> Any:
    """``scalar · point`` (scalar >= 1) by left-to-right double-and-add over point addition.

    blspy has no scalar multiplication; doubling is ``p + p`` (blst adds-or-doubles). Not
    constant time: fine for a development beacon, not for a key that must stay secret against
    co-located attackers.
    """
    if scalar < 1:
        raise ValueError("scalar must be >= 1")
    acc = point
    for bit in bin(scalar)[3:]:
        acc = acc + acc
        if bit == "1":
            acc = acc + point
    return acc


class LocalSigner:
    """The BLS key of a local chain: signs rounds in the ``bls-unchained-g1-rfc9380`` scheme.

    The secret scalar comes from a 32-byte seed:
    ``sk = int.from_bytes(sha256(b"hypertrain-local-beacon|" || seed), "big") mod (r - 1) + 1``
    (so never 0). ``public_key = sk · g2`` (96 bytes compressed),
    ``sign(r) = sk · H(sha256(u64be(r)))`` (48 bytes compressed).
    """

    __slots__ = ("_sk", "public_key")

    def __init__(self, sk: int) -> None:
        if not 1 <= sk < BLS12_381_R:
            raise ValueError("a BLS secret scalar lies in [1, r)")
        self._sk = sk
        self.public_key: bytes = bytes(_scalar_mul(blspy.G2Element.generator(), sk))

    @classmethod
    def from_seed(cls, seed: bytes) -> LocalSigner:
        if len(seed) != 32:
            raise ValueError(f"a local beacon seed is 32 bytes, got {len(seed)}")
        digest = hashlib.sha256(_SIGNER_DOMAIN + seed).digest()
        return cls(int.from_bytes(digest, "big") % (BLS12_381_R - 1) + 1)

    @property
    def public_key_hex(self) -> str:
        return self.public_key.hex()

    def sign_message(self, message: bytes) -> bytes:
        """``sk · H(message)``: the 48-byte compressed G1 signature."""
        return bytes(_scalar_mul(hash_to_g1(message), self._sk))

    def sign_round(self, round_: int) -> BeaconRound:
        """Round ``round_`` (>= 1) of this key's chain, as relays serve it."""
        if round_ < 1:
            raise ValueError(f"rounds start at 1, got {round_}")
        signature = self.sign_message(round_message(round_))
        return BeaconRound(
            round=round_,
            signature=signature.hex(),
            randomness=hashlib.sha256(signature).hexdigest(),
        )

    def __repr__(self) -> str:
        return f"LocalSigner(public_key={self.public_key_hex[:16]}...)"
