"""The journal's record formats: one canonical JSON line per record (spec 8)::

    {"kind": str, "seq": int, "prev_hash": hex64, ...fields..., "hash": hex64}

``hash = sha256(canonical(record without "hash"))`` in lowercase hex; ``prev_hash`` is the
previous record's ``hash``, ``"0" * 64`` for the first; ``seq`` counts from 0. The fields of
each kind:

====================  ============================================================================
``init``              ``format`` (``"hypertrain-ledger/1"``), ``params`` (every LedgerParams
                      field); always and only seq 0
event kinds           the event's fields (:mod:`hypertrain.ledger.events`)
``weights``           ``answer`` (the answer object, whose canonical bytes are the answer),
                      ``payments`` (``[[entitlement_index, units], ...]`` in walk order)
``journal_repaired``  ``offset``, ``length``, ``sha256`` of the torn bytes quarantined and
                      ``sidecar``, the file name they were moved to
====================  ============================================================================

Decoding is strict: unknown or missing fields, wrong types and out-of-range values are refused
(``ValueError`` naming the field), through the protocol's one converter.
"""

from __future__ import annotations

from typing import Any, ClassVar, Final

import attrs

from hypertrain.ledger.events import EVENT_TYPES, Event, event_fields
from hypertrain.ledger.params import LedgerParams, check_count
from hypertrain.protocol.converter import structure
from hypertrain.protocol.errors import SchemaError

__all__ = [
    "ENVELOPE",
    "FORMAT",
    "GENESIS_HASH",
    "INIT",
    "RECORD_KINDS",
    "REPAIRED",
    "WEIGHTS",
    "InitRecord",
    "Record",
    "RepairRecord",
    "WeightsRecord",
    "decode_body",
    "encode_body",
]

FORMAT: Final = "hypertrain-ledger/1"
GENESIS_HASH: Final = "0" * 64
ENVELOPE: Final = ("kind", "seq", "prev_hash", "hash")
INIT: Final = "init"
WEIGHTS: Final = "weights"
REPAIRED: Final = "journal_repaired"
RECORD_KINDS: Final = (INIT, *EVENT_TYPES, WEIGHTS, REPAIRED)


def _format(_instance: object, _attribute: attrs.Attribute[str], value: str) -> None:
    if value != FORMAT:
        raise ValueError(f"format must be {FORMAT!r}, got {value!r}")


def _count(_instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    check_count(attribute.name, value)


def _payments(
    _instance: object, _attribute: attrs.Attribute[Any], value: tuple[tuple[int, int], ...]
) -> None:
    for index, units in value:
        check_count("payments entitlement_index", index)
        check_count("payments units", units)


@attrs.frozen(kw_only=True)
class InitRecord:
    """The first record: the params the journal's arithmetic depends on."""

    kind: ClassVar[str] = INIT
    format: str = attrs.field(validator=_format)
    params: LedgerParams


@attrs.frozen(kw_only=True)
class WeightsRecord:
    """A ``get_weights`` answer computed and persisted at this place in the sequence."""

    kind: ClassVar[str] = WEIGHTS
    answer: dict[str, Any]
    payments: tuple[tuple[int, int], ...] = attrs.field(validator=_payments)


@attrs.frozen(kw_only=True)
class RepairRecord:
    """A torn final write was moved to ``sidecar`` and cut off at ``offset``."""

    kind: ClassVar[str] = REPAIRED
    offset: int = attrs.field(validator=_count)
    length: int = attrs.field(validator=_count)
    sha256: str
    sidecar: str


Record = InitRecord | WeightsRecord | RepairRecord | Event
_TYPES: Final[dict[str, type[Any]]] = {
    INIT: InitRecord,
    WEIGHTS: WeightsRecord,
    REPAIRED: RepairRecord,
    **EVENT_TYPES,
}


def encode_body(record: Record) -> tuple[str, dict[str, Any]]:
    """The kind and the fields of ``record`` (everything but the envelope)."""
    if isinstance(record, InitRecord):
        return INIT, {"format": record.format, "params": record.params.to_record()}
    if isinstance(record, WeightsRecord):
        return WEIGHTS, {"answer": record.answer, "payments": [list(p) for p in record.payments]}
    if isinstance(record, RepairRecord):
        return REPAIRED, attrs.asdict(record)
    return record.kind, event_fields(record)


def decode_body(kind: str, body: dict[str, Any]) -> Record:
    """The typed record of ``kind`` with fields ``body``; ValueError naming what is wrong."""
    cls = _TYPES.get(kind)
    if cls is None:
        raise ValueError(f"unknown record kind {kind!r}")
    try:
        record: Record = structure(cls, body)
    except SchemaError as e:
        raise ValueError(e.detail) from None
    return record
