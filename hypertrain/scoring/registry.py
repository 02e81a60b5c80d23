"""The challenge registry: what a scoring job is, how long it may run and how answers agree.

A :class:`Challenge` is the contract between the coordinator, the fallback evaluator pool and
``hypertrain-node``: its id (and ``base``, the challenge whose scorer runs it; a node's
capability is the base id), ``kind`` (``deterministic``: two answers agree when objective and
fingerprint are equal; ``timing``: equal fingerprints and objectives within ``tolerance_pct``
of the smaller one, and only nodes of ``hardware_class`` get its jobs), the result field that
holds the objective, the tools a node must have, the worker rules (``kill_after_ms``, memory
cap, CPU step budget) and the named input files the scorer reads. ``version`` changes whenever
a scorer's output for the same inputs could change, so answers of different versions are never
compared.

Objectives travel as JSON: a deterministic challenge's objective is a string compared exactly
(``delta-loss``: the 8-hex-char f32 of the loss); a timing challenge's is a finite number.
Failures are compared by class (:data:`FAILURE_CLASSES`), never by text; ``timeout`` and ``oom``
are inconclusive (DESIGN.md section 6).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal

import attrs

__all__ = [
    "DELTA_LOSS",
    "FAILURE_CLASSES",
    "INCONCLUSIVE",
    "REGISTRY",
    "STEP_THROUGHPUT",
    "Challenge",
    "ChallengeKind",
    "FailureClass",
    "UnknownChallenge",
    "get_challenge",
]

ChallengeKind = Literal["deterministic", "timing"]
FailureClass = Literal["timeout", "oom", "bad-input", "crash"]
FAILURE_CLASSES: Final[tuple[FailureClass, ...]] = ("timeout", "oom", "bad-input", "crash")
INCONCLUSIVE: Final[frozenset[FailureClass]] = frozenset({"timeout", "oom"})
"""Failure classes that strike nobody: the fallback evaluator decides the step."""


class UnknownChallenge(KeyError):
    """No challenge of that id in :data:`REGISTRY`."""


@attrs.frozen(kw_only=True)
class Challenge:
    """One registry entry (module doc)."""

    id: str
    base: str | None = None
    kind: ChallengeKind
    objective: str
    """The result field holding the objective (``result[objective]``)."""
    tools: tuple[str, ...]
    """Tool names a node must have (``hypertrain-node`` probes them by running them)."""
    hardware_class: str | None = None
    """Timing challenges only: the one hardware class whose nodes get its jobs."""
    tolerance_pct: float | None = None
    """Timing challenges only: the agreement band, relative to the smaller objective."""
    kill_after_ms: int
    """The scorer's whole process group is killed this long after its start."""
    memory_bytes: int
    """The scorer's address-space cap."""
    step_budget_ms: int
    """CPU time the scorer may use (its RLIMIT_CPU, rounded up to whole seconds)."""
    inputs: tuple[str, ...]
    """The names of the input files of a job, in order."""
    version: int = 1

    def __attrs_post_init__(self) -> None:
        timing = self.kind == "timing"
        if timing != (self.hardware_class is not None) or timing != (
            self.tolerance_pct is not None
        ):
            raise ValueError(f"{self.id}: only timing challenges have a class and a tolerance")
        if self.step_budget_ms >= self.kill_after_ms:
            raise ValueError(f"{self.id}: the step budget must end before the kill time")

    @property
    def capability(self) -> str:
        """The id a node lists to run this challenge (its base, if any)."""
        return self.base or self.id


DELTA_LOSS: Final = Challenge(
    id="delta-loss",
    kind="deterministic",
    objective="loss",
    tools=("torch",),
    kill_after_ms=60_000,
    memory_bytes=4 << 30,
    step_budget_ms=45_000,
    inputs=("model.json", "state.bin", "delta.bin", "trace.u16"),
)
"""The loss of a miner's weights ``theta_start - decode(delta)`` on a trace (DESIGN.md 6)."""

STEP_THROUGHPUT: Final = Challenge(
    id="step-throughput",
    kind="timing",
    objective="tokens_per_s",
    tools=("torch",),
    hardware_class="cpu-generic",
    tolerance_pct=25.0,
    kill_after_ms=60_000,
    memory_bytes=4 << 30,
    step_budget_ms=45_000,
    inputs=("model.json", "state.bin", "trace.u16"),
)
"""Tokens per second of reference training steps; the fingerprint is the result's hash."""

REGISTRY: Final[Mapping[str, Challenge]] = {c.id: c for c in (DELTA_LOSS, STEP_THROUGHPUT)}


def get_challenge(challenge_id: str) -> Challenge:
    """The registry entry of ``challenge_id``; :class:`UnknownChallenge` if there is none."""
    try:
        return REGISTRY[challenge_id]
    except KeyError:
        raise UnknownChallenge(challenge_id) from None
