"""The ledger's canonical JSON (spec 8; **not** RFC 8785, trap 7 of spec 14)::

    json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)

The bytes are ASCII; floats are written the way Python writes them (``333333.0``), which is
why answers may hold floats while the rest of the protocol may not.
"""

from __future__ import annotations

import json

from hypertrain.protocol.hashes import sha256_hex

__all__ = ["canonical_bytes", "sha256_hex"]


def canonical_bytes(value: object) -> bytes:
    """The canonical bytes of a JSON value (ValueError for NaN or infinities)."""
    text = json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    )
    return text.encode("ascii")
