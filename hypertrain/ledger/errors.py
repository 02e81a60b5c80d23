"""The ledger's errors, one tree::

    HypertrainError
    └── LedgerError                 root of what the ledger raises on purpose
        ├── LedgerRefused           a call breaks a rule of spec 8 (also a ValueError);
        │                           nothing was written and the state is unchanged
        ├── JournalError            the journal on disk cannot be used as it is
        │   ├── ChainBreak          damage other than a torn final write: a bad hash,
        │   │                       prev_hash or seq, an unparsable or non-canonical line, an
        │   │                       unknown kind, a record the rules refuse (names the offset)
        │   ├── RebuildMismatch     a stored ``weights`` answer differs from its recomputation
        │   ├── ParamsMismatch      the ``init`` record holds other params than the caller's
        │   ├── JournalLocked       another writer holds the journal's lock
        │   └── JournalChanged      the file is not what this writer last wrote (size check),
        │                           an append failed half way, or the ledger is closed
        └── LedgerInvariantError    ``minted == burned + paid + pending`` broke: a bug, never
                                    a caller's mistake (also an AssertionError)

A caller (the daemon's adapter) maps LedgerRefused to a 4xx answer and treats every
JournalError as fatal at start-up; it never catches LedgerInvariantError.
"""

from __future__ import annotations

from hypertrain.protocol.errors import HypertrainError

__all__ = [
    "ChainBreak",
    "JournalChanged",
    "JournalError",
    "JournalLocked",
    "LedgerError",
    "LedgerInvariantError",
    "LedgerRefused",
    "ParamsMismatch",
    "RebuildMismatch",
]


class LedgerError(HypertrainError):
    """Root of the errors the ledger raises on purpose; ``detail`` says what happened."""


class LedgerRefused(LedgerError, ValueError):
    """A mutating call or a request breaks a rule; the message names the rule."""


class JournalError(LedgerError):
    """The journal file cannot be used as it is."""


class ChainBreak(JournalError):
    """The journal is damaged beyond a torn final write; the message names the byte offset and
    the line and seq of the first bad record."""

    def __init__(self, detail: str, *, offset: int) -> None:
        super().__init__(detail)
        self.offset = offset


class RebuildMismatch(JournalError):
    """A stored ``weights`` record is not what replaying the journal up to it computes."""

    def __init__(self, detail: str, *, offset: int) -> None:
        super().__init__(detail)
        self.offset = offset


class ParamsMismatch(JournalError):
    """The journal was started with other params than the ones the caller opens it with."""


class JournalLocked(JournalError):
    """Another process (or another open :class:`~hypertrain.ledger.ledger.Ledger`) writes it."""


class JournalChanged(JournalError):
    """The writer cannot append: the file changed behind it, a previous append failed, or the
    ledger is closed. Reopen the ledger (that replays and repairs)."""


class LedgerInvariantError(LedgerError, AssertionError):
    """An internal accounting invariant failed. Never a caller's mistake."""
