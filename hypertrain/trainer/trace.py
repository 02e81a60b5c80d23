"""The hashes of one inner step that a dispute bisects (spec 6.4; issue 14).

:func:`trace_step` runs inner step ``t = before.t + 1`` exactly as training does (a
:class:`~hypertrain.trainer.loop.Stepper`, so :attr:`StepTrace.after` is bit for bit the state
``Stepper.step()`` reaches) while hashing every op output of its forward. The points are those
of :mod:`hypertrain.rounds.bisection`:

- a forward point's hash covers all ``grad_accum`` micro-batches in order:
  :func:`point_hash` of the per-micro-batch :func:`micro_digest`;
- layer point ``0`` is the step's input token rows (int64 ``[mb, seq_len+1]`` per micro-batch),
  ``i`` in ``1 .. n_layers`` the output of layer ``i - 1`` (its ``mlp_residual``) and
  ``n_layers + 1`` the state after the step (:func:`state_hash`, the step point ``t``);
- the op points of layer ``l`` are layer point ``l`` then the output of each op of
  ``bisection.layer_ops(n_layers, l)``; the last is layer point ``l + 1`` (the tail's
  ``update`` is the state after the step).

A :class:`~hypertrain.trainer.fault.Fault` (tests only) miscomputes one op of the traced step
as it would in training.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np
import torch

from hypertrain.protocol.hashes import tensor_root
from hypertrain.protocol.manifest import RunManifest
from hypertrain.protocol.tensorhash import th_bytes
from hypertrain.rounds.bisection import layer_ops
from hypertrain.trainer.fault import UPDATE_OP, Fault
from hypertrain.trainer.loop import SampleSource, StateAt, Stepper

__all__ = ["Fault", "StepTrace", "micro_digest", "point_hash", "state_hash", "trace_step"]


def micro_digest(x: np.ndarray[Any, Any] | torch.Tensor) -> bytes:
    """``sha256(f"{dtype}|{shape}|" || raw)`` of one micro-batch's tensor: ``dtype`` the numpy
    name (``float32``, ``int64``), ``shape`` the dims joined by ``,`` (empty for 0-d), ``raw``
    the elements little-endian in C order."""
    array = x.detach().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
    raw = array.astype(array.dtype.newbyteorder("<"), order="C", copy=False)
    head = f"{array.dtype.name}|{','.join(str(d) for d in array.shape)}|".encode()
    return hashlib.sha256(head + raw.tobytes()).digest()


def point_hash(per_micro: Sequence[bytes]) -> str:
    """A forward point's hash: ``sha256`` over its micro-batch digests in order, hex."""
    return hashlib.sha256(b"".join(per_micro)).hexdigest()


def state_hash(state: StateAt) -> str:
    """``tensor_root(TH(theta), TH(m), TH(v), step)`` of a training state, as a StateServe
    names it (``step`` is the optimizer's step count)."""
    opt = state.opt
    return tensor_root(th_bytes(state.theta), th_bytes(opt.m), th_bytes(opt.v), opt.step)


@attrs.frozen(eq=False)
class StepTrace:
    """The points of inner step ``t`` (module docstring): ``before_hash`` is step point
    ``t - 1``, ``after`` the state after the step, ``layer_points`` the ``n_layers + 2`` layer
    points and ``op_points[l]`` the ``len(layer_ops(l)) + 1`` op points of layer ``l``.
    Compared by identity (``after`` holds arrays): compare the hashes."""

    t: int
    before_hash: str
    after: StateAt
    layer_points: tuple[str, ...]
    op_points: tuple[tuple[str, ...], ...]


def trace_step(
    manifest: RunManifest,
    run_id: str,
    w: int,
    sample_ids: Sequence[int],
    samples: SampleSource,
    before: StateAt,
    fault: Fault | None = None,
) -> StepTrace:
    """Run step ``before.t + 1`` of round ``w`` from ``before`` and hash its points (module
    docstring); ``sample_ids`` / ``samples`` are the whole round's, as for ``Stepper``."""
    stepper = Stepper(manifest, run_id, w, sample_ids, samples, before, fault)
    t, n_layers = before.t + 1, manifest.model.n_layers
    inputs = [micro_digest(mb) for mb in stepper.micro_batches(t)]
    outputs: defaultdict[tuple[int, str], list[bytes]] = defaultdict(list)

    def observe(micro: int, layer: int, op: str, out: torch.Tensor) -> None:
        outputs[layer, op].append(micro_digest(out))

    stepper.step(observe)
    after = stepper.state()
    after_hash = state_hash(after)

    def op_hash(layer: int, op: str) -> str:
        return after_hash if op == UPDATE_OP else point_hash(outputs[layer, op])

    layers = (
        point_hash(inputs),
        *(op_hash(i, "mlp_residual") for i in range(n_layers)),
        after_hash,
    )
    ops = tuple(
        (layers[layer], *(op_hash(layer, op) for op in layer_ops(n_layers, layer)))
        for layer in range(n_layers + 1)
    )
    return StepTrace(
        t=t, before_hash=state_hash(before), after=after, layer_points=layers, op_points=ops
    )
