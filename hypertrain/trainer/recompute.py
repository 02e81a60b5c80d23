"""One party's own recomputation of round ``w`` for a dispute (spec 6.4; issue 14).

A :class:`Recompute` starts from a state (``start``, at ``t0``: the round start in full mode,
the served state at the challenged window's start in segments mode) and answers every hash of
:mod:`hypertrain.rounds.bisection` from its own training:

- :meth:`Recompute.state_at` steps forward with a :class:`~hypertrain.trainer.loop.Stepper`,
  keeping the states at leaf boundaries and the latest one, so a bisection's many queries replay
  each step about once;
- :meth:`Recompute.trace` is :func:`~hypertrain.trainer.trace.trace_step` from the state
  before the step (cached); :meth:`Recompute.point_hash` answers a step point from
  :meth:`~Recompute.state_at`, a layer or op point from the trace of its step;
- :meth:`Recompute.leaf_digest` rebuilds leaf ``k`` as training builds it (a Stepper from the
  state at leaf ``k - 1`` run ``J`` steps, so its norm is taken against that state's theta);
- :meth:`Recompute.judge` is the referee: its own values at the case's points, decided by
  :func:`bisection.rule <hypertrain.rounds.bisection.rule>`.

A ``fault`` (tests only, :mod:`hypertrain.trainer.fault`) applies to everything it computes: a
faulty party answers from its faulty recomputation.
"""

from __future__ import annotations

from collections.abc import Sequence

from hypertrain.protocol.manifest import RunManifest
from hypertrain.rounds import bisection
from hypertrain.trainer.fault import Fault
from hypertrain.trainer.loop import SampleSource, StateAt, Stepper
from hypertrain.trainer.trace import StepTrace, state_hash, trace_step

__all__ = ["Recompute"]


class Recompute:
    """Round ``w`` recomputed from ``start`` (module docstring); ``sample_ids`` / ``samples``
    are the whole round's, in assignment order."""

    def __init__(
        self,
        manifest: RunManifest,
        run_id: str,
        w: int,
        sample_ids: Sequence[int],
        samples: SampleSource,
        start: StateAt,
        fault: Fault | None = None,
    ) -> None:
        inner = manifest.inner
        if not 0 <= start.t <= inner.H or start.t % inner.J:
            raise ValueError(f"a recomputation starts at a leaf inside 0..{inner.H}, not {start.t}")
        self.manifest, self.run_id, self.w = manifest, run_id, w
        self.sample_ids, self.samples = list(sample_ids), samples
        self.start, self.fault = start, fault
        self._leaf_states: dict[int, StateAt] = {start.t: start}
        self._latest = start
        self._traces: dict[int, StepTrace] = {}
        self._leaves: dict[int, bytes] = {}

    @property
    def n_layers(self) -> int:
        """The model's layer count (the tail is "layer" ``n_layers``)."""
        return self.manifest.model.n_layers

    def _stepper(self, state: StateAt) -> Stepper:
        return Stepper(
            self.manifest, self.run_id, self.w, self.sample_ids, self.samples, state, self.fault
        )

    def _check_t(self, t: int, lo: int) -> None:
        if not lo <= t <= self.manifest.inner.H:
            raise ValueError(f"step {t} is outside {lo}..{self.manifest.inner.H}")

    def state_at(self, t: int) -> StateAt:
        """The state after inner step ``t`` (``start.t <= t <= H``)."""
        self._check_t(t, self.start.t)
        known = {**self._leaf_states, self._latest.t: self._latest}
        if t in known:
            return known[t]
        stepper = self._stepper(known[max(s for s in known if s <= t)])
        while stepper.t < t:
            stepper.step()
            if stepper.t % self.manifest.inner.J == 0:
                self._leaf_states[stepper.t] = stepper.state()
        self._latest = self._leaf_states[t] if t in self._leaf_states else stepper.state()
        return self._latest

    def step_hash(self, t: int) -> str:
        """Step point ``t``: :func:`~hypertrain.trainer.trace.state_hash` of the state after
        step ``t``."""
        return state_hash(self.state_at(t))

    def trace(self, t: int) -> StepTrace:
        """The trace of step ``t`` (``start.t < t <= H``) from the state before it."""
        self._check_t(t, self.start.t + 1)
        if t not in self._traces:
            before = self.state_at(t - 1)
            self._traces[t] = trace_step(
                self.manifest,
                self.run_id,
                self.w,
                self.sample_ids,
                self.samples,
                before,
                self.fault,
            )
        return self._traces[t]

    def point_hash(self, point: bisection.Point) -> str:
        """This party's hash at a canonical point."""
        if point.level == "step":
            return self.step_hash(point.t)
        if point.index is None:
            raise ValueError(f"point {point.key()} has no index")
        trace = self.trace(point.t)
        if point.level == "layer":
            return trace.layer_points[point.index]
        if point.layer is None:
            raise ValueError(f"op point {point.key()} has no layer")
        return trace.op_points[point.layer][point.index]

    def hashes(self, stage: bisection.Stage) -> list[str]:
        """The ``N + 1`` hashes a Bisect for ``stage`` publishes."""
        return [self.point_hash(p) for p in bisection.stage_points(self.n_layers, stage)]

    def leaf_digest(self, k: int) -> bytes:
        """Leaf ``k``'s 32-byte digest (``start.t < k*J <= H``) as training builds it."""
        J = self.manifest.inner.J  # noqa: N806
        self._check_t(k * J, self.start.t + J)
        if k not in self._leaves:
            stepper = self._stepper(self.state_at((k - 1) * J))
            for _ in range(J):
                stepper.step()
            self._leaf_states.setdefault(stepper.t, stepper.state())
            self._leaves[k] = stepper.leaf().digest
        return self._leaves[k]

    def judge(
        self, case: bisection.RefereeCase, committed_leaf: str | None = None
    ) -> tuple[bisection.Ruling, str]:
        """Decide ``case`` from this recomputation (an honest referee's); returns the ruling
        and the referee's own hash at the case's point (for ``leaf``: its rebuilt leaf digest,
        hex, against ``committed_leaf``, the miner's committed digest hex)."""
        if case.point is None:
            raise ValueError("a verdict case is ruled by a new audit, not by a recomputation")
        if case.kind == "leaf":
            if case.leaf is None:
                raise ValueError("a leaf case names its leaf")
            rebuilt = self.leaf_digest(case.leaf).hex()
            return bisection.rule(case, true_point=rebuilt, committed_leaf=committed_leaf), rebuilt
        true_point = self.point_hash(case.point)
        ruling = bisection.rule(
            case,
            true_point=true_point,
            true_agreed=None if case.agreed is None else self.point_hash(case.agreed),
            true_agreed_step=(
                None if case.agreed_step is None else self.step_hash(case.point.t - 1)
            ),
        )
        return ruling, true_point
