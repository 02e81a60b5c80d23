"""A checkpoint's model in plain files for loaders outside hypertrain (``hypertrain export``).

:func:`export_files` turns a parsed ``model.safetensors`` (and, when there is one, the
checkpoint's manifest body) into three files, by name::

    model.safetensors  the same float32 tensors under the same names (module
                       :mod:`hypertrain.trainer.params`), with the plain metadata
                       {"format": "pt"} that torch/transformers-style loaders expect;
                       TH of its tensors is the checkpoint's theta_hash
    config.json        the architecture, every dimension, the tensor layout and the forward in
                       words (:data:`FORWARD`), what the weights are (run_id, round,
                       theta_hash) and, from the manifest, their license and dataset
    tokenizer.json     the byte tokenizer ht-byte-259: its pin and special ids

Pure (no torch, no I/O): the same inputs give the same bytes (safetensors writes tensors in a
fixed order and one metadata key; the JSON files are sorted, indented, newline-terminated).
"""

from __future__ import annotations

import json
from typing import Any, Final

import numpy as np
from safetensors.numpy import save as st_save

from hypertrain.aggregator.checkpoint import MODEL_FILE, CheckpointBody, ModelFile
from hypertrain.datasets.tokenizer import BOS, EOS, PAD, VOCAB, tokenizer_json
from hypertrain.protocol.converter import unstructure
from hypertrain.trainer.params import RMS_EPS, head_dim, param_shapes

__all__ = [
    "ARCHITECTURE",
    "CONFIG_FILE",
    "EXPORT_FILES",
    "FORWARD",
    "TOKENIZER_FILE",
    "export_config",
    "export_files",
    "tokenizer_file",
]

ARCHITECTURE: Final = "hypertrain-decoder"
CONFIG_FILE: Final = "config.json"
TOKENIZER_FILE: Final = "tokenizer.json"
EXPORT_FILES: Final = (CONFIG_FILE, MODEL_FILE, TOKENIZER_FILE)
"""The exact file set of an export directory, sorted."""

FORWARD: Final = (
    "tokens: int64 [B, T]; every tensor float32; matrices are stored (in, out): x @ W",
    "x = emb.weight[tokens]",
    "rmsnorm(x, w) = x * rsqrt(mean(x^2, -1) + rms_norm_eps) * w",
    "per layer i (layers.{i:03d}.*):",
    "  h = rmsnorm(x, attn_norm); q = rope(h @ wq), k = rope(h @ wk), v = h @ wv",
    "  heads [B, T, heads, head_dim]; kv head j // (n_heads / n_kv_heads) serves query head j",
    "  x = x + (softmax(q k^T / sqrt(head_dim), causal mask) v, heads merged) @ wo",
    "  h = rmsnorm(x, mlp_norm); x = x + (silu(h @ w1) * (h @ w3)) @ w2",
    "logits = rmsnorm(x, norm.weight) @ head.weight   (untied from emb.weight)",
    "rope, rotate-half: position p, pair j < head_dim/2, angle p * rope_theta^(-2j/head_dim)"
    " (tables in float64, cast to float32); x1, x2 = the two halves of each head;"
    " rope(x) = [x1*cos - x2*sin, x1*sin + x2*cos]",
)
"""The forward in words, for a re-implementation (:mod:`hypertrain.trainer.model`)."""


def _json_file(value: object) -> bytes:
    return (json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


def tokenizer_file() -> dict[str, Any]:
    """``tokenizer.json``: the tokenizer's name and pin, its vocabulary and special ids."""
    return {
        **tokenizer_json(),
        "vocab_size": VOCAB,
        "bytes": "ids 0..255 are the bytes of the UTF-8 text",
        "bos_token_id": BOS,
        "eos_token_id": EOS,
        "pad_token_id": PAD,
        "packing": "each document's bytes followed by EOS; no BOS",
    }


def export_config(model_file: ModelFile, body: CheckpointBody | None = None) -> dict[str, Any]:
    """``config.json`` of ``model_file``; ``body`` (the manifest's) adds the checkpoint's rounds,
    status, license and dataset."""
    model = model_file.model
    config: dict[str, Any] = {
        "architecture": ARCHITECTURE,
        "model_type": ARCHITECTURE,
        "n_layers": model.n_layers,
        "d_model": model.d_model,
        "n_heads": model.n_heads,
        "n_kv_heads": model.n_kv_heads,
        "head_dim": head_dim(model),
        "d_ff": model.d_ff,
        "vocab_size": model.vocab,
        "seq_len": model.seq_len,
        "rope_theta": model.rope_theta,
        "rope_style": "rotate-half",
        "rms_norm_eps": RMS_EPS,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "tokenizer": tokenizer_json()["name"],
        "run_id": model_file.run_id,
        "round": model_file.w,
        "theta_hash": model_file.theta_hash(),
        "tensors": {name: list(shape) for name, shape in param_shapes(model).items()},
        "forward": list(FORWARD),
        "model_spec": unstructure(model),
    }
    if body is not None:
        config |= {
            "rounds": list(body.rounds),
            "status": body.status,
            "license": body.license,
            "dataset": unstructure(body.dataset),
        }
    return config


def export_files(model_file: ModelFile, body: CheckpointBody | None = None) -> dict[str, bytes]:
    """The export directory's files by name (module docstring)."""
    arrays = {n: np.ascontiguousarray(a, dtype="<f4") for n, a in model_file.theta.items()}
    weights: bytes = st_save(arrays, metadata={"format": "pt"})
    return {
        CONFIG_FILE: _json_file(export_config(model_file, body)),
        MODEL_FILE: weights,
        TOKENIZER_FILE: _json_file(tokenizer_file()),
    }
