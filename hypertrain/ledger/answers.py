"""The ``get_weights`` answer (spec 8): its canonical bytes and the request it answers.

An answer is the canonical bytes (:mod:`hypertrain.ledger.canonical`, no trailing newline) of::

    {"challenge_slug": str, "epoch": int, "weights": {hotkey: float(units)},
     "full_share_mass": 1000000,
     "metadata": {"epoch_at", "round_at", "reason", "units_paid", "units_burned_this_epoch",
                  "hotkeys_capped", "ledger_minted", "ledger_burned", "ledger_paid",
                  "ledger_pending"},
     "computed_at": int}

``weights`` names only hotkeys paid a positive amount; ``units_burned_this_epoch`` is the part
of the epoch's 10^6 left unpaid (Cortex burns it); the ``ledger_*`` totals are those after the
payments. ``reason`` is one of:

- ``paid``: at least one unit was paid;
- ``nothing_vested``: an answer in order that pays nothing (no entitlement vested, or the
  vested ones were all of frozen hotkeys);
- ``out_of_order``: the request's epoch is below the last answered epoch, or its ``epoch_at``
  is below the last answered ``epoch_at``; nothing is paid, no event is applied.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

import attrs

from hypertrain.ledger.accounts import Totals
from hypertrain.ledger.params import FULL_SHARE_MASS, UNIT, LedgerParams

__all__ = [
    "REASONS",
    "AnswerRequest",
    "Reason",
    "WeightsAnswer",
    "WeightsMetadata",
    "render_answer",
    "request_of",
]

Reason = Literal["paid", "nothing_vested", "out_of_order"]
REASONS: Final[tuple[Reason, ...]] = ("paid", "nothing_vested", "out_of_order")


@attrs.frozen
class AnswerRequest:
    """What a ``get_weights`` call asked: the answer is a function of it and the journal."""

    epoch: int
    epoch_at: int
    computed_at: int


@attrs.frozen(kw_only=True)
class WeightsMetadata:
    """The answer's ``metadata`` (module doc)."""

    epoch_at: int
    round_at: int
    reason: Reason
    units_paid: int
    units_burned_this_epoch: int
    hotkeys_capped: int
    ledger_minted: int
    ledger_burned: int
    ledger_paid: int
    ledger_pending: int


@attrs.frozen(kw_only=True)
class WeightsAnswer:
    """The ``get_weights`` answer's shape (module doc), for ``GET /openapi.json``. Not its
    codec: an answer is persisted as the canonical bytes :func:`render_answer`'s dict encodes to
    (a weight ``5.0`` is written ``5``) and replayed as those bytes."""

    challenge_slug: str
    epoch: int
    weights: dict[str, float]
    full_share_mass: int
    metadata: WeightsMetadata
    computed_at: int


def render_answer(
    params: LedgerParams,
    request: AnswerRequest,
    *,
    reason: Reason,
    weights: Mapping[str, int],
    hotkeys_capped: int,
    totals: Totals,
) -> dict[str, Any]:
    """The answer to ``request``; its canonical bytes are what ``get_weights`` returns."""
    paid = sum(weights.values())
    answer: dict[str, Any] = {
        "challenge_slug": params.challenge_slug,
        "epoch": request.epoch,
        "weights": {hotkey: float(units) for hotkey, units in weights.items() if units},
        "full_share_mass": FULL_SHARE_MASS,
        "metadata": {
            "epoch_at": request.epoch_at,
            "round_at": params.round_of(request.epoch_at),
            "reason": reason,
            "units_paid": paid,
            "units_burned_this_epoch": UNIT - paid,
            "hotkeys_capped": hotkeys_capped,
            "ledger_minted": totals.minted,
            "ledger_burned": totals.burned,
            "ledger_paid": totals.paid,
            "ledger_pending": totals.pending,
        },
        "computed_at": request.computed_at,
    }
    return answer


def _int(value: object, where: str) -> int:
    if type(value) is not int:
        raise ValueError(f"{where} is not an integer")
    return value


def request_of(answer: Mapping[str, Any]) -> AnswerRequest:
    """The request a stored answer answered (ValueError if the answer lacks it)."""
    metadata = answer.get("metadata")
    if not isinstance(metadata, Mapping):
        raise ValueError("answer.metadata is not an object")
    return AnswerRequest(
        epoch=_int(answer.get("epoch"), "answer.epoch"),
        epoch_at=_int(metadata.get("epoch_at"), "answer.metadata.epoch_at"),
        computed_at=_int(answer.get("computed_at"), "answer.computed_at"),
    )
