"""Job inputs for the scoring tests: the CPU test-mode model, its init state, a delta, a trace.

Imports neither torch nor the torch-using modules (the files are plain bytes).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from hypertrain.protocol.converter import unstructure
from hypertrain.protocol.example import example_manifest
from hypertrain.protocol.manifest import ModelSpec
from hypertrain.protocol.testmode import build_test_mode_manifest
from hypertrain.trainer.codec import encode_dense_int8
from hypertrain.trainer.params import init_params
from hypertrain.trainer.state import pack_state

TRACE_ROWS = 12


def scoring_model() -> ModelSpec:
    """The model section of the CPU test-mode manifest (2 layers, d 64, vocab 259, T 64)."""
    manifest, _ = build_test_mode_manifest(coord_pubkey=example_manifest().coord_pubkey)
    return manifest.model


def synthetic_delta(model: ModelSpec, seed: int = 1, scale: float = 1e-3) -> bytes:
    """A dense-int8 payload of small seeded values over the model's parameters."""
    rng = np.random.default_rng(seed)
    theta = init_params(model)
    delta = {n: (rng.standard_normal(a.shape) * scale).astype(np.float32) for n, a in theta.items()}
    return encode_dense_int8(delta)


def trace_bytes(model: ModelSpec, rows: int = TRACE_ROWS, seed: int = 2) -> bytes:
    """``rows`` seeded rows of ``seq_len + 1`` little-endian uint16 ids below ``vocab``."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, model.vocab, size=(rows, model.seq_len + 1))
    return ids.astype("<u2").tobytes()


def write_job(directory: Path, *, with_delta: bool = True) -> dict[str, Path]:
    """Write model.json, state.bin, [delta.bin,] trace.u16 into ``directory``; their paths."""
    model = scoring_model()
    directory.mkdir(parents=True, exist_ok=True)
    files = {
        "model.json": json.dumps(unstructure(model)).encode(),
        "state.bin": pack_state(init_params(model)),
        "trace.u16": trace_bytes(model),
    }
    if with_delta:
        files["delta.bin"] = synthetic_delta(model)
    paths = {}
    for name, data in files.items():
        (directory / name).write_bytes(data)
        paths[name] = directory / name
    return paths
