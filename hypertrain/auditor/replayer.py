"""The torch side of the auditor: :class:`TorchReplayer`, the real :class:`~hypertrain.auditor.
verdict.Replayer` and :class:`~hypertrain.auditor.dispute.Recomputer`.

Imports torch (through :mod:`hypertrain.trainer.loop`): import this module only after
:func:`hypertrain.trainer.determinism.configure` ran with the run's ``reference_spec.env``
(the worker imports it lazily). Every trainer entry point calls ``check_live`` first, so a
process whose env drifted raises :class:`~hypertrain.trainer.errors.DeterminismError`.

- ``full``: :func:`~hypertrain.trainer.loop.train_round` from the public start with no carried
  state (what ``reset`` trains), all ``H/J + 1`` leaves;
- ``window``: :func:`~hypertrain.trainer.replay.replay` of ``[a, b]`` from the served state at
  leaf ``a`` (``t = a*J``, its ``m``, ``v`` and optimizer step);
- ``recompute``: a dispute's :class:`~hypertrain.trainer.recompute.Recompute` of the round
  from a :class:`~hypertrain.auditor.dispute.RecomputeStart` (the public start with a reset
  optimizer state, or a served full state).

``fault`` (tests only: no command line or file reaches it, :mod:`hypertrain.trainer.fault`)
miscomputes one op in all three, so a faulty auditor's verdicts and its answers in the
disputes about them come from the same faulty training.
"""

from __future__ import annotations

from hypertrain.auditor.dispute import RecomputeStart
from hypertrain.auditor.job import AuditJob
from hypertrain.auditor.verdict import Replayed, Samples
from hypertrain.trainer.fault import Fault
from hypertrain.trainer.loop import Moments, StateAt, round_start, train_round
from hypertrain.trainer.params import F32Array
from hypertrain.trainer.recompute import Recompute
from hypertrain.trainer.replay import replay
from hypertrain.trainer.state import TrainState

__all__ = ["TorchReplayer"]


def _full_state(state: TrainState, t: int) -> StateAt:
    if state.m is None or state.v is None or state.step is None:
        raise ValueError("a window replays from a full state (theta, m, v, step)")
    return StateAt(t=t, theta=state.theta, opt=Moments(m=state.m, v=state.v, step=state.step))


class TorchReplayer:
    """Replays and recomputes with the trainer (module docstring)."""

    def __init__(self, fault: Fault | None = None) -> None:
        self.fault = fault

    def full(self, job: AuditJob, theta_start: dict[str, F32Array], samples: Samples) -> Replayed:
        result = train_round(
            job.manifest,
            job.run_id,
            job.w,
            theta_start,
            job.assignment.sample_ids,
            samples,
            fault=self.fault,
        )
        return Replayed(
            digests=tuple(leaf.digest for leaf in result.leaves), theta_end=result.theta_end
        )

    def window(
        self, job: AuditJob, state: TrainState, a: int, b: int, samples: Samples
    ) -> Replayed:
        start = _full_state(state, a * job.manifest.inner.J)
        segment = replay(
            job.manifest,
            job.run_id,
            job.w,
            start,
            a,
            b,
            job.assignment.sample_ids,
            samples,
            fault=self.fault,
        )
        return Replayed(digests=segment.digests, theta_end=segment.states[-1].theta)

    def recompute(self, job: AuditJob, start: RecomputeStart, samples: Samples) -> Recompute:
        if start.state.m is None:  # the public round start: a reset optimizer state
            state = round_start(job.manifest, start.state.theta, None)
        else:
            state = _full_state(start.state, start.t)
        return Recompute(
            job.manifest,
            job.run_id,
            job.w,
            job.assignment.sample_ids,
            samples,
            state,
            fault=self.fault,
        )
