"""The miner's step-by-step training equals train_round; honeypot modes deviate where spec 6.5
says (H = 6, J = 2: leaves at t = 0, 2, 4, 6)."""

from __future__ import annotations

from typing import Any

import pytest

from hypertrain.miner.honeypot import HoneypotMode
from hypertrain.miner.training import train_round_async
from hypertrain.protocol.manifest import RunManifest
from hypertrain.protocol.tensorhash import th_hex
from hypertrain.trainer.loop import RoundResult, train_round
from hypertrain.trainer.params import init_params
from tests.trainer.helpers import RUN_ID, in_process_env, synthetic_round, tiny_manifest


@pytest.fixture
def manifest(configured: None) -> RunManifest:
    return tiny_manifest(env=in_process_env())


async def _train(manifest: RunManifest, mode: HoneypotMode) -> tuple[RoundResult, list[Any]]:
    ids, rows = synthetic_round(manifest, seed=5)
    steps: list[Any] = []
    result = await train_round_async(
        manifest, RUN_ID, 0, init_params(manifest.model), ids, rows, mode=mode,
        on_step=lambda t, h, loss: steps.append((t, h, loss)),
    )  # fmt: skip
    return result, steps


async def test_honest_equals_train_round(manifest: RunManifest) -> None:
    ids, rows = synthetic_round(manifest, seed=5)
    want = train_round(manifest, RUN_ID, 0, init_params(manifest.model), ids, rows)
    got, steps = await _train(manifest, HoneypotMode.HONEST)
    assert got.leaves_root == want.leaves_root
    assert got.metrics_root == want.metrics_root
    assert th_hex(got.theta_end) == th_hex(want.theta_end)
    assert th_hex(got.delta) == th_hex(want.delta)
    assert [s[0] for s in steps] == list(range(1, manifest.inner.H + 1))


@pytest.mark.parametrize(
    ("mode", "same_leaves"),
    [
        (HoneypotMode.FABRICATE, [0]),
        (HoneypotMode.NOISE, [0, 1]),
        (HoneypotMode.LAST_STEP, [0, 1, 2]),
    ],
)
async def test_honeypot_modes_deviate_where_expected(
    manifest: RunManifest, mode: HoneypotMode, same_leaves: list[int]
) -> None:
    honest, _ = await _train(manifest, HoneypotMode.HONEST)
    cheat, _ = await _train(manifest, mode)
    same = [i for i, (a, b) in enumerate(zip(honest.leaves, cheat.leaves, strict=True))
            if a.digest == b.digest]  # fmt: skip
    assert same == same_leaves
    assert th_hex(cheat.theta_end) != th_hex(honest.theta_end)
