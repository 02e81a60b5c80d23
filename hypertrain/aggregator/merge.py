"""The outer merge of one round: preclip, CenteredClip, Nesterov step (spec/protocol.md section 7).

Everything here is part of the protocol: a tape replays it bit for bit. The arithmetic is:

* **Element-wise** numpy float32 with one IEEE-754 rounding per operation (round half to even,
  no fused multiply-add), each operation written out separately below in the order given.
  Tensors go in increasing UTF-8 name order, contributions in increasing UTF-8 hotkey order
  (element-wise results do not depend on the name order; the hotkey order matters for ``acc``).
* **Norms** ``r = sqrt(S)`` where ``S`` is ``math.fsum`` of the exact float64 squares of every
  element of every tensor, i.e. the exactly rounded sum (computed by :mod:`.exact`), and
  ``sqrt`` is the correctly rounded float64 ``math.sqrt``. Preclip and CenteredClip use ``r``
  only through ``r <= x`` and ``f32(x / r)``; they decide both from a float64 sum with a proven
  error bound and compute the exact sum only when the bound leaves the answer open
  (:mod:`.bounded`), so the results are those of the exact norm, bit for bit.
* **Chunks**: element-wise loops run over chunks of each tensor (:data:`.bounded.CHUNK`
  elements) so the buffers stay in the CPU cache; each element still sees exactly the operations
  below in the order given, so chunking changes no bit.
* **Scalars** from the manifest are float32 values. A ratio such as ``preclip_norm / r`` is one
  float64 division of the float32 value by the float64 norm, then rounded to float32; the
  comparisons ``r <= preclip_norm`` and ``r <= tau`` are made in float64.

:func:`aggregate_round` runs, for the contributions left after ``excluded``: validation, preclip,
the copy screen (:mod:`.copyscreen`), CenteredClip around ``state.center``, the outer step. Its
preclip is a scale per contribution (:func:`preclip_scale`) that the screen and CenteredClip
apply to each chunk they read (``prescale``): :func:`preclip`'s bits, and no scaled copy.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from typing import Literal, Protocol

import attrs
import numpy as np
import numpy.typing as npt

from hypertrain.aggregator import bounded
from hypertrain.aggregator.bounded import CHUNK, SquareSum, decide, scale_for, segments
from hypertrain.aggregator.copyscreen import CopyFlag, copy_screen
from hypertrain.aggregator.exact import ExactSum, split_f32
from hypertrain.aggregator.outerstate import OuterState
from hypertrain.protocol.errors import HypertrainError, Malformed
from hypertrain.protocol.f32 import f32_from_hex, f32_hex
from hypertrain.protocol.manifest import OuterOpt
from hypertrain.trainer.codec import F32Array

__all__ = [
    "CClipResult",
    "MergeInputError",
    "MergeResult",
    "OuterParams",
    "Params",
    "UnsupportedOuterOpt",
    "aggregate_round",
    "centered_clip",
    "norm",
    "outer_step",
    "preclip",
    "preclip_scale",
    "sorted_ids",
    "validate_delta",
]

Tensors = Mapping[str, F32Array]
ZERO_WEIGHT_HEX = "00000000"
_F32 = np.float32


class MergeInputError(Malformed):
    """A contribution that is not a finite float32 delta with exactly the model's names/shapes."""


class UnsupportedOuterOpt(HypertrainError, NotImplementedError):
    """The manifest's outer optimizer is not implemented (v1: only ``nesterov``)."""


def _f32_param(what: str, h: str) -> np.float32:
    value = f32_from_hex(h)
    if not math.isfinite(value) or value < 0:
        raise Malformed(f"outer params: {what} {h!r} is not a finite non-negative float32")
    return _F32(value)


class OuterParams(Protocol):
    """What :meth:`Params.from_outer` reads: a manifest ``OuterSpec`` or a tape's ``params``."""

    @property
    def opt(self) -> OuterOpt: ...
    @property
    def lr(self) -> str: ...
    @property
    def momentum(self) -> str: ...
    @property
    def preclip_norm(self) -> str: ...
    @property
    def cclip_tau(self) -> str: ...
    @property
    def cclip_iters(self) -> int: ...


@attrs.frozen
class Params:
    """The outer section of the manifest as float32 scalars (``opt`` nesterov only)."""

    opt: Literal["nesterov"]
    lr: np.float32
    momentum: np.float32
    preclip_norm: np.float32
    cclip_tau: np.float32
    cclip_iters: int

    @classmethod
    def from_outer(cls, outer: OuterParams) -> Params:
        """Decode ``outer`` (the manifest's, or a signed tape's own ``params``); sparseloco
        raises :class:`UnsupportedOuterOpt`."""
        if outer.opt != "nesterov":
            raise UnsupportedOuterOpt(f"outer optimizer {outer.opt!r} is not implemented")
        return cls(
            opt="nesterov",
            lr=_f32_param("lr", outer.lr),
            momentum=_f32_param("momentum", outer.momentum),
            preclip_norm=_f32_param("preclip_norm", outer.preclip_norm),
            cclip_tau=_f32_param("cclip_tau", outer.cclip_tau),
            cclip_iters=outer.cclip_iters,
        )

    def to_tape(self) -> dict[str, str | int]:
        """``{opt, lr, momentum, preclip_norm, cclip_tau, cclip_iters}`` with f32 hex reals."""
        return {
            "opt": self.opt,
            "lr": f32_hex(float(self.lr)),
            "momentum": f32_hex(float(self.momentum)),
            "preclip_norm": f32_hex(float(self.preclip_norm)),
            "cclip_tau": f32_hex(float(self.cclip_tau)),
            "cclip_iters": self.cclip_iters,
        }


def sorted_ids(ids: Collection[str]) -> list[str]:
    """``ids`` in increasing UTF-8 byte order (the contribution order of spec 7)."""
    return sorted(ids, key=lambda s: s.encode("utf-8"))


def _names(tensors: Mapping[str, object]) -> list[str]:
    return sorted(tensors, key=lambda s: s.encode("utf-8"))


def norm(tensors: Tensors) -> float:
    """``sqrt(fsum(float64(x)**2 for every element of every tensor))``, exactly rounded sum."""
    acc = ExactSum()
    for name in _names(tensors):
        parts = split_f32(tensors[name])
        acc.add_parts(parts, parts)
    return math.sqrt(acc.value())


def _flat(array: F32Array) -> F32Array:
    """``array`` as a 1-d float32 array: a view when it is C-contiguous, else a copy."""
    out: F32Array = np.ravel(np.asarray(array, dtype=_F32))
    return out


def _wide() -> npt.NDArray[np.float64]:
    return np.empty(CHUNK, dtype=np.float64)


def preclip_scale(delta: Tensors, preclip_norm: float) -> tuple[bool, np.float32]:
    """``(False, f32(1))`` if ``r <= preclip_norm``, else ``(True, f32(preclip_norm / r))``.

    ``r = norm(delta)``; the scale is one float64 division rounded to float32. The decision comes
    from a bounded float64 sum when it proves it (:mod:`.bounded`), else from the exact norm.
    """
    names = _names(delta)
    flats = {name: _flat(delta[name]) for name in names}
    sq, wide = SquareSum(), _wide()
    for name, sl in segments(flats, names):
        sq.add(flats[name][sl], wide)
    decided = decide(*sq.bounds(), preclip_norm)
    within, scale = decided or scale_for(norm(delta), preclip_norm)
    return not within, scale


def preclip(delta: Tensors, preclip_norm: float) -> tuple[dict[str, F32Array], bool]:
    """``(delta, False)`` if ``r <= preclip_norm``, else ``(delta * f32(preclip_norm / r), True)``.

    The scale is :func:`preclip_scale`'s, applied with one float32 multiplication per element.
    The unclipped result holds the input arrays themselves.
    """
    clipped, scale = preclip_scale(delta, preclip_norm)
    if not clipped:
        return dict(delta), False
    out = {name: np.empty_like(delta[name], dtype=_F32) for name in _names(delta)}
    for name, array in out.items():
        np.multiply(delta[name], scale, out=array)  # out= keeps 0-d results arrays
    return out, True


@attrs.frozen(eq=False)
class CClipResult:
    """``g``, the uniform weight ``w`` as f32 hex and each contributor's ``s`` per iteration."""

    g: dict[str, F32Array]
    weight_hex: str
    scales: dict[str, tuple[str, ...]]


def centered_clip(
    deltas: Mapping[str, Tensors],
    center: Tensors,
    tau: float,
    iters: int,
    *,
    prescale: Mapping[str, np.float32] | None = None,
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
    With ``prescale``, each ``delta_i`` is the preclipped ``f32(x * prescale[i])`` (one float32
    multiplication per element, skipped for 1: :func:`.bounded.prescaled`), recomputed where a
    chunk is read: the bits of passing :func:`preclip`'s output, without a copy of the deltas.
    Each iteration makes two passes over the chunks: the first sums every ``diff**2`` in float64
    with a proven bound, which decides ``s`` (:mod:`.bounded`; the exact norm only when it does
    not), the second recomputes ``diff`` and accumulates ``acc`` and ``v`` chunk by chunk.
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
    pre = {hk: one if prescale is None else prescale[hk] for hk in ids}
    v = {name: np.array(center[name], dtype=_F32, order="C") for name in names}
    vflat = {name: v[name].reshape(-1) for name in names}  # views of v: C order, always
    flats = {hk: {name: _flat(deltas[hk][name]) for name in names} for hk in ids}
    plan = list(segments(vflat, names))
    t, acc, wide = np.empty(CHUNK, dtype=_F32), np.empty(CHUNK, dtype=_F32), _wide()
    scales: dict[str, list[str]] = {hk: [] for hk in ids}
    for _ in range(iters):
        sums = {hk: SquareSum() for hk in ids}
        for name, sl in plan:  # pass 1: every diff's bounded sum of squares
            vv = vflat[name][sl]
            tt = t[: vv.shape[0]]
            for hk in ids:
                np.subtract(bounded.prescaled(flats[hk][name][sl], pre[hk], tt), vv, out=tt)
                sums[hk].add(tt, wide)
        factor: dict[str, np.float32] = {}
        for hk in ids:
            decided = decide(*sums[hk].bounds(), tau)
            _, factor[hk] = decided or scale_for(_diff_norm(deltas[hk], pre[hk], v, names), tau)
            scales[hk].append(f32_hex(float(factor[hk])))
        for name, sl in plan:  # pass 2: acc, then v = v + acc, chunk by chunk
            vv = vflat[name][sl]
            n = vv.shape[0]
            tt, aa = t[:n], acc[:n]
            aa.fill(0)
            for hk in ids:
                np.subtract(bounded.prescaled(flats[hk][name][sl], pre[hk], tt), vv, out=tt)
                if factor[hk] != one:
                    np.multiply(tt, factor[hk], out=tt)
                np.multiply(tt, w, out=tt)
                np.add(aa, tt, out=aa)
            np.add(vv, aa, out=vv)
    return CClipResult(
        g=v, weight_hex=f32_hex(float(w)), scales={hk: tuple(s) for hk, s in scales.items()}
    )


def _diff_norm(delta: Tensors, scale: np.float32, v: Tensors, names: list[str]) -> float:
    """The exact ``sqrt(fsum((f32(delta * scale) - v)**2))`` (float32 products and differences,
    the product skipped for 1), for undecided bounds."""
    sq = ExactSum()
    for name in names:
        x = bounded.prescaled(_flat(delta[name]), scale, np.empty(delta[name].size, dtype=_F32))
        parts = split_f32(np.subtract(x, _flat(v[name]), dtype=_F32))
        sq.add_parts(parts, parts)
    return math.sqrt(sq.value())


def outer_step(state: OuterState, g: Tensors, params: Params) -> OuterState:
    """Nesterov, per element in float32 (``mu``, ``eta`` the f32 momentum and lr)::

    u' = (mu * u) + g;   theta' = theta - (eta * (g + (mu * u')));   center' = g (a copy)
    """
    if params.opt != "nesterov":  # pragma: no cover - Params only builds nesterov
        raise UnsupportedOuterOpt(f"outer optimizer {params.opt!r} is not implemented")
    mu, eta = params.momentum, params.lr
    theta: dict[str, F32Array] = {}
    u: dict[str, F32Array] = {}
    center: dict[str, F32Array] = {}
    t = np.empty(CHUNK, dtype=_F32)
    for name in _names(state.theta):
        # C order, whatever the inputs': u_out and th_out below must be views, not copies.
        u[name] = np.empty_like(state.u[name], dtype=_F32, order="C")
        theta[name] = np.empty_like(state.theta[name], dtype=_F32, order="C")
        u_in, g_in, th_in = _flat(state.u[name]), _flat(g[name]), _flat(state.theta[name])
        u_out, th_out = u[name].reshape(-1), theta[name].reshape(-1)
        for start in range(0, u_out.shape[0], CHUNK):
            sl = slice(start, start + CHUNK)
            un, tt = u_out[sl], t[: u_out[sl].shape[0]]
            np.multiply(mu, u_in[sl], out=un)
            np.add(un, g_in[sl], out=un)  # u' = (mu * u) + g
            np.multiply(mu, un, out=tt)
            np.add(g_in[sl], tt, out=tt)
            np.multiply(eta, tt, out=tt)
            np.subtract(th_in[sl], tt, out=th_out[sl])  # theta - eta * (g + mu * u')
        center[name] = np.array(g[name], dtype=_F32)
    return OuterState(theta=theta, u=u, center=center)


def validate_delta(hotkey: str, delta: object, shapes: Mapping[str, tuple[int, ...]]) -> Tensors:
    """``delta`` if it is finite float32 with exactly ``shapes``; else :class:`MergeInputError`."""
    if not isinstance(delta, Mapping):
        raise MergeInputError(f"miner {hotkey!r}: delta is a {type(delta).__name__}, not a mapping")
    missing = sorted_ids([n for n in shapes if n not in delta])
    if missing:
        raise MergeInputError(f"miner {hotkey!r}: tensor {missing[0]!r} is missing")
    extra = sorted_ids([str(n) for n in delta if n not in shapes])
    if extra:
        raise MergeInputError(f"miner {hotkey!r}: tensor {extra[0]!r} is not in the model")
    for name in _names(shapes):
        array = delta[name]
        if not isinstance(array, np.ndarray) or array.dtype != _F32:
            kind = getattr(array, "dtype", type(array).__name__)
            raise MergeInputError(f"miner {hotkey!r}: tensor {name!r} is {kind}, not float32")
        if array.shape != tuple(shapes[name]):
            raise MergeInputError(
                f"miner {hotkey!r}: tensor {name!r} has shape {array.shape}, "
                f"the model's is {tuple(shapes[name])}"
            )
        if not np.isfinite(array).all():
            raise MergeInputError(f"miner {hotkey!r}: tensor {name!r} holds NaN or infinity")
    return delta


@attrs.frozen(eq=False)
class MergeResult:
    """One round's merge: new state, ``g``, tape inputs and screens (all ids UTF-8 sorted)."""

    state_out: OuterState
    g: dict[str, F32Array]
    inputs: tuple[tuple[str, str], ...]  # (hotkey, weight f32 hex)
    excluded: tuple[str, ...]
    preclipped: tuple[str, ...]
    copy_flags: tuple[CopyFlag, ...]
    raise_q: tuple[str, ...]
    scales: dict[str, tuple[str, ...]]


def aggregate_round(
    state: OuterState,
    deltas: Mapping[str, Mapping[str, F32Array]],
    params: Params,
    *,
    excluded: Collection[str] = (),
) -> MergeResult:
    """Drop ``excluded``, validate, preclip, copy-screen, CenteredClip around ``state.center``,
    then the outer step. Contributions are taken in UTF-8 hotkey order whatever the mapping's.
    """
    shapes = state.shapes()
    dropped = set(excluded)
    kept: dict[str, Tensors] = {}
    scale: dict[str, np.float32] = {}  # the preclip, applied where the deltas are read
    clipped: list[str] = []
    for hk in sorted_ids([h for h in deltas if h not in dropped]):
        kept[hk] = validate_delta(hk, deltas[hk], shapes)
        was_clipped, scale[hk] = preclip_scale(kept[hk], float(params.preclip_norm))
        if was_clipped:
            clipped.append(hk)
    flags, raise_q = copy_screen(kept, prescale=scale)
    tau, iters = float(params.cclip_tau), params.cclip_iters
    cc = centered_clip(kept, state.center, tau, iters, prescale=scale)
    return MergeResult(
        state_out=outer_step(state, cc.g, params),
        g=cc.g,
        inputs=tuple((hk, cc.weight_hex) for hk in kept),
        excluded=tuple(sorted_ids(list(dropped))),
        preclipped=tuple(clipped),
        copy_flags=flags,
        raise_q=raise_q,
        scales=cc.scales,
    )
