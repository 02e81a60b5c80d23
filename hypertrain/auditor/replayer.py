"""The torch side of a replay: :class:`TorchReplayer`, the real :class:`~hypertrain.auditor.
verdict.Replayer`.

Imports torch (through :mod:`hypertrain.trainer.loop`): import this module only after
:func:`hypertrain.trainer.determinism.configure` ran with the run's ``reference_spec.env``
(the worker imports it lazily). Every trainer entry point calls ``check_live`` first, so a
process whose env drifted raises :class:`~hypertrain.trainer.errors.DeterminismError`.

- ``full``: :func:`~hypertrain.trainer.loop.train_round` from the public start with no carried
  state (what ``reset`` trains), all ``H/J + 1`` leaves;
- ``window``: :func:`~hypertrain.trainer.replay.replay` of ``[a, b]`` from the served state at
  leaf ``a`` (``t = a*J``, its ``m``, ``v`` and optimizer step).
"""

from __future__ import annotations

from hypertrain.auditor.job import AuditJob
from hypertrain.auditor.verdict import Replayed, Samples
from hypertrain.trainer.loop import Moments, StateAt, train_round
from hypertrain.trainer.params import F32Array
from hypertrain.trainer.replay import replay
from hypertrain.trainer.state import TrainState

__all__ = ["TorchReplayer"]


class TorchReplayer:
    """Replays with the trainer (module docstring)."""

    def full(self, job: AuditJob, theta_start: dict[str, F32Array], samples: Samples) -> Replayed:
        result = train_round(
            job.manifest, job.run_id, job.w, theta_start, job.assignment.sample_ids, samples
        )
        return Replayed(
            digests=tuple(leaf.digest for leaf in result.leaves), theta_end=result.theta_end
        )

    def window(
        self, job: AuditJob, state: TrainState, a: int, b: int, samples: Samples
    ) -> Replayed:
        if state.m is None or state.v is None or state.step is None:
            raise ValueError("a window replays from a full state (theta, m, v, step)")
        start = StateAt(
            t=a * job.manifest.inner.J,
            theta=state.theta,
            opt=Moments(m=state.m, v=state.v, step=state.step),
        )
        segment = replay(
            job.manifest, job.run_id, job.w, start, a, b, job.assignment.sample_ids, samples
        )
        return Replayed(digests=segment.digests, theta_end=segment.states[-1].theta)
