"""The finalize math of spec 8, exactly, in integers::

    contrib_i = tokens_i * (800000 + clamp(soft_score_ppm_i, 0, 10^6) // 5)   # 0.8 .. 1.0 x tokens
    slice_i   = floor(B_w * contrib_i / sum_j contrib_j)

The sum runs over every committed miner of the round (each has a verdict by then), whatever
the verdict; a sum of 0 (no miners, or no tokens) gives every miner a slice of 0, so the whole
budget burns. ``sum_i slice_i <= B_w``; the rounding remainder burns.
"""

from __future__ import annotations

from collections.abc import Mapping

from hypertrain.ledger.params import F_MIN_PPM, PPM

__all__ = ["contribution", "slices"]


def contribution(tokens: int, soft_score_ppm: int) -> int:
    """A miner's weight in its round: ``tokens * (F_MIN_PPM + clamp(ppm, 0, 10^6) // 5)``."""
    # (PPM - F_MIN_PPM) / PPM == 1/5: a full score adds 200,000 ppm to the 800,000 floor.
    return tokens * (F_MIN_PPM + min(max(soft_score_ppm, 0), PPM) // 5)


def slices(budget: int, contributions: Mapping[str, int]) -> dict[str, int]:
    """Each hotkey's floor share of ``budget`` in proportion to its contribution."""
    total = sum(contributions.values())
    if total == 0:
        return dict.fromkeys(contributions, 0)
    return {hotkey: budget * c // total for hotkey, c in contributions.items()}
