"""Shared fixtures of the trainer tests: a tiny manifest and seeded synthetic tokens.

Imports neither torch nor the torch-using trainer modules, so subprocess children can build the
manifest before :func:`hypertrain.trainer.determinism.configure`.
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np

from hypertrain.protocol.example import example_manifest
from hypertrain.protocol.manifest import ReferenceEnv, RunManifest, StatePolicy
from hypertrain.protocol.testmode import build_test_mode_manifest, decoder_param_count

RUN_ID = "ab" * 32

TINY_DIMS: dict[str, int] = {
    "n_layers": 2,
    "d_model": 32,
    "n_heads": 4,
    "n_kv_heads": 2,
    "d_ff": 48,
}
"""The reference CPU trainer fixture (spec 5.2): vocab 64, seq_len 16, H 6, J 2, pp 2."""


def tiny_manifest(
    *, env: ReferenceEnv | None = None, policy: StatePolicy = "carry", **inner: Any
) -> RunManifest:
    """The test-mode manifest shrunk to the spec's CPU fixture (GQA, two pipeline stages)."""
    base, _ = build_test_mode_manifest(coord_pubkey=example_manifest().coord_pubkey)
    model = attrs.evolve(
        base.model,
        vocab=64,
        seq_len=16,
        param_count=decoder_param_count(vocab=64, **TINY_DIMS),
        n_layers=TINY_DIMS["n_layers"],
        d_model=TINY_DIMS["d_model"],
        n_heads=TINY_DIMS["n_heads"],
        n_kv_heads=TINY_DIMS["n_kv_heads"],
        d_ff=TINY_DIMS["d_ff"],
    )
    inner_spec = attrs.evolve(base.inner, state_policy=policy, **inner)
    ref = base.reference_spec
    ref = attrs.evolve(
        ref, layout=attrs.evolve(ref.layout, pp=2), env=env if env is not None else ref.env
    )
    return attrs.evolve(base, model=model, inner=inner_spec, reference_spec=ref)


def in_process_env(threads: int = 1) -> ReferenceEnv:
    """An env the pytest process can satisfy: torch is already imported there, so the CPU kernel
    path and MKL mode are left unpinned (subprocess tests pin them)."""
    return ReferenceEnv(
        CUBLAS_WORKSPACE_CONFIG=":4096:8", CUDA_DISABLE_PTX_JIT="1", cpu_threads=threads
    )


def synthetic_round(
    manifest: RunManifest, seed: int, n_steps: int | None = None
) -> tuple[list[int], np.ndarray[Any, np.dtype[np.uint32]]]:
    """Seeded sample ids and u32 token rows ``[B, seq_len+1]`` for one round (or n_steps)."""
    inner, model = manifest.inner, manifest.model
    steps = inner.H if n_steps is None else n_steps
    n = inner.micro_batch * inner.grad_accum * steps
    rng = np.random.default_rng(seed)
    ids = [int(i) for i in rng.choice(1_000_000, size=n, replace=False)]
    rows = rng.integers(0, model.vocab, size=(n, model.seq_len + 1), dtype=np.uint32)
    return ids, rows
