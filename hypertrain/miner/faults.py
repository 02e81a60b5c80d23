"""Test-only fault injection into the miner's training (issue 14): never reachable from the
command line or ``miner.toml``. :func:`~hypertrain.miner.session.run_miner`'s ``faults``
keyword sets it, and a ``hypertrain-miner run`` process takes a ``fault`` from the test
variable ``HYPERTRAIN_TEST_MINER_FAULT`` (:func:`faults_from_env`; like the test pause hook,
for real-process tests and the demo's dispute drill, ``--dispute``): an op spec as a
Resolution names it, ``step=T;layer=L;op=NAME``, optionally followed by ``;index=I`` and
``;ulps=K`` (defaults 0 and 2^16: a change no later rounding swallows).

- ``fault``: the miner's training is faulty (a cheating miner that stands by its commitment):
  it applies to the committed training, the rerun after a MISMATCH and every Bisect answer;
- ``glitch``: a one-time hardware glitch: only the committed training of the rounds in
  ``glitch_rounds`` (every round when None) has it; the rerun and the Bisects are clean, so
  the rerun reproduces the auditor's root (TRANSIENT).

A round both glitched and faulty trains with the glitch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import attrs

from hypertrain.rounds.bisection import EMBED_OP, OPS, TAIL_OPS
from hypertrain.trainer.fault import Fault

__all__ = ["NO_FAULTS", "TEST_FAULT_ENV", "Faults", "fault_from_spec", "faults_from_env"]

TEST_FAULT_ENV: Final = "HYPERTRAIN_TEST_MINER_FAULT"
DRILL_ULPS: Final = 2**16
_KEYS: Final = ("step", "layer", "op", "index", "ulps")


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


def fault_from_spec(spec: str) -> Fault:
    """The Fault of an op spec (module docstring); ValueError naming what is wrong."""
    fields: dict[str, str] = {}
    for part in spec.split(";"):
        key, sep, value = part.partition("=")
        if not sep or key not in _KEYS or key in fields or not value:
            raise ValueError(f"{spec!r}: expected step=T;layer=L;op=NAME[;index=I][;ulps=K]")
        fields[key] = value
    if not {"step", "layer", "op"} <= set(fields):
        raise ValueError(f"{spec!r}: step, layer and op are required")
    numbers = {}
    for key in ("step", "layer", "index", "ulps"):
        if key in fields:
            if not fields[key].isdigit():
                raise ValueError(f"{spec!r}: {key} must be a non-negative integer")
            numbers[key] = int(fields[key])
    op = fields["op"]
    if op not in {EMBED_OP, *OPS, *TAIL_OPS}:
        raise ValueError(f"{spec!r}: {op!r} is not an op")
    return Fault(
        t=numbers["step"],
        layer=numbers["layer"],
        op=op,
        index=numbers.get("index", 0),
        ulps=numbers.get("ulps", DRILL_ULPS),
    )


def faults_from_env(environ: Mapping[str, str]) -> Faults:
    """The Faults of ``HYPERTRAIN_TEST_MINER_FAULT`` (none when unset or empty)."""
    spec = environ.get(TEST_FAULT_ENV, "")
    return NO_FAULTS if not spec else Faults(fault=fault_from_spec(spec))
