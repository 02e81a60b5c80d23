"""Load a job's input files and run its challenge's scorer (imports torch).

:func:`run_challenge` is the one entry point shared by the sandboxed worker
(:mod:`hypertrain.scoring.worker`) and the in-process
:func:`~hypertrain.scoring.sandbox.score_inline`; it is :func:`score_inputs` reading each file
from its path. :func:`score_inputs` takes its bytes from any reader: the warm-up
(:mod:`hypertrain.scoring.warmup`) runs the same parsers and scorers on bytes held in memory.
It dispatches on the challenge's base id
(:attr:`~hypertrain.scoring.registry.Challenge.capability`):

- ``delta-loss``: ``model.json``, ``state.bin``, ``delta.bin``, ``trace.u16`` ->
  :func:`~hypertrain.scoring.delta_loss.score_delta_loss`;
- ``step-throughput``: ``model.json``, ``state.bin``, ``trace.u16`` ->
  :func:`~hypertrain.scoring.step_throughput.score_steps`.

Files are read in that order, ``model.json`` first (it sets the other files' size caps), each
at most its cap. A bad file raises :class:`~hypertrain.scoring.inputs.BadInput`; an unknown
challenge too. Import this module only after the process applied
:data:`~hypertrain.scoring.jobs.SCORING_ENV` when the bits must match other machines.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from hypertrain.protocol.manifest import ModelSpec
from hypertrain.scoring.delta_loss import score_delta_loss
from hypertrain.scoring.inputs import BadInput, parse_delta, parse_model, parse_state, parse_trace
from hypertrain.scoring.jobs import read_input
from hypertrain.scoring.registry import Challenge
from hypertrain.scoring.step_throughput import score_steps

__all__ = ["SCORERS", "Reader", "run_challenge", "score_inputs"]

SCORERS = ("delta-loss", "step-throughput")
"""The base challenge ids this module can run."""

Reader = Callable[[str, ModelSpec | None], bytes]
"""``read(name, model)``: the bytes of input ``name`` (``model`` None for ``model.json``)."""


def score_inputs(challenge: Challenge, read: Reader) -> dict[str, Any]:
    """The result dict of ``challenge`` on the inputs ``read`` gives, in the order of the
    module doc."""
    base = challenge.capability
    if base not in SCORERS:
        raise BadInput(f"challenge {challenge.id!r}: no scorer for {base!r}")
    model = parse_model(read("model.json", None))
    theta = parse_state(read("state.bin", model), model)
    if base == "delta-loss":
        delta = parse_delta(read("delta.bin", model), model)
        rows = parse_trace(read("trace.u16", model), model)
        return score_delta_loss(model, theta, delta, rows)
    rows = parse_trace(read("trace.u16", model), model)
    return score_steps(model, theta, rows)


def run_challenge(challenge: Challenge, paths: Mapping[str, Path]) -> dict[str, Any]:
    """The result dict of ``challenge`` on the files ``paths`` (already checked by
    :func:`~hypertrain.scoring.jobs.check_job_inputs`), each read at most its cap."""
    return score_inputs(challenge, lambda name, model: read_input(paths[name], name, model))
