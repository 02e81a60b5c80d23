"""Deterministic model, optimizer, inner loop, leaves and delta codecs (spec section 5).

Importing this package does not import torch: :func:`configure` must run before torch is loaded
(``ATEN_CPU_CAPABILITY`` and the thread variables only take effect then). The torch-using
modules are imported explicitly after it::

    from hypertrain.trainer import configure
    configure(manifest.reference_spec.env)          # before anything imports torch
    from hypertrain.trainer.loop import train_round
    from hypertrain.trainer.replay import replay

Modules: ``determinism`` (process setup and live checks), ``philox`` (Philox4x32-10 streams),
``params`` (names, shapes, init, ``init_state_hash``), ``model`` (functional forward and loss),
``schedule`` (WSD learning rate), ``optim`` (fixed-order AdamW), ``leaves`` (preimages, digests,
roots), ``loop`` (``train_round``, ``Stepper``), ``replay`` (segment replay), ``trace`` (a
step's dispute hashes), ``recompute`` (a party's recomputation for a dispute, and the referee),
``fault`` (test-only fault injection), ``codec`` (delta payloads), ``state`` (state blobs),
``errors``.
"""

from hypertrain.trainer.determinism import check_live, configure
from hypertrain.trainer.errors import (
    DeterminismError,
    TrainerError,
    UnsupportedModel,
    UnsupportedPolicy,
)
from hypertrain.trainer.params import init_params, init_state_hash, param_shapes

__all__ = [
    "DeterminismError",
    "TrainerError",
    "UnsupportedModel",
    "UnsupportedPolicy",
    "check_live",
    "configure",
    "init_params",
    "init_state_hash",
    "param_shapes",
]
