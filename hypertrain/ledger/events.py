"""The ledger's events (spec 8), one frozen class each, with the fields its journal record
carries besides ``kind``, ``seq``, ``prev_hash`` and ``hash``.

==============  ==============================================================================
kind            fields
==============  ==============================================================================
``commit``      ``run_id, w, hotkey, at``
``verdict``     ``run_id, w, hotkey, verdict, tokens, soft_score_ppm, at``
``finalize``    ``run_id, w, at, final_round``  (``final_round = round_of(at)``)
``clawback``    ``hotkey, units, at``
``vindicate``   ``run_id, w, hotkey, at, final_round``  (``final_round = round_of(at)``)
``fault``       ``run_id, w, hotkey, at``
==============  ==============================================================================

Unlike the spec, ``commit``, ``verdict`` and ``finalize`` carry ``run_id``: the daemon hosts
several runs, rounds are ordered per run, and every run's rounds mint into the one ledger whose
payouts share the 10^6-per-epoch budget.

Construction checks each field's type and range only (LedgerRefused); the rules that depend on
what came before live in :mod:`hypertrain.ledger.book` and :mod:`hypertrain.ledger.state`.
"""

from __future__ import annotations

from typing import Any, ClassVar, Final, Literal

import attrs

from hypertrain.ledger.errors import LedgerRefused
from hypertrain.ledger.params import check_count, check_int, check_name

__all__ = [
    "EVENT_TYPES",
    "VERDICTS",
    "ClawbackEvent",
    "CommitEvent",
    "Event",
    "FaultEvent",
    "FinalizeEvent",
    "Verdict",
    "VerdictEvent",
    "VindicateEvent",
    "event_fields",
]

Verdict = Literal["MATCH", "UNSAMPLED", "FAULT", "TRANSIENT", "NO_UPLOAD"]
VERDICTS: Final[tuple[Verdict, ...]] = ("MATCH", "UNSAMPLED", "FAULT", "TRANSIENT", "NO_UPLOAD")


def _count(_instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    check_count(attribute.name, value)


def _int(_instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    check_int(attribute.name, value)


def _optional_count(
    _instance: object, attribute: attrs.Attribute[int | None], value: int | None
) -> None:
    if value is not None:
        check_count(attribute.name, value)


def _positive(_instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    check_int(attribute.name, value, 1)


def _name(_instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    check_name(attribute.name, value)


def _verdict(_instance: object, _attribute: attrs.Attribute[str], value: str) -> None:
    if value not in VERDICTS:
        raise LedgerRefused(f"verdict must be one of {', '.join(VERDICTS)}, got {value!r}")


@attrs.frozen(kw_only=True)
class CommitEvent:
    """A miner committed to round ``w`` of ``run_id``."""

    kind: ClassVar[str] = "commit"
    run_id: str = attrs.field(validator=_name)
    w: int = attrs.field(validator=_count)
    hotkey: str = attrs.field(validator=_name)
    at: int = attrs.field(validator=_count)


@attrs.frozen(kw_only=True)
class VerdictEvent:
    """The outcome of a committed miner's round; ``tokens`` and ``soft_score_ppm`` weigh its
    slice (``soft_score_ppm`` is clamped to ``[0, 10^6]`` by the math, not refused)."""

    kind: ClassVar[str] = "verdict"
    run_id: str = attrs.field(validator=_name)
    w: int = attrs.field(validator=_count)
    hotkey: str = attrs.field(validator=_name)
    verdict: Verdict = attrs.field(validator=_verdict)
    tokens: int = attrs.field(validator=_count)
    soft_score_ppm: int = attrs.field(validator=_int)
    at: int = attrs.field(validator=_count)
    transient_epoch: int | None = attrs.field(default=None, validator=_optional_count)
    """For a TRANSIENT: the chain epoch its forgiveness counts in (the coordinator's rerun
    epoch, so the store and the ledger forgive on one clock); None: ``epoch_of(at)``."""


@attrs.frozen(kw_only=True)
class FinalizeEvent:
    """Round ``w`` of ``run_id`` is final: mint ``B_w`` and grant its slices."""

    kind: ClassVar[str] = "finalize"
    run_id: str = attrs.field(validator=_name)
    w: int = attrs.field(validator=_count)
    at: int = attrs.field(validator=_count)
    final_round: int = attrs.field(validator=_int)


@attrs.frozen(kw_only=True)
class ClawbackEvent:
    """Take ``units`` back from ``hotkey``: outstanding escrow burns first, the rest is debt."""

    kind: ClassVar[str] = "clawback"
    hotkey: str = attrs.field(validator=_name)
    units: int = attrs.field(validator=_positive)
    at: int = attrs.field(validator=_count)


@attrs.frozen(kw_only=True)
class VindicateEvent:
    """A finalized NO_UPLOAD slice is credited after all, vesting from ``final_round``."""

    kind: ClassVar[str] = "vindicate"
    run_id: str = attrs.field(validator=_name)
    w: int = attrs.field(validator=_count)
    hotkey: str = attrs.field(validator=_name)
    at: int = attrs.field(validator=_count)
    final_round: int = attrs.field(validator=_int)


@attrs.frozen(kw_only=True)
class FaultEvent:
    """A finalized NO_UPLOAD slice turned out a fault: blacklist and freeze the hotkey."""

    kind: ClassVar[str] = "fault"
    run_id: str = attrs.field(validator=_name)
    w: int = attrs.field(validator=_count)
    hotkey: str = attrs.field(validator=_name)
    at: int = attrs.field(validator=_count)


Event = CommitEvent | VerdictEvent | FinalizeEvent | ClawbackEvent | VindicateEvent | FaultEvent
EVENT_TYPES: Final[dict[str, type[Event]]] = {
    cls.kind: cls
    for cls in (CommitEvent, VerdictEvent, FinalizeEvent, ClawbackEvent, VindicateEvent, FaultEvent)
}
"""The event class of each record kind."""


def event_fields(event: Event) -> dict[str, Any]:
    """The record fields of ``event`` (every field, in no particular order)."""
    return attrs.asdict(event)
