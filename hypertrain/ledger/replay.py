"""State = pure replay of the journal, and the read-only verifier.

:func:`replay` feeds every record of a :class:`~hypertrain.ledger.journal.Scan` to a fresh
:class:`~hypertrain.ledger.state.LedgerState` through the very checks and moves the live ledger
uses, so the state after a reopen equals the state before it:

- an event the rules refuse (or a repeated settlement, which the writer never records) is
  :class:`~hypertrain.ledger.errors.ChainBreak`;
- a ``weights`` record is recomputed at its place in the sequence from the request its answer
  names (``epoch``, ``metadata.epoch_at``, ``computed_at``); the answer's bytes and the
  payments must be the recomputation's exactly, else
  :class:`~hypertrain.ledger.errors.RebuildMismatch`;
- ``init`` starts the state and ``journal_repaired`` moves nothing.

:func:`verify_journal` reads a journal without the writer's lock and without repairing it
(a torn tail is reported, not moved), replays it, and recounts the accounts.
"""

from __future__ import annotations

from pathlib import Path

import attrs

from hypertrain.ledger.accounts import Totals
from hypertrain.ledger.answers import request_of
from hypertrain.ledger.canonical import canonical_bytes
from hypertrain.ledger.errors import (
    ChainBreak,
    JournalError,
    LedgerInvariantError,
    LedgerRefused,
    RebuildMismatch,
)
from hypertrain.ledger.journal import Scan, ScannedRecord, TornTail, scan_journal
from hypertrain.ledger.params import LedgerParams
from hypertrain.ledger.records import InitRecord, RepairRecord, WeightsRecord
from hypertrain.ledger.state import LedgerState

__all__ = ["VerifyReport", "read_journal", "replay", "verify_journal"]


def _where(scanned: ScannedRecord) -> str:
    return f"line {scanned.line} at byte offset {scanned.offset} (seq {scanned.seq})"


def _replay_weights(state: LedgerState, scanned: ScannedRecord, record: WeightsRecord) -> None:
    where = _where(scanned)
    try:
        request = request_of(record.answer)
        prepared = state.prepare_answer(request.epoch, request.epoch_at, request.computed_at)
    except (ValueError, LedgerRefused) as e:
        raise RebuildMismatch(f"{where}: weights answer: {e}", offset=scanned.offset) from None
    if isinstance(prepared, bytes):
        raise RebuildMismatch(
            f"{where}: a second weights answer for epoch {request.epoch}", offset=scanned.offset
        )
    if canonical_bytes(record.answer) != prepared.data:
        raise RebuildMismatch(
            f"{where}: the stored answer for epoch {request.epoch} is not its recomputation",
            offset=scanned.offset,
        )
    if record.payments != prepared.payments:
        raise RebuildMismatch(
            f"{where}: the stored payments for epoch {request.epoch} are not the recomputed ones",
            offset=scanned.offset,
        )
    state.commit_answer(prepared)


def replay(scan: Scan) -> LedgerState | None:
    """The state the records of ``scan`` build (None for a journal with no record)."""
    state: LedgerState | None = None
    for scanned in scan.records:
        record = scanned.record
        if isinstance(record, InitRecord):
            state = LedgerState.new(record.params)
            continue
        assert state is not None  # the scan puts init first
        if isinstance(record, WeightsRecord):
            _replay_weights(state, scanned, record)
        elif not isinstance(record, RepairRecord):
            try:
                if not state.check(record):
                    raise LedgerRefused(f"{record.kind}: a repeated settlement")
            except LedgerRefused as e:
                raise ChainBreak(
                    f"{_where(scanned)}: the ledger rules refuse it: {e.detail}",
                    offset=scanned.offset,
                ) from None
            state.record(record)
    return state


def read_journal(path: Path) -> tuple[Scan, LedgerState | None]:
    """Read and replay ``path`` without locking or repairing it (a torn tail is left out).
    OSError if it cannot be read; JournalError if it is damaged."""
    scan = scan_journal(path.read_bytes(), path.name)
    return scan, replay(scan)


@attrs.frozen(kw_only=True)
class VerifyReport:
    """What :func:`verify_journal` found. ``ok``: every record is whole and replays exactly
    (a torn tail does not make it not ok: the writer repairs it, and a reader racing an append
    in flight sees one too)."""

    path: Path
    ok: bool
    records: int
    """Whole valid records (before the damage, if any)."""
    answers: int
    damage: str | None
    damage_offset: int | None
    torn: TornTail | None
    params: LedgerParams | None
    totals: Totals | None
    """The projected totals (every recorded event applied); None unless ok."""
    last_hash: str | None


def verify_journal(path: Path) -> VerifyReport:
    """Walk ``path``'s chain read-only, replay it, recount it. OSError if it cannot be read."""
    data = path.read_bytes()
    damage: str | None = None
    offset: int | None = None
    state: LedgerState | None = None
    scan: Scan | None = None
    try:
        scan = scan_journal(data, path.name)
        state = replay(scan)
        if state is not None:
            state.accounts.audit()
            state.projected().audit()
    except (ChainBreak, RebuildMismatch) as e:
        damage, offset = e.detail, e.offset
    except (JournalError, LedgerInvariantError) as e:
        damage = e.detail
    if damage is not None:
        partial = _records_before(data, offset)
        return VerifyReport(
            path=path,
            ok=False,
            records=partial,
            answers=0,
            damage=damage,
            damage_offset=offset,
            torn=None,
            params=None,
            totals=None,
            last_hash=None,
        )
    assert scan is not None
    return VerifyReport(
        path=path,
        ok=True,
        records=len(scan.records),
        answers=len(state.answers) if state is not None else 0,
        damage=None,
        damage_offset=None,
        torn=scan.torn,
        params=state.params if state is not None else None,
        totals=state.totals() if state is not None else None,
        last_hash=scan.last_hash if scan.records else None,
    )


def _records_before(data: bytes, offset: int | None) -> int:
    """Whole lines before ``offset`` (all records before the damaged one were valid)."""
    if offset is None:
        return 0
    return data[:offset].count(b"\n")
