"""SS58 addresses, Substrate generic prefix 42, over 32-byte ed25519 public keys.

``address = base58(0x2a || pub32 || blake2b-512(b"SS58PRE" || 0x2a || pub32)[:2])``
(spec/protocol.md section 2.1). Decoding accepts 46..50 chars of the bitcoin alphabet whose
decoding is exactly 35 bytes with prefix 42 and a matching checksum.
"""

from __future__ import annotations

import hashlib
import re

import base58

from hypertrain.protocol.errors import Malformed

__all__ = ["SS58_PREFIX", "SS58_RE", "is_ss58", "ss58_decode", "ss58_encode"]

SS58_PREFIX = 42
SS58_RE = re.compile(r"[1-9A-HJ-NP-Za-km-z]{46,50}")
_CHECKSUM_SALT = b"SS58PRE"


def _checksum(payload: bytes) -> bytes:
    return hashlib.blake2b(_CHECKSUM_SALT + payload, digest_size=64).digest()[:2]


def ss58_encode(public_key: bytes) -> str:
    """The prefix-42 SS58 address of a 32-byte public key."""
    if len(public_key) != 32:
        raise Malformed(f"ss58: public key must be 32 bytes, got {len(public_key)}")
    payload = bytes([SS58_PREFIX]) + bytes(public_key)
    encoded: bytes = base58.b58encode(payload + _checksum(payload))
    return encoded.decode("ascii")


def ss58_decode(address: str) -> bytes:
    """The 32-byte public key of a prefix-42 SS58 address; Malformed names what is wrong."""
    if not isinstance(address, str) or SS58_RE.fullmatch(address) is None:
        raise Malformed(f"ss58: {address!r} is not 46-50 base58 characters")
    raw: bytes = base58.b58decode(address)
    if len(raw) != 35:
        raise Malformed(f"ss58: {address!r} decodes to {len(raw)} bytes, not 35")
    if raw[0] != SS58_PREFIX:
        raise Malformed(f"ss58: {address!r} has prefix {raw[0]}, not {SS58_PREFIX}")
    if _checksum(raw[:33]) != raw[33:]:
        raise Malformed(f"ss58: {address!r} has a bad checksum")
    return raw[1:33]


def is_ss58(address: object) -> bool:
    """True when ``address`` is a valid prefix-42 SS58 address."""
    if not isinstance(address, str):
        return False
    try:
        ss58_decode(address)
    except Malformed:
        return False
    return True
