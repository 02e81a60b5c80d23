"""The merge's preclip, CenteredClip and outer step as they were before issue 17 (exact norms,
whole-tensor operations): the reference the fast merge must equal bit for bit."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from hypertrain.aggregator.exact import ExactSum, split_f32
from hypertrain.aggregator.merge import CClipResult, Params, sorted_ids
from hypertrain.aggregator.outerstate import OuterState
from hypertrain.protocol.f32 import f32_hex
from hypertrain.trainer.codec import F32Array

Tensors = Mapping[str, F32Array]
ZERO_WEIGHT_HEX = "00000000"
_F32 = np.float32


def _names(tensors: Mapping[str, object]) -> list[str]:
    return sorted(tensors, key=lambda s: s.encode("utf-8"))


def norm(tensors: Tensors) -> float:
    """``sqrt(fsum(float64(x)**2 for every element of every tensor))``, exactly rounded sum."""
    acc = ExactSum()
    for name in _names(tensors):
        parts = split_f32(tensors[name])
        acc.add_parts(parts, parts)
    return math.sqrt(acc.value())


def preclip(delta: Tensors, preclip_norm: float) -> tuple[dict[str, F32Array], bool]:
    """``(delta, False)`` if ``r <= preclip_norm``, else ``(delta * f32(preclip_norm / r), True)``.

    ``r = norm(delta)``; the scale is one float64 division rounded to float32, applied with one
    float32 multiplication per element. The unclipped result holds the input arrays themselves.
    """
    r = norm(delta)
    if r <= preclip_norm:
        return dict(delta), False
    scale = _F32(preclip_norm / r)
    out = {name: np.empty_like(delta[name], dtype=_F32) for name in _names(delta)}
    for name, array in out.items():
        np.multiply(delta[name], scale, out=array)  # out= keeps 0-d results arrays
    return out, True


def centered_clip(
    deltas: Mapping[str, Tensors], center: Tensors, tau: float, iters: int
) -> CClipResult:
    """CenteredClip of spec 7, in exactly this float32 order::

        w = f32(1) / f32(n);  v = center
        repeat iters:
            acc = 0                                   (zeros, +0.0)
            for each delta_i in UTF-8 hotkey order:
                diff = delta_i - v                    (f32 subtraction)
                r = sqrt(fsum(diff**2))               (exactly rounded float64, see module doc)
                s = f32(1) if r <= tau else f32(tau / r)
                acc = acc + w * (diff * s)            (f32: t = diff*s; t = w*t; acc = acc + t)
            v = v + acc                               (f32 addition)
        g = v

    ``diff * s`` is skipped when ``s == 1`` (``x * 1 == x`` bit for bit for finite ``x``).
    With no contributions ``g`` is all zeros (shaped like ``center``) and the weight "00000000".
    ``deltas`` must already have ``center``'s names and shapes (see :func:`validate_delta`).
    """
    names = _names(center)
    ids = sorted_ids(list(deltas))
    if not ids:
        zeros = {name: np.zeros_like(center[name], dtype=_F32) for name in names}
        return CClipResult(g=zeros, weight_hex=ZERO_WEIGHT_HEX, scales={})
    w = _F32(1) / _F32(len(ids))
    one = _F32(1)
    v = {name: np.array(center[name], dtype=_F32) for name in names}
    diff = {name: np.empty_like(v[name]) for name in names}
    scales: dict[str, list[str]] = {hk: [] for hk in ids}
    for _ in range(iters):
        acc = {name: np.zeros_like(v[name]) for name in names}
        for hk in ids:
            delta = deltas[hk]
            sq = ExactSum()
            for name in names:
                np.subtract(delta[name], v[name], out=diff[name])
                parts = split_f32(diff[name])
                sq.add_parts(parts, parts)
            r = math.sqrt(sq.value())
            s = one if r <= tau else _F32(tau / r)
            scales[hk].append(f32_hex(float(s)))
            for name in names:
                t = diff[name]
                if s != one:
                    np.multiply(t, s, out=t)
                np.multiply(t, w, out=t)
                np.add(acc[name], t, out=acc[name])
        for name in names:
            np.add(v[name], acc[name], out=v[name])
    return CClipResult(
        g=v, weight_hex=f32_hex(float(w)), scales={hk: tuple(s) for hk, s in scales.items()}
    )


def outer_step(state: OuterState, g: Tensors, params: Params) -> OuterState:
    """Nesterov, per element in float32 (``mu``, ``eta`` the f32 momentum and lr)::

    u' = (mu * u) + g;   theta' = theta - (eta * (g + (mu * u')));   center' = g (a copy)
    """
    mu, eta = params.momentum, params.lr
    theta: dict[str, F32Array] = {}
    u: dict[str, F32Array] = {}
    center: dict[str, F32Array] = {}
    for name in _names(state.theta):
        u_new = np.empty_like(state.u[name], dtype=_F32)
        np.multiply(mu, state.u[name], out=u_new)
        np.add(u_new, g[name], out=u_new)  # u' = (mu * u) + g
        t = np.empty_like(u_new)
        np.multiply(mu, u_new, out=t)
        np.add(g[name], t, out=t)
        np.multiply(eta, t, out=t)
        theta[name] = np.empty_like(t)
        np.subtract(state.theta[name], t, out=theta[name])  # theta - eta * (g + mu * u')
        u[name] = u_new
        center[name] = np.array(g[name], dtype=_F32)
    return OuterState(theta=theta, u=u, center=center)
