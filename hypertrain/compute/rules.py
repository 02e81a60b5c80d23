"""Agreement, the decision after each answer, trusted judging and the UTC day (pure).

Promises (DESIGN.md section 6, "Compute rules the node document leaves open"):

- :func:`agree`: busy answers never agree. Two failed answers agree when they have the same
  class and that class is not inconclusive (``timeout``/``oom``). Two ok answers of a
  deterministic challenge agree when objective and fingerprint are equal; of a timing
  challenge when fingerprints are equal and :func:`within_tolerance` holds.
- :func:`within_tolerance`: both values finite; when the smaller is <= 0 only identical values
  agree (``0`` with ``0``, never ``0`` with ``1e-9``); otherwise ``(hi - lo) / lo * 100 <= pct``,
  evaluated EXACTLY on the binary64 values received (rationals, no rounding), so a pair exactly
  on the band (100 and 110 at 10 %) agrees and the next float above splits. NaN never agrees.
- :func:`decide`, given the counted answers of one job in the order they were counted:
  any inconclusive answer -> ``fallback`` (nobody struck; the trusted evaluator decides);
  fewer than 2 -> ``wait``; 2 agreeing -> ``settle`` by ``agreement``; 2 disagreeing ->
  ``third-copy`` (a split); 3 -> the third settles by ``third-copy`` only when it agrees with
  exactly ONE of the first two (that one and the third win, the other is struck); when it agrees
  with both (tolerance bands are not transitive) or with neither (all differ) -> ``fallback``.
  The settled result is the earlier-counted answer of the winning pair.
- :func:`judge` of one node answer against the trusted (fallback) answer: ``paid`` when they
  agree, or when both failed with the same inconclusive class (two honest OOMs are both right);
  ``none`` (no pay, no strike) when either is inconclusive otherwise or the node was busy;
  ``struck`` otherwise.
- :func:`utc_day` names the UTC day of an instant (``YYYY-MM-DD``); :func:`next_day_start_ms`
  is the first millisecond of the next UTC day. 23:59:59.999 and 00:00:00.000 are different days.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Final, Literal

import attrs

from hypertrain.compute.answers import Answer
from hypertrain.compute.wire import Verdict
from hypertrain.scoring.registry import INCONCLUSIVE, Challenge

__all__ = [
    "DAY_MS",
    "Decision",
    "Verdict",
    "agree",
    "decide",
    "is_inconclusive",
    "judge",
    "next_day_start_ms",
    "utc_day",
    "within_tolerance",
]

DAY_MS: Final = 86_400_000
_EPOCH: Final = dt.date(1970, 1, 1)

DecisionKind = Literal["wait", "settle", "third-copy", "fallback"]
SettledHow = Literal["agreement", "third-copy"]


@attrs.frozen(kw_only=True)
class Decision:
    """What to do after a counted answer; indexes refer to the answers given to :func:`decide`."""

    kind: DecisionKind
    how: SettledHow | None = None
    winners: tuple[int, ...] = ()
    losers: tuple[int, ...] = ()
    reason: str = ""


def is_inconclusive(answer: Answer) -> bool:
    """A failure of an inconclusive class (``timeout``, ``oom``)."""
    return not answer.ok and answer.failure in INCONCLUSIVE


def within_tolerance(a: float, b: float, pct: float) -> bool:
    """The timing band (module doc), exact on the values given."""
    if not (math.isfinite(a) and math.isfinite(b) and math.isfinite(pct)):
        return False
    lo, hi = min(a, b), max(a, b)
    if lo <= 0.0:
        return a == b
    return (Fraction(hi) - Fraction(lo)) * 100 <= Fraction(pct) * Fraction(lo)


def agree(challenge: Challenge, a: Answer, b: Answer) -> bool:
    """Whether two answers to one job agree (module doc)."""
    if a.busy or b.busy:
        return False
    if not a.ok or not b.ok:
        return not a.ok and not b.ok and a.failure == b.failure and a.failure not in INCONCLUSIVE
    if a.fingerprint != b.fingerprint:
        return False
    if challenge.kind == "timing":
        assert challenge.tolerance_pct is not None
        if not isinstance(a.objective, float | int) or not isinstance(b.objective, float | int):
            return False
        return within_tolerance(float(a.objective), float(b.objective), challenge.tolerance_pct)
    return a.objective == b.objective


def decide(challenge: Challenge, answers: Sequence[Answer]) -> Decision:
    """The decision after the latest counted answer (module doc)."""
    if any(is_inconclusive(a) for a in answers):
        return Decision(kind="fallback", reason="inconclusive")
    if len(answers) < 2:
        return Decision(kind="wait")
    first, second = answers[0], answers[1]
    if len(answers) == 2:
        if agree(challenge, first, second):
            return Decision(kind="settle", how="agreement", winners=(0, 1))
        return Decision(kind="third-copy", reason="split")
    third = answers[2]
    with_first, with_second = agree(challenge, first, third), agree(challenge, second, third)
    if with_first and not with_second:
        return Decision(kind="settle", how="third-copy", winners=(0, 2), losers=(1,))
    if with_second and not with_first:
        return Decision(kind="settle", how="third-copy", winners=(1, 2), losers=(0,))
    reason = "third agrees with both" if with_first else "all differ"
    return Decision(kind="fallback", reason=reason)


def judge(challenge: Challenge, trusted: Answer, answer: Answer) -> Verdict:
    """One node answer judged against the trusted answer (module doc)."""
    if answer.busy:
        return "none"
    if agree(challenge, trusted, answer):
        return "paid"
    if is_inconclusive(answer) or is_inconclusive(trusted):
        if not answer.ok and not trusted.ok and answer.failure == trusted.failure:
            return "paid"
        return "none"
    return "struck"


def utc_day(now_ms: int) -> str:
    """The UTC day of ``now_ms`` as ``YYYY-MM-DD``."""
    return (_EPOCH + dt.timedelta(days=now_ms // DAY_MS)).isoformat()


def next_day_start_ms(now_ms: int) -> int:
    """The first millisecond of the UTC day after the one holding ``now_ms``."""
    return (now_ms // DAY_MS + 1) * DAY_MS
