"""train_round: leaves, delta, carry across rounds, sample changes (spec 5.3-5.5)."""

from __future__ import annotations

import attrs
import numpy as np

from hypertrain.protocol.hashes import batch_ids_sha256, rng_ctr
from hypertrain.protocol.manifest import RunManifest
from hypertrain.protocol.tensorhash import th_bytes, th_hex
from hypertrain.trainer.leaves import leaves_root, preimage_digest, stage_of, theta_distance
from hypertrain.trainer.loop import train_round
from hypertrain.trainer.params import init_params
from hypertrain.trainer.replay import first_mismatch
from tests.trainer.helpers import RUN_ID, synthetic_round


def test_leaves_of_one_round(manifest: RunManifest) -> None:
    ids, rows = synthetic_round(manifest, 1)
    theta0 = init_params(manifest.model)
    result = train_round(manifest, RUN_ID, 3, theta0, ids, rows, keep_leaf_states=True)
    inner = manifest.inner
    assert [leaf.t for leaf in result.leaves] == [0, 2, 4, 6]
    assert len(result.losses) == inner.H
    assert result.tokens == len(ids) * manifest.model.seq_len
    first = result.leaves[0].preimage
    assert first.loss_f32 == first.norm_f32 == "00000000"
    assert first.batch_ids_sha256 == batch_ids_sha256([]).hex()
    assert len(first.stages) == 2  # layout.pp
    stage0 = {n: p for n, p in theta0.items() if n.startswith(("emb.", "layers.000."))}
    assert first.stages[0].theta == th_bytes(stage0).hex()
    zeros = {n: np.zeros_like(p) for n, p in stage0.items()}
    assert first.stages[0].m == first.stages[0].v == th_hex(zeros)
    per_step = inner.micro_batch * inner.grad_accum
    for k, leaf in enumerate(result.leaves):
        p = leaf.preimage
        assert (p.run_id, p.w, p.rng_ctr) == (RUN_ID, 3, rng_ctr(RUN_ID, 3, p.t, -1))
        assert leaf.digest == preimage_digest(p)
        if k:
            window = ids[(p.t - inner.J) * per_step : p.t * per_step]
            assert p.batch_ids_sha256 == batch_ids_sha256(window).hex()
            assert p.loss_f32 == np.array(result.losses[p.t - 1], "<f4").tobytes().hex()
            prev = result.leaf_states[k - 1].theta
            norm = theta_distance(result.leaf_states[k].theta, prev)
            assert p.norm_f32 == np.array(norm, "<f4").tobytes().hex()
            assert norm > 0
    assert result.leaves_root == leaves_root(result.leaves)
    for name, d in result.delta.items():
        assert np.array_equal(d, theta0[name] - result.theta_end[name])
    assert result.opt_state_out.step == inner.H
    assert th_hex(result.leaf_states[-1].theta) == th_hex(result.theta_end)


def test_stage_mapping() -> None:
    assert stage_of("emb.weight", 4, 2) == 0
    assert [stage_of(f"layers.{i:03d}.wq", 4, 2) for i in range(4)] == [0, 0, 1, 1]
    assert stage_of("norm.weight", 4, 2) == stage_of("head.weight", 4, 2) == 1


def test_loader_equals_array(manifest: RunManifest) -> None:
    ids, rows = synthetic_round(manifest, 2)
    by_id = {i: rows[k] for k, i in enumerate(ids)}
    theta0 = init_params(manifest.model)
    a = train_round(manifest, RUN_ID, 0, theta0, ids, rows)
    b = train_round(
        manifest, RUN_ID, 0, theta0, ids, lambda chosen: np.stack([by_id[i] for i in chosen])
    )
    assert a.leaves_root == b.leaves_root
    assert a.metrics_root == b.metrics_root


def test_carry_across_two_rounds_equals_one_long_run(manifest: RunManifest) -> None:
    """Round 1 runs global steps H..2H-1 with the carried (m, v, step): the same arithmetic as
    steps H+1..2H of one uninterrupted 2H-step round 0."""
    inner = manifest.inner
    ids, rows = synthetic_round(manifest, 3, n_steps=2 * inner.H)
    half = len(ids) // 2
    theta0 = init_params(manifest.model)
    r0 = train_round(manifest, RUN_ID, 0, theta0, ids[:half], rows[:half])
    r1 = train_round(manifest, RUN_ID, 1, r0.theta_end, ids[half:], rows[half:], r0.opt_state_out)
    long = attrs.evolve(manifest, inner=attrs.evolve(inner, H=2 * inner.H))
    whole = train_round(long, RUN_ID, 0, theta0, ids, rows)
    assert th_hex(r1.theta_end) == th_hex(whole.theta_end)
    assert th_hex(r1.opt_state_out.m) == th_hex(whole.opt_state_out.m)
    assert th_hex(r1.opt_state_out.v) == th_hex(whole.opt_state_out.v)
    assert r1.opt_state_out.step == whole.opt_state_out.step == 2 * inner.H
    assert r0.losses + r1.losses == whole.losses
    stages = [leaf.preimage.stages for leaf in whole.leaves[len(r0.leaves) - 1 :]]
    assert stages == [leaf.preimage.stages for leaf in r1.leaves]
    # Without the carried state round 1 differs (reset moments, step 0).
    fresh = train_round(manifest, RUN_ID, 1, r0.theta_end, ids[half:], rows[half:])
    assert th_hex(fresh.theta_end) != th_hex(r1.theta_end)


def test_reset_policy_ignores_the_carried_state(manifest: RunManifest) -> None:
    reset = attrs.evolve(manifest, inner=attrs.evolve(manifest.inner, state_policy="reset"))
    ids, rows = synthetic_round(reset, 4)
    theta0 = init_params(reset.model)
    r0 = train_round(reset, RUN_ID, 0, theta0, ids, rows)
    a = train_round(reset, RUN_ID, 1, r0.theta_end, ids, rows, r0.opt_state_out)
    b = train_round(reset, RUN_ID, 1, r0.theta_end, ids, rows)
    assert a.leaves_root == b.leaves_root


def test_changing_one_sample_changes_exactly_from_its_leaf(manifest: RunManifest) -> None:
    ids, rows = synthetic_round(manifest, 5)
    theta0 = init_params(manifest.model)
    base = train_round(manifest, RUN_ID, 0, theta0, ids, rows)
    inner = manifest.inner
    per_step = inner.micro_batch * inner.grad_accum
    for step in (1, 3, 6):
        changed_ids = list(ids)
        changed_ids[(step - 1) * per_step] = 999_999_999
        changed_rows = rows.copy()
        changed_rows[(step - 1) * per_step, 3] ^= 1
        other = train_round(manifest, RUN_ID, 0, theta0, changed_ids, changed_rows)
        digests = [leaf.digest for leaf in other.leaves]
        expected_leaf = -(-step // inner.J)  # the leaf covering `step`: ceil(step / J)
        assert first_mismatch([leaf.digest for leaf in base.leaves], digests) == expected_leaf
        # the id alone (same tokens) already changes the covering leaf
        only_id = train_round(manifest, RUN_ID, 0, theta0, changed_ids, rows)
        assert only_id.leaves[expected_leaf].digest != base.leaves[expected_leaf].digest
        assert (
            only_id.leaves[expected_leaf].preimage.stages
            == base.leaves[expected_leaf].preimage.stages
        )
