"""The copy screen as it was before issue 17 (all pairs, exact norms): the test reference.

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

Exact dot products cost ~20 ms per million elements, so each pair first gets a float64 BLAS dot;
its error is at most ``gamma_n * sum|a_i b_i| <= gamma_n * norm(a) * norm(b)`` with
``gamma_n = n * 2**-53 / (1 - n * 2**-53)``, so whenever that cosine is farther than the bound
(plus a few ulps) from 0.95 the decision is certain. The exact dot is computed for pairs near the
threshold and for every flagged pair, so the output is exactly that of the definition above.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import attrs
import numpy as np
import numpy.typing as npt

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


@attrs.frozen(eq=False)
class _Entry:
    flat: F32Array
    flat64: npt.NDArray[np.float64]
    norm: float
    topk: npt.NDArray[np.int64]


def _entry(delta: Mapping[str, F32Array], k: int) -> _Entry:
    names = sorted(delta, key=lambda s: s.encode("utf-8"))
    flat = np.zeros(0, dtype=np.float32)
    if names:
        flat = np.concatenate([np.ravel(delta[n]) for n in names]).astype(np.float32, copy=False)
    return _Entry(flat, flat.astype(np.float64), math.sqrt(fsum_squares(flat)), top_k(flat, k))


def _cosine(a: _Entry, b: _Entry, exact: bool) -> float:
    if a.norm == 0.0 or b.norm == 0.0:
        return 0.0
    dot = fsum_dot(a.flat, b.flat) if exact else float(np.dot(a.flat64, b.flat64))
    return dot / (a.norm * b.norm)


def copy_screen(
    deltas: Mapping[str, Mapping[str, F32Array]],
) -> tuple[tuple[CopyFlag, ...], tuple[str, ...]]:
    """``(copy_flags, raise_q)`` over preclipped deltas with equal names and shapes."""
    ids = sorted(deltas, key=lambda s: s.encode("utf-8"))
    if len(ids) < 2:
        return (), ()
    first = deltas[ids[0]]
    size = sum(int(np.asarray(first[n]).size) for n in first)
    k = top_k_size(size)
    entries = {hk: _entry(deltas[hk], k) for hk in ids}
    u = size * 2.0**-53
    margin = u / (1.0 - u) + 2.0**-48 if u < 0.5 else math.inf
    flags: list[CopyFlag] = []
    for i, a in enumerate(ids):
        for b in ids[i + 1 :]:
            ea, eb = entries[a], entries[b]
            overlap = int(np.intersect1d(ea.topk, eb.topk, assume_unique=True).size)
            by_overlap = overlap / k > OVERLAP_LIMIT
            approx = _cosine(ea, eb, exact=False)
            near = abs(approx - COSINE_LIMIT) <= margin
            if not (by_overlap or near or approx > COSINE_LIMIT):
                continue
            cosine = _cosine(ea, eb, exact=True)
            if by_overlap or cosine > COSINE_LIMIT:
                flags.append(
                    CopyFlag(a=a, b=b, overlap=f32_hex(overlap / k), cosine=f32_hex(cosine))
                )
    raise_q = sorted({f.a for f in flags} | {f.b for f in flags}, key=lambda s: s.encode("utf-8"))
    return tuple(flags), tuple(raise_q)
