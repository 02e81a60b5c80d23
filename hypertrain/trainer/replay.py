"""Replay a segment of a round from the state at one of its leaves (spec 6.3, segment mode).

Leaf ``k`` sits at inner step ``t = k*J``. ``replay(..., state_a, a, b, ...)`` starts from the
full state at leaf ``a`` (theta, m, v and the optimizer step count, as served by the miner),
runs steps ``a*J + 1 .. b*J`` of round ``w`` exactly as :func:`~hypertrain.trainer.loop.train_round`
does (same global step for the learning rate, same sample ids, same leaf rules; the norm of leaf
``a+1`` is taken against the served theta) and returns the leaves ``a+1 .. b`` with the state at
each. An honest miner's leaves are reproduced bit for bit; comparing digests finds the first bad
leaf. Replaying ``[0, H/J]`` from the round start state is a full replay.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from hypertrain.protocol.manifest import RunManifest
from hypertrain.trainer.fault import Fault
from hypertrain.trainer.leaves import Leaf
from hypertrain.trainer.loop import SampleSource, StateAt, Stepper

__all__ = ["Segment", "first_mismatch", "replay"]


@attrs.frozen
class Segment:
    """The replayed leaves ``a+1 .. b`` and the state at each (same order)."""

    leaves: tuple[Leaf, ...]
    states: tuple[StateAt, ...]

    @property
    def digests(self) -> tuple[bytes, ...]:
        """The 32-byte leaf digests."""
        return tuple(leaf.digest for leaf in self.leaves)


def replay(
    manifest: RunManifest,
    run_id: str,
    w: int,
    state_a: StateAt,
    a: int,
    b: int,
    sample_ids: Sequence[int],
    samples: SampleSource,
    fault: Fault | None = None,
) -> Segment:
    """Leaves ``a+1 .. b`` of round ``w`` recomputed from ``state_a`` (module docstring).

    ``state_a.t`` must be ``a*J``; ``sample_ids``/``samples`` are the whole round's, in
    assignment order. ``fault`` (tests only, :mod:`hypertrain.trainer.fault`) miscomputes one
    op.
    """
    inner = manifest.inner
    n_last = inner.H // inner.J
    if not 0 <= a < b <= n_last:
        raise ValueError(f"segment [{a}, {b}] is not inside leaves 0..{n_last}")
    if state_a.t != a * inner.J:
        raise ValueError(f"the state is at t={state_a.t}, leaf {a} is at t={a * inner.J}")
    stepper = Stepper(manifest, run_id, w, sample_ids, samples, state_a, fault)
    leaves: list[Leaf] = []
    states: list[StateAt] = []
    for _ in range(a * inner.J, b * inner.J):
        stepper.step()
        if stepper.t % inner.J == 0:
            leaves.append(stepper.leaf())
            states.append(stepper.state())
    return Segment(leaves=tuple(leaves), states=tuple(states))


def first_mismatch(expected: Sequence[bytes], got: Sequence[bytes]) -> int | None:
    """Index of the first differing digest (or of the first missing one); None when equal."""
    for i, (x, y) in enumerate(zip(expected, got, strict=False)):
        if x != y:
            return i
    if len(expected) != len(got):
        return min(len(expected), len(got))
    return None
