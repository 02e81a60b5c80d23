"""The ``step-throughput`` scorer: tokens per second of reference training steps (timing).

From the weights of a theta-only ``state.bin`` and the rows of a trace, :func:`score_steps`
runs :data:`STEPS` training steps of the trainer's functional decoder with its hand-written
AdamW (:func:`~hypertrain.trainer.optim.adamw_step`; fresh zero moments, the fixed
hyperparameters of :data:`HYPER` and learning rate :data:`LR`). Step ``k`` (``0..STEPS-1``)
trains on the :data:`BATCH` rows ``(k * BATCH + j) mod n``, ``j = 0..BATCH-1``, of the trace.

- ``tokens_per_s = STEPS * BATCH * seq_len / elapsed``, ``elapsed`` measured with
  :func:`time.perf_counter` (monotonic) around the steps only, not the parsing;
- ``fingerprint`` = sha256 hex of the float32 loss of every step, little-endian, in step order.
  It is deterministic under the worker's pinned settings and proves the steps were run.

Result: ``{"tokens_per_s": float, "fingerprint": "<64 hex>", "steps": STEPS, "tokens": int}``.
For the test-mode model (2 layers, d_model 64, vocab 259, seq_len 64) a run takes well under a
second on one thread.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Final

import numpy as np
import torch

from hypertrain.protocol.manifest import ModelSpec
from hypertrain.scoring.delta_loss import fingerprint
from hypertrain.scoring.inputs import TokenRows
from hypertrain.trainer.codec import F32Array
from hypertrain.trainer.model import loss
from hypertrain.trainer.optim import AdamWHyper, OptState, adamw_step, f32

__all__ = ["BATCH", "HYPER", "LR", "STEPS", "score_steps"]

STEPS: Final = 16
BATCH: Final = 4
LR: Final = f32(1e-3)
HYPER: Final = AdamWHyper(
    beta1=f32(0.9), beta2=f32(0.95), eps=f32(1e-8), wd=f32(0.1), grad_clip=f32(1.0)
)


def _batch(rows: TokenRows, k: int) -> torch.Tensor:
    index = (np.arange(BATCH) + k * BATCH) % len(rows)
    return torch.from_numpy(rows[index].astype(np.int64))


def score_steps(model: ModelSpec, theta: Mapping[str, F32Array], rows: TokenRows) -> dict[str, Any]:
    """The ``step-throughput`` result (module doc)."""
    names = sorted(theta)
    params = {n: torch.from_numpy(np.array(theta[n], dtype=np.float32)) for n in names}
    for p in params.values():
        p.requires_grad_(True)
    zeros = {n: torch.zeros_like(p) for n, p in params.items()}
    opt = OptState(m=zeros, v={n: z.clone() for n, z in zeros.items()}, step=0)
    batches = [_batch(rows, k) for k in range(STEPS)]
    losses = np.empty(STEPS, dtype=np.float32)
    started = time.perf_counter()
    for k, tokens in enumerate(batches):
        ce = loss(params, tokens, model)
        grads = torch.autograd.grad(ce, [params[n] for n in names])
        adamw_step(params, dict(zip(names, grads, strict=True)), opt, LR, HYPER)
        losses[k] = ce.item()
    elapsed = time.perf_counter() - started
    tokens_done = STEPS * BATCH * model.seq_len
    return {
        "tokens_per_s": tokens_done / max(elapsed, 1e-9),
        "fingerprint": fingerprint(losses),
        "steps": STEPS,
        "tokens": tokens_done,
    }
