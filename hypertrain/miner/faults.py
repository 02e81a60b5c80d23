"""Test-only fault injection into the miner's training (issue 14): never reachable from the
command line or ``miner.toml``; only :func:`~hypertrain.miner.session.run_miner`'s ``faults``
keyword sets it.

- ``fault``: the miner's training is faulty (a cheating miner that stands by its commitment):
  it applies to the committed training, the rerun after a MISMATCH and every Bisect answer;
- ``glitch``: a one-time hardware glitch: only the committed training of the rounds in
  ``glitch_rounds`` (every round when None) has it; the rerun and the Bisects are clean, so
  the rerun reproduces the auditor's root (TRANSIENT).

A round both glitched and faulty trains with the glitch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import attrs

if TYPE_CHECKING:
    from hypertrain.trainer.fault import Fault

__all__ = ["NO_FAULTS", "Faults"]


@attrs.frozen
class Faults:
    """What is injected where (module docstring)."""

    fault: Fault | None = None
    glitch: Fault | None = None
    glitch_rounds: frozenset[int] | None = None

    def training(self, w: int) -> Fault | None:
        """The fault of round ``w``'s committed training."""
        if self.glitch is not None and (self.glitch_rounds is None or w in self.glitch_rounds):
            return self.glitch
        return self.fault

    @property
    def recompute(self) -> Fault | None:
        """The fault of the miner's own recomputations (the rerun, the Bisect hashes)."""
        return self.fault


NO_FAULTS: Final = Faults()
