"""The miner's own recomputations after a MISMATCH (spec 6.4, issue 14): blocking, torch.

Imports torch (through the trainer): :mod:`hypertrain.miner.disputes` imports it lazily and
runs these functions through its ``run_sync`` (worker threads in production).

- :func:`rerun_root`: exactly what the auditor recomputed (:func:`~hypertrain.miner.disputeplan.
  rerun_windows`): in full mode the whole round with ``train_round`` from the round start
  (the public theta, ``start_state.bin`` or the theta of ``leaf_state_0.bin``, with a reset
  optimizer state, as the auditor replays it), every leaf; in segments mode each challenged
  window ``[a, b]`` with ``replay`` from the kept ``leaf_state_{a}.bin``, leaves ``a+1 .. b``.
  The Merkle root of those digests, in window order, is the rerun's ``leaves_root``;
- :func:`dispute_recompute`: the :class:`~hypertrain.trainer.recompute.Recompute` of a dispute,
  from the start state of the contract (full mode: the round start; segments mode: the kept
  state at the start ``a`` of the window holding the disputed leaf).

The miner's training ``fault`` (a test's injection) applies to both.
"""

from __future__ import annotations

from collections.abc import Sequence

from hypertrain.miner.artifacts import START_STATE_FILE, RoundDir, leaf_state_file
from hypertrain.miner.disputeplan import Window
from hypertrain.miner.errors import ServeError
from hypertrain.protocol.errors import HypertrainError
from hypertrain.protocol.manifest import RunManifest
from hypertrain.protocol.merkle import merkle_root_hex
from hypertrain.trainer.fault import Fault
from hypertrain.trainer.loop import Moments, SampleSource, StateAt, round_start, train_round
from hypertrain.trainer.recompute import Recompute
from hypertrain.trainer.replay import replay

__all__ = ["dispute_recompute", "load_state", "rerun_root"]


def load_state(rd: RoundDir, manifest: RunManifest, leaf: int | None) -> StateAt:
    """The state a recomputation starts at: ``None`` the round start (the start theta with a
    reset optimizer state, what a full-mode audit replays), a leaf its kept full state (what
    the miner served: under ``carry`` leaf 0 holds the carried-in m, v and step). ServeError
    when it is not kept."""
    try:
        if leaf is None:
            name = START_STATE_FILE if rd.exists(START_STATE_FILE) else leaf_state_file(0)
            return round_start(manifest, rd.read_state(name).theta, None)
        state = rd.read_state(leaf_state_file(leaf))
    except (OSError, HypertrainError) as e:
        raise ServeError(f"round {rd.w}: no kept state at leaf {leaf}: {e}") from e
    if state.m is None or state.v is None or state.step is None:
        raise ServeError(f"round {rd.w}: the kept state of leaf {leaf} has no optimizer state")
    t = leaf * manifest.inner.J
    return StateAt(t=t, theta=state.theta, opt=Moments(m=state.m, v=state.v, step=state.step))


def _sample_ids(rd: RoundDir) -> list[int]:
    try:
        return [int(i) for i in rd.read_json("samples.json")]
    except (OSError, ValueError, TypeError) as e:
        raise ServeError(f"round {rd.w}: samples.json: {e}") from e


def rerun_root(
    manifest: RunManifest,
    run_id: str,
    rd: RoundDir,
    windows: Sequence[Window],
    samples: SampleSource,
    fault: Fault | None = None,
) -> str:
    """The rerun's ``leaves_root`` over ``windows`` (module docstring)."""
    ids = _sample_ids(rd)
    digests: list[bytes] = []
    for window in windows:
        start = load_state(rd, manifest, None if window.full else window.start)
        if window.full:
            result = train_round(
                manifest, run_id, rd.w, start.theta, ids, samples, None, fault=fault
            )
            digests += [leaf.digest for leaf in result.leaves]
        else:
            segment = replay(
                manifest, run_id, rd.w, start, window.start, window.end, ids, samples, fault=fault
            )
            digests += segment.digests
    return merkle_root_hex(digests)


def dispute_recompute(
    manifest: RunManifest,
    run_id: str,
    rd: RoundDir,
    start_leaf: int | None,
    samples: SampleSource,
    fault: Fault | None = None,
) -> Recompute:
    """The miner's recomputation of a dispute from the kept state at leaf ``start_leaf``, or
    from the round start (None: full mode) (module docstring)."""
    start = load_state(rd, manifest, start_leaf)
    return Recompute(manifest, run_id, rd.w, _sample_ids(rd), samples, start, fault=fault)
