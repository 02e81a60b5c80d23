"""A plain re-implementation of spec 7's merge, written from the spec text, for tests.

Element loops over float32 scalars (one rounding per operation), ``math.fsum`` over Python lists
for norms and dots. Slow on purpose: only for tiny tensors.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

F32 = np.float32
State = dict[str, np.ndarray]


def key(s: str) -> bytes:
    return s.encode("utf-8")


def ref_norm(tensors: Mapping[str, np.ndarray]) -> float:
    squares = [float(x) * float(x) for n in sorted(tensors, key=key) for x in tensors[n].flat]
    return math.sqrt(math.fsum(squares))


def elementwise(op, *arrays: np.ndarray) -> np.ndarray:  # type: ignore[no-untyped-def]
    out = np.empty(arrays[0].shape, dtype=F32)
    for i in np.ndindex(out.shape):
        out[i] = op(*(F32(a[i]) for a in arrays))
    return out


def ref_preclip(delta: Mapping[str, np.ndarray], c: float) -> tuple[State, bool]:
    r = ref_norm(delta)
    if r <= c:
        return dict(delta), False
    s = F32(c / r)
    return {n: elementwise(lambda x: x * s, a) for n, a in delta.items()}, True


def ref_cclip(
    deltas: Mapping[str, Mapping[str, np.ndarray]], center: State, tau: float, iters: int
) -> State:
    ids = sorted(deltas, key=key)
    if not ids:
        return {n: np.zeros_like(a) for n, a in center.items()}
    w = F32(1) / F32(len(ids))
    v = {n: a.copy() for n, a in center.items()}
    for _ in range(iters):
        acc = {n: np.zeros_like(a) for n, a in center.items()}
        for hk in ids:
            diff = {n: elementwise(lambda d, x: d - x, deltas[hk][n], v[n]) for n in v}
            r = ref_norm(diff)
            s = F32(1) if r <= tau else F32(tau / r)
            for n in v:
                acc[n] = elementwise(lambda a, d, s=s: a + w * (d * s), acc[n], diff[n])
        v = {n: elementwise(lambda x, a: x + a, v[n], acc[n]) for n in v}
    return v


def ref_outer(theta: State, u: State, g: State, lr: float, mu: float) -> tuple[State, State]:
    m, eta = F32(mu), F32(lr)
    u2 = {n: elementwise(lambda uu, gg: m * uu + gg, u[n], g[n]) for n in theta}
    th2 = {
        n: elementwise(lambda t, gg, uu: t - eta * (gg + m * uu), theta[n], g[n], u2[n])
        for n in theta
    }
    return th2, u2


def ref_topk(flat: list[float], k: int) -> set[int]:
    order = sorted(range(len(flat)), key=lambda i: (-abs(flat[i]), i))
    return set(order[:k])


def ref_copy_screen(
    deltas: Mapping[str, Mapping[str, np.ndarray]],
) -> list[tuple[str, str, float, float]]:
    ids = sorted(deltas, key=key)
    flats = {
        hk: [float(x) for n in sorted(deltas[hk], key=key) for x in deltas[hk][n].flat]
        for hk in ids
    }
    out = []
    for i, a in enumerate(ids):
        for b in ids[i + 1 :]:
            fa, fb = flats[a], flats[b]
            k = max(1, math.ceil(0.01 * len(fa)))
            overlap = len(ref_topk(fa, k) & ref_topk(fb, k))
            na = math.sqrt(math.fsum(x * x for x in fa))
            nb = math.sqrt(math.fsum(x * x for x in fb))
            dot = math.fsum(x * y for x, y in zip(fa, fb, strict=True))
            cos = 0.0 if na == 0 or nb == 0 else dot / (na * nb)
            if overlap / k > 0.4 or cos > 0.95:
                out.append((a, b, overlap / k, cos))
    return out


def bits(tensors: Mapping[str, np.ndarray]) -> dict[str, bytes]:
    return {n: np.asarray(a, dtype="<f4").tobytes() for n, a in tensors.items()}
