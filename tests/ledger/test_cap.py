"""The cap on hotkeys per answer: the largest sums are kept, ties to the smaller hotkey, and
the others are paid first in the next epochs."""

from __future__ import annotations

from pathlib import Path

from hypertrain.ledger import MAX_ENTRIES, Entitlement, Ledger
from hypertrain.ledger.payout import cap_payments
from tests.ledger.support import RUN, Outcome, equal_round, make_params, play_round, weights_of


def test_a_small_cap_keeps_the_largest_and_carries_the_rest(tmp_path: Path) -> None:
    with Ledger.open(tmp_path, make_params(max_entries=2)) as ledger:
        outcomes: dict[str, Outcome] = {
            "c": ("MATCH", 1, 0),
            "a": ("MATCH", 3, 0),
            "b": ("MATCH", 2, 0),
        }
        play_round(ledger, 0, outcomes, 1050)  # 500,000 / 333,333 / 166,666
        first = weights_of(ledger, 1)
        assert first["weights"] == {"a": 500_000.0, "b": 333_333.0}
        assert first["metadata"]["hotkeys_capped"] == 1
        assert first["metadata"]["units_paid"] == 833_333
        assert first["metadata"]["units_burned_this_epoch"] == 166_667
        second = weights_of(ledger, 2)
        assert second["weights"] == {"c": 166_666.0}
        assert second["metadata"]["hotkeys_capped"] == 0


def test_ties_keep_the_smaller_hotkey(tmp_path: Path) -> None:
    with Ledger.open(tmp_path, make_params(max_entries=2)) as ledger:
        play_round(ledger, 0, equal_round("z", "y", "x"), 1050)
        assert set(weights_of(ledger, 1)["weights"]) == {"x", "y"}
        assert set(weights_of(ledger, 2)["weights"]) == {"z"}


def test_carried_payments_are_walked_first_and_compete_by_size_again(tmp_path: Path) -> None:
    with Ledger.open(tmp_path, make_params(max_entries=1)) as ledger:
        play_round(ledger, 0, {"a": ("MATCH", 1, 0), "b": ("MATCH", 3, 0)}, 1050)
        play_round(ledger, 1, {"c": ("MATCH", 1, 0)}, 1060)
        assert weights_of(ledger, 1)["weights"] == {"b": 750_000.0}  # a carried
        # The walk takes a's 250,000 first, then 750,000 of c: c's sum is the larger.
        assert weights_of(ledger, 2)["weights"] == {"c": 750_000.0}
        assert weights_of(ledger, 3)["weights"] == {"a": 250_000.0}  # a tie: the smaller hotkey
        assert weights_of(ledger, 4)["weights"] == {"c": 250_000.0}
        assert weights_of(ledger, 5)["metadata"]["reason"] == "nothing_vested"


def _entitlements(count: int) -> list[Entitlement]:
    return [
        Entitlement(run_id=RUN, w=0, final_round=0, hotkey=f"hk{i:06d}", amount=15)
        for i in range(count)
    ]


def test_cap_payments_at_the_real_cap() -> None:
    entitlements = _entitlements(MAX_ENTRIES + 3)
    payments = [(i, 15 if i != 7 else 16) for i in range(len(entitlements))]
    kept, capped = cap_payments(payments, entitlements, MAX_ENTRIES)
    assert capped == 3
    assert len(kept) == MAX_ENTRIES
    kept_indexes = {i for i, _ in kept}
    assert 7 in kept_indexes  # the largest sum
    assert not {MAX_ENTRIES, MAX_ENTRIES + 1, MAX_ENTRIES + 2} & kept_indexes  # largest names
    assert cap_payments(payments[:MAX_ENTRIES], entitlements, MAX_ENTRIES) == (
        tuple(payments[:MAX_ENTRIES]),
        0,
    )
