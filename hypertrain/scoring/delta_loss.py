"""The ``delta-loss`` scorer: the loss of a miner's weights on a trace (DESIGN.md section 6).

Given the round's start weights ``theta_start``, a miner's decoded delta (``delta = start -
end``, spec 5.5) and a trace of token rows, :func:`score_delta_loss` computes, exactly:

1. ``theta_i = theta_start_i - delta_i`` per tensor: one float32 subtraction per element
   (numpy, round to nearest even). Non-finite weights are refused (:class:`BadInput` naming
   ``delta.bin``).
2. For each trace row ``r`` in file order, ``per_seq[r] = f32(model.loss(theta, row[None]))``:
   the mean next-token cross-entropy of that one sequence, computed by the trainer's
   functional decoder in float32 on CPU, one row per call (batch size 1, so a row's loss never
   depends on its neighbours), under ``torch.no_grad``.
3. ``loss = f32(math.fsum(float64(per_seq)) / n)``: an exact float64 sum, one float64 division,
   one rounding to float32. The objective is its 8-hex-char wire form
   (:func:`~hypertrain.protocol.f32.f32_hex`).
4. ``fingerprint = sha256(per_seq as little-endian float32 bytes, in row order)`` as hex.
5. ``losses``: those same bytes as hex, so that the coordinator can combine the slices of a
   hidden trace exactly (:mod:`hypertrain.scoring.slices`, whose :func:`~hypertrain.scoring.
   slices.summarise` computes steps 3 to 5).

A NaN anywhere is written as the canonical quiet NaN ``0x7fc00000`` (objective
``"0000c07f"``) and infinities as their bit patterns, so a broken model still gives one
well-defined answer. Bitwise agreement between machines needs the worker's pinned process
settings (:data:`hypertrain.scoring.scorers.SCORING_ENV`); this module itself only computes.

Result: ``{"loss": "<8 hex>", "fingerprint": "<64 hex>", "sequences": n, "losses": "<8n hex>"}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from hypertrain.protocol.manifest import ModelSpec
from hypertrain.scoring.inputs import BadInput, TokenRows
from hypertrain.scoring.slices import CANONICAL_NAN, f32_bits_hex, fingerprint, summarise
from hypertrain.trainer.codec import F32Array
from hypertrain.trainer.model import loss

__all__ = ["CANONICAL_NAN", "f32_bits_hex", "fingerprint", "miner_weights", "score_delta_loss"]


def miner_weights(
    theta_start: Mapping[str, F32Array], delta: Mapping[str, F32Array]
) -> dict[str, F32Array]:
    """``theta_start - delta`` per tensor in float32 (module doc, step 1)."""
    out: dict[str, F32Array] = {}
    with np.errstate(over="ignore", invalid="ignore"):
        for name in sorted(theta_start):
            value = np.subtract(theta_start[name], delta[name], dtype=np.float32)
            if not np.isfinite(value).all():
                raise BadInput(f"delta.bin: theta_start - delta is not finite in {name!r}")
            out[name] = value
    return out


def per_sequence_losses(
    model: ModelSpec, theta: Mapping[str, F32Array], rows: TokenRows
) -> F32Array:
    """The float32 loss of each row, one row per forward pass (module doc, step 2)."""
    params = {name: torch.from_numpy(np.ascontiguousarray(v)) for name, v in theta.items()}
    tokens = torch.from_numpy(rows.astype(np.int64))
    out = np.empty(len(rows), dtype=np.float32)
    with torch.no_grad():
        for i in range(len(rows)):
            out[i] = loss(params, tokens[i : i + 1], model).item()
    return out


def score_delta_loss(
    model: ModelSpec,
    theta_start: Mapping[str, F32Array],
    delta: Mapping[str, F32Array],
    rows: TokenRows,
) -> dict[str, Any]:
    """The ``delta-loss`` result of a miner's delta on ``rows`` (module doc)."""
    return summarise(per_sequence_losses(model, miner_weights(theta_start, delta), rows))
