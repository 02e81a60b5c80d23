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

1. *Overlaps, exactly, near-linearly*: the ``m`` top-k sets go into one array of keys
   ``index * m + row``, sorted once; equal indices then sit together in row order, and each pair
   of rows sharing an index is counted by ``np.bincount`` (work: the shared indices, not the
   ``m**2`` pairs of sets).
2. *Cosine candidates*: one float64 Gram product ``G = X X^T`` of the stacked float32 deltas, in
   column blocks of ``B`` = :data:`BLOCK` (widened exactly to float64; a float32 product is exact
   in float64). Each entry is a tree of rounded float64 additions over the exact products, a
   product meeting at most ``B - 1`` of them in the BLAS call and one per block when the blocks
   add up (``c`` blocks), whatever order the BLAS uses (no Strassen-like product: OpenBLAS, MKL
   and Accelerate all sum the products), so with ``e = (B + c) * 2**-52``,
   ``|G_ab - dot(a, b)| <= e * sum|a_i b_i| <= e * |a| |b|`` and ``|G_aa - |a|**2| <= e |a|**2``.
   Then ``q = G_ab / sqrt(G_aa G_bb)`` is within ``3e`` of the real cosine, and the recorded
   cosine (a few roundings of exact values) within ``10 * 2**-53`` of it: a pair whose computed
   ``q`` is at most ``0.95 - (4e + 2**-40)`` cannot be flagged by its cosine.
3. *Exact values for candidates only*: a pair flagged by its overlap, or whose ``q`` is above that
   margin, gets its exact dot and norms (:mod:`.exact`) and the flag test of the definition.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import attrs
import numpy as np
import numpy.typing as npt
from threadpoolctl import threadpool_limits

from hypertrain.aggregator.exact import fsum_dot, fsum_squares
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


def top_k(flat: F32Array, k: int) -> npt.NDArray[np.int64]:
    """Sorted indices of the ``k`` largest ``|flat|``, ties to the lower index."""
    mag = np.abs(flat)
    if k >= mag.size:
        return np.arange(mag.size, dtype=np.int64)
    kth = np.partition(mag, mag.size - k)[mag.size - k]  # the k-th largest value
    above = np.flatnonzero(mag > kth)
    ties = np.flatnonzero(mag == kth)[: k - above.size]
    return np.sort(np.concatenate([above, ties])).astype(np.int64)


BLOCK = 1 << 12
"""Columns per block of the Gram product (its float64 copy stays small)."""


def _stack(deltas: Mapping[str, Mapping[str, F32Array]], ids: list[str]) -> F32Array:
    """Row ``i``: the flattened delta of ``ids[i]`` (tensors in UTF-8 name order)."""
    first = deltas[ids[0]]
    names = sorted(first, key=lambda s: s.encode("utf-8"))
    size = sum(int(np.asarray(first[n]).size) for n in names)
    stack = np.empty((len(ids), size), dtype=np.float32)
    for row, hk in zip(stack, ids, strict=True):
        at = 0
        for n in names:
            flat = np.ravel(deltas[hk][n])
            row[at : at + flat.size] = flat
            at += flat.size
    return stack


def _overlaps(tops: list[npt.NDArray[np.int64]], m: int) -> npt.NDArray[np.int64]:
    """``(m, m)`` counts of shared top-k indices for rows ``a < b`` (module doc, step 1)."""
    rows = np.repeat(np.arange(m, dtype=np.int64), [t.size for t in tops])
    keys = np.concatenate(tops) * m + rows
    keys.sort()
    index, row = keys // m, keys % m
    counts = np.zeros(m * m, dtype=np.int64)
    n = keys.size
    at = np.flatnonzero(index[1:] == index[:-1])  # positions j sharing with j + 1
    gap = 1
    while at.size:
        counts += np.bincount(row[at] * m + row[at + gap], minlength=m * m)
        at = at[at + gap + 1 < n]
        at = at[index[at] == index[at + gap + 1]]
        gap += 1
    return counts.reshape(m, m)


def _gram(stack: F32Array) -> tuple[npt.NDArray[np.float64], float]:
    """``(G, e)``: the blocked float64 Gram product and its error factor (module doc, step 2)."""
    m, size = stack.shape
    gram = np.zeros((m, m), dtype=np.float64)
    wide = np.empty((m, min(BLOCK, max(size, 1))), dtype=np.float64)
    blocks = 0
    # One BLAS thread: the products are small and many, and a threaded BLAS on a busy machine
    # (the daemon's other work, its neighbours) spins: 64 x 1M took 93 s instead of 14.
    with threadpool_limits(limits=1, user_api="blas"):
        for start in range(0, size, BLOCK):
            part = stack[:, start : start + BLOCK]
            block = wide[:, : part.shape[1]]
            np.copyto(block, part)  # exact widening
            gram += block @ block.T
            blocks += 1
    return gram, (BLOCK + blocks) * 2.0**-52


def copy_screen(
    deltas: Mapping[str, Mapping[str, F32Array]],
) -> tuple[tuple[CopyFlag, ...], tuple[str, ...]]:
    """``(copy_flags, raise_q)`` over preclipped deltas with equal names and shapes."""
    ids = sorted(deltas, key=lambda s: s.encode("utf-8"))
    if len(ids) < 2:
        return (), ()
    stack = _stack(deltas, ids)
    m, size = stack.shape
    k = top_k_size(size)
    counts = _overlaps([top_k(row, k) for row in stack], m)
    gram, e = _gram(stack)
    diag = np.sqrt(np.diagonal(gram))
    scale = np.outer(diag, diag)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(scale > 0.0, gram / np.where(scale > 0.0, scale, 1.0), 0.0)
    margin = 4.0 * e + 2.0**-40 if e < 2.0**-10 else math.inf
    by_overlap = counts / k > OVERLAP_LIMIT
    maybe = np.triu(by_overlap | (q > COSINE_LIMIT - margin) | ~np.isfinite(q), 1)
    norms: dict[int, float] = {}

    def exact_norm(i: int) -> float:
        if i not in norms:
            norms[i] = math.sqrt(fsum_squares(stack[i]))
        return norms[i]

    flags: list[CopyFlag] = []
    for a, b in zip(*np.nonzero(maybe), strict=True):
        na, nb = exact_norm(int(a)), exact_norm(int(b))
        cosine = 0.0 if na == 0.0 or nb == 0.0 else fsum_dot(stack[a], stack[b]) / (na * nb)
        overlap = int(counts[a, b])
        if overlap / k > OVERLAP_LIMIT or cosine > COSINE_LIMIT:
            hk_a, hk_b = ids[int(a)], ids[int(b)]
            flags.append(
                CopyFlag(a=hk_a, b=hk_b, overlap=f32_hex(overlap / k), cosine=f32_hex(cosine))
            )
    raise_q = sorted({f.a for f in flags} | {f.b for f in flags}, key=lambda s: s.encode("utf-8"))
    return tuple(flags), tuple(raise_q)
