"""drand chains and rounds: what a chain is (its info) and what one round of it says.

Time is kept in integer milliseconds so that round arithmetic is exact for any period, the
sub-second periods of local development chains included::

    round_at(t)  = (floor(t * 1000) - genesis_ms) // period_ms + 1     (0 before genesis)
    time_of(r)   = (genesis_ms + (r - 1) * period_ms) / 1000            (when round r is due)

The JSON shapes are drand's HTTP API: ``/info`` gives
``{public_key, period, genesis_time, hash, groupHash, schemeID, metadata: {beaconID}}`` and
``/public/{round}`` gives ``{round, signature, randomness}`` (written with
``protocol.converter.unstructure``). Parsing is strict: a wrong type or a malformed hex string is
:class:`Malformed`, never an exception from deeper down; keys drand adds are ignored.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, Final

from attrs import frozen

from hypertrain.protocol.converter import unstructure
from hypertrain.protocol.errors import Malformed

__all__ = [
    "DST_G1",
    "QUICKNET",
    "SCHEME_UNCHAINED_G1",
    "BeaconRound",
    "ChainInfo",
    "DrandInfo",
    "DrandMetadata",
    "InvalidRound",
]

SCHEME_UNCHAINED_G1: Final = "bls-unchained-g1-rfc9380"
"""Signatures on G1 (48 bytes), public key on G2 (96 bytes), message sha256(u64be(round))."""
DST_G1: Final = b"BLS_SIG_BLS12381G1_XMD:SHA-256_SSWU_RO_NUL_"
"""The hash-to-G1 domain separation tag of the unchained G1 scheme (RFC 9380)."""


class InvalidRound(Malformed):
    """A beacon round that is not a genuine round of the chain (HTTP 400); names the reason."""


_HEX = re.compile(r"[0-9a-f]*")
_MAX_ROUND: Final = 2**53 - 1


def _hex(value: object, n_bytes: int, what: str) -> str:
    if not isinstance(value, str) or len(value) != 2 * n_bytes or not _HEX.fullmatch(value):
        raise Malformed(f"{what}: expected {2 * n_bytes} lowercase hex chars")
    return value


def _int(value: object, what: str, low: int) -> int:
    if type(value) is not int or not low <= value <= _MAX_ROUND:
        raise Malformed(f"{what}: expected an integer >= {low}")
    return value


def _millis(value: object, what: str) -> int:
    """Seconds (an int, or a float with at most millisecond precision) as integer ms."""
    if type(value) is int:
        return value * 1000
    if type(value) is float and math.isfinite(value):
        ms = round(value * 1000)
        if abs(ms - value * 1000) < 1e-6:
            return ms
    raise Malformed(f"{what}: expected seconds with at most millisecond precision")


def _seconds_json(ms: int) -> int | float:
    return ms // 1000 if ms % 1000 == 0 else ms / 1000


@frozen
class DrandMetadata:
    """The ``metadata`` of drand's ``/info``."""

    beaconID: str  # noqa: N815 (drand's name)


@frozen
class DrandInfo:
    """drand's ``/info`` JSON as :meth:`ChainInfo.to_json` writes it (``GET /v1/beacon/info``):
    ``period`` and ``genesis_time`` in seconds, an int when whole, drand's key names."""

    public_key: str
    period: float
    genesis_time: float
    hash: str
    groupHash: str  # noqa: N815 (drand's name)
    schemeID: str  # noqa: N815 (drand's name)
    metadata: DrandMetadata


@frozen
class ChainInfo:
    """A drand chain: its group public key, schedule, scheme and chain hash."""

    public_key: str
    """Hex of the compressed group public key (G2, 96 bytes, for the unchained G1 scheme)."""
    period_ms: int
    genesis_ms: int
    hash: str
    """The chain hash (64 hex), the chain's name in relay URLs."""
    scheme_id: str = SCHEME_UNCHAINED_G1
    beacon_id: str = ""
    group_hash: str = ""

    @property
    def period(self) -> float:
        """Seconds between rounds."""
        return self.period_ms / 1000

    @property
    def genesis_time(self) -> float:
        """Unix time of round 1."""
        return self.genesis_ms / 1000

    def round_at(self, t: float) -> int:
        """The latest round due at unix time ``t`` (0 before genesis)."""
        now_ms = math.floor(t * 1000)
        if now_ms < self.genesis_ms:
            return 0
        return (now_ms - self.genesis_ms) // self.period_ms + 1

    def time_of(self, round_: int) -> float:
        """Unix time at which ``round_`` (>= 1) is due."""
        if round_ < 1:
            raise ValueError(f"rounds start at 1, got {round_}")
        return (self.genesis_ms + (round_ - 1) * self.period_ms) / 1000

    def to_json(self) -> dict[str, Any]:
        """The drand ``/info`` JSON of this chain.

        Written through :class:`DrandInfo` and the converter, parsed here: the JSON gives
        ``period`` and ``genesis_time`` in seconds (an int, or a float with millisecond
        precision) where the class keeps integer milliseconds, uses drand's names
        (``groupHash``, ``schemeID``, ``metadata.beaconID``), and relays add keys of their own
        that parsing ignores.
        """
        info = DrandInfo(
            public_key=self.public_key,
            period=_seconds_json(self.period_ms),
            genesis_time=_seconds_json(self.genesis_ms),
            hash=self.hash,
            groupHash=self.group_hash,
            schemeID=self.scheme_id,
            metadata=DrandMetadata(self.beacon_id),
        )
        answer: dict[str, Any] = unstructure(info)
        return answer

    @classmethod
    def from_json(cls, data: object) -> ChainInfo:
        """Parse a relay's ``/info`` answer (unknown extra keys are ignored, as relays add some)."""
        if not isinstance(data, Mapping):
            raise Malformed("chain info: expected a JSON object")
        metadata = data.get("metadata", {})
        if not isinstance(metadata, Mapping):
            raise Malformed("chain info: metadata must be an object")
        beacon_id = metadata.get("beaconID", "")
        scheme_id = data.get("schemeID")
        group_hash = data.get("groupHash", "")
        if not isinstance(scheme_id, str) or not isinstance(beacon_id, str):
            raise Malformed("chain info: schemeID and metadata.beaconID must be strings")
        if group_hash != "":
            group_hash = _hex(group_hash, 32, "chain info groupHash")
        public_key = data.get("public_key")
        if not isinstance(public_key, str) or not _HEX.fullmatch(public_key) or not public_key:
            raise Malformed("chain info: public_key must be lowercase hex")
        period_ms = _millis(data.get("period"), "chain info period")
        if period_ms <= 0:
            raise Malformed("chain info: period must be positive")
        return cls(
            public_key=public_key,
            period_ms=period_ms,
            genesis_ms=_millis(data.get("genesis_time"), "chain info genesis_time"),
            hash=_hex(data.get("hash"), 32, "chain info hash"),
            scheme_id=scheme_id,
            beacon_id=beacon_id,
            group_hash=group_hash,
        )


QUICKNET: Final = ChainInfo(
    public_key=(
        "83cf0f2896adee7eb8b5f01fcad3912212c437e0073e911fb90022d3e760183c"
        "8c4b450b6a0a6c3ac6a5776a2d1064510d1fec758c921cc22b0e17e63aaf4bcb"
        "5ed66304de9cf809bd274ca73bab4af5a6e9c76a4bc09e76eae8991ef5ece45a"
    ),
    period_ms=3000,
    genesis_ms=1692803367 * 1000,
    hash="52db9ba70e0cc0f6eaf7803dd07447a1f5477735fd3f661792ba94600c84e971",
    scheme_id=SCHEME_UNCHAINED_G1,
    beacon_id="quicknet",
    group_hash="f477d5c89f21a17c863a7f937c6a6d15859414d2be09cd448d4279af331c5d3e",
)
"""drand quicknet, the public chain hypertrain runs on (spec/protocol.md section 4.2)."""


@frozen
class BeaconRound:
    """One round as relays serve it: ``{round, signature, randomness}`` (hex strings)."""

    round: int
    signature: str
    """Hex of the compressed G1 signature (48 bytes)."""
    randomness: str
    """Hex of sha256(signature) (32 bytes)."""

    @property
    def signature_bytes(self) -> bytes:
        return bytes.fromhex(self.signature)

    @classmethod
    def from_json(cls, data: object) -> BeaconRound:
        """Parse ``{round, signature, randomness}``; relays' extra keys are ignored.

        Only the shape is checked here; whether the round is genuine is the verifier's job. The
        strict converter does not parse this (drand's answers carry keys of their own, which it
        would refuse); it does write it: ``unstructure(rnd)`` is the same three keys.
        """
        if not isinstance(data, Mapping):
            raise Malformed("beacon round: expected a JSON object")
        return cls(
            round=_int(data.get("round"), "beacon round: round", 1),
            signature=_hex(data.get("signature"), 48, "beacon round: signature"),
            randomness=_hex(data.get("randomness"), 32, "beacon round: randomness"),
        )
