"""The copy screen's fast pass: exact top-k overlap counts and cosine bounds with a proven error.

:mod:`.copyscreen` computes exact recorded values only for the pairs this pass cannot rule out;
everything here is exact or carries a bound, so the screen's result is the definition's, bit for
bit, on any machine. ``m`` rows (one per contribution), ``size`` columns.

**Overlap counts** (:func:`overlap_counts`, exact integers). The index range is cut into pieces
holding about :data:`KEYS` of the ``m`` top-k sets' indices; in each, the indices go into one array
of keys ``index * 2**s + row`` (``2**s >= m``), sorted once; equal indices then sit together in
runs, in row order (a run never spans two pieces, and the pieces' counts add up). A run of ``r``
rows adds one to each of its ``r (r - 1) / 2`` pairs. Short runs are counted pair by pair
(``np.bincount`` over rows ``j`` and ``j + gap`` of the same run, one gap at a time); a long run
costs less as a column of a 0/1 matrix ``T`` whose product ``T T^T`` (float32, :data:`BLOCK` columns
per call, so every entry is an integer below ``2**24``: exact) counts all its pairs at once. A run
is long when ``r (r - 1) > m**2 / DENSE``: there a pair costs about as much as ``m**2 / DENSE``
multiply-adds of the product. Independent deltas share few indices (runs of 2 or 3), similar ones
(honest miners on one data set) share many: counted pair by pair, 256 correlated miners cost 0.9 s,
as columns 0.2 s; the counts are the same integers either way.

**Cosine bounds** (:func:`cosine_bounds`). A row is the preclipped delta: given a ``prescale``,
its elements are ``f32(x * s)``, computed as each chunk is gathered (:func:`.bounded.prescaled`),
so these are the recorded values themselves. Each row is scaled by a power of two that takes its
largest ``|x|`` into ``[1, 2)`` (exact, except that an element landing below float32's normal
range rounds, by at most ``2**-150``, against a row norm of at least 1; IEEE-754 gradual
underflow, which the merge's own arithmetic assumes). Scaled entries are below 2, so nothing
below overflows. Every sum is in float32 over blocks of at most ``B`` = :data:`BLOCK` columns
(a BLAS product ``X X^T`` for dots, ``einsum`` for sums of squares), the blocks' results added
in float64 (``c`` blocks in all). A block entry is a tree of rounded float32 operations over the
products of its columns, a product meeting at most ``B`` roundings (its multiplication, at most
``B - 1`` additions; a fused multiply-add only removes one), whatever order the BLAS uses (no
Strassen-like product: OpenBLAS, MKL and Accelerate all sum the products), plus at most
``2**-150`` per operation from underflow; a float64 total meets at most ``c`` more roundings. So
with ``e = 2B * 2**-24 + (c + 1) * 2**-52`` (``gamma(B) <= 2B * 2**-24``, Higham 3.1), a computed
dot over a set of columns is within ``e * sum|a_i b_i| + t <= e |a_S| |b_S| + t`` of the real
one (``a_S`` the row on those columns, ``t < 2**-100 |a| |b|``), a sum of squares within
``e |a_S|**2 + t``. A cosine does not change with the scale.

First one pass sums each row's squares per chunk of :data:`GATHER` columns (or the caller does, row
by row, with :func:`row_squares`, while it has each row laid out in cache for its top-k set). Then
the Gram product runs over the chunks, those holding the largest share of the rows' squares first,
in :data:`STAGES`; after each, with ``P`` the columns done and ``R`` the rest, the real cosine is
``(dot_P(a, b) + dot_R(a, b)) / (|a| |b|) <= (dot_P(a, b) + |a_R| |b_R|) / (|a| |b|)``
(Cauchy-Schwarz), and its computed value ``q`` is within ``3e`` of that bound (for ``e < 2**-10``:
the numerator's errors add to at most ``e (|a_P| |b_P| + |a_R| |b_R|) <= e |a| |b|``, the
denominator's are relative ``e``). The recorded cosine (a few roundings of exact values) is within
``10 * 2**-53`` of the real one, so a pair whose ``q`` is at most ``limit - margin``, with ``margin
= 4e + 2**-40``, cannot be flagged by its cosine, and drops out; later stages gather only rows with
an open pair. Independent deltas (cosine near 0) drop out after the first sixteenth of the columns,
honest similar ones (cosine 0.5) after the first eighth; a pair open to the end has ``R`` empty, and
``q`` is then the cosine estimate, within ``3e`` both ways. With ``B = 2**12``, ``margin`` is about
``0.002``: a float32 product at twice the float64 speed, and a margin far below the distance of
independent deltas from 0.95.

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

from hypertrain.aggregator.bounded import prescaled
from hypertrain.trainer.codec import F32Array

__all__ = [
    "BLOCK",
    "DENSE",
    "GATHER",
    "KEYS",
    "STAGES",
    "cosine_bounds",
    "overlap_counts",
    "row_squares",
]

BLOCK = 1 << 12
"""Columns per product call: the float32 buffers stay small, and ``e`` stays near ``2**-11``."""

GATHER = 4 * BLOCK
"""Columns of all rows copied (and scaled) at a time, one copy per row and tensor piece."""

STAGES = (1 / 16, 1 / 8, 1 / 4, 1 / 2, 1.0)
"""Shares of the columns after which the pairs that cannot reach the limit drop out."""

DENSE = 1 << 10
"""A run of ``r`` rows sharing an index is counted as a product column when
``r (r - 1) > m**2 / DENSE`` (module doc)."""

KEYS = 1 << 18
"""Top-k keys sorted at a time by :func:`overlap_counts` (2 MB of int64: cache-sized)."""

I64Array = npt.NDArray[np.int64]
F64Array = npt.NDArray[np.float64]


@functools.cache
def _blas() -> ThreadpoolController:
    """The loaded BLAS, inspected once (``threadpool_limits`` walks the loaded libraries on each
    call: about 1 ms)."""
    return ThreadpoolController()


def overlap_counts(tops: list[I64Array], m: int) -> I64Array:
    """``(m, m)`` counts of the top-k indices rows ``a < b`` share (upper triangle; the rest 0);
    each of ``tops`` sorted increasing. Counted over pieces of the index range of about
    :data:`KEYS` keys (module doc): the arrays stay cache-sized (at 256 x 1M parameters the
    unpieced count made a few hundred MB of temporaries a round, each first touch a page fault)."""
    counts = np.zeros((m, m), dtype=np.int64)
    total = sum(t.size for t in tops)
    if not total:
        return counts
    top = max(int(t[-1]) for t in tops if t.size) + 1
    width = -(-top // -(-total // KEYS))
    edges = np.arange(0, top + width, width)  # the last is at least top
    cuts = [np.searchsorted(t, edges) for t in tops]
    long_rows: list[I64Array] = []
    long_runs: list[I64Array] = []
    for p in range(edges.size - 1):
        pairs, rows, runs = _piece([t[c[p] : c[p + 1]] for t, c in zip(tops, cuts, strict=True)], m)
        counts += pairs
        long_rows.append(rows)
        long_runs.append(runs)
    counts += _columns(np.concatenate(long_rows), np.concatenate(long_runs), m)
    return np.triu(counts, 1)


def _piece(tops: list[I64Array], m: int) -> tuple[I64Array, I64Array, I64Array]:
    """``(counts, rows, runs)`` over the indices in ``tops``: the short runs' counts, pair by
    pair; the long runs' rows, run after run, and their lengths (for :func:`_columns`)."""
    shift = max(m - 1, 1).bit_length()  # keys index * 2**shift + row: rows below 2**shift
    rows = np.repeat(np.arange(m, dtype=np.int64), [t.size for t in tops])
    keys = np.concatenate(tops)
    keys <<= shift
    keys |= rows
    keys.sort()
    index, row = keys >> shift, keys & ((1 << shift) - 1)
    starts = np.flatnonzero(np.concatenate([[True], index[1:] != index[:-1]]))
    runs = np.diff(np.append(starts, keys.size))
    long_run = runs * (runs - 1) > (m * m) // DENSE
    long_key = np.repeat(long_run, runs)
    short = ~long_key
    return _pairwise(index[short], row[short], m), row[long_key], runs[long_run]


def _pairwise(index: I64Array, row: I64Array, m: int) -> I64Array:
    """Counts of rows sharing an index, pair by pair (``index`` sorted, rows increasing within)."""
    n = index.size
    at = np.flatnonzero(index[1:] == index[:-1])  # positions j sharing with j + 1
    gap = 1
    codes: list[I64Array] = [np.empty(0, dtype=np.int64)]
    while at.size:
        codes.append(row[at] * m + row[at + gap])
        at = at[at + gap + 1 < n]
        at = at[index[at] == index[at + gap + 1]]
        gap += 1
    counts: I64Array = np.bincount(np.concatenate(codes), minlength=m * m).reshape(m, m)
    return counts


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


class _Gather:
    """Chunks of :data:`GATHER` columns of the scaled rows, one chunk of chosen rows at a time."""

    def __init__(
        self,
        rows: Sequence[Sequence[F32Array]],
        peaks: Sequence[float],
        prescale: Sequence[np.float32],
    ) -> None:
        self.rows = rows
        self.prescale = prescale
        self.chunks = list(_spans([int(part.size) for part in rows[0]], GATHER))
        self.first, second = _row_scales(peaks)
        self.second = second
        self.buf = np.empty((len(rows), GATHER), dtype=np.float32)

    def chunk(self, c: int, which: I64Array) -> F32Array:
        """Chunk ``c`` of rows ``which``, scaled (module doc): a view of the buffer."""
        pieces, columns = self.chunks[c]
        out = self.buf[: which.size, :columns]
        for j, i in enumerate(which.tolist()):
            parts, pre = self.rows[i], self.prescale[i]
            for part, start, stop, at in pieces:
                to = out[j, at : at + stop - start]
                np.multiply(prescaled(parts[part][start:stop], pre, to), self.first[i], out=to)
        small = np.flatnonzero(self.second[which] != 1)
        if small.size:
            out[small] *= self.second[which[small], None]
        return out


def _blocks(chunk: F32Array) -> Iterator[F32Array]:
    for start in range(0, chunk.shape[1], BLOCK):
        yield chunk[:, start : start + BLOCK]


def _ratio(num: F64Array, a: F64Array, b: F64Array) -> F64Array:
    """``num / sqrt(a b)`` (outer product), 0 where ``a`` or ``b`` is 0."""
    scale = np.sqrt(np.outer(a, b))
    with np.errstate(divide="ignore", invalid="ignore"):
        out: F64Array = np.where(scale > 0.0, num / np.where(scale > 0.0, scale, 1.0), 0.0)
    return out


def row_squares(flat: F32Array, peak: float, scratch: F32Array) -> F64Array:
    """The first pass of :func:`cosine_bounds` over one row laid out whole (``flat``, its largest
    ``|x|`` ``peak``): per chunk of :data:`GATHER` columns, the float64 sum, block after block,
    of the float32 sums of squares over its blocks of :data:`BLOCK` columns of the row scaled
    by its power of two (module doc). ``scratch`` (float32, at least as long) holds that row."""
    first, second = _row_scales([peak])[:, 0]
    n = flat.size
    scaled = np.multiply(flat, first, out=scratch[:n])
    if second != 1:
        scaled *= second
    full = n - n % BLOCK
    sums = np.zeros(-(-n // GATHER) * (GATHER // BLOCK), dtype=np.float64)  # per block
    rows = scaled[:full].reshape(-1, BLOCK)
    sums[: rows.shape[0]] = np.einsum("ij,ij->i", rows, rows)  # float32 sums, widened exactly
    if full < n:
        tail = scaled[full:]
        sums[rows.shape[0]] = np.einsum("i,i->", tail, tail)
    out = np.zeros(-(-n // GATHER), dtype=np.float64)
    for j in range(GATHER // BLOCK):  # block j of each chunk, in order (absent blocks add 0)
        out += sums[j :: GATHER // BLOCK]
    return out


def cosine_bounds(
    rows: Sequence[Sequence[F32Array]],
    peaks: Sequence[float],
    limit: float,
    prescale: Sequence[np.float32] | None = None,
    squares: F64Array | None = None,
) -> tuple[F64Array, float]:
    """``(q, margin)`` over ``rows`` (each the 1-d parts of a flattened row, equal sizes across
    rows; ``peaks`` their largest ``|x|``): the recorded cosine of rows ``a < b`` is at most
    ``q[a, b] + margin``, and within ``margin`` of ``q[a, b]`` when ``q[a, b] > limit - margin``
    (module doc). With ``prescale``, row ``i`` is ``f32(x * prescale[i])`` element by element
    (the preclip, :func:`.bounded.prescaled`; ``peaks`` are the scaled rows'). ``squares``, when
    given, is column ``i`` = :func:`row_squares` of row ``i``: the first pass, made by a caller
    that laid each row out whole anyway; here the rows are never laid out whole."""
    m = len(rows)
    gather = _Gather(rows, peaks, [np.float32(1)] * m if prescale is None else prescale)
    everyone = np.arange(m, dtype=np.int64)
    n = len(gather.chunks)
    width = min(BLOCK, max(sum(int(part.size) for part in rows[0]), 1))
    blocks = sum(-(-columns // BLOCK) for _, columns in gather.chunks)
    e = 2 * width * 2.0**-24 + (blocks + 1) * 2.0**-52
    margin = 4.0 * e + 2.0**-40 if e < 2.0**-10 else math.inf
    sq = np.zeros((n, m), dtype=np.float64) if squares is None else squares  # chunk c, row i
    with _blas().limit(limits=1, user_api="blas"):
        for c in range(n if squares is None else 0):
            for block in _blocks(gather.chunk(c, everyone)):
                sq[c] += np.einsum("ij,ij->i", block, block)  # float32 sums, widened exactly
        total = sq.sum(axis=0)
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where(total > 0.0, sq / np.where(total > 0.0, total, 1.0), 0.0).sum(axis=1)
        order = np.argsort(
            -share, kind="stable"
        )  # the chunks holding most of the rows' energy first
        gram = np.zeros((m, m), dtype=np.float64)
        q = np.full((m, m), np.inf)
        active = everyone
        done = 0
        for stage in STAGES:
            end = max(done, min(n, math.ceil(stage * n)))
            pairs = np.ix_(active, active)
            for c in order[done:end].tolist():
                for block in _blocks(gather.chunk(c, active)):
                    product = block @ block.T  # float32 entries, widened exactly by the add
                    if active.size == m:
                        gram += product  # the same additions, without gathering all m**2
                    else:
                        gram[pairs] += product
            done = end
            rest = sq[order[done:]].sum(axis=0)
            bound = _ratio(gram + np.sqrt(np.outer(rest, rest)), total, total)
            q[pairs] = np.minimum(q[pairs], bound[pairs])
            open_pairs = np.triu(~(q <= limit - margin), 1)
            active = np.flatnonzero(open_pairs.any(axis=0) | open_pairs.any(axis=1))
            if done == n or not active.size:
                break
    return q, margin
