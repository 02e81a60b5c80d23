"""Philox4x32-10 (Salmon et al., SC'11; Random123) in vectorized numpy, and 24-bit uniforms.

One block maps a 128-bit counter ``(c0, c1, c2, c3)`` and a 64-bit key ``(k0, k1)`` (all u32
words) to four u32 words by ten rounds of::

    hi0, lo0 = mulhilo32(0xD2511F53, c0)        hi1, lo1 = mulhilo32(0xCD9E8D57, c2)
    (c0, c1, c2, c3) <- (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0)

with the key bumped by the Weyl constants ``k0 += 0x9E3779B9``, ``k1 += 0xBB67AE85`` (mod 2^32)
between rounds (nine bumps). ``mulhilo32(a, b)`` is the high and low u32 of the 64-bit product.
Pinned by the Random123 known-answer vectors in ``tests/trainer/test_init.py``.

Streams (our convention, spec 5.2 leaves it open): a stream is keyed by one integer
``key < 2^64`` split as ``k0 = key & 0xFFFFFFFF``, ``k1 = key >> 32``. Element ``i`` of the
stream is word ``i % 4`` of the block whose counter is ``(i // 4) & 0xFFFFFFFF,
(i // 4) >> 32, 0, 0``, i.e. blocks 0, 1, 2, ... in order with their four words in order.
:func:`uniform24` maps each u32 ``u`` to ``(u >> 8) * 2^-24`` in float64, an exact value in
``[0, 1)`` on a 2^-24 grid.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["M0", "M1", "W0", "W1", "philox4x32_10", "stream_u32", "uniform24"]

M0 = 0xD2511F53
M1 = 0xCD9E8D57
W0 = 0x9E3779B9
W1 = 0xBB67AE85
_ROUNDS = 10
_MASK32 = np.uint64(0xFFFFFFFF)
_SHIFT32 = np.uint64(32)

U32Array = np.ndarray[Any, np.dtype[np.uint32]]


def _u64(x: Any) -> np.ndarray[Any, np.dtype[np.uint64]]:
    return np.asarray(x, dtype=np.uint64)


def philox4x32_10(
    c0: Any, c1: Any, c2: Any, c3: Any, k0: int, k1: int
) -> tuple[U32Array, U32Array, U32Array, U32Array]:
    """Philox4x32-10 of counters ``(c0, c1, c2, c3)`` (u32 scalars or equal-shape arrays) under
    key ``(k0, k1)``; returns the four output words as uint32 arrays."""
    for k in (k0, k1):
        if not 0 <= k <= 0xFFFFFFFF:
            raise ValueError(f"philox: key word {k!r} is not a u32")
    x0, x1, x2, x3 = np.broadcast_arrays(_u64(c0), _u64(c1), _u64(c2), _u64(c3))
    if any(int(a.max(initial=0)) > 0xFFFFFFFF for a in (x0, x1, x2, x3)):
        raise ValueError("philox: counter words must be u32")
    m0, m1 = np.uint64(M0), np.uint64(M1)
    key0, key1 = k0, k1
    for r in range(_ROUNDS):
        if r:
            key0 = (key0 + W0) & 0xFFFFFFFF
            key1 = (key1 + W1) & 0xFFFFFFFF
        p0 = m0 * x0  # < 2^64: exact in uint64
        p1 = m1 * x2
        hi0, lo0 = p0 >> _SHIFT32, p0 & _MASK32
        hi1, lo1 = p1 >> _SHIFT32, p1 & _MASK32
        x0, x1, x2, x3 = (
            hi1 ^ x1 ^ np.uint64(key0),
            lo1,
            hi0 ^ x3 ^ np.uint64(key1),
            lo0,
        )
    return (
        x0.astype(np.uint32),
        x1.astype(np.uint32),
        x2.astype(np.uint32),
        x3.astype(np.uint32),
    )


def stream_u32(key: int, n: int) -> U32Array:
    """The first ``n`` u32 words of the stream keyed by ``key`` (module docstring)."""
    if not 0 <= key < 2**64:
        raise ValueError(f"philox: stream key {key!r} is not a u64")
    if n < 0:
        raise ValueError(f"philox: negative length {n}")
    n_blocks = (n + 3) // 4
    block = np.arange(n_blocks, dtype=np.uint64)
    words = philox4x32_10(block & _MASK32, block >> _SHIFT32, 0, 0, key & 0xFFFFFFFF, key >> 32)
    return np.stack(words, axis=1).reshape(-1)[:n]


def uniform24(key: int, n: int) -> np.ndarray[Any, np.dtype[np.float64]]:
    """``n`` uniforms ``(u32 >> 8) * 2^-24`` (float64, exact, in ``[0, 1)``) of stream ``key``."""
    u = stream_u32(key, n) >> np.uint32(8)
    return u.astype(np.float64) * 2.0**-24
