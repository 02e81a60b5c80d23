"""A step's trace (issue 14): digests, points, the traced step is the training step, faults."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

from hypertrain.protocol.hashes import tensor_root
from hypertrain.protocol.manifest import RunManifest
from hypertrain.protocol.tensorhash import th_bytes, th_hex
from hypertrain.rounds.bisection import layer_ops
from hypertrain.trainer.fault import Fault
from hypertrain.trainer.loop import StateAt, train_round
from hypertrain.trainer.replay import replay
from hypertrain.trainer.trace import micro_digest, point_hash, state_hash
from tests.trainer.disputes import W, make_round, small_manifest, spreading_fault
from tests.trainer.helpers import RUN_ID


def _same_state(a: StateAt, b: StateAt) -> bool:
    return (a.t, a.opt.step, th_hex(a.theta), th_hex(a.opt.m), th_hex(a.opt.v)) == (
        b.t,
        b.opt.step,
        th_hex(b.theta),
        th_hex(b.opt.m),
        th_hex(b.opt.v),
    )


def test_micro_digest_layout() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert micro_digest(x) == hashlib.sha256(b"float32|2,3|" + x.tobytes()).digest()
    assert micro_digest(x.astype(">f4")) == micro_digest(x)  # raw bytes are little-endian
    assert micro_digest(np.asfortranarray(x)) == micro_digest(x)  # in C order
    assert micro_digest(torch.from_numpy(x).requires_grad_(True)) == micro_digest(x)
    rows = np.array([[1, 2]], dtype=np.int64)
    assert micro_digest(rows) == hashlib.sha256(b"int64|1,2|" + rows.tobytes()).digest()
    scalar = np.float32(2.5)
    assert (
        micro_digest(torch.tensor(2.5)) == hashlib.sha256(b"float32||" + scalar.tobytes()).digest()
    )


def test_point_hash_covers_the_micro_batches_in_order() -> None:
    a, b = micro_digest(np.zeros(2, np.float32)), micro_digest(np.ones(2, np.float32))
    assert point_hash([a, b]) == hashlib.sha256(a + b).hexdigest()
    assert point_hash([a, b]) != point_hash([b, a])


def test_state_hash_is_the_served_tensor_root(manifest: RunManifest) -> None:
    rd = make_round(small_manifest(manifest))
    state = rd.state_before(3)
    opt = state.opt
    want = tensor_root(th_bytes(state.theta), th_bytes(opt.m), th_bytes(opt.v), 2)
    assert opt.step == 2
    assert state_hash(state) == want


@pytest.mark.parametrize("grad_accum", [1, 2])
@pytest.mark.parametrize(
    "fault", [None, Fault(2, 1, "attn_residual", 5), Fault(2, 2, "update", 3)], ids=str
)
def test_the_traced_step_is_the_training_step(
    manifest: RunManifest, grad_accum: int, fault: Fault | None
) -> None:
    rd = make_round(small_manifest(manifest, grad_accum=grad_accum))
    before = rd.state_before(2)
    stepper = rd.stepper(before, fault)
    stepper.step()
    trace = rd.trace(before, fault)
    assert trace.t == 2
    assert _same_state(trace.after, stepper.state())
    if fault is not None:  # and the fault did something
        assert not _same_state(trace.after, rd.trace(before).after)


@pytest.mark.parametrize("grad_accum", [1, 2])
def test_layer_and_op_points_meet(manifest: RunManifest, grad_accum: int) -> None:
    rd = make_round(small_manifest(manifest, grad_accum=grad_accum))
    before = rd.state_before(2)
    trace = rd.trace(before)
    n = rd.manifest.model.n_layers
    assert len(trace.layer_points) == n + 2
    assert [len(p) for p in trace.op_points] == [len(layer_ops(n, lyr)) + 1 for lyr in range(n + 1)]
    for layer, points in enumerate(trace.op_points):
        assert points[0] == trace.layer_points[layer]
        assert points[-1] == trace.layer_points[layer + 1]
    rows = [micro_digest(mb) for mb in rd.stepper(before).micro_batches(2)]
    assert len(rows) == grad_accum
    assert trace.layer_points[0] == point_hash(rows)
    assert trace.layer_points[-1] == state_hash(trace.after)
    assert trace.before_hash == state_hash(before)
    every = [p for points in trace.op_points for p in points[1:]]
    assert len(set(every)) == len(every)  # no two ops hash alike


def _ops(n_layers: int) -> list[tuple[int, str]]:
    return [(lyr, op) for lyr in range(n_layers + 1) for op in layer_ops(n_layers, lyr)]


@pytest.mark.parametrize("grad_accum", [1, 2])
def test_a_fault_changes_its_op_and_nothing_before_it(
    manifest: RunManifest, grad_accum: int
) -> None:
    rd = make_round(small_manifest(manifest, grad_accum=grad_accum))
    before = rd.state_before(3)
    clean = rd.trace(before)
    n = rd.manifest.model.n_layers
    for layer, op in _ops(n):
        got = rd.trace(before, Fault(3, layer, op, 1 if op != "loss" else 0))
        k = layer_ops(n, layer).index(op) + 1
        assert got.layer_points[: layer + 1] == clean.layer_points[: layer + 1], op
        assert got.op_points[:layer] == clean.op_points[:layer], op
        assert got.op_points[layer][:k] == clean.op_points[layer][:k], op
        assert got.op_points[layer][k] != clean.op_points[layer][k], op


def test_a_loss_fault_changes_the_loss_but_not_the_state(manifest: RunManifest) -> None:
    """The gradient does not depend on the loss's value: a wrong loss shows only in the leaf
    (which is why such a dispute ends at the referee's leaf case)."""
    rd = make_round(small_manifest(manifest))
    before = rd.state_before(2)
    clean, faulty = rd.stepper(before), rd.stepper(before, Fault(2, 2, "loss"))
    clean.step()
    faulty.step()
    assert faulty.losses[-1] > clean.losses[-1]
    assert np.float32(faulty.losses[-1]) == np.nextafter(np.float32(clean.losses[-1]), np.inf)
    assert _same_state(faulty.state(), clean.state())


def test_a_fault_elsewhere_changes_nothing(manifest: RunManifest) -> None:
    rd = make_round(small_manifest(manifest))
    before = rd.state_before(2)
    got, clean = rd.trace(before, Fault(3, 0, "embed")), rd.trace(before)
    assert (got.layer_points, got.op_points) == (clean.layer_points, clean.op_points)
    assert _same_state(got.after, clean.after)


@pytest.mark.parametrize(
    "fault",
    [Fault(0, 0, "embed"), Fault(5, 0, "embed"), Fault(1, 0, "head"), Fault(1, 2, "embed")],
    ids=str,
)
def test_a_fault_must_name_a_step_and_an_op(manifest: RunManifest, fault: Fault) -> None:
    rd = make_round(small_manifest(manifest))
    with pytest.raises(ValueError, match=r"fault step|has no op"):
        rd.stepper(fault=fault)


def test_a_fault_index_must_be_inside_the_output(manifest: RunManifest) -> None:
    rd = make_round(small_manifest(manifest))
    with pytest.raises(ValueError, match="outside the output"):
        rd.stepper(fault=Fault(1, 2, "loss", 1)).step()


@pytest.mark.parametrize("J", [1, 2])
def test_train_round_and_replay_apply_a_fault(manifest: RunManifest, J: int) -> None:  # noqa: N803
    small = small_manifest(manifest, J=J)
    rd = make_round(small)
    fault = spreading_fault(rd, 3, 0, "embed")
    theta0 = rd.start.theta
    clean = train_round(small, RUN_ID, W, theta0, rd.ids, rd.rows, keep_leaf_states=True)
    bad = train_round(small, RUN_ID, W, theta0, rd.ids, rd.rows, keep_leaf_states=True, fault=fault)
    first_bad = -(-fault.t // J)
    assert [a.digest == b.digest for a, b in zip(clean.leaves, bad.leaves, strict=True)] == [
        k < first_bad for k in range(len(clean.leaves))
    ]
    seg = replay(small, RUN_ID, W, clean.leaf_states[1], 1, 4 // J, rd.ids, rd.rows, fault)
    assert list(seg.digests) == [leaf.digest for leaf in bad.leaves[2:]]
