"""The miner's step-by-step training equals train_round; honeypot modes deviate where spec 6.5
says (H = 6, J = 2: leaves at t = 0, 2, 4, 6)."""

from __future__ import annotations

from typing import Any

import pytest

from hypertrain.miner.honeypot import HoneypotMode
from hypertrain.miner.training import train_round_async
from hypertrain.protocol.manifest import RunManifest
from hypertrain.protocol.tensorhash import th_hex
from hypertrain.trainer.fault import Fault
from hypertrain.trainer.leaves import stage_states
from hypertrain.trainer.loop import RoundResult, StateAt, train_round
from hypertrain.trainer.params import init_params
from hypertrain.trainer.state import pack_state
from tests.trainer.helpers import RUN_ID, in_process_env, synthetic_round, tiny_manifest


@pytest.fixture
def manifest(configured: None) -> RunManifest:
    return tiny_manifest(env=in_process_env())


async def _train(
    manifest: RunManifest, mode: HoneypotMode, *, keep: bool = False
) -> tuple[RoundResult, list[Any]]:
    ids, rows = synthetic_round(manifest, seed=5)
    steps: list[Any] = []
    result = await train_round_async(
        manifest, RUN_ID, 0, init_params(manifest.model), ids, rows, mode=mode,
        on_step=lambda t, h, loss: steps.append((t, h, loss)), keep_leaf_states=keep,
    )  # fmt: skip
    return result, steps


def _packed(state: StateAt) -> bytes:
    return pack_state(state.theta, state.opt.m, state.opt.v, state.opt.step)


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


async def test_honest_leaf_states_equal_train_rounds_bit_for_bit(manifest: RunManifest) -> None:
    ids, rows = synthetic_round(manifest, seed=5)
    theta = init_params(manifest.model)
    want = train_round(manifest, RUN_ID, 0, theta, ids, rows, keep_leaf_states=True)
    got, _ = await _train(manifest, HoneypotMode.HONEST, keep=True)
    assert len(got.leaf_states) == manifest.inner.H // manifest.inner.J + 1
    assert [_packed(s) for s in got.leaf_states] == [_packed(s) for s in want.leaf_states]
    assert [s.t for s in got.leaf_states] == [leaf.t for leaf in got.leaves]
    unkept, _ = await _train(manifest, HoneypotMode.HONEST)
    assert unkept.leaf_states == ()


@pytest.mark.parametrize(
    "mode", [HoneypotMode.FABRICATE, HoneypotMode.NOISE, HoneypotMode.LAST_STEP]
)
async def test_a_honeypot_keeps_the_states_its_leaves_were_built_from(
    manifest: RunManifest, mode: HoneypotMode
) -> None:
    honest, _ = await _train(manifest, HoneypotMode.HONEST, keep=True)
    cheat, _ = await _train(manifest, mode, keep=True)
    model, pp = manifest.model, manifest.reference_spec.layout.pp
    for state, leaf in zip(cheat.leaf_states, cheat.leaves, strict=True):
        stages = stage_states(state.theta, state.opt.m, state.opt.v, model.n_layers, pp)
        assert stages == leaf.preimage.stages
    same = [i for i, (a, b) in enumerate(zip(honest.leaf_states, cheat.leaf_states, strict=True))
            if _packed(a) == _packed(b)]  # fmt: skip
    assert same == [i for i, (a, b) in enumerate(zip(honest.leaves, cheat.leaves, strict=True))
                    if a.digest == b.digest]  # fmt: skip
    assert _packed(cheat.leaf_states[-1]) == pack_state(
        cheat.theta_end, cheat.opt_state_out.m, cheat.opt_state_out.v, cheat.opt_state_out.step
    )


async def test_a_fault_trains_as_train_round_does(manifest: RunManifest) -> None:
    ids, rows = synthetic_round(manifest, seed=5)
    theta0, fault = init_params(manifest.model), Fault(3, manifest.model.n_layers, "update", 2)
    want = train_round(manifest, RUN_ID, 0, theta0, ids, rows, fault=fault)
    got = await train_round_async(manifest, RUN_ID, 0, theta0, ids, rows, fault=fault)
    assert got.leaves_root == want.leaves_root
    assert th_hex(got.theta_end) == th_hex(want.theta_end)
    honest = train_round(manifest, RUN_ID, 0, theta0, ids, rows)
    assert [a.digest == b.digest for a, b in zip(got.leaves, honest.leaves, strict=True)] == [
        True,
        True,
        False,
        False,
    ]
