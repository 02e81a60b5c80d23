"""The functional dense decoder over a flat ``{name: float32 tensor}`` dict (spec 5.2).

``loss(params, tokens, model)`` with ``tokens`` int64 ``[B, T+1]``, everything float32::

    x      = emb[tokens[:, :-1]]                                    (Embed, below)
    per layer i:
      h    = rmsnorm(x, attn_norm)        rmsnorm(x, w) = x * rsqrt(mean(x^2, -1) + 1e-6) * w
      q    = rope(h @ wq)  k = rope(h @ wk)  v = h @ wv            heads: [B, T, heads, hd]
      k, v expanded from n_kv_heads to n_heads (query head j reads kv head j // (nh / nkv))
      p    = softmax((q @ k^T) / sqrt(hd) with -inf above the diagonal, over keys)
      x    = x + (p @ v merged to [B, T, d]) @ wo
      h    = rmsnorm(x, mlp_norm)
      x    = x + (silu(h @ w1) * (h @ w3)) @ w2
    logits = rmsnorm(x, norm.weight) @ head.weight
    loss   = mean cross-entropy of logits against tokens[:, 1:]

RoPE (rotate-half form, *ours* where the spec is silent): for position ``p`` and pair
``j < hd/2`` the angle is ``p * rope_theta^(-2j/hd)``; ``cos``/``sin`` tables are computed in
float64 on the host and cast to float32; ``rope(x) = [x1*cos - x2*sin, x1*sin + x2*cos]`` with
``x1, x2`` the first and second halves of each head.

Embed: the forward is a row gather; the backward is the spec's deterministic sorted
segment-sum: the flat indices are sorted *stably*, the incoming gradient rows are taken in that
order, and ``index_add_`` accumulates them into a zero ``(vocab, d)`` tensor, so every
embedding row is the left-to-right float32 sum of its occurrences in token order, whatever the
thread count.

No fused attention or other kernel that picks an algorithm at run time is used.

:func:`forward` is the one forward: :func:`loss` is it without a tap, and a dispute's trace
(:mod:`hypertrain.trainer.trace`) is it with a tap that hashes (and, in tests, perturbs) every
op output, so the traced forward is the training forward bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812

from hypertrain.protocol.manifest import ModelSpec
from hypertrain.trainer.params import RMS_EPS, check_supported, head_dim, layer_name

__all__ = ["RMS_EPS", "Tap", "embed", "forward", "loss", "rms_norm", "rope_tables"]


class _Embed(torch.autograd.Function):
    """Row gather with the sorted segment-sum backward (module docstring)."""

    @staticmethod
    def forward(ctx: Any, weight: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(idx)
        ctx.vocab = weight.shape[0]
        return weight.index_select(0, idx.reshape(-1)).reshape(*idx.shape, weight.shape[1])

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor, None]:
        (idx,) = ctx.saved_tensors
        (grad,) = grads
        flat = idx.reshape(-1)
        rows = grad.reshape(flat.numel(), -1)
        order = torch.sort(flat, stable=True).indices
        out = torch.zeros(ctx.vocab, rows.shape[1], dtype=rows.dtype)
        out.index_add_(0, flat[order], rows[order].contiguous())
        return out, None


def embed(weight: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``weight[idx]`` with the deterministic sorted segment-sum backward."""
    out: torch.Tensor = _Embed.apply(weight, idx)  # type: ignore[no-untyped-call]
    return out


def rms_norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``x * rsqrt(mean(x^2, -1) + 1e-6) * w`` in float32."""
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + RMS_EPS) * w


def rope_tables(seq_len: int, hd: int, theta: int) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 ``cos``/``sin`` tables ``[seq_len, hd/2]`` computed in float64 on the host."""
    j = np.arange(hd // 2, dtype=np.float64)
    inv_freq = np.power(float(theta), -2.0 * j / hd)
    angles = np.outer(np.arange(seq_len, dtype=np.float64), inv_freq)
    cos = torch.from_numpy(np.cos(angles).astype(np.float32))
    sin = torch.from_numpy(np.sin(angles).astype(np.float32))
    return cos, sin


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[:, None, :], sin[:, None, :]  # [T, 1, hd/2] against [B, T, heads, hd/2]
    return torch.cat((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1)


def _attention(
    p: Mapping[str, torch.Tensor],
    i: int,
    h: torch.Tensor,
    model: ModelSpec,
    tables: tuple[torch.Tensor, torch.Tensor],
) -> torch.Tensor:
    b, t, d = h.shape
    nh, nkv, hd = model.n_heads, model.n_kv_heads, head_dim(model)
    q = _rope((h @ p[layer_name(i, "wq")]).view(b, t, nh, hd), *tables)
    k = _rope((h @ p[layer_name(i, "wk")]).view(b, t, nkv, hd), *tables)
    v = (h @ p[layer_name(i, "wv")]).view(b, t, nkv, hd)
    if nkv != nh:
        rep = nh // nkv
        k = k.unsqueeze(3).expand(b, t, nkv, rep, hd).reshape(b, t, nh, hd)
        v = v.unsqueeze(3).expand(b, t, nkv, rep, hd).reshape(b, t, nh, hd)
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B, nh, T, hd]
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
    causal = torch.ones(t, t, dtype=torch.bool).triu(1)
    probs = torch.softmax(scores.masked_fill(causal, float("-inf")), dim=-1)
    out = (probs @ v).transpose(1, 2).reshape(b, t, d)
    return out @ p[layer_name(i, "wo")]


Tap = Callable[[int, str, torch.Tensor], torch.Tensor]
"""``tap(layer, op, out) -> out'``: sees (and may replace) the output of every op of the
forward (:func:`forward`); what it returns is what the rest of the forward uses."""


def _untapped(layer: int, op: str, out: torch.Tensor) -> torch.Tensor:
    return out


def forward(
    params: Mapping[str, torch.Tensor],
    tokens: torch.Tensor,
    model: ModelSpec,
    tap: Tap | None = None,
) -> torch.Tensor:
    """The loss of ``tokens`` ``[B, T+1]`` (as :func:`loss`), calling ``tap`` on each op output.

    The ops, named as the bisection names them (:func:`hypertrain.rounds.bisection.layer_ops`):
    layer 0 starts with ``embed``; each layer ``i`` has ``attn_norm``, ``attn`` (the attention
    output after ``wo``, before the residual add), ``attn_residual``, ``mlp_norm``, ``mlp``
    (``(silu(h @ w1) * (h @ w3)) @ w2``) and ``mlp_residual``; the tail "layer" ``n_layers`` has
    ``final_norm``, ``head`` (the logits) and ``loss`` (the 0-d mean cross-entropy, which is
    also the result). Without a tap this is exactly :func:`loss`'s arithmetic.
    """
    check_supported(model)
    if tokens.dim() != 2 or tokens.shape[1] < 2 or tokens.dtype != torch.int64:
        raise ValueError(f"tokens must be int64 [B, T+1], got {tokens.dtype} {tuple(tokens.shape)}")
    op = _untapped if tap is None else tap
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    tables = rope_tables(inputs.shape[1], head_dim(model), model.rope_theta)
    x = op(0, "embed", embed(params["emb.weight"], inputs))
    for i in range(model.n_layers):
        h = op(i, "attn_norm", rms_norm(x, params[layer_name(i, "attn_norm")]))
        attn = op(i, "attn", _attention(params, i, h, model, tables))
        x = op(i, "attn_residual", x + attn)
        h = op(i, "mlp_norm", rms_norm(x, params[layer_name(i, "mlp_norm")]))
        gate = F.silu(h @ params[layer_name(i, "w1")])
        mlp = op(i, "mlp", (gate * (h @ params[layer_name(i, "w3")])) @ params[layer_name(i, "w2")])
        x = op(i, "mlp_residual", x + mlp)
    tail = model.n_layers
    normed = op(tail, "final_norm", rms_norm(x, params["norm.weight"]))
    logits = op(tail, "head", normed @ params["head.weight"])
    ce = F.cross_entropy(logits.reshape(-1, model.vocab), targets.reshape(-1))
    return op(tail, "loss", ce)


def loss(
    params: Mapping[str, torch.Tensor], tokens: torch.Tensor, model: ModelSpec
) -> torch.Tensor:
    """Mean next-token cross-entropy (a 0-d float32 tensor) of ``tokens`` ``[B, T+1]``: the
    untapped :func:`forward`."""
    return forward(params, tokens, model)
