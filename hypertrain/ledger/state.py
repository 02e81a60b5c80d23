"""The whole pure ledger: the round book, the money, the queue of events not yet applied to
the money, and the answers. A journal replays into exactly this (state = pure replay).

Events apply lazily (spec 8): an answer for ``epoch_at`` sees exactly the events with
``at <= epoch_at``. Since ``at`` never goes back and every event's ``at`` is after the last
answered ``epoch_at``, the events an answer must see are always a prefix of :attr:`queue`
(recording order). So:

- :meth:`check` then :meth:`record` put an event in the book at once (the rules of the next
  event depend on it) and at the end of the queue;
- :meth:`prepare_answer` applies the queue's prefix with ``at <= epoch_at`` to a *copy* of the
  accounts, plans the payout and renders the answer; nothing changes until
  :meth:`commit_answer` installs it. The journal writes the answer between the two.

The time rules :meth:`check` adds to the book's: ``at >= last_event_at`` and
``at > last_epoch_at``; ``final_round`` of a finalize or vindicate is ``round_of(at)``.

Queries (:meth:`totals`, :meth:`balance`, :meth:`balances`) report the *projection*: the
accounts with every recorded event applied, as the next answer past them would see them before
paying. The answers' own ``ledger_*`` metadata report the applied accounts at that answer.
"""

from __future__ import annotations

from typing import Any

import attrs

from hypertrain.ledger.accounts import Accounts, ClawbackSplit, HotkeyAccount, Totals
from hypertrain.ledger.answers import AnswerRequest, Reason, render_answer
from hypertrain.ledger.book import Book
from hypertrain.ledger.canonical import canonical_bytes
from hypertrain.ledger.errors import LedgerInvariantError, LedgerRefused
from hypertrain.ledger.events import ClawbackEvent, Event, FinalizeEvent, VindicateEvent
from hypertrain.ledger.params import LedgerParams, check_count
from hypertrain.ledger.payout import Payment, Payout, per_hotkey, plan_payout

__all__ = ["LedgerState", "PreparedAnswer"]


@attrs.frozen(kw_only=True)
class PreparedAnswer:
    """A computed answer not installed yet: its bytes, its payments, the accounts after it."""

    request: AnswerRequest
    data: bytes
    payments: tuple[Payment, ...]
    in_order: bool
    """False for ``out_of_order``: installing it changes nothing but the stored answers."""
    applied: int
    """How many queued events it applied."""
    answer: dict[str, Any] = attrs.field(eq=False, repr=False)
    """The answer object (``data`` is its canonical bytes)."""
    accounts: Accounts = attrs.field(eq=False, repr=False)
    version: int
    """The state's :attr:`LedgerState.version` it was computed from."""


@attrs.define
class LedgerState:
    """Book + accounts + queue + answers; build with :meth:`new`."""

    params: LedgerParams
    book: Book
    accounts: Accounts
    queue: list[Event] = attrs.field(factory=list)
    """Recorded events not yet applied to :attr:`accounts`, in recording order."""
    answers: dict[int, bytes] = attrs.field(factory=dict)
    last_event_at: int | None = None
    last_epoch: int | None = None
    """Epoch of the last answer in order (``out_of_order`` answers do not count)."""
    last_epoch_at: int | None = None
    version: int = attrs.field(default=0, eq=False)
    """Counts the changes (events recorded, answers installed) in this process."""
    _projection: Accounts | None = attrs.field(default=None, init=False, eq=False, repr=False)

    @classmethod
    def new(cls, params: LedgerParams) -> LedgerState:
        return cls(params=params, book=Book(), accounts=Accounts(params=params))

    # Events.

    def check(self, event: Event) -> bool:
        """LedgerRefused if ``event`` breaks a rule; False if it is a no-op repeat (a
        settlement already made), True if it is to be recorded. Changes nothing."""
        if not self.book.check(event):
            return False
        if self.last_event_at is not None and event.at < self.last_event_at:
            raise LedgerRefused(
                f"{event.kind}: at {event.at} is before the last event's at {self.last_event_at}"
            )
        if self.last_epoch_at is not None and event.at <= self.last_epoch_at:
            raise LedgerRefused(
                f"{event.kind}: at {event.at} is not after the last answered epoch_at"
                f" {self.last_epoch_at}"
            )
        if isinstance(event, FinalizeEvent | VindicateEvent):
            expected = self.params.round_of(event.at)
            if event.final_round != expected:
                raise LedgerRefused(
                    f"{event.kind}: final_round must be round_of(at) = {expected},"
                    f" not {event.final_round}"
                )
        return True

    def record(self, event: Event) -> None:
        """Record ``event``, which :meth:`check` accepted (True). The projection applies it at
        once, so the books are checked after every event, not only at the next answer."""
        self.book.record(event)
        self.queue.append(event)
        self.last_event_at = event.at
        self.version += 1
        if self._projection is None:
            self.projected()
        else:
            self._projection.apply(event)

    def event_time(self, t: int) -> int:
        """The ``at`` an event happening at ``t`` should carry: the first time not before
        ``t`` that the time rules accept."""
        at = t
        if self.last_event_at is not None:
            at = max(at, self.last_event_at)
        if self.last_epoch_at is not None:
            at = max(at, self.last_epoch_at + 1)
        return at

    # Answers.

    def prepare_answer(self, epoch: int, epoch_at: int, computed_at: int) -> bytes | PreparedAnswer:
        """The stored bytes if ``epoch`` was answered, else the answer to install."""
        request = AnswerRequest(
            epoch=check_count("epoch", epoch),
            epoch_at=check_count("epoch_at", epoch_at),
            computed_at=check_count("computed_at", computed_at),
        )
        stored = self.answers.get(epoch)
        if stored is not None:
            return stored
        if self._out_of_order(epoch, epoch_at):
            return self._prepared(request, "out_of_order", self.accounts, None, 0)
        accounts = self.accounts.clone()
        applied = 0
        for event in self.queue:
            if event.at > epoch_at:
                break
            accounts.apply(event)
            applied += 1
        payout = plan_payout(accounts, self.params.round_of(epoch_at))
        accounts.settle(payout.payments, payout.burns)
        accounts.audit()
        reason: Reason = "paid" if payout.units_paid else "nothing_vested"
        return self._prepared(request, reason, accounts, payout, applied)

    def _out_of_order(self, epoch: int, epoch_at: int) -> bool:
        if self.last_epoch is None or self.last_epoch_at is None:
            return False
        return epoch < self.last_epoch or epoch_at < self.last_epoch_at

    def commit_answer(self, prepared: PreparedAnswer) -> None:
        """Install an answer :meth:`prepare_answer` made from this very state."""
        if prepared.version != self.version:
            raise LedgerInvariantError("an answer prepared before the state changed")
        self.version += 1
        self.answers[prepared.request.epoch] = prepared.data
        if prepared.in_order:
            self.accounts = prepared.accounts
            del self.queue[: prepared.applied]
            self.last_epoch = prepared.request.epoch
            self.last_epoch_at = prepared.request.epoch_at
        self._projection = None

    def _prepared(
        self,
        request: AnswerRequest,
        reason: Reason,
        accounts: Accounts,
        payout: Payout | None,
        applied: int,
    ) -> PreparedAnswer:
        payments = payout.payments if payout is not None else ()
        answer = render_answer(
            self.params,
            request,
            reason=reason,
            weights=per_hotkey(payments, accounts.entitlements),
            hotkeys_capped=payout.hotkeys_capped if payout is not None else 0,
            totals=accounts.totals(),
        )
        return PreparedAnswer(
            request=request,
            data=canonical_bytes(answer),
            answer=answer,
            payments=payments,
            in_order=payout is not None,
            applied=applied,
            accounts=accounts,
            version=self.version,
        )

    # Queries (of the projection).

    def projected(self) -> Accounts:
        """The accounts with every recorded event applied (kept up to date; do not mutate)."""
        if self._projection is None:
            accounts = self.accounts.clone()
            for event in self.queue:
                accounts.apply(event)
            self._projection = accounts
        return self._projection

    def preview_clawback(self, event: ClawbackEvent) -> ClawbackSplit:
        """How ``event`` splits if applied after every recorded event: the hotkey's pending
        burns up to ``units``, the rest is debt."""
        burned = min(event.units, self.projected().account(event.hotkey).pending)
        return ClawbackSplit(burned=burned, debt=event.units - burned)

    def totals(self) -> Totals:
        return self.projected().totals()

    def balance(self, hotkey: str) -> HotkeyAccount:
        return self.projected().account(hotkey)

    def balances(self) -> dict[str, HotkeyAccount]:
        """Every hotkey's account, by hotkey."""
        accounts = self.projected()
        return {hotkey: accounts.hotkeys[hotkey] for hotkey in sorted(accounts.hotkeys)}
