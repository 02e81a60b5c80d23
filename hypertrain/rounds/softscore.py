"""Quality weights of a round's miners: each delta's soft score (DESIGN.md section 9).

The ledger pays a round's budget in proportion to ``tokens_i * (800000 + soft_score_ppm_i //
5)`` (spec 8): a miner's tokens count 0.8 to 1.0 times, by how well its delta did on the
hidden trace. :func:`soft_scores` gives those ppm from the miners' settled hidden-trace
``delta-loss`` objectives (the f32 hex of a mean cross-entropy: lower is better), applying, in
this order:

1. A miner without a settled score (``None``) is unscored. So is one whose objective is not
   finite (NaN or an infinity: what a broken model's loss is written as): a value that cannot
   be ordered, or that would stretch the scale until every other miner looked alike, takes no
   part in the scale. An unscored miner's soft score is 0, the same as the worst's.
2. Each other loss ``L_i`` is the exact value of its float32, as a :class:`~fractions.Fraction`;
   ``L_best`` is the smallest, ``L_worst`` the largest.
3. When they are all equal (also when only one miner is scored), every scored miner gets
   :data:`FULL_SCORE_PPM`.
4. Otherwise ``soft_score_ppm_i = floor(10^6 * (L_worst - L_i) / (L_worst - L_best))``,
   computed on the exact fractions, never on floats: the best gets 10^6, the worst 0, and
   every other value is the floor of the exact ratio. ``L_best <= L_i <= L_worst`` makes the
   ratio lie in [0, 1] already, so the rule's clamp changes nothing.

A miner's soft score depends on the scored miners passed with it (their best and worst), so a
caller passes every miner of the round at once. Pure: no clock, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction
from typing import Final

from hypertrain.protocol.f32 import f32_from_hex

__all__ = ["FULL_SCORE_PPM", "soft_scores"]

FULL_SCORE_PPM: Final = 10**6
"""The soft score of the best miner (and of every scored miner when all losses are equal)."""


def _exact_loss(objective: str | None) -> Fraction | None:
    """The exact value of an f32 hex objective; None when unscored (module doc, rule 1).
    A string that is not 8 lower-case hex characters is ``Malformed``."""
    if objective is None:
        return None
    value = f32_from_hex(objective)
    return Fraction(value) if math.isfinite(value) else None


def soft_scores(objectives: Mapping[str, str | None]) -> dict[str, int]:
    """Each miner's soft score in ppm (0..10^6, module doc), in the order of ``objectives``.

    ``objectives`` maps every miner of the round (hotkey) to the objective of its settled
    hidden-trace ``delta-loss`` score, as stored: the 8-hex-char f32 of the loss, or ``None``
    when it has none. Every hotkey given is in the answer.
    """
    losses = {hotkey: _exact_loss(objective) for hotkey, objective in objectives.items()}
    scored = [loss for loss in losses.values() if loss is not None]
    if not scored:
        return dict.fromkeys(losses, 0)
    best, worst = min(scored), max(scored)
    span = worst - best
    out: dict[str, int] = {}
    for hotkey, loss in losses.items():
        if loss is None:
            out[hotkey] = 0
        elif span == 0:
            out[hotkey] = FULL_SCORE_PPM
        else:
            out[hotkey] = math.floor(FULL_SCORE_PPM * (worst - loss) / span)
    return out
