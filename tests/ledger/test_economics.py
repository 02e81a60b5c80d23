"""The economics of spec 8 through the journaled ledger: slices, vesting, faults, clawback,
vindication, forgiveness and the invariant."""

from __future__ import annotations

from pathlib import Path

from hypertrain.ledger import HotkeyAccount, Ledger, Totals
from tests.ledger.support import (
    RUN,
    epoch_at,
    equal_round,
    make_params,
    play_round,
    weights_of,
)


def totals(ledger: Ledger) -> tuple[int, int, int, int, int]:
    t = ledger.totals()
    assert t.minted == t.burned + t.paid + t.pending
    return (t.minted, t.burned, t.paid, t.pending, t.debt)


def test_three_equal_miners_get_333333_each_and_one_unit_burns(ledger: Ledger) -> None:
    assert play_round(ledger, 0, equal_round("a", "b", "c"), 1050) == 0
    assert totals(ledger) == (10**6, 1, 0, 999_999, 0)
    assert [ledger.balance(h).pending for h in "abc"] == [333_333] * 3


def test_one_faulty_of_three_burns_333334(ledger: Ledger) -> None:
    outcomes = {**equal_round("a", "b"), "c": ("FAULT", 100, 0)}
    play_round(ledger, 0, outcomes, 1050)
    assert totals(ledger) == (10**6, 333_334, 0, 666_666, 0)
    assert ledger.balance("c") == HotkeyAccount(burned=333_333, blacklisted=True)


def test_payment_vests_after_vest_rounds_and_not_before(ledger: Ledger) -> None:
    play_round(ledger, 0, equal_round("a", "b", "c"), 1050)  # final_round 0, vests in round 2
    first = weights_of(ledger, 0)  # epoch_at 1100: round 1
    assert first["weights"] == {}
    assert first["metadata"]["reason"] == "nothing_vested"
    assert first["metadata"]["round_at"] == 1
    assert first["metadata"]["units_burned_this_epoch"] == 10**6
    second = weights_of(ledger, 1)  # epoch_at 1200: round 2
    assert second["weights"] == {"a": 333_333.0, "b": 333_333.0, "c": 333_333.0}
    assert second["metadata"]["reason"] == "paid"
    assert second["metadata"]["units_paid"] == 999_999
    assert second["metadata"]["units_burned_this_epoch"] == 1
    assert totals(ledger) == (10**6, 1, 999_999, 0, 0)
    assert weights_of(ledger, 2)["weights"] == {}


def test_the_answer_is_the_specs_canonical_json(ledger: Ledger) -> None:
    play_round(ledger, 0, equal_round("b", "a"), 1050)
    data = ledger.get_weights(1, epoch_at(ledger.params, 1), 1234)
    assert data == (
        b'{"challenge_slug":"hypertrain","computed_at":1234,"epoch":1,"full_share_mass":1000000,'
        b'"metadata":{"epoch_at":1200,"hotkeys_capped":0,"ledger_burned":0,'
        b'"ledger_minted":1000000,"ledger_paid":1000000,"ledger_pending":0,"reason":"paid",'
        b'"round_at":2,"units_burned_this_epoch":0,"units_paid":1000000},'
        b'"weights":{"a":500000.0,"b":500000.0}}'
    )


def test_the_epoch_budget_pays_oldest_first_and_carries_the_rest(tmp_path: Path) -> None:
    with Ledger.open(tmp_path, make_params(epochs_per_round=2)) as ledger:  # B_w = 2 x 10^6
        play_round(ledger, 0, equal_round("a", "b"), 1050)  # 10^6 each, vests in round 2
        play_round(ledger, 1, equal_round("c"), 1060)
        paid = weights_of(ledger, 4)  # epoch_at 1500: epoch 5, round 2
        assert paid["weights"] == {"a": 10**6}
        assert weights_of(ledger, 5)["weights"] == {"b": 10**6}
        assert weights_of(ledger, 6)["weights"] == {"c": 10**6}
        assert weights_of(ledger, 7)["weights"] == {"c": 10**6}
        assert weights_of(ledger, 8)["metadata"]["reason"] == "nothing_vested"
        assert totals(ledger) == (4 * 10**6, 0, 4 * 10**6, 0, 0)


def test_a_fault_burns_the_round_slice_and_all_escrow(ledger: Ledger) -> None:
    play_round(ledger, 0, equal_round("a", "b"), 1050)
    play_round(ledger, 1, {**equal_round("a"), "b": ("FAULT", 100, 0)}, 1060)
    assert ledger.balance("b") == HotkeyAccount(burned=10**6, blacklisted=True)
    assert totals(ledger) == (2 * 10**6, 10**6, 0, 10**6, 0)
    play_round(ledger, 2, equal_round("a", "b"), 1070)  # blacklisted: its slice burns
    assert ledger.balance("b").burned == 10**6 + 500_000
    assert ledger.balance("b").pending == 0


def test_transient_is_forgiven_once_per_epoch_then_faults(ledger: Ledger) -> None:
    play_round(ledger, 0, {**equal_round("a"), "t": ("TRANSIENT", 100, 0)}, 1050)
    assert ledger.balance("t") == HotkeyAccount(burned=500_000)  # nothing granted, no blacklist
    play_round(ledger, 1, equal_round("t", "a"), 1060)
    assert ledger.balance("t").pending == 500_000
    play_round(ledger, 2, {**equal_round("a"), "t": ("TRANSIENT", 100, 0)}, 1070)  # epoch 0 again
    assert ledger.balance("t") == HotkeyAccount(burned=1_500_000, blacklisted=True)
    # A TRANSIENT in each of two epochs is forgiven both times.
    play_round(ledger, 3, {**equal_round("a"), "u": ("TRANSIENT", 100, 0)}, 1080)
    play_round(ledger, 4, {**equal_round("a"), "u": ("TRANSIENT", 100, 0)}, 1180)  # epoch 1
    assert not ledger.balance("u").blacklisted


def test_a_transient_counts_in_the_epoch_the_coordinator_forgave_it_in(ledger: Ledger) -> None:
    # Two TRANSIENTs rerun in epochs 3 and 4 but finalised together in epoch 0: both forgiven,
    # as the coordinator forgave them (DESIGN.md 9: one clock for the store and the ledger).
    for w, (hotkey, epoch) in enumerate([("t", 3), ("t", 4), ("u", 5), ("u", 5)]):
        at = 1050 + w
        ledger.commit(RUN, w, "a", at)
        ledger.commit(RUN, w, hotkey, at)
        ledger.verdict(RUN, w, "a", "MATCH", 100, 0, at)
        ledger.verdict(RUN, w, hotkey, "TRANSIENT", 100, 0, at, transient_epoch=epoch)
        ledger.finalize(RUN, w, at)
    assert not ledger.balance("t").blacklisted
    assert ledger.balance("u").blacklisted  # twice in epoch 5: the second one faults


def test_no_forgiveness_when_forgive_per_epoch_is_0(tmp_path: Path) -> None:
    with Ledger.open(tmp_path, make_params(forgive_per_epoch=0)) as ledger:
        play_round(ledger, 0, {"t": ("TRANSIENT", 100, 0)}, 1050)
        assert ledger.balance("t").blacklisted


def test_soft_score_weighs_the_slices(ledger: Ledger) -> None:
    play_round(ledger, 0, {"low": ("MATCH", 7, 0), "high": ("UNSAMPLED", 7, 10**6)}, 1050)
    assert ledger.balance("low").pending == 444_444
    assert ledger.balance("high").pending == 555_555
    assert totals(ledger) == (10**6, 1, 0, 999_999, 0)


def test_rounds_without_tokens_burn_whole(ledger: Ledger) -> None:
    play_round(ledger, 0, {"a": ("MATCH", 0, 10**6), "b": ("MATCH", 0, 0)}, 1050)
    assert totals(ledger) == (10**6, 10**6, 0, 0, 0)


def test_clawback_burns_escrow_then_debt_is_repaid_from_grants(ledger: Ledger) -> None:
    play_round(ledger, 0, equal_round("a", "b", "c"), 1050)
    assert ledger.clawback("a", 100, 1051) == (100, 0)
    assert ledger.clawback("a", 400_000, 1052) == (333_233, 66_767)
    assert ledger.balance("a") == HotkeyAccount(burned=333_333, debt=66_767)
    assert totals(ledger) == (10**6, 333_334, 0, 666_666, 66_767)
    play_round(ledger, 1, equal_round("a", "b", "c"), 1060)  # a's 333,333 repays first
    assert ledger.balance("a") == HotkeyAccount(pending=266_566, burned=400_100)
    assert totals(ledger) == (2 * 10**6, 333_334 + 66_767 + 1, 0, 1_599_898, 0)


def test_paid_units_are_never_recalled(ledger: Ledger) -> None:
    play_round(ledger, 0, equal_round("a", "b"), 1050)
    weights_of(ledger, 1)  # pays a and b 500,000 each
    assert ledger.clawback("a", 10, ledger.event_time(0)) == (0, 10)
    assert ledger.balance("a") == HotkeyAccount(paid=500_000, debt=10)
    assert totals(ledger) == (10**6, 0, 10**6, 0, 10)


def test_vindication_turns_a_forgone_slice_into_escrow(ledger: Ledger) -> None:
    play_round(ledger, 0, {**equal_round("a"), "b": ("NO_UPLOAD", 100, 0)}, 1050)
    assert ledger.balance("b") == HotkeyAccount(burned=500_000)
    assert totals(ledger) == (10**6, 500_000, 0, 500_000, 0)
    assert ledger.vindicate(RUN, 0, "b", 1250)  # credit round 2: vests in round 4
    assert ledger.balance("b") == HotkeyAccount(pending=500_000)
    assert totals(ledger) == (10**6, 0, 0, 10**6, 0)
    assert weights_of(ledger, 2)["weights"] == {"a": 500_000.0}  # round 3
    assert weights_of(ledger, 3)["weights"] == {"b": 500_000.0}  # round 4
    assert not ledger.vindicate(RUN, 0, "b", ledger.event_time(0))


def test_vindication_repays_debt_first(ledger: Ledger) -> None:
    play_round(ledger, 0, {**equal_round("a"), "b": ("NO_UPLOAD", 100, 0)}, 1050)
    ledger.clawback("b", 1_000, 1051)
    assert ledger.vindicate(RUN, 0, "b", 1052)
    assert ledger.balance("b") == HotkeyAccount(pending=499_000, burned=1_000)
    assert totals(ledger) == (10**6, 1_000, 0, 999_000, 0)


def test_a_fault_after_finality_freezes_the_hotkey(ledger: Ledger) -> None:
    play_round(ledger, 0, {**equal_round("a"), "b": ("NO_UPLOAD", 100, 0)}, 1050)
    play_round(ledger, 1, equal_round("a", "b"), 1060)  # b escrows 500,000
    assert ledger.fault(RUN, 0, "b", 1070)
    assert ledger.balance("b") == HotkeyAccount(burned=10**6, blacklisted=True, frozen=True)
    assert totals(ledger) == (2 * 10**6, 10**6, 0, 10**6, 0)
    play_round(ledger, 2, equal_round("a", "b"), 1080)  # no grant either
    assert ledger.balance("b").pending == 0
    for epoch in range(6):
        assert "b" not in weights_of(ledger, epoch)["weights"]
    assert totals(ledger) == (3 * 10**6, 1_500_000, 1_500_000, 0, 0)


def test_a_vindication_of_a_blacklisted_hotkey_stays_burned(ledger: Ledger) -> None:
    play_round(ledger, 0, {**equal_round("a"), "b": ("NO_UPLOAD", 100, 0)}, 1050)
    play_round(ledger, 1, {**equal_round("a"), "b": ("FAULT", 100, 0)}, 1060)
    assert ledger.vindicate(RUN, 0, "b", 1070)
    assert ledger.balance("b") == HotkeyAccount(burned=10**6, blacklisted=True)


def test_events_apply_lazily_an_answer_sees_only_events_up_to_epoch_at(ledger: Ledger) -> None:
    play_round(ledger, 0, equal_round("a"), 1050)  # vests in round 2 (epoch_at >= 1200)
    ledger.clawback("a", 10**6, 1250)  # recorded before the answer, but after its epoch_at
    assert ledger.totals() == Totals(minted=10**6, burned=10**6, paid=0, pending=0, debt=0)
    answer = weights_of(ledger, 1)  # epoch_at 1200 does not see the clawback
    assert answer["weights"] == {"a": 10**6}
    assert answer["metadata"]["ledger_paid"] == 10**6
    assert ledger.totals() == Totals(minted=10**6, burned=0, paid=10**6, pending=0, debt=10**6)
    assert ledger.balance("a") == HotkeyAccount(paid=10**6, debt=10**6)


def test_vest_rounds_0_pays_in_the_final_round_but_not_before_the_event(tmp_path: Path) -> None:
    with Ledger.open(tmp_path, make_params(vest_rounds=0)) as ledger:
        play_round(ledger, 0, equal_round("a"), 1150)  # round 1
        early = weights_of(ledger, 0)  # epoch_at 1100
        assert early["weights"] == {}
        assert early["metadata"]["ledger_minted"] == 0
        assert weights_of(ledger, 1)["weights"] == {"a": 10**6}


def test_out_of_order_requests_pay_nothing_and_keep_their_answer(ledger: Ledger) -> None:
    play_round(ledger, 0, equal_round("a"), 1050)
    assert weights_of(ledger, 5)["weights"] == {"a": 10**6}  # epoch_at 1600
    stale = ledger.get_weights(3, epoch_at(ledger.params, 3), 7)
    answer = weights_of(ledger, 3, computed_at=8)  # the stored answer, unchanged
    assert ledger.get_weights(3, 0, 99) == stale
    assert answer["weights"] == {}
    assert answer["computed_at"] == 7
    assert answer["metadata"]["reason"] == "out_of_order"
    assert answer["metadata"]["units_paid"] == 0
    backwards = ledger.get_weights(9, 1500, 0)  # a later epoch, but epoch_at before 1600
    assert b'"reason":"out_of_order"' in backwards
    assert ledger.last_answered == (5, 1600)
    assert ledger.event_time(0) == 1601


def test_repeated_requests_return_the_stored_bytes(ledger: Ledger) -> None:
    play_round(ledger, 0, equal_round("a", "b", "c"), 1050)
    first = ledger.get_weights(1, 1200, 1)
    play_round(ledger, 1, equal_round("a"), ledger.event_time(1300))
    assert ledger.get_weights(1, 1300, 2) == first
    assert ledger.answer(1) == first
    assert ledger.answer(2) is None


def test_statistics(ledger: Ledger) -> None:
    play_round(ledger, 0, equal_round("a"), 1050)
    stats = ledger.statistics()
    assert (stats.records, stats.queued_events, stats.answers) == (4, 3, 0)
    assert (stats.minted, stats.pending) == (10**6, 10**6)
    weights_of(ledger, 0)
    stats = ledger.statistics()
    assert (stats.records, stats.queued_events, stats.answers) == (5, 0, 1)
    assert (stats.last_epoch, stats.last_epoch_at) == (0, 1100)


def test_runs_share_the_epoch_budget(ledger: Ledger) -> None:
    play_round(ledger, 0, equal_round("a"), 1050, run_id="r1")
    play_round(ledger, 0, equal_round("b"), 1050, run_id="r2")
    assert weights_of(ledger, 1)["weights"] == {"a": 10**6}
    assert weights_of(ledger, 2)["weights"] == {"b": 10**6}
