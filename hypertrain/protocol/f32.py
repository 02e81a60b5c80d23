"""Reals on the wire: 8 lowercase hex chars of the little-endian IEEE-754 float32.

Floats are forbidden in anything signed or hashed (spec/protocol.md section 2.2), so every real
number travels as ``struct.pack("<f", x).hex()``: ``0.1 -> "cdcccc3d"``, ``1.0 -> "0000803f"``.
Encoding rounds a Python float to the nearest float32 (ties to even), exactly as ``struct`` does.
"""

from __future__ import annotations

import math
import re
import struct

from hypertrain.protocol.errors import Malformed

__all__ = ["F32_HEX_RE", "f32_from_hex", "f32_hex", "f32_round", "is_f32_hex"]

F32_HEX_RE = re.compile(r"[0-9a-f]{8}")


def f32_hex(x: float) -> str:
    """Encode a finite real as f32 hex; refuses NaN, infinities and values beyond float32."""
    if isinstance(x, bool) or not isinstance(x, int | float):
        raise Malformed(f"f32: expected a real number, got {type(x).__name__}")
    try:
        finite = math.isfinite(x)
        packed = struct.pack("<f", x) if finite else b""
    except (OverflowError, struct.error):  # floats past FLT_MAX, ints beyond float or float32
        raise Malformed(f"f32: {repr(x)[:40]} is beyond the float32 range") from None
    if not finite:
        raise Malformed(f"f32: {x!r} is not finite")
    return packed.hex()


def is_f32_hex(s: object) -> bool:
    """True when ``s`` is exactly 8 lowercase hex chars."""
    return isinstance(s, str) and F32_HEX_RE.fullmatch(s) is not None


def f32_from_hex(h: str) -> float:
    """Decode f32 hex to the exact float32 value (as a Python float).

    Any bit pattern decodes, NaN and infinities included; callers that need a finite value
    check ``math.isfinite`` themselves.
    """
    if not is_f32_hex(h):
        raise Malformed(f"f32: {h!r} is not 8 lowercase hex chars")
    value: float = struct.unpack("<f", bytes.fromhex(h))[0]
    return value


def f32_round(x: float) -> float:
    """The float32 nearest to ``x``, as a Python float (what the wire will carry)."""
    return f32_from_hex(f32_hex(x))
