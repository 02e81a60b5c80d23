"""The copy screen (spec/protocol.md section 7): soft, it only raises audit rates.

Over the preclipped deltas, each contribution is flattened as the concatenation of its tensors in
increasing UTF-8 name order (C order within a tensor), ``size`` elements in all. Its top-k set
holds the indices of the ``k = max(1, ceil(0.01 * size))`` largest ``|x|`` (ties broken by the
lower index), where ``0.01 * size`` is the float64 product, as the spec writes it. For every pair
``a < b`` (UTF-8 hotkey order):

* ``overlap = |topk(a) & topk(b)| / k``, carried as f32 hex (the fraction the threshold uses),
* ``cosine = dot(a, b) / (norm(a) * norm(b))`` in float64, where ``dot`` is ``math.fsum`` of the
  exact float64 products (exactly rounded, see :mod:`.exact`) and ``norm`` as in the merge;
  ``cosine = 0.0`` when either norm is zero,
* the pair is flagged when ``overlap / k > 0.4`` or ``cosine > 0.95`` (float64 comparisons).

Flags carry ``cosine`` as f32 hex (floats never travel); ``raise_q`` is the UTF-8 sorted set of
hotkeys in any flag.

**How it is computed** (the result is exactly the definition's, on any machine):

1. *A fast pass* (:mod:`.screenpass`): the exact overlap counts, from sorted top-k indices; and
   for every pair an upper bound on its cosine from a staged float32 Gram product (pairs that
   cannot reach 0.95 drop out early), with a proven error (``margin``, about 0.002). Each row is
   laid out once, for its top-k set and its sums of squares per chunk (the product's first pass).
2. *Exact values for candidates only*: a pair flagged by its overlap, or whose estimate is above
   ``0.95 - margin``, gets its exact dot and norms (:mod:`.exact`) and the flag test of the
   definition. Other pairs cannot be flagged.

The merge passes the raw deltas with their preclip scales (``prescale``): each pass scales what it
reads (one row at a time for the top-k sets, one chunk at a time for the Gram product, a
candidate's row for its exact values), the bits of the preclipped deltas without a copy of them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import attrs
import numpy as np
import numpy.typing as npt

from hypertrain.aggregator.bounded import prescaled
from hypertrain.aggregator.exact import fsum_dot, fsum_squares
from hypertrain.aggregator.screenpass import cosine_bounds, overlap_counts, row_squares
from hypertrain.protocol.f32 import f32_hex
from hypertrain.trainer.codec import F32Array

__all__ = ["CopyFlag", "copy_screen", "top_k", "top_k_size"]

OVERLAP_LIMIT = 0.4
COSINE_LIMIT = 0.95


@attrs.frozen
class CopyFlag:
    """A flagged pair ``a < b``: top-k overlap fraction and cosine (both f32 hex)."""

    a: str
    b: str
    overlap: str
    cosine: str


def top_k_size(size: int) -> int:
    """``max(1, ceil(0.01 * size))`` with the float64 product."""
    return max(1, math.ceil(0.01 * size))


SAMPLE = 1 << 16
"""Elements of a row :func:`top_k` samples to place its first cut."""


def top_k(flat: F32Array, k: int, scratch: F32Array | None = None) -> npt.NDArray[np.int64]:
    """Sorted indices of the ``k`` largest ``|flat|``, ties to the lower index (``flat`` finite).

    A sample of :data:`SAMPLE` evenly spaced elements gives a cut ``c`` that about twice ``k``
    magnitudes reach; when at least ``k`` do, the ``k``-th largest is among them (it is at least
    ``c``), and so is every index of the answer, found there; otherwise the whole row is
    partitioned. The answer is the same either way. ``scratch`` (float32, at least as long as
    ``flat``) holds the magnitudes instead of a fresh array.
    """
    n = flat.size
    if k >= n:
        return np.arange(n, dtype=np.int64)
    mag = np.abs(flat) if scratch is None else np.abs(flat, out=scratch[:n])
    sample = mag[:: max(1, n // SAMPLE)]
    rank = min(sample.size, 2 * -(-sample.size * k // n) + 64)  # about 2k of the row reach it
    cut = np.partition(sample, sample.size - rank)[sample.size - rank]
    where = np.flatnonzero(mag >= cut)
    if where.size < k:
        where = np.arange(n, dtype=np.int64)
    near = mag[where]
    kth = np.partition(near, near.size - k)[near.size - k]  # the k-th largest value
    take = near > kth
    ties = np.flatnonzero(near == kth)[: k - int(np.count_nonzero(take))]
    take[ties] = True
    out: npt.NDArray[np.int64] = where[take].astype(np.int64, copy=False)
    return out


def _rows(deltas: Mapping[str, Mapping[str, F32Array]], ids: list[str]) -> list[list[F32Array]]:
    """Row ``i``: the tensors of ``ids[i]`` as 1-d float32, in UTF-8 name order (views of
    contiguous float32 tensors)."""
    names = sorted(deltas[ids[0]], key=lambda s: s.encode("utf-8"))
    return [[np.ravel(np.asarray(deltas[hk][n], dtype=np.float32)) for n in names] for hk in ids]


def _flat(parts: list[F32Array], out: F32Array | None = None) -> F32Array:
    """The flattened row (``parts`` itself when it is one tensor)."""
    if len(parts) == 1:
        return parts[0]
    flat: F32Array = np.concatenate(parts, out=out)
    return flat


def copy_screen(
    deltas: Mapping[str, Mapping[str, F32Array]],
    *,
    prescale: Mapping[str, np.float32] | None = None,
) -> tuple[tuple[CopyFlag, ...], tuple[str, ...]]:
    """``(copy_flags, raise_q)`` over preclipped deltas with equal names and shapes. With
    ``prescale``, the preclipped delta of ``hk`` is ``f32(x * prescale[hk])`` element by element
    (:func:`.bounded.prescaled`), computed where a chunk is read, never laid out whole."""
    ids = sorted(deltas, key=lambda s: s.encode("utf-8"))
    if len(ids) < 2:
        return (), ()
    rows = _rows(deltas, ids)
    one = np.float32(1)
    scales = [one if prescale is None else prescale[hk] for hk in ids]
    m, size = len(rows), sum(int(part.size) for part in rows[0])
    k = top_k_size(size)
    buf, scratch = np.empty(size, dtype=np.float32), np.empty(size, dtype=np.float32)
    tops: list[npt.NDArray[np.int64]] = []
    peaks: list[float] = []
    squares: list[npt.NDArray[np.float64]] = []
    for parts, scale in zip(rows, scales, strict=True):  # one row at a time: no m x size copy
        flat = prescaled(_flat(parts, buf), scale, buf)
        tops.append(top_k(flat, k, scratch))
        peaks.append(float(np.abs(flat[tops[-1]]).max()) if size else 0.0)
        squares.append(row_squares(flat, peaks[-1], scratch))  # while the row is in cache
    counts = overlap_counts(tops, m)
    q, margin = cosine_bounds(rows, peaks, COSINE_LIMIT, scales, np.stack(squares, axis=1))
    by_overlap = counts / k > OVERLAP_LIMIT
    maybe = np.triu(by_overlap | (q > COSINE_LIMIT - margin) | ~np.isfinite(q), 1)
    norms: dict[int, float] = {}

    def row(i: int) -> F32Array:
        flat = _flat(rows[i])
        return prescaled(flat, scales[i], np.empty_like(flat))

    def exact_norm(i: int) -> float:
        if i not in norms:
            norms[i] = math.sqrt(fsum_squares(row(i)))
        return norms[i]

    flags: list[CopyFlag] = []
    for a, b in zip(*np.nonzero(maybe), strict=True):
        na, nb = exact_norm(int(a)), exact_norm(int(b))
        cosine = 0.0 if na == 0.0 or nb == 0.0 else fsum_dot(row(a), row(b)) / (na * nb)
        overlap = int(counts[a, b])
        if overlap / k > OVERLAP_LIMIT or cosine > COSINE_LIMIT:
            hk_a, hk_b = ids[int(a)], ids[int(b)]
            flags.append(
                CopyFlag(a=hk_a, b=hk_b, overlap=f32_hex(overlap / k), cosine=f32_hex(cosine))
            )
    raise_q = sorted({f.a for f in flags} | {f.b for f in flags}, key=lambda s: s.encode("utf-8"))
    return tuple(flags), tuple(raise_q)
