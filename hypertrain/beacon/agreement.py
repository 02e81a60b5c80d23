"""The relay agreement rules, as pure functions over what each relay answered.

No Trio, no HTTP: :mod:`hypertrain.beacon.relays` gathers one :data:`Outcome` per relay and
asks these functions what that means. The rules (spec/protocol.md section 4.2, settled here):

- A relay either **answered** (HTTP 200 with a genuine answer: a round that parses, is the one
  asked for and passes ``check_round``; an ``/info`` equal to the pinned chain), answered
  something **invalid** (HTTP 200 with JSON that is not a genuine answer), or **failed**
  (network error, timeout, a non-200 status after retries, a body that is not JSON at all).
- An invalid answer counts as a *disagreement*, not as a failure: a relay that serves a bad
  signature, another chain or the wrong round is broken or hostile, and the operator must see
  that rather than have it silently outvoted. The whole query fails with
  :class:`BeaconDisagreement` (:class:`ChainMismatch` for ``/info``).
- Every relay that answered must give the identical value, else :class:`BeaconDisagreement`.
- At least ``min_relays`` relays must have answered, else :class:`BeaconUnavailable`.
- ``latest``: relays may straddle a round boundary. If the answers are all genuine and their
  round numbers differ by at most ``max_straddle``, the caller re-asks every relay for the
  lowest one (:func:`straddle_round`). A wider spread means a relay lags: a disagreement.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Generic, TypeVar

import attrs

from hypertrain.beacon.chain import BeaconRound, ChainInfo
from hypertrain.beacon.errors import BeaconDisagreement, BeaconUnavailable

__all__ = [
    "Answered",
    "Failed",
    "Invalid",
    "Outcome",
    "agree",
    "chain_mismatches",
    "straddle_round",
]

T = TypeVar("T")


@attrs.frozen
class Answered(Generic[T]):
    """The relay gave a genuine answer."""

    value: T


@attrs.frozen
class Failed:
    """The relay did not answer usefully (network, timeout, non-200 status)."""

    reason: str


@attrs.frozen
class Invalid:
    """The relay answered 200 with something that is not a genuine answer."""

    reason: str


Outcome = Answered[T] | Failed | Invalid
"""What one relay did for one query."""


def _describe(outcomes: Mapping[str, Outcome[T]], kind: type[Failed] | type[Invalid]) -> str:
    return "; ".join(
        f"{relay}: {outcome.reason}"
        for relay, outcome in outcomes.items()
        if isinstance(outcome, kind)
    )


def _reasons(outcomes: Mapping[str, Outcome[T]]) -> dict[str, str]:
    return {
        relay: outcome.reason
        for relay, outcome in outcomes.items()
        if isinstance(outcome, Failed | Invalid)
    }


def agree(
    outcomes: Mapping[str, Outcome[T]],
    *,
    min_relays: int,
    what: str,
    disagreement: type[BeaconDisagreement] = BeaconDisagreement,
) -> T:
    """The one value every answering relay gave, if at least ``min_relays`` answered.

    Raises ``disagreement`` if any relay answered something invalid or two answers differ,
    :class:`BeaconUnavailable` if fewer than ``min_relays`` answered. Messages name the relays.
    """
    answers = {r: o.value for r, o in outcomes.items() if isinstance(o, Answered)}
    if any(isinstance(o, Invalid) for o in outcomes.values()):
        raise disagreement(
            f"{what}: relay served an invalid answer: {_describe(outcomes, Invalid)}",
            _reasons(outcomes),
        )
    distinct = list(dict.fromkeys(answers.values()))
    if len(distinct) > 1:
        shown = "; ".join(f"{relay}: {value!r}" for relay, value in answers.items())
        raise disagreement(f"{what}: relays disagree: {shown}", _reasons(outcomes))
    if len(answers) < min_relays:
        failed = _describe(outcomes, Failed) or "none failed"
        raise BeaconUnavailable(
            f"{what}: {len(answers)} of {len(outcomes)} relays answered, "
            f"{min_relays} needed ({failed})",
            _reasons(outcomes),
        )
    return distinct[0]


def straddle_round(
    outcomes: Mapping[str, Outcome[BeaconRound]], *, min_relays: int, max_straddle: int
) -> int | None:
    """The round to re-ask every relay for when ``latest`` answers straddle a boundary.

    ``None`` when there is nothing to re-ask: all answers name the same round, or the outcome
    is already decided by :func:`agree` (an invalid answer, too few answers). Raises
    :class:`BeaconDisagreement` when the spread exceeds ``max_straddle`` rounds.
    """
    if any(isinstance(o, Invalid) for o in outcomes.values()):
        return None
    rounds = {r: o.value.round for r, o in outcomes.items() if isinstance(o, Answered)}
    if len(rounds) < min_relays or len(set(rounds.values())) <= 1:
        return None
    low, high = min(rounds.values()), max(rounds.values())
    if high - low > max_straddle:
        shown = ", ".join(f"{relay}: {n}" for relay, n in rounds.items())
        raise BeaconDisagreement(
            f"latest: relays are {high - low} rounds apart (at most {max_straddle} allowed): "
            f"{shown}",
            _reasons(outcomes),
        )
    return low


def chain_mismatches(pinned: ChainInfo, served: ChainInfo) -> list[str]:
    """The fields of ``served`` that differ from ``pinned`` (public key, hash, schedule, scheme).

    ``beaconID`` and ``groupHash`` are informative and not compared.
    """
    fields = ("public_key", "hash", "period_ms", "genesis_ms", "scheme_id")
    return [name for name in fields if getattr(pinned, name) != getattr(served, name)]
