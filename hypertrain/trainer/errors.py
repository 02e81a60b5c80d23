"""The trainer's errors.

    TrainerError                 base of everything the trainer refuses
    ├── DeterminismError         the live process cannot reproduce the manifest's bits
    ├── UnsupportedModel         a model the trainer does not implement yet (MoE, od-encoder)
    └── UnsupportedPolicy        an optimizer / state policy the trainer does not implement yet

All are ``ValueError`` subclasses: they describe bad or unsupported input, never a bug.
"""

from __future__ import annotations

__all__ = ["DeterminismError", "TrainerError", "UnsupportedModel", "UnsupportedPolicy"]


class TrainerError(ValueError):
    """Base class of the trainer's refusals."""


class DeterminismError(TrainerError):
    """The live thread count, kernel path or torch settings differ from ``reference_spec.env``."""


class UnsupportedModel(TrainerError):
    """The manifest asks for a model this trainer does not implement (MoE, od-encoder)."""


class UnsupportedPolicy(TrainerError):
    """The manifest asks for an optimizer or state policy this trainer does not implement."""
