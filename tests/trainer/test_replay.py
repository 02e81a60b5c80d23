"""Segment replay from a leaf state reproduces the leaves bit for bit (spec 6.3)."""

from __future__ import annotations

import attrs
import numpy as np
import pytest

from hypertrain.protocol.manifest import RunManifest
from hypertrain.protocol.tensorhash import th_hex
from hypertrain.trainer.loop import StateAt, train_round
from hypertrain.trainer.params import init_params
from hypertrain.trainer.replay import first_mismatch, replay
from tests.trainer.helpers import RUN_ID, synthetic_round


def test_every_segment_replays_exactly(manifest: RunManifest) -> None:
    ids, rows = synthetic_round(manifest, 7)
    theta0 = init_params(manifest.model)
    w = 2
    # carry with a non-trivial incoming state: a previous round's end
    prev = train_round(manifest, RUN_ID, w - 1, theta0, ids, rows)
    original = train_round(
        manifest, RUN_ID, w, prev.theta_end, ids, rows, prev.opt_state_out, keep_leaf_states=True
    )
    digests = [leaf.digest for leaf in original.leaves]
    n = len(digests) - 1
    for a in range(n):
        for b in range(a + 1, n + 1):
            seg = replay(manifest, RUN_ID, w, original.leaf_states[a], a, b, ids, rows)
            assert list(seg.digests) == digests[a + 1 : b + 1]
            for got, want in zip(seg.states, original.leaf_states[a + 1 : b + 1], strict=True):
                assert got.t == want.t
                assert got.opt.step == want.opt.step
                assert th_hex(got.theta) == th_hex(want.theta)
                assert th_hex(got.opt.v) == th_hex(want.opt.v)


def test_a_segment_under_reset_keeps_the_served_moments(manifest: RunManifest) -> None:
    """``reset`` zeroes the moments at the round start only: a window replayed from a leaf
    inside the round continues with that leaf's m, v and step."""
    reset = attrs.evolve(manifest, inner=attrs.evolve(manifest.inner, state_policy="reset"))
    ids, rows = synthetic_round(reset, 10)
    original = train_round(
        reset, RUN_ID, 0, init_params(reset.model), ids, rows, keep_leaf_states=True
    )
    seg = replay(reset, RUN_ID, 0, original.leaf_states[1], 1, 3, ids, rows)
    assert list(seg.digests) == [leaf.digest for leaf in original.leaves[2:]]
    assert [s.opt.step for s in seg.states] == [4, 6]


def test_a_tampered_state_is_caught_at_the_next_leaf(manifest: RunManifest) -> None:
    ids, rows = synthetic_round(manifest, 8)
    original = train_round(
        manifest, RUN_ID, 0, init_params(manifest.model), ids, rows, keep_leaf_states=True
    )
    state = original.leaf_states[1]
    theta = {n: p.copy() for n, p in state.theta.items()}
    theta["head.weight"][0, 0] = np.nextafter(theta["head.weight"][0, 0], np.float32(1))
    seg = replay(manifest, RUN_ID, 0, attrs.evolve(state, theta=theta), 1, 3, ids, rows)
    assert first_mismatch([leaf.digest for leaf in original.leaves[2:]], seg.digests) == 0


def test_replay_checks_its_arguments(manifest: RunManifest) -> None:
    ids, rows = synthetic_round(manifest, 9)
    original = train_round(
        manifest, RUN_ID, 0, init_params(manifest.model), ids, rows, keep_leaf_states=True
    )
    state: StateAt = original.leaf_states[1]
    with pytest.raises(ValueError, match="leaf 2"):
        replay(manifest, RUN_ID, 0, state, 2, 3, ids, rows)
    with pytest.raises(ValueError, match="segment"):
        replay(manifest, RUN_ID, 0, state, 1, 9, ids, rows)
    assert first_mismatch([b"a", b"b"], [b"a"]) == 1
    assert first_mismatch([b"a"], [b"a"]) is None
