"""The integer escrow ledger of spec 8: rewards per finalized round, vesting, ``get_weights``.

No Trio, no HTTP. The layers, from the bottom:

Pure (no I/O): :mod:`.params` (constants, :class:`LedgerParams`, the epoch and round clock),
:mod:`.events` (the event records), :mod:`.rewards` (the finalize math), :mod:`.book` (the
round rules), :mod:`.accounts` (how events move units; the invariant), :mod:`.payout` (one
epoch's FIFO walk and the hotkey cap), :mod:`.answers` (the answer's bytes and reasons),
:mod:`.state` (all of it, with lazy application of events), :mod:`.canonical` (the ledger's
canonical JSON), :mod:`.records` (the journal's record formats).

File I/O: :mod:`.journal` (the hash chain read back, the single writer), :mod:`.replay`
(state = pure replay; the read-only verifier) and :mod:`.ledger` (:class:`Ledger`, the
facade: check, append + fsync, apply). The errors are drawn in :mod:`.errors`.
"""

from hypertrain.ledger.accounts import ClawbackSplit, Entitlement, HotkeyAccount, Totals
from hypertrain.ledger.answers import REASONS, Reason
from hypertrain.ledger.canonical import canonical_bytes
from hypertrain.ledger.errors import (
    ChainBreak,
    JournalChanged,
    JournalError,
    JournalLocked,
    LedgerError,
    LedgerInvariantError,
    LedgerRefused,
    ParamsMismatch,
    RebuildMismatch,
)
from hypertrain.ledger.events import (
    VERDICTS,
    ClawbackEvent,
    CommitEvent,
    Event,
    FaultEvent,
    FinalizeEvent,
    Verdict,
    VerdictEvent,
    VindicateEvent,
)
from hypertrain.ledger.journal import JOURNAL_DIR, JOURNAL_FILE, LOCK_FILE, journal_path
from hypertrain.ledger.ledger import Ledger, LedgerStatistics
from hypertrain.ledger.params import (
    F_MIN_PPM,
    FULL_SHARE_MASS,
    MAX_ENTRIES,
    UNIT,
    LedgerParams,
)
from hypertrain.ledger.replay import VerifyReport, read_journal, verify_journal
from hypertrain.ledger.state import LedgerState

__all__ = [
    "FULL_SHARE_MASS",
    "F_MIN_PPM",
    "JOURNAL_DIR",
    "JOURNAL_FILE",
    "LOCK_FILE",
    "MAX_ENTRIES",
    "REASONS",
    "UNIT",
    "VERDICTS",
    "ChainBreak",
    "ClawbackEvent",
    "ClawbackSplit",
    "CommitEvent",
    "Entitlement",
    "Event",
    "FaultEvent",
    "FinalizeEvent",
    "HotkeyAccount",
    "JournalChanged",
    "JournalError",
    "JournalLocked",
    "Ledger",
    "LedgerError",
    "LedgerInvariantError",
    "LedgerParams",
    "LedgerRefused",
    "LedgerState",
    "LedgerStatistics",
    "ParamsMismatch",
    "Reason",
    "RebuildMismatch",
    "Totals",
    "Verdict",
    "VerdictEvent",
    "VerifyReport",
    "VindicateEvent",
    "canonical_bytes",
    "journal_path",
    "read_journal",
    "verify_journal",
]
