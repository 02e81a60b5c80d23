"""One epoch's payout: which entitlements an answer pays, and how much (spec 8).

:func:`plan_payout` walks the entitlements in grant order from the accounts' cursor:

1. an entitlement with nothing outstanding is passed over;
2. the first one not yet vested (``final_round + vest_rounds > round_at``) ends the walk:
   grants come in ``final_round`` order, so nothing after it is vested either;
3. one of a frozen hotkey (a fault after finality) is paid nothing and its outstanding burns
   (the rules never leave such an entitlement outstanding; this is the guard that keeps it so);
4. otherwise it is paid ``min(outstanding, budget left)`` of the epoch's ``10^6``; the walk
   ends when the budget is spent.

Then :func:`cap_payments` keeps at most ``max_entries`` hotkeys: the largest per-hotkey sums,
ties to the smaller hotkey. The other hotkeys' payments are dropped from this answer; their
entitlements stay outstanding at the head of the FIFO and are paid first next epoch. The budget
they would have used is not handed to anyone else: it is unpaid this epoch. Next epoch the
carried hotkeys compete by size again with whatever else the walk reaches.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from hypertrain.ledger.accounts import Accounts, Entitlement
from hypertrain.ledger.params import UNIT

__all__ = ["Payout", "cap_payments", "per_hotkey", "plan_payout"]

Payment = tuple[int, int]


@attrs.frozen(kw_only=True)
class Payout:
    """What an answer pays: ``(entitlement_index, units)`` in walk order, the entitlements of
    frozen hotkeys that burn, and how many hotkeys the cap left out."""

    payments: tuple[Payment, ...]
    burns: tuple[int, ...]
    hotkeys_capped: int

    @property
    def units_paid(self) -> int:
        return sum(units for _index, units in self.payments)


def per_hotkey(payments: Sequence[Payment], entitlements: Sequence[Entitlement]) -> dict[str, int]:
    """Units paid to each hotkey."""
    sums: dict[str, int] = {}
    for index, units in payments:
        hotkey = entitlements[index].hotkey
        sums[hotkey] = sums.get(hotkey, 0) + units
    return sums


def cap_payments(
    payments: Sequence[Payment], entitlements: Sequence[Entitlement], max_entries: int
) -> tuple[tuple[Payment, ...], int]:
    """The payments of the ``max_entries`` hotkeys with the largest sums (ties: the smaller
    hotkey), and how many hotkeys were left out."""
    sums = per_hotkey(payments, entitlements)
    if len(sums) <= max_entries:
        return tuple(payments), 0
    kept = set(sorted(sums, key=lambda hotkey: (-sums[hotkey], hotkey))[:max_entries])
    return (
        tuple(p for p in payments if entitlements[p[0]].hotkey in kept),
        len(sums) - max_entries,
    )


def plan_payout(accounts: Accounts, round_at: int) -> Payout:
    """The payout of an epoch in ledger round ``round_at`` (``accounts`` is not changed)."""
    params = accounts.params
    budget = UNIT
    payments: list[Payment] = []
    burns: list[int] = []
    for index in range(accounts.cursor, len(accounts.entitlements)):
        entitlement = accounts.entitlements[index]
        outstanding = entitlement.outstanding
        if not outstanding:
            continue
        if not entitlement.vested(round_at, params.vest_rounds):
            break
        if accounts.account(entitlement.hotkey).frozen:
            burns.append(index)
            continue
        units = min(outstanding, budget)
        payments.append((index, units))
        budget -= units
        if not budget:
            break
    kept, capped = cap_payments(payments, accounts.entitlements, params.max_entries)
    return Payout(payments=kept, burns=tuple(burns), hotkeys_capped=capped)
