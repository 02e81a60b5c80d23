"""The ledger as the daemon uses it: the pure state with its journal under a state directory.

Every mutating call checks the rules on the pure state, appends its record to the journal
(``write`` + ``fsync``), and only then changes the state. A crash at any moment leaves the
record whole or absent (a torn remainder is quarantined at the next open), and reopening
replays exactly the records written, so the state after a reopen is the state before the crash
minus, at most, the call in flight, which was never acknowledged.

``Ledger.open`` replays the journal (state = pure replay, each stored answer recomputed byte
for byte), checks the ``init`` params against the caller's, repairs a torn final write, and
writes ``init`` into a new journal. One process, one thread: a Trio adapter calls it from one
task at a time (each call blocks on an fsync).
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType

import attrs

from hypertrain.ledger.accounts import ClawbackSplit, HotkeyAccount, Totals
from hypertrain.ledger.errors import ParamsMismatch
from hypertrain.ledger.events import (
    ClawbackEvent,
    CommitEvent,
    Event,
    FaultEvent,
    FinalizeEvent,
    Verdict,
    VerdictEvent,
    VindicateEvent,
)
from hypertrain.ledger.journal import JournalWriter, journal_path, scan_journal
from hypertrain.ledger.params import LedgerParams
from hypertrain.ledger.records import FORMAT, InitRecord, WeightsRecord
from hypertrain.ledger.replay import replay
from hypertrain.ledger.state import LedgerState

__all__ = ["Ledger", "LedgerStatistics"]


@attrs.frozen(kw_only=True)
class LedgerStatistics:
    """A status page's view of the ledger (projected totals)."""

    records: int
    queued_events: int
    """Recorded events no answer has applied yet."""
    answers: int
    minted: int
    burned: int
    paid: int
    pending: int
    debt: int
    last_event_at: int | None
    last_epoch: int | None
    last_epoch_at: int | None


class Ledger:
    """The journaled ledger of one state directory; use :meth:`open` (or ``with``)."""

    def __init__(self, writer: JournalWriter, state: LedgerState) -> None:
        self._writer = writer
        self._state = state

    @classmethod
    def open(cls, state_dir: Path, params: LedgerParams) -> Ledger:
        """Open (or start) ``<state_dir>/ledger/journal.jsonl`` as its only writer.

        Raises JournalLocked (another writer), ChainBreak or RebuildMismatch (damage; nothing
        is changed on disk), ParamsMismatch (the journal holds other params)."""
        writer = JournalWriter.open(journal_path(state_dir))
        try:
            data = writer.read()
            scan = scan_journal(data, writer.path.name)
            state = replay(scan)
            if state is not None and state.params != params:
                raise ParamsMismatch(
                    f"{writer.path}: the journal was started with {state.params}, not {params}"
                )
            writer.resume(scan, len(data))
            repair = writer.quarantine(scan.torn) if scan.torn is not None else None
            if state is None:
                writer.append(InitRecord(format=FORMAT, params=params))
                state = LedgerState.new(params)
            if repair is not None:
                writer.append(repair)
        except BaseException:
            writer.close()
            raise
        return cls(writer, state)

    def close(self) -> None:
        """Close the journal and release the writer's lock (idempotent)."""
        self._writer.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def params(self) -> LedgerParams:
        return self._state.params

    @property
    def path(self) -> Path:
        """The journal file."""
        return self._writer.path

    @property
    def state(self) -> LedgerState:
        """The pure state (read it; never change it)."""
        return self._state

    # Events.

    def commit(self, run_id: str, w: int, hotkey: str, at: int) -> None:
        """Record that ``hotkey`` committed to round ``w`` of ``run_id``."""
        self._record(CommitEvent(run_id=run_id, w=w, hotkey=hotkey, at=at))

    def verdict(
        self,
        run_id: str,
        w: int,
        hotkey: str,
        verdict: Verdict,
        tokens: int,
        soft_score_ppm: int,
        at: int,
        transient_epoch: int | None = None,
    ) -> None:
        """Record the verdict of a committed miner's round (``transient_epoch``: for a
        TRANSIENT, the chain epoch its forgiveness counts in; default ``epoch_of(at)``)."""
        self._record(
            VerdictEvent(
                run_id=run_id,
                w=w,
                hotkey=hotkey,
                verdict=verdict,
                tokens=tokens,
                soft_score_ppm=soft_score_ppm,
                at=at,
                transient_epoch=transient_epoch,
            )
        )

    def finalize(self, run_id: str, w: int, at: int) -> int:
        """Finalize round ``w`` of ``run_id``; its ``final_round`` (``round_of(at)``)."""
        final_round = self.params.round_of(at)
        self._record(FinalizeEvent(run_id=run_id, w=w, at=at, final_round=final_round))
        return final_round

    def clawback(self, hotkey: str, units: int, at: int) -> ClawbackSplit:
        """Take ``units`` back from ``hotkey``: ``(burned, debt)``, as the split falls with
        every recorded event applied. (An answer for an ``epoch_at`` before ``at`` may still
        pay out escrow first; then less burns and more becomes debt.)"""
        event = ClawbackEvent(hotkey=hotkey, units=units, at=at)
        if not self._check(event):
            raise AssertionError("a clawback is never a repeat")
        split = self._state.preview_clawback(event)
        self._append(event)
        return split

    def vindicate(self, run_id: str, w: int, hotkey: str, at: int) -> bool:
        """Credit a finalized NO_UPLOAD slice after all; False if it already was (a no-op)."""
        final_round = self.params.round_of(at)
        event = VindicateEvent(run_id=run_id, w=w, hotkey=hotkey, at=at, final_round=final_round)
        return self._record(event)

    def fault(self, run_id: str, w: int, hotkey: str, at: int) -> bool:
        """Fault a finalized NO_UPLOAD slice after finality; False if it already was."""
        return self._record(FaultEvent(run_id=run_id, w=w, hotkey=hotkey, at=at))

    def get_weights(self, epoch: int, epoch_at: int, computed_at: int) -> bytes:
        """The answer for ``epoch``: the stored bytes if it was answered, else a new answer
        computed from the events with ``at <= epoch_at``, persisted before it is returned."""
        prepared = self._state.prepare_answer(epoch, epoch_at, computed_at)
        if isinstance(prepared, bytes):
            return prepared
        self._writer.append(WeightsRecord(answer=prepared.answer, payments=prepared.payments))
        self._state.commit_answer(prepared)
        return prepared.data

    # Queries.

    def totals(self) -> Totals:
        """Totals with every recorded event applied."""
        return self._state.totals()

    def balance(self, hotkey: str) -> HotkeyAccount:
        return self._state.balance(hotkey)

    def balances(self) -> dict[str, HotkeyAccount]:
        return self._state.balances()

    def is_finalized(self, run_id: str, w: int) -> bool:
        return self._state.book.is_finalized(run_id, w)

    def finalized_at(self, run_id: str, w: int) -> int | None:
        """The ``at`` of round ``w``'s finalize, or None while it is not finalized."""
        return self._state.book.final_at.get((run_id, w))

    def has_commit(self, run_id: str, w: int, hotkey: str) -> bool:
        return self._state.book.has_commit(run_id, w, hotkey)

    def has_verdict(self, run_id: str, w: int, hotkey: str) -> bool:
        return self._state.book.verdict_of(run_id, w, hotkey) is not None

    @property
    def last_event_at(self) -> int | None:
        return self._state.last_event_at

    @property
    def last_answered(self) -> tuple[int, int] | None:
        """``(epoch, epoch_at)`` of the last answer in order, if any."""
        if self._state.last_epoch is None or self._state.last_epoch_at is None:
            return None
        return self._state.last_epoch, self._state.last_epoch_at

    def event_time(self, t: int) -> int:
        """The ``at`` to give an event happening at ``t`` (see LedgerState.event_time)."""
        return self._state.event_time(t)

    def answer(self, epoch: int) -> bytes | None:
        """The stored answer for ``epoch``, if any."""
        return self._state.answers.get(epoch)

    def statistics(self) -> LedgerStatistics:
        totals = self.totals()
        return LedgerStatistics(
            records=self._writer.seq,
            queued_events=len(self._state.queue),
            answers=len(self._state.answers),
            minted=totals.minted,
            burned=totals.burned,
            paid=totals.paid,
            pending=totals.pending,
            debt=totals.debt,
            last_event_at=self._state.last_event_at,
            last_epoch=self._state.last_epoch,
            last_epoch_at=self._state.last_epoch_at,
        )

    # The write path.

    def _check(self, event: Event) -> bool:
        return self._state.check(event)

    def _record(self, event: Event) -> bool:
        if not self._check(event):
            return False
        self._append(event)
        return True

    def _append(self, event: Event) -> None:
        self._writer.append(event)
        self._state.record(event)
