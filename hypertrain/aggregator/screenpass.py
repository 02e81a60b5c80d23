"""The copy screen's fast pass: exact top-k overlap counts and cosine estimates with a proven error.

:mod:`.copyscreen` computes exact recorded values only for the pairs this pass cannot rule out;
everything here is exact or carries a bound, so the screen's result is the definition's, bit for
bit, on any machine. ``m`` rows (one per contribution), ``size`` columns.

**Overlap counts** (:func:`overlap_counts`, exact integers). The ``m`` top-k sets go into one
array of keys ``index * m + row``, sorted once; equal indices then sit together in runs, in row
order. A run of ``r`` rows adds one to each of its ``r (r - 1) / 2`` pairs. Short runs are
counted pair by pair (``np.bincount`` over rows ``j`` and ``j + gap`` of the same run, one gap at
a time); a long run costs less as a column of a 0/1 matrix ``T`` whose product ``T T^T`` (float32,
:data:`BLOCK` columns per call, so every entry is an integer below ``2**24``: exact) counts all
its pairs at once. A run is long when ``r (r - 1) > m**2 / DENSE``: there a pair costs about as
much as ``m**2 / DENSE`` multiply-adds of the product. Independent deltas share few indices (runs
of 2 or 3), similar ones (honest miners on one data set) share many: counted pair by pair, 256
correlated miners cost 0.9 s, as columns 0.2 s; the counts are the same integers either way.

**Cosine estimates** (:func:`cosine_estimates`). Each row is scaled by a power of two that takes
its largest ``|x|`` into ``[1, 2)`` (exact, except that an element landing below float32's normal
range rounds, by at most ``2**-150``, against a row norm of at least 1; IEEE-754 gradual
underflow, which the merge's own arithmetic assumes), then one Gram product ``G = X X^T`` of the
scaled rows in float32, in column blocks of ``B`` = :data:`BLOCK`, the blocks' float32 results
added in float64 (``c`` blocks). Scaled entries are below 2, so nothing overflows. Each block
entry is a tree of rounded float32 operations over the products of its columns, a product
meeting at most ``B`` roundings (its multiplication, at most ``B - 1`` additions; a fused
multiply-add only removes one), whatever order the BLAS uses (no Strassen-like product:
OpenBLAS, MKL and Accelerate all sum the products), plus at most ``2**-150`` per operation from
underflow; each sum of blocks meets at most ``c`` float64 roundings. So with
``e = 2B * 2**-24 + (c + 1) * 2**-52`` (``gamma(B) <= 2B * 2**-24``, Higham 3.1),
``|G_ab - dot(a', b')| <= e * sum|a'_i b'_i| + t <= e |a'| |b'| + t`` for the scaled rows ``a'``,
``b'``, and ``|G_aa - |a'|**2| <= e |a'|**2 + t``, with ``t < 2**-100 |a'| |b'|``. A cosine does
not change with the scale, so ``q = G_ab / sqrt(G_aa G_bb)`` (``0`` for a zero row) is within
``3e`` of the real cosine (for ``e < 2**-10``), and the recorded cosine (a few roundings of exact
values) within ``10 * 2**-53`` of it: a pair whose ``q`` is at most ``0.95 - margin``, with
``margin = 4e + 2**-40``, cannot be flagged by its cosine. With ``B = 2**12``, ``margin`` is
about ``0.002``: a float32 product at twice the float64 speed, and a margin far below the
distance of independent deltas from 0.95.

Both products run on one BLAS thread: they are small and many, and a threaded BLAS on a busy
machine (the daemon's other work, its neighbours) spins: 64 x 1M took 93 s instead of 14.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator, Sequence

import numpy as np
import numpy.typing as npt
from threadpoolctl import ThreadpoolController

from hypertrain.trainer.codec import F32Array

__all__ = ["BLOCK", "DENSE", "GATHER", "cosine_estimates", "overlap_counts"]

BLOCK = 1 << 12
"""Columns per product call: the float32 buffers stay small, and ``e`` stays near ``2**-11``."""

GATHER = 4 * BLOCK
"""Columns of all rows copied (and scaled) at a time, one copy per row and tensor piece."""

DENSE = 1 << 10
"""A run of ``r`` rows sharing an index is counted as a product column when
``r (r - 1) > m**2 / DENSE`` (module doc)."""

I64Array = npt.NDArray[np.int64]
F64Array = npt.NDArray[np.float64]


@functools.cache
def _blas() -> ThreadpoolController:
    """The loaded BLAS, inspected once (``threadpool_limits`` walks the loaded libraries on each
    call: about 1 ms)."""
    return ThreadpoolController()


def overlap_counts(tops: list[I64Array], m: int) -> I64Array:
    """``(m, m)`` counts of the top-k indices rows ``a < b`` share (upper triangle; the rest 0)."""
    rows = np.repeat(np.arange(m, dtype=np.int64), [t.size for t in tops])
    if not rows.size:
        return np.zeros((m, m), dtype=np.int64)
    keys = np.concatenate(tops) * m + rows
    keys.sort()
    index, row = keys // m, keys % m
    starts = np.flatnonzero(np.concatenate([[True], index[1:] != index[:-1]]))
    runs = np.diff(np.append(starts, keys.size))
    long_run = runs * (runs - 1) > (m * m) // DENSE
    long_key = np.repeat(long_run, runs)
    counts = _pairwise(index[~long_key], row[~long_key], m)
    counts += _columns(row[long_key], runs[long_run], m)
    return np.triu(counts, 1)


def _pairwise(index: I64Array, row: I64Array, m: int) -> I64Array:
    """Counts of rows sharing an index, pair by pair (``index`` sorted, rows increasing within)."""
    counts = np.zeros(m * m, dtype=np.int64)
    n = index.size
    at = np.flatnonzero(index[1:] == index[:-1])  # positions j sharing with j + 1
    gap = 1
    while at.size:
        counts += np.bincount(row[at] * m + row[at + gap], minlength=m * m)
        at = at[at + gap + 1 < n]
        at = at[index[at] == index[at + gap + 1]]
        gap += 1
    return counts.reshape(m, m)


def _columns(row: I64Array, runs: I64Array, m: int) -> I64Array:
    """Counts of rows sharing an index over whole runs (``row`` run after run): ``T T^T``."""
    counts = np.zeros((m, m), dtype=np.int64)
    column = np.repeat(np.arange(runs.size, dtype=np.int64), runs)
    edges = np.searchsorted(column, np.arange(0, runs.size + BLOCK, BLOCK))
    ones = np.empty((m, BLOCK), dtype=np.float32)
    with _blas().limit(limits=1, user_api="blas"):
        for i, first in enumerate(range(0, runs.size, BLOCK)):
            lo, hi = edges[i], edges[i + 1]
            ones.fill(0)
            ones[row[lo:hi], column[lo:hi] - first] = 1
            counts += (ones @ ones.T).astype(np.int64)  # integers below 2**24: exact
    return counts


def _row_scales(peaks: Sequence[float]) -> F32Array:
    """``(2, m)`` float32 powers of two whose product takes each row's largest ``|x|`` (``peaks``)
    into ``[1, 2)`` (ones for a zero row); two factors, because ``2**149`` is not a float32 while
    the first factor alone scales a subnormal row up exactly."""
    shift = 1 - np.frexp(np.array(peaks, dtype=np.float64))[1].astype(np.int64)  # frexp(0): 0
    first = np.minimum(shift, 127)
    scales: F32Array = np.ldexp(1.0, np.stack([first, shift - first])).astype(np.float32)
    return scales


Piece = tuple[int, int, int, int]
"""``(part, start, stop, column)``: ``part[start:stop]`` of every row goes to ``column`` on."""


def _spans(sizes: Sequence[int], width: int) -> Iterator[tuple[list[Piece], int]]:
    """``(pieces, columns)`` for each block of at most ``width`` columns over the parts laid end to
    end (the flattened row)."""
    pieces: list[Piece] = []
    at = 0
    for part, n in enumerate(sizes):
        start = 0
        while start < n:
            take = min(n - start, width - at)
            pieces.append((part, start, start + take, at))
            start += take
            at += take
            if at == width:
                yield pieces, at
                pieces, at = [], 0
    if at:
        yield pieces, at


def cosine_estimates(
    rows: Sequence[Sequence[F32Array]], peaks: Sequence[float]
) -> tuple[F64Array, float]:
    """``(q, margin)``: the ``(m, m)`` cosine estimates of ``rows`` (each the 1-d parts of a
    flattened row, equal sizes across rows; ``peaks`` their largest ``|x|``) and the bound on
    their distance from the recorded cosines (module doc). The rows are never laid out whole:
    :data:`GATHER` columns of all of them at a time."""
    m = len(rows)
    sizes = [int(part.size) for part in rows[0]]
    gram = np.zeros((m, m), dtype=np.float64)
    width = min(BLOCK, max(sum(sizes), 1))
    buf = np.empty((m, GATHER), dtype=np.float32)
    first, second = _row_scales(peaks)
    small = np.flatnonzero(second != 1)
    blocks = 0
    with _blas().limit(limits=1, user_api="blas"):
        for pieces, columns in _spans(sizes, GATHER):
            for i, parts in enumerate(rows):
                for part, start, stop, at in pieces:
                    np.multiply(
                        parts[part][start:stop], first[i], out=buf[i, at : at + stop - start]
                    )
            if small.size:
                buf[small, :columns] *= second[small, None]
            for start in range(0, columns, BLOCK):
                block = buf[:, start : min(start + BLOCK, columns)]
                gram += block @ block.T  # float32 entries, widened exactly as they are added
                blocks += 1
    e = 2 * width * 2.0**-24 + (blocks + 1) * 2.0**-52
    diag = np.sqrt(np.diagonal(gram))
    scale = np.outer(diag, diag)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(scale > 0.0, gram / np.where(scale > 0.0, scale, 1.0), 0.0)
    return q, 4.0 * e + 2.0**-40 if e < 2.0**-10 else math.inf
