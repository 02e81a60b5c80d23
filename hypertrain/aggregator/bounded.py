"""Norm decisions from a fast float64 sum with a proven error bound (spec/protocol.md section 7).

The merge uses a norm ``r = sqrt(S)`` (``S`` the exactly rounded sum of the float64 squares of
float32 elements, module :mod:`.exact`) only through :func:`scale_for`: the comparison
``r <= x`` and the float32 ``f32(x / r)``, for ``x`` = ``preclip_norm`` or ``tau``. This module
decides that pair without the exact sum whenever it can prove the answer.

**The bound.** The square of a float32 is exact in float64 (24-bit significands give 48-bit
products; exponents stay far inside float64's range, subnormals included), so
:class:`SquareSum` adds exact non-negative terms in float64: each piece of at most ``n`` =
:data:`PIECE` terms by one ``np.dot`` (BLAS ``ddot``), the piece sums by Python ``+=``. Whatever
order and grouping the BLAS uses (SIMD lanes, unrolling, fused multiply-adds: the products are
exact, so an FMA is one rounded addition), a piece's sum is a binary tree of float64 additions,
each rounded to nearest, in which a term meets at most ``n - 1`` roundings; the ``c`` piece sums
add at most ``c`` more. So with ``d = n + c`` (Higham, *Accuracy and Stability of Numerical
Algorithms*, section 4.2)

    ``|T - S| <= gamma(d) * sum|t_i| = gamma(d) * S``,  ``gamma(d) = d*u / (1 - d*u)``,

with ``u = 2**-53`` (all terms are non-negative, so ``sum|t_i| = S``). With ``e = d * 2**-52``
(at least ``gamma(d)`` while ``d * u <= 1/2``), ``S`` lies in ``[T * (1 - 4e), T * (1 + 4e)]``,
widened by one float each way for the roundings of those products: :meth:`SquareSum.bounds`.
The rounding of ``S`` to float64 and ``sqrt`` are monotone and fix floats, so ``r`` lies in
``[sqrt(lo), sqrt(hi)]``; ``r <= x`` and ``f32(x / r)`` (one float64 division, then float32
rounding: non-increasing in ``r``) are monotone in ``r``, so when both ends of the interval give
the same answer, every ``r`` in it does: :func:`decide`. Otherwise the caller computes the exact
sum. ``T == 0`` exactly when every term is zero (a positive term never rounds away), so zero norms
are decided exactly. Nothing here depends on the machine beyond IEEE-754 float64 arithmetic
rounded to nearest (an x87 double rounding stays well inside the factor 4 of slack).

The interval for ``r`` is ``~d * 2**-50`` wide (relative); an undecided answer needs ``f32(x / r)``
within that of a float32 rounding boundary (spacing ``2**-24`` relative): with pieces of
``2**13`` and a few hundred of them, fewer than one norm in a thousand.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping

import numpy as np
import numpy.typing as npt

__all__ = ["CHUNK", "SquareSum", "decide", "prescaled", "scale_for", "segments"]

CHUNK = 1 << 15
"""Elements per chunk of the merge's loops: float32 and float64 buffers stay in the CPU cache."""

PIECE = 1 << 13
"""Elements per ``np.dot`` call: OpenBLAS runs ``ddot`` on one thread up to 10,000 elements, and
its threads cost more than the sum on a busy machine."""

_F32 = np.float32
_ONE = _F32(1)
F32Array = npt.NDArray[np.float32]
F64Array = npt.NDArray[np.float64]


def scale_for(r: float, x: float) -> tuple[bool, np.float32]:
    """The protocol's ``(r <= x, f32(1) if r <= x else f32(x / r))`` (module doc of merge), in
    float64 whatever the type of ``x``: a numpy float32 ``x`` would make NumPy 2 round ``r`` to
    float32 and divide in float32 (NEP 50), which is not the protocol."""
    r64, x64 = float(r), float(x)
    if r64 <= x64:
        return True, _ONE
    return False, _F32(x64 / r64)


def decide(lo: float, hi: float, x: float) -> tuple[bool, np.float32] | None:
    """:func:`scale_for` of ``sqrt(S)`` for every float ``S`` in ``[lo, hi]``, or None when the
    interval holds two answers (module doc)."""
    low, high = scale_for(math.sqrt(lo), x), scale_for(math.sqrt(hi), x)
    if low[0] == high[0] and low[1] == high[1]:
        return low
    return None


class SquareSum:
    """A float64 sum of the squares of float32 chunks, with :meth:`bounds` on the exact sum."""

    def __init__(self) -> None:
        self.total = 0.0
        self.longest = 0
        self.chunks = 0

    def add(self, chunk: F32Array, buf: F64Array) -> None:
        """Add ``sum(float64(x)**2)`` over 1-d ``chunk``, using ``buf`` (float64, at least as
        long) for the conversion."""
        n = chunk.shape[0]
        wide = buf[:n]
        np.copyto(wide, chunk)  # exact widening
        for start in range(0, n, PIECE):
            piece = wide[start : start + PIECE]
            self.total += float(np.dot(piece, piece))
            self.chunks += 1
        self.longest = max(self.longest, min(n, PIECE))

    def bounds(self) -> tuple[float, float]:
        """Floats ``lo <= S <= hi`` around the exact sum ``S`` of the squares added."""
        t = self.total
        if t == 0.0:
            return 0.0, 0.0
        if not math.isfinite(t):  # float32 differences that overflowed: leave it to the exact path
            return 0.0, math.inf
        d = self.longest + self.chunks
        if d * 2.0**-53 > 0.25:  # pragma: no cover - needs 2**51 chunks
            return 0.0, math.inf
        e4 = d * 2.0**-50  # 4e, exact: an integer times a power of two
        lo = math.nextafter(t * (1.0 - e4), 0.0)
        hi = math.nextafter(t * (1.0 + e4), math.inf)
        return max(lo, 0.0), hi


def segments(
    arrays: Mapping[str, F32Array], names: list[str], size: int = CHUNK
) -> Iterator[tuple[str, slice]]:
    """``(name, slice)`` pieces of at most ``size`` elements covering each flattened tensor, in
    ``names`` order."""
    for name in names:
        n = int(arrays[name].size)
        for start in range(0, n, size):
            yield name, slice(start, min(start + size, n))


def prescaled(chunk: F32Array, scale: np.float32, out: F32Array) -> F32Array:
    """``chunk`` as the preclip leaves it: ``f32(x * scale)`` per element (one float32
    multiplication), written to ``out`` (``chunk``'s shape; it may be ``chunk`` itself), or
    ``chunk`` untouched when ``scale`` is 1 (``x * 1 == x`` bit for bit for every finite float32;
    the merge takes finite deltas only). Lets the merge apply the preclip where it reads a chunk
    instead of keeping a scaled copy of every clipped delta."""
    if scale == _ONE:
        return chunk
    np.multiply(chunk, scale, out=out)
    return out
