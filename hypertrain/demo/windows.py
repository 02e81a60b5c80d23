"""The demo's round windows, sized from one measured training round (pure).

The demo measures how long one training round of its model takes here
(:mod:`hypertrain.demo.probe`, or ``--train-seconds S``) and :func:`size_windows` turns that into
the run's windows, in drand rounds of ``period`` seconds (the demo's chain: one second)::

    load       = trainers + others            processes busy at once during a round
    stretch    = max(1, load / cores)         each trainer's share of the CPU, inverted
    train_s    = SAFETY * seconds * stretch + TRAIN_OVERHEAD_SECONDS
    train_rounds        = max(TRAIN_FLOOR,  ceil(train_s / period))
    upload_after_commit = max(UPLOAD_FLOOR, ceil(train_rounds * UPLOAD_SHARE))

``trainers`` are the miners that train at the same time (honest, honeypots, the drill miner:
every one starts at ``d_assign``); ``others`` are the processes that may be busy beside them
(compute nodes scoring the previous round, auditors replaying it, the daemon merging and
evaluating). Each trainer runs torch on one thread (``reference_spec.env.cpu_threads = 1``), so
on ``cores`` cores ``load`` busy processes give each about ``cores / load`` of a core.
:data:`SAFETY` covers what the measurement cannot see: the machine's own load changing (a CI
runner's other jobs), a round's samples costing more than the measured ones, the first round's
cache misses. :data:`TRAIN_OVERHEAD_SECONDS` is the rest of a miner's training phase, which does
not grow with the model: noticing the assignment (it polls every half second), fetching its
samples and the start state, the Accept, writing its artifacts and the Commit.

A miner commits and uploads as soon as it has trained, so the upload window is only the slack of
the slowest miner: half the training window again (:data:`UPLOAD_SHARE`), at least
:data:`UPLOAD_FLOOR` rounds. Of the other windows, ``assign_after_open`` and
``final_after_upload`` are pure waiting and take the protocol's minimum, one round
(:data:`ASSIGN_AFTER_OPEN`, :data:`FINAL_AFTER_UPLOAD`); ``audit_after_commit`` stays at the
protocol's minimum of 40 rounds, so a round is final about 40 s after its commit window closes
whatever this module says.
"""

from __future__ import annotations

import math
from typing import Final

import attrs

__all__ = [
    "ASSIGN_AFTER_OPEN",
    "FINAL_AFTER_UPLOAD",
    "SAFETY",
    "TRAIN_FLOOR",
    "TRAIN_OVERHEAD_SECONDS",
    "UPLOAD_FLOOR",
    "UPLOAD_SHARE",
    "Windows",
    "size_windows",
]

SAFETY: Final = 2.0
"""Training may take twice what was measured, on top of the CPU shared with the demo's other
processes (module doc)."""
TRAIN_OVERHEAD_SECONDS: Final = 1.5
"""A miner's training phase apart from the training itself (module doc)."""
TRAIN_FLOOR: Final = 2
"""Drand rounds: the shortest training window (one round would leave a miner that noticed the
assignment half a second late half a second to train)."""
UPLOAD_SHARE: Final = 0.5
"""The upload window, as a share of the training window (module doc)."""
UPLOAD_FLOOR: Final = 2
"""Drand rounds: the shortest upload window (leaves, upload grant, PUT, DeltaManifest)."""
ASSIGN_AFTER_OPEN: Final = 1
"""``verify.T.assign_after_open`` of the demo manifest: the protocol's minimum (the assignment
beacon is still unknown when the round opens)."""
FINAL_AFTER_UPLOAD: Final = 1
"""The run config's ``final_after_upload``: the protocol's minimum (finalize waits for the
audits anyway)."""


@attrs.frozen
class Windows:
    """A measured training round and the windows sized from it (module doc)."""

    train_seconds: float
    """One training round of the model, measured (or given with ``--train-seconds``)."""
    stretch: float
    """How much longer a round takes with the demo's processes sharing the CPU."""
    train_rounds: int
    upload_after_commit: int
    period: int = 1
    """Seconds per drand round."""
    assign_after_open: int = ASSIGN_AFTER_OPEN
    final_after_upload: int = FINAL_AFTER_UPLOAD

    @property
    def round_seconds(self) -> int:
        """Seconds from a round's opening to its merge (the next round opens then)."""
        return (self.assign_after_open + self.train_rounds + self.upload_after_commit) * self.period

    def line(self, how: str) -> str:
        """The demo's one line about them; ``how`` says where ``train_seconds`` came from."""
        return (
            f"demo: one training round {how} {self.train_seconds:.2f} s; windows for"
            f" {self.stretch:.1f}x that (the CPU shared), x{SAFETY:g} to spare:"
            f" assign {self.assign_after_open}, train {self.train_rounds},"
            f" upload {self.upload_after_commit} rounds of {self.period} s"
            f" ({self.round_seconds} s a round plus the merge)"
        )


def size_windows(
    train_seconds: float, *, trainers: int, others: int, cores: int, period: int = 1
) -> Windows:
    """The windows for a training round of ``train_seconds`` (module doc): ``trainers`` miners
    training at once, ``others`` processes busy beside them, on ``cores`` cores, with drand
    rounds of ``period`` seconds. Raises ValueError on a negative or non-finite
    ``train_seconds``, or a count or period below one (``others`` may be zero)."""
    if not math.isfinite(train_seconds) or train_seconds < 0:
        raise ValueError(f"train_seconds must be finite and >= 0, not {train_seconds!r}")
    if min(trainers, cores, period) < 1 or others < 0:
        raise ValueError(
            f"need trainers, cores, period >= 1 and others >= 0, not {trainers}, {cores},"
            f" {period} and {others}"
        )
    stretch = max(1.0, (trainers + others) / cores)
    train_s = SAFETY * train_seconds * stretch + TRAIN_OVERHEAD_SECONDS
    train_rounds = max(TRAIN_FLOOR, math.ceil(train_s / period))
    upload = max(UPLOAD_FLOOR, math.ceil(train_rounds * UPLOAD_SHARE))
    return Windows(train_seconds, stretch, train_rounds, upload, period)
