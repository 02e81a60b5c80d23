"""Parameter names, shapes and the initial state (spec 5.2): a pure function of ``model``.

Names and shapes, with ``d = d_model``, ``hd = d / n_heads``, ``kv = n_kv_heads * hd``::

    emb.weight (vocab, d)
    layers.{i:03d}.attn_norm (d)   .wq (d, d)   .wk (d, kv)   .wv (d, kv)   .wo (d, d)
    layers.{i:03d}.mlp_norm (d)    .w1 (d, d_ff)   .w3 (d, d_ff)   .w2 (d_ff, d)
    norm.weight (d)                head.weight (d, vocab)          (untied)

Matrices are stored ``(in, out)``: a projection is ``x @ W``. Only the dense decoder
(``n_experts == 1``, ``arch == "decoder"``) is implemented; MoE is refused.

Init (spec 5.2; the choices where it is open are marked *ours*):

- tensors are visited in sorted (UTF-8 byte) name order; ``tensor_index`` is the position in
  that order counting *every* tensor, norms included (*ours*);
- norms (``*_norm``, ``norm.weight``) are all ones;
- every other tensor of ``n`` elements takes the first ``n`` uniforms of the Philox stream keyed
  ``rng_ctr("init:{init_seed}", 0, 0, tensor_index)`` (:mod:`hypertrain.trainer.philox`), in C
  order, each mapped as ``f32(a * (2u - 1))`` with ``a = f64(init_std) * sqrt(3)`` computed in
  float64 (*ours*: the spec says Uniform(-a, a) from 24-bit uniforms in f64, cast to f32).

``init_state_hash(model) = TH(init_params(model))``, the manifest's ``init_state_hash``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from hypertrain.protocol.f32 import f32_from_hex
from hypertrain.protocol.hashes import rng_ctr
from hypertrain.protocol.manifest import ModelSpec
from hypertrain.protocol.tensorhash import th_hex
from hypertrain.trainer.errors import UnsupportedModel
from hypertrain.trainer.philox import uniform24

__all__ = [
    "RMS_EPS",
    "F32Array",
    "check_supported",
    "head_dim",
    "init_params",
    "init_state_hash",
    "is_norm",
    "layer_name",
    "param_shapes",
]

F32Array = np.ndarray[Any, np.dtype[np.float32]]

RMS_EPS = 1e-6
"""The RMSNorm epsilon of :func:`hypertrain.trainer.model.rms_norm` (here so that what reads it,
such as ``hypertrain export``, need not import torch)."""


def check_supported(model: ModelSpec) -> None:
    """Refuse (UnsupportedModel) what this trainer does not implement; check the head split."""
    if model.arch != "decoder":
        raise UnsupportedModel(f"arch {model.arch!r}: only the dense decoder is implemented")
    if model.n_experts != 1:
        raise UnsupportedModel(
            f"n_experts={model.n_experts}: mixture-of-experts layers are not implemented yet"
        )
    if model.master_dtype != "fp32" or model.compute_dtype != "fp32":
        raise UnsupportedModel(
            f"compute_dtype {model.compute_dtype!r}: only fp32 compute is implemented on CPU"
        )
    if model.d_model % model.n_heads or model.n_heads % model.n_kv_heads:
        raise UnsupportedModel("d_model must divide by n_heads and n_heads by n_kv_heads")
    if head_dim(model) % 2:
        raise UnsupportedModel("RoPE needs an even head dimension")


def head_dim(model: ModelSpec) -> int:
    """``d_model / n_heads``."""
    return model.d_model // model.n_heads


def layer_name(i: int, part: str) -> str:
    """``layers.{i:03d}.{part}``."""
    return f"layers.{i:03d}.{part}"


def is_norm(name: str) -> bool:
    """True for the RMSNorm gains (initialised to ones, never weight-decayed: they are 1-D)."""
    return name.endswith("_norm") or name == "norm.weight"


def param_shapes(model: ModelSpec) -> dict[str, tuple[int, ...]]:
    """``{name: shape}`` of every parameter, in sorted name order."""
    check_supported(model)
    d, kv = model.d_model, model.n_kv_heads * head_dim(model)
    shapes: dict[str, tuple[int, ...]] = {
        "emb.weight": (model.vocab, d),
        "norm.weight": (d,),
        "head.weight": (d, model.vocab),
    }
    for i in range(model.n_layers):
        shapes |= {
            layer_name(i, "attn_norm"): (d,),
            layer_name(i, "wq"): (d, d),
            layer_name(i, "wk"): (d, kv),
            layer_name(i, "wv"): (d, kv),
            layer_name(i, "wo"): (d, d),
            layer_name(i, "mlp_norm"): (d,),
            layer_name(i, "w1"): (d, model.d_ff),
            layer_name(i, "w3"): (d, model.d_ff),
            layer_name(i, "w2"): (model.d_ff, d),
        }
    return {name: shapes[name] for name in sorted(shapes, key=lambda n: n.encode("utf-8"))}


def init_params(model: ModelSpec) -> dict[str, F32Array]:
    """The initial parameters (module docstring), float32, sorted by name."""
    a = f32_from_hex(model.init_std) * math.sqrt(3.0)
    seed_label = f"init:{model.init_seed}"
    out: dict[str, F32Array] = {}
    for index, (name, shape) in enumerate(param_shapes(model).items()):
        if is_norm(name):
            out[name] = np.ones(shape, dtype=np.float32)
            continue
        n = math.prod(shape)
        u = uniform24(rng_ctr(seed_label, 0, 0, index), n)
        out[name] = (a * (2.0 * u - 1.0)).astype(np.float32).reshape(shape)
    return out


def init_state_hash(model: ModelSpec) -> str:
    """``TH(init_params(model))`` as 64 hex chars."""
    return th_hex(init_params(model))
