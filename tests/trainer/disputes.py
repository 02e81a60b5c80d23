"""Shared pieces of the dispute tests: a very small manifest, round data, and faults that the
forward does not absorb.

Imports torch-using trainer modules: import it only from test modules (after ``configure``).
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np

from hypertrain.protocol.manifest import RunManifest
from hypertrain.protocol.testmode import decoder_param_count
from hypertrain.rounds.bisection import layer_ops
from hypertrain.trainer.fault import Fault
from hypertrain.trainer.loop import StateAt, Stepper, round_start
from hypertrain.trainer.params import init_params
from hypertrain.trainer.trace import StepTrace, trace_step
from tests.trainer.helpers import RUN_ID, synthetic_round

W = 1
DIMS: dict[str, Any] = {"n_layers": 2, "d_model": 16, "n_heads": 2, "n_kv_heads": 1, "d_ff": 32}


SMALL_INNER: dict[str, Any] = {"micro_batch": 2, "grad_accum": 1, "J": 1, "H": 4}


def small_manifest(base: RunManifest, **inner: Any) -> RunManifest:
    """``base`` (the tiny trainer manifest) shrunk further: 2 layers, d_model 16, seq_len 8,
    the inner fields of :data:`SMALL_INNER` overridden by ``inner``."""
    model = attrs.evolve(
        base.model,
        seq_len=8,
        param_count=decoder_param_count(vocab=base.model.vocab, **DIMS),
        **DIMS,
    )
    inner_spec = attrs.evolve(base.inner, **(SMALL_INNER | inner))
    return attrs.evolve(base, model=model, inner=inner_spec)


@attrs.frozen
class Round:
    """One round's inputs: the manifest, sample ids, token rows and the start state."""

    manifest: RunManifest
    ids: list[int]
    rows: np.ndarray[Any, Any]
    start: StateAt

    def stepper(self, state: StateAt | None = None, fault: Fault | None = None) -> Stepper:
        """A Stepper of this round from ``state`` (default: the round start)."""
        at = self.start if state is None else state
        return Stepper(self.manifest, RUN_ID, W, self.ids, self.rows, at, fault)

    def state_before(self, t: int) -> StateAt:
        """The honest state after step ``t - 1``."""
        stepper = self.stepper()
        for _ in range(t - 1):
            stepper.step()
        return stepper.state()

    def trace(self, before: StateAt, fault: Fault | None = None) -> StepTrace:
        """``trace_step`` of this round from ``before``."""
        return trace_step(self.manifest, RUN_ID, W, self.ids, self.rows, before, fault)


def make_round(manifest: RunManifest, seed: int = 3) -> Round:
    """Seeded data and the reset start state (round ``W`` with nothing carried)."""
    ids, rows = synthetic_round(manifest, seed)
    return Round(manifest, ids, rows, round_start(manifest, init_params(manifest.model), None))


def spreading_fault(rd: Round, t: int, layer: int, op: str) -> Fault:
    """The fault at ``op`` of ``layer`` in step ``t`` with the lowest element index whose
    change every later point of step ``t`` sees: the op points from ``op`` to the end of its
    layer and every later layer point differ from the clean trace (a one-ulp change is often
    rounded away; a fault that is, cannot be found by bisecting forward points)."""
    before = rd.state_before(t)
    clean = rd.trace(before)
    k = layer_ops(rd.manifest.model.n_layers, layer).index(op) + 1
    for index in range(64):
        fault = Fault(t, layer, op, index)
        got = rd.trace(before, fault)
        ops = zip(got.op_points[layer][k:], clean.op_points[layer][k:], strict=True)
        later = zip(got.layer_points[layer + 1 :], clean.layer_points[layer + 1 :], strict=True)
        if all(a != b for a, b in (*ops, *later)):
            return fault
    raise AssertionError(f"no element of {op} in layer {layer}, step {t} spreads")
