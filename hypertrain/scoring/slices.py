"""Slices of a hidden trace and the exact combination of their per-sequence losses.

A hidden scoring step is split into ``S`` slices of its trace (issue 19 item 4) so that no
single node holds the whole hidden window. The rules, shared by the coordinator, the
``delta-loss`` scorer and the nodes, so that the combination of the slices is bit for bit the
unsliced computation:

- :func:`slice_bounds`: slice ``k`` of a trace of ``n`` rows is the contiguous rows
  ``[k * n // S, (k + 1) * n // S)``, in file order (``S`` is at most ``n``: a slice is never
  empty). Concatenating the slices in ``k`` order gives back the trace.
- :func:`summarise`: what the ``delta-loss`` scorer answers for per-sequence float32 losses
  ``per_seq`` (one per row, in row order): ``loss = f32(math.fsum(float64(per_seq)) / n)``,
  ``fingerprint = sha256(per_seq as little-endian float32)``, ``sequences = n`` and ``losses``,
  the same little-endian float32 bytes as lower-case hex (8 characters a row, NaNs written as
  the canonical quiet NaN). A row's loss depends only on that row (the scorer runs one row a
  forward pass), so the losses of a slice are exactly the unsliced losses of its rows.
- :func:`combine`: the slices' ``losses`` concatenated in slice order and summarised again.
  ``fsum`` is exact and correctly rounded whatever the order, and sha256 runs over the same
  bytes in the same order, so the combined loss and fingerprint equal the unsliced ones.
- :func:`check_losses`: a scorer result whose ``losses`` do not give back its own ``loss``,
  ``fingerprint`` and ``sequences`` is refused (``ValueError`` naming the field).

Pure: no clock, no I/O, no torch.
"""

from __future__ import annotations

import hashlib
import math
import re
import struct
from collections.abc import Mapping, Sequence
from typing import Any, Final

import numpy as np

__all__ = [
    "CANONICAL_NAN",
    "check_losses",
    "combine",
    "f32_bits_hex",
    "fingerprint",
    "losses_bytes",
    "slice_bounds",
    "summarise",
]

CANONICAL_NAN: Final = 0x7FC00000
"""The float32 bit pattern every NaN is written as."""
_LOSSES: Final = re.compile(r"(?:[0-9a-f]{8})+")


def slice_bounds(n_rows: int, slices: int) -> list[tuple[int, int]]:
    """``[start, end)`` of each slice of a trace of ``n_rows`` rows (module doc)."""
    if not 1 <= slices <= n_rows:
        raise ValueError(f"cannot cut {n_rows} rows into {slices} non-empty slices")
    return [(k * n_rows // slices, (k + 1) * n_rows // slices) for k in range(slices)]


def f32_bits_hex(x: float) -> str:
    """``x`` rounded to float32 as 8 hex chars of its little-endian bytes (NaN canonical)."""
    if math.isnan(x):
        return struct.pack("<I", CANONICAL_NAN).hex()
    return struct.pack("<f", x).hex()


def _canonical_bits(values: Any) -> bytes:
    floats = np.asarray(values, dtype=np.float32)
    bits = floats.astype("<f4").view("<u4").copy()
    bits[np.isnan(floats)] = CANONICAL_NAN
    return bits.tobytes()


def fingerprint(values: Any) -> str:
    """sha256 hex of float32 ``values`` as little-endian bytes, NaNs canonical."""
    return hashlib.sha256(_canonical_bits(values)).hexdigest()


def summarise(per_seq: Any) -> dict[str, Any]:
    """The ``delta-loss`` result of per-sequence float32 losses (module doc)."""
    floats = np.asarray(per_seq, dtype=np.float32)
    if floats.ndim != 1 or len(floats) == 0:
        raise ValueError("per-sequence losses: a non-empty vector")
    mean = math.fsum(float(x) for x in floats) / len(floats)
    raw = _canonical_bits(floats)
    return {
        "loss": f32_bits_hex(mean),
        "fingerprint": hashlib.sha256(raw).hexdigest(),
        "sequences": len(floats),
        "losses": raw.hex(),
    }


def losses_bytes(losses: str) -> bytes:
    """The float32 bytes of a ``losses`` hex string (``ValueError`` when malformed)."""
    if not isinstance(losses, str) or _LOSSES.fullmatch(losses) is None:
        raise ValueError("losses: 8 lower-case hex characters per sequence")
    return bytes.fromhex(losses)


def combine(parts: Sequence[str]) -> dict[str, Any]:
    """The unsliced result of the slices' ``losses`` hex strings, in slice order."""
    raw = b"".join(losses_bytes(p) for p in parts)
    return summarise(np.frombuffer(raw, dtype="<f4"))


def check_losses(result: Mapping[str, Any]) -> str:
    """``result["losses"]`` when it gives back the result's loss, fingerprint and sequences
    (module doc); ``ValueError`` naming the field otherwise."""
    raw = losses_bytes(result.get("losses"))  # type: ignore[arg-type]
    again = summarise(np.frombuffer(raw, dtype="<f4"))
    for name in ("loss", "fingerprint"):
        if result.get(name) != again[name]:
            raise ValueError(f"{name}: does not match the per-sequence losses")
    sequences = result.get("sequences", again["sequences"])
    if sequences != again["sequences"]:
        raise ValueError("sequences: does not match the per-sequence losses")
    return str(again["losses"])
