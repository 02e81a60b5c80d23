"""Scoring passes on synthetic inputs held in memory: what the warm scorer runs ahead of jobs.

A job forked from the warm server (:mod:`hypertrain.scoring.forkserver`) should cost what the
same job costs inline, in a process that has scored before. Two things stand in the way, and
:func:`warm_up` removes each where it runs (``bench/scoring.py`` measures the result):

- **First calls.** The first scoring pass of a process does one-time work: torch's and numpy's
  on their first operations, the allocator growing its heap, code cattrs generates. Run once
  in the server before it forks, every child inherits it done.
- **Copy-on-write.** Every page a child writes that it still shares with the server (the
  reference counts of each Python object it touches, the heap its allocations reuse) is copied
  at the child's first write to it: about 2,000 page faults in a ``delta-loss`` job of the
  test-mode model. A spare (a child forked ahead of its job) runs one pass of ``delta-loss``
  on one row while it waits, so that most of those pages are its own before its job comes.

Inputs: the CPU test-mode model (:func:`~hypertrain.protocol.testmode.build_test_mode_manifest`,
the model demo and test runs score), its initial weights, a small constant delta and a trace
of ``rows`` rows, as the bytes of the job files, through the same parsers and scorers as a job
(:func:`~hypertrain.scoring.scorers.score_inputs`). A job of another model gets the first
benefit whole and the second in part.

Promises: a pass reads no file and uses no job's data (its result is dropped); it starts no
thread (torch runs in the calling thread under the pinned one-thread settings), so forking
after it loses nothing; and it changes no job's result, each being a function of its own
inputs under the pinned settings (``tests/scoring/test_warm.py`` checks warm against inline,
bit for bit). Import it only where :func:`hypertrain.scoring.worker.prepare` ran (torch).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from functools import cache
from typing import Final

import numpy as np

from hypertrain.protocol.converter import unstructure
from hypertrain.protocol.example import example_manifest
from hypertrain.protocol.manifest import ModelSpec
from hypertrain.protocol.testmode import build_test_mode_manifest
from hypertrain.scoring.registry import DELTA_LOSS, STEP_THROUGHPUT, Challenge
from hypertrain.scoring.scorers import score_inputs
from hypertrain.trainer.codec import encode_dense_int8
from hypertrain.trainer.params import init_params
from hypertrain.trainer.state import pack_state

__all__ = ["DELTA_STEP", "SERVER_ROWS", "synthetic_inputs", "warm_spare", "warm_up"]

SERVER_ROWS: Final = 4
"""Trace rows of the server's one pass of each challenge."""
DELTA_STEP: Final = 1e-3
"""Every element of the synthetic delta."""


@cache
def _model() -> ModelSpec:
    manifest, _ = build_test_mode_manifest(coord_pubkey=example_manifest().coord_pubkey)
    return manifest.model


def synthetic_inputs(rows: int) -> dict[str, bytes]:
    """The four job files of a test-mode job with ``rows`` trace rows, as bytes (module doc)."""
    model = _model()
    theta = init_params(model)
    delta = {name: np.full(a.shape, DELTA_STEP, dtype=np.float32) for name, a in theta.items()}
    ids = np.arange(rows * (model.seq_len + 1), dtype=np.int64) % model.vocab
    return {
        "model.json": json.dumps(unstructure(model)).encode(),
        "state.bin": pack_state(theta),
        "delta.bin": encode_dense_int8(delta),
        "trace.u16": ids.astype("<u2").tobytes(),
    }


def _pass(challenge: Challenge, files: dict[str, bytes]) -> None:
    score_inputs(challenge, lambda name, _model: files[name])


def warm_up(
    challenges: Iterable[Challenge] = (DELTA_LOSS, STEP_THROUGHPUT), rows: int = SERVER_ROWS
) -> None:
    """One pass of each challenge on :func:`synthetic_inputs` (module doc): the server's."""
    files = synthetic_inputs(rows)
    for challenge in challenges:
        _pass(challenge, files)


def warm_spare() -> None:
    """One ``delta-loss`` pass on one row (module doc): each spare's, while it waits."""
    _pass(DELTA_LOSS, _spare_files())


@cache
def _spare_files() -> dict[str, bytes]:
    return synthetic_inputs(1)
