"""The model really learns: 200 deterministic steps on the default corpus cut the held-out loss.

The data set is built the way operators build it (``hypertrain.datasets.build`` over the Python
standard library's sources, no download), the trainer runs its real inner loop on the train
split, and the loss is measured on the holdout split, which training never touches.
"""

from __future__ import annotations

import math
from pathlib import Path

import attrs
import numpy as np
import pytest
import torch

from hypertrain.datasets import BuildOptions, Dataset, build
from hypertrain.datasets.sources import stdlib_sources
from hypertrain.protocol.example import example_manifest
from hypertrain.protocol.manifest import RunManifest
from hypertrain.protocol.testmode import build_test_mode_manifest
from hypertrain.trainer.loop import train_round
from hypertrain.trainer.model import loss
from hypertrain.trainer.params import init_params
from tests.trainer.helpers import RUN_ID, in_process_env

STEPS = 200
EVAL_SAMPLES = 96


def _manifest(data: Dataset) -> RunManifest:
    base, _ = build_test_mode_manifest(coord_pubkey=example_manifest().coord_pubkey)
    assert base.model.seq_len == data.seq_len
    inner = attrs.evolve(base.inner, H=STEPS, J=50)
    ref = attrs.evolve(base.reference_spec, env=in_process_env())
    return attrs.evolve(base, inner=inner, reference_spec=ref)


def _heldout_loss(params: dict[str, np.ndarray], holdout: Dataset, m: RunManifest) -> float:
    rows = holdout.samples(range(min(EVAL_SAMPLES, holdout.n_samples)))
    tokens = torch.from_numpy(rows.astype(np.int64))
    tensors = {name: torch.from_numpy(value) for name, value in params.items()}
    with torch.no_grad():
        return float(loss(tensors, tokens, m.model))


@pytest.mark.slow
def test_two_hundred_steps_cut_the_heldout_loss_well_below_the_initial_one(
    tmp_path: Path, configured: None
) -> None:
    build(
        BuildOptions(
            sources=tuple(stdlib_sources()),
            out=tmp_path / "data",
            seq_len=64,
            max_bytes=1 << 20,
            samples_per_shard=512,
            holdout_frac=0.02,
            salt=bytes(32),
        )
    )
    train = Dataset.open(tmp_path / "data")
    holdout = Dataset.open(tmp_path / "data", split="holdout")
    m = _manifest(train)
    batch = m.inner.micro_batch * m.inner.grad_accum * STEPS
    assert batch <= train.n_samples
    sample_ids = [int(i) for i in np.random.default_rng(0).permutation(train.n_samples)[:batch]]

    theta = init_params(m.model)
    before = _heldout_loss(theta, holdout, m)
    result = train_round(m, RUN_ID, 0, theta, sample_ids, train.samples)
    after = _heldout_loss(result.theta_end, holdout, m)

    assert before == pytest.approx(math.log(m.model.vocab), rel=0.05)  # uniform at init
    print(f"held-out loss: {before:.4f} at init, {after:.4f} after {STEPS} steps")
    assert after < 0.85 * before, (before, after)
    assert len(result.leaves) == STEPS // m.inner.J + 1
