"""The money of the ledger: escrowed entitlements, per-hotkey balances, debt and the totals.

Every unit ever minted is in exactly one of three places, and :meth:`Accounts.check_balance`
(after every event) and :meth:`Accounts.audit` (after every answer, a full recount) hold it::

    minted == burned + paid + pending        pending = sum of the entitlements' outstanding

How each event moves units (spec 8; ``acct`` is the hotkey's :class:`HotkeyAccount`):

- ``verdict``: a TRANSIENT counts against ``(hotkey, transient_epoch or epoch_of(at))``; past
  ``forgive_per_epoch`` it is a FAULT. A FAULT blacklists the hotkey and burns every
  outstanding entitlement it holds (its escrow). The verdict waits for its round's finalize.
- ``finalize``: mints ``B_w``, computes the slices (:mod:`hypertrain.ledger.rewards`). A MATCH
  or UNSAMPLED slice of a hotkey that is not blacklisted is credited: debt is repaid first (the
  repaid units burn), the rest becomes a new entitlement vesting ``vest_rounds`` after
  ``final_round``. Every other slice burns: NO_UPLOAD as *forgone* (payable on vindication),
  FAULT, TRANSIENT, and slices of blacklisted hotkeys. The rounding remainder burns too.
- ``clawback``: burns the hotkey's outstanding entitlements oldest first, up to ``units``; what
  is left becomes debt. Paid units are never recalled.
- ``vindicate``: the forgone slice is credited like a grant (debt first), vesting from the
  vindication's ``final_round``; its units move from burned to pending. A blacklisted hotkey
  holds no escrow, so its vindicated slice stays burned.
- ``fault`` (after finality): the forgone slice stays burned; the hotkey's escrow burns; it is
  blacklisted and frozen.

Per-hotkey ``burned`` counts the slices and escrow of that hotkey that burned (repaid debt
included); rounding remainders and rounds without contributions burn unattributed.
"""

from __future__ import annotations

from typing import Final, NamedTuple

import attrs

from hypertrain.ledger.errors import LedgerInvariantError
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
from hypertrain.ledger.params import LedgerParams
from hypertrain.ledger.rewards import contribution, slices

__all__ = ["Accounts", "ClawbackSplit", "Entitlement", "HotkeyAccount", "RoundEntry", "Totals"]

RoundKey = tuple[str, int]
SliceKey = tuple[str, int, str]
_GRANTED: frozenset[Verdict] = frozenset({"MATCH", "UNSAMPLED"})


@attrs.frozen(kw_only=True)
class Entitlement:
    """Escrowed units of one hotkey from one round; ``paid + burned <= amount``."""

    run_id: str
    w: int
    final_round: int
    hotkey: str
    amount: int
    paid: int = 0
    burned: int = 0

    @property
    def outstanding(self) -> int:
        """Units still to pay (pending)."""
        return self.amount - self.paid - self.burned

    def vested(self, round_at: int, vest_rounds: int) -> bool:
        """Payable in ledger round ``round_at``: ``final_round + vest_rounds <= round_at``."""
        return self.final_round + vest_rounds <= round_at


@attrs.frozen(kw_only=True)
class HotkeyAccount:
    """One hotkey's balances and standing."""

    pending: int = 0
    paid: int = 0
    burned: int = 0
    debt: int = 0
    blacklisted: bool = False
    frozen: bool = False
    """Frozen by a fault after finality: never paid again."""


_NO_ACCOUNT: Final = HotkeyAccount()


@attrs.frozen
class RoundEntry:
    """A verdict waiting for its round's finalize (TRANSIENT already turned FAULT if due)."""

    verdict: Verdict
    contribution: int


@attrs.frozen(kw_only=True)
class Totals:
    """The ledger's totals; ``minted == burned + paid + pending``."""

    minted: int
    burned: int
    paid: int
    pending: int
    debt: int


class ClawbackSplit(NamedTuple):
    """What a clawback did: units of escrow burned, units added to the debt."""

    burned: int
    debt: int


@attrs.define
class Accounts:
    """The money state; mutated only by :meth:`apply` and :meth:`settle`."""

    params: LedgerParams
    minted: int = 0
    burned: int = 0
    paid: int = 0
    pending: int = 0
    debt: int = 0
    entitlements: list[Entitlement] = attrs.field(factory=list)
    """Every entitlement ever granted, in grant order (the FIFO of payouts)."""
    cursor: int = 0
    """Index of the first entitlement with units outstanding (all before it are settled)."""
    hotkeys: dict[str, HotkeyAccount] = attrs.field(factory=dict)
    transients: dict[tuple[str, int], int] = attrs.field(factory=dict)
    """TRANSIENT verdicts per ``(hotkey, epoch)``."""
    rounds: dict[RoundKey, dict[str, RoundEntry]] = attrs.field(factory=dict)
    """Verdicts of rounds not finalized yet."""
    forgone: dict[SliceKey, int] = attrs.field(factory=dict)
    """Unsettled NO_UPLOAD slices of finalized rounds (burned, payable on vindication)."""

    def clone(self) -> Accounts:
        """An independent copy (entitlements and accounts are frozen, so shallow copies do)."""
        return attrs.evolve(
            self,
            entitlements=list(self.entitlements),
            hotkeys=dict(self.hotkeys),
            transients=dict(self.transients),
            rounds={key: dict(entries) for key, entries in self.rounds.items()},
            forgone=dict(self.forgone),
        )

    def totals(self) -> Totals:
        return Totals(
            minted=self.minted,
            burned=self.burned,
            paid=self.paid,
            pending=self.pending,
            debt=self.debt,
        )

    def account(self, hotkey: str) -> HotkeyAccount:
        """``hotkey``'s account (all zeros if it never had one)."""
        return self.hotkeys.get(hotkey, _NO_ACCOUNT)

    def apply(self, event: Event) -> ClawbackSplit | None:
        """Move the units ``event`` moves (the book has checked it); a clawback's split."""
        split: ClawbackSplit | None = None
        if isinstance(event, VerdictEvent):
            self._verdict(event)
        elif isinstance(event, FinalizeEvent):
            self._finalize(event)
        elif isinstance(event, ClawbackEvent):
            split = self._clawback(event)
        elif isinstance(event, VindicateEvent):
            self._vindicate(event)
        elif isinstance(event, FaultEvent):
            self._forgone(event.run_id, event.w, event.hotkey)
            self._blacklist(event.hotkey, freeze=True)
        else:
            assert isinstance(event, CommitEvent)  # a commit moves nothing until its verdict
        self._advance()
        self.check_balance()
        return split

    def settle(self, payments: tuple[tuple[int, int], ...], burns: tuple[int, ...]) -> None:
        """Pay ``(entitlement_index, units)`` and burn the outstanding of ``burns``."""
        for index, units in payments:
            entitlement = self.entitlements[index]
            if not 0 < units <= entitlement.outstanding:
                raise LedgerInvariantError(f"payment of {units} to entitlement {index}")
            self.entitlements[index] = attrs.evolve(entitlement, paid=entitlement.paid + units)
            self._add(entitlement.hotkey, pending=-units, paid=units)
            self.pending -= units
            self.paid += units
        for index in burns:
            self._burn(index, self.entitlements[index].outstanding)
        self._advance()
        self.check_balance()

    def check_balance(self) -> None:
        """``minted == burned + paid + pending`` (O(1); LedgerInvariantError if not)."""
        balanced = self.minted == self.burned + self.paid + self.pending
        if not balanced or min(self.burned, self.paid, self.pending, self.debt) < 0:
            raise LedgerInvariantError(f"ledger out of balance: {self.totals()}")

    def audit(self) -> None:
        """Recount pending, paid and debt from the entitlements and the accounts."""
        pending: dict[str, int] = {}
        for entitlement in self.entitlements[self.cursor :]:
            if entitlement.outstanding < 0:
                raise LedgerInvariantError(f"entitlement overdrawn: {entitlement}")
            if entitlement.outstanding:
                pending[entitlement.hotkey] = (
                    pending.get(entitlement.hotkey, 0) + entitlement.outstanding
                )
        if any(e.outstanding for e in self.entitlements[: self.cursor]):
            raise LedgerInvariantError("an entitlement before the cursor is outstanding")
        for hotkey, account in self.hotkeys.items():
            if account.pending != pending.get(hotkey, 0):
                raise LedgerInvariantError(f"pending of {hotkey} is {account.pending}")
        if sum(pending.values()) != self.pending:
            raise LedgerInvariantError(f"pending is {self.pending}, entitlements hold more")
        if sum(a.paid for a in self.hotkeys.values()) != self.paid:
            raise LedgerInvariantError(f"paid is {self.paid}, not the hotkeys' sum")
        if sum(a.debt for a in self.hotkeys.values()) != self.debt:
            raise LedgerInvariantError(f"debt is {self.debt}, not the hotkeys' sum")
        self.check_balance()

    # The events.

    def _verdict(self, event: VerdictEvent) -> None:
        verdict = event.verdict
        if verdict == "TRANSIENT":
            epoch = event.transient_epoch
            if epoch is None:
                epoch = self.params.epoch_of(event.at)
            count = self.transients.get((event.hotkey, epoch), 0) + 1
            self.transients[(event.hotkey, epoch)] = count
            if count > self.params.forgive_per_epoch:
                verdict = "FAULT"
        if verdict == "FAULT":
            self._blacklist(event.hotkey, freeze=False)
        entry = RoundEntry(verdict, contribution(event.tokens, event.soft_score_ppm))
        self.rounds.setdefault((event.run_id, event.w), {})[event.hotkey] = entry

    def _finalize(self, event: FinalizeEvent) -> None:
        entries = self.rounds.pop((event.run_id, event.w), {})
        budget = self.params.round_budget
        self.minted += budget
        shares = slices(budget, {hotkey: e.contribution for hotkey, e in entries.items()})
        placed = 0
        for hotkey in sorted(entries):
            verdict, share = entries[hotkey].verdict, shares[hotkey]
            if verdict in _GRANTED and not self.account(hotkey).blacklisted:
                placed += self._credit(hotkey, share, event.run_id, event.w, event.final_round)
                continue
            if verdict == "NO_UPLOAD":
                self.forgone[(event.run_id, event.w, hotkey)] = share
            self._add(hotkey, burned=share)
        self.burned += budget - placed

    def _clawback(self, event: ClawbackEvent) -> ClawbackSplit:
        left = event.units
        for index in self._outstanding_of(event.hotkey):
            if left == 0:
                break
            units = min(left, self.entitlements[index].outstanding)
            self._burn(index, units)
            left -= units
        self._add(event.hotkey, debt=left)
        self.debt += left
        return ClawbackSplit(burned=event.units - left, debt=left)

    def _vindicate(self, event: VindicateEvent) -> None:
        share = self._forgone(event.run_id, event.w, event.hotkey)
        if self.account(event.hotkey).blacklisted:
            return
        self._add(event.hotkey, burned=-share)
        self.burned -= share
        placed = self._credit(event.hotkey, share, event.run_id, event.w, event.final_round)
        self.burned += share - placed

    # The moves.

    def _forgone(self, run_id: str, w: int, hotkey: str) -> int:
        share = self.forgone.pop((run_id, w, hotkey), None)
        if share is None:
            raise LedgerInvariantError(f"no forgone slice of {hotkey} in round {w} of {run_id}")
        return share

    def _credit(self, hotkey: str, units: int, run_id: str, w: int, final_round: int) -> int:
        """Repay debt from ``units`` (the repaid units count as the hotkey's burned; the caller
        adds them to the total), escrow the rest; returns the units escrowed."""
        repaid = min(self.account(hotkey).debt, units)
        placed = units - repaid
        self._add(hotkey, debt=-repaid, burned=repaid, pending=placed)
        self.debt -= repaid
        if placed:
            self.entitlements.append(
                Entitlement(
                    run_id=run_id, w=w, final_round=final_round, hotkey=hotkey, amount=placed
                )
            )
            self.pending += placed
        return placed

    def _blacklist(self, hotkey: str, *, freeze: bool) -> None:
        for index in self._outstanding_of(hotkey):
            self._burn(index, self.entitlements[index].outstanding)
        account = self.account(hotkey)
        self.hotkeys[hotkey] = attrs.evolve(
            account, blacklisted=True, frozen=account.frozen or freeze
        )

    def _burn(self, index: int, units: int) -> None:
        entitlement = self.entitlements[index]
        self.entitlements[index] = attrs.evolve(entitlement, burned=entitlement.burned + units)
        self._add(entitlement.hotkey, pending=-units, burned=units)
        self.pending -= units
        self.burned += units

    def _outstanding_of(self, hotkey: str) -> list[int]:
        return [
            index
            for index in range(self.cursor, len(self.entitlements))
            if self.entitlements[index].hotkey == hotkey and self.entitlements[index].outstanding
        ]

    def _add(
        self, hotkey: str, *, pending: int = 0, paid: int = 0, burned: int = 0, debt: int = 0
    ) -> None:
        a = self.account(hotkey)
        self.hotkeys[hotkey] = HotkeyAccount(
            pending=a.pending + pending,
            paid=a.paid + paid,
            burned=a.burned + burned,
            debt=a.debt + debt,
            blacklisted=a.blacklisted,
            frozen=a.frozen,
        )

    def _advance(self) -> None:
        while (
            self.cursor < len(self.entitlements) and not self.entitlements[self.cursor].outstanding
        ):
            self.cursor += 1
