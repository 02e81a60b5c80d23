"""The rules of spec 8: every refused call names its rule and changes nothing, on disk or in
memory."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest

from hypertrain.ledger import Ledger, LedgerRefused
from tests.ledger.support import RUN, epoch_at, equal_round, play_round


def refused(ledger: Ledger, call: Callable[[], object], match: str) -> None:
    """``call`` raises LedgerRefused matching ``match`` and leaves the ledger as it was."""
    state = copy.deepcopy(ledger.state)
    size = ledger.path.stat().st_size
    with pytest.raises(LedgerRefused, match=match):
        call()
    assert ledger.state == state
    assert ledger.path.stat().st_size == size


def test_commit_rules(ledger: Ledger) -> None:
    ledger.commit(RUN, 0, "a", 1010)
    refused(ledger, lambda: ledger.commit(RUN, 0, "a", 1010), "already committed")
    ledger.verdict(RUN, 0, "a", "MATCH", 1, 0, 1020)
    ledger.finalize(RUN, 0, 1020)
    refused(ledger, lambda: ledger.commit(RUN, 0, "b", 1030), "already finalized")
    ledger.commit(RUN, 5, "b", 1030)  # a later round may take commits before its turn
    ledger.commit("run-2", 0, "a", 1030)  # rounds are per run


def test_verdict_rules(ledger: Ledger) -> None:
    refused(
        ledger, lambda: ledger.verdict(RUN, 0, "a", "MATCH", 1, 0, 1010), "has no commit in round"
    )
    ledger.commit(RUN, 0, "a", 1010)
    ledger.verdict(RUN, 0, "a", "MATCH", 1, 0, 1010)
    refused(
        ledger,
        lambda: ledger.verdict(RUN, 0, "a", "FAULT", 1, 0, 1010),
        "already has a verdict",
    )
    ledger.finalize(RUN, 0, 1010)
    refused(ledger, lambda: ledger.verdict(RUN, 0, "a", "MATCH", 1, 0, 1010), "already finalized")


def test_finalize_rules(ledger: Ledger) -> None:
    refused(ledger, lambda: ledger.finalize(RUN, 1, 1010), "the next is 0, not 1")
    ledger.commit(RUN, 0, "a", 1010)
    ledger.commit(RUN, 0, "b", 1010)
    ledger.verdict(RUN, 0, "a", "MATCH", 1, 0, 1010)
    refused(ledger, lambda: ledger.finalize(RUN, 0, 1010), "without a verdict: b")
    ledger.verdict(RUN, 0, "b", "MATCH", 1, 0, 1010)
    assert ledger.finalize(RUN, 0, 1010) == 0
    assert ledger.is_finalized(RUN, 0)
    refused(ledger, lambda: ledger.finalize(RUN, 0, 1010), "the next is 1, not 0")
    assert not ledger.is_finalized(RUN, 1)
    assert not ledger.is_finalized("run-2", 0)


def test_field_values_are_checked(ledger: Ledger) -> None:
    refused(ledger, lambda: ledger.commit("", 0, "a", 1010), "run_id")
    refused(ledger, lambda: ledger.commit(RUN, -1, "a", 1010), "w must be")
    refused(ledger, lambda: ledger.commit(RUN, 0, "a", True), "at must be")
    ledger.commit(RUN, 0, "a", 1010)
    refused(
        ledger,
        lambda: ledger.verdict(RUN, 0, "a", "BOGUS", 1, 0, 1010),  # type: ignore[arg-type]
        "verdict must be one of",
    )
    refused(ledger, lambda: ledger.verdict(RUN, 0, "a", "MATCH", -1, 0, 1010), "tokens")
    refused(ledger, lambda: ledger.clawback("a", 0, 1010), "units")
    refused(ledger, lambda: ledger.get_weights(-1, 1010, 0), "epoch must be")


def test_at_never_goes_back_and_follows_the_last_answer(ledger: Ledger) -> None:
    ledger.commit(RUN, 0, "a", 1050)
    refused(ledger, lambda: ledger.commit(RUN, 0, "b", 1049), "before the last event's at 1050")
    ledger.commit(RUN, 0, "b", 1050)  # equal is fine
    ledger.get_weights(0, epoch_at(ledger.params, 0), 0)  # epoch_at 1100
    refused(ledger, lambda: ledger.commit(RUN, 0, "c", 1100), "not after the last answered")
    assert ledger.event_time(1060) == 1101
    assert ledger.event_time(5000) == 5000
    ledger.commit(RUN, 0, "c", ledger.event_time(1060))
    assert ledger.last_event_at == 1101
    assert ledger.last_answered == (0, 1100)


def test_queries_of_the_book(ledger: Ledger) -> None:
    ledger.commit(RUN, 0, "a", 1010)
    assert ledger.has_commit(RUN, 0, "a")
    assert not ledger.has_verdict(RUN, 0, "a")
    assert not ledger.has_commit(RUN, 0, "b")
    ledger.verdict(RUN, 0, "a", "MATCH", 1, 0, 1010)
    assert ledger.has_verdict(RUN, 0, "a")
    ledger.finalize(RUN, 0, 1010)
    assert ledger.has_commit(RUN, 0, "a")
    assert ledger.has_verdict(RUN, 0, "a")


def test_settlements_need_a_finalized_no_upload(ledger: Ledger) -> None:
    ledger.commit(RUN, 0, "a", 1010)
    ledger.commit(RUN, 0, "b", 1010)
    ledger.verdict(RUN, 0, "a", "MATCH", 1, 0, 1010)
    ledger.verdict(RUN, 0, "b", "NO_UPLOAD", 1, 0, 1010)
    refused(ledger, lambda: ledger.vindicate(RUN, 0, "b", 1010), "is not finalized")
    refused(ledger, lambda: ledger.fault(RUN, 0, "b", 1010), "is not finalized")
    ledger.finalize(RUN, 0, 1010)
    refused(ledger, lambda: ledger.vindicate(RUN, 0, "a", 1010), "no NO_UPLOAD verdict")
    refused(ledger, lambda: ledger.fault(RUN, 0, "c", 1010), "no NO_UPLOAD verdict")
    assert ledger.vindicate(RUN, 0, "b", 1010)
    refused(ledger, lambda: ledger.fault(RUN, 0, "b", 1010), "already vindicated")
    size = ledger.path.stat().st_size
    assert not ledger.vindicate(RUN, 0, "b", 1020)  # a repeat: a no-op, nothing written
    assert not ledger.vindicate(RUN, 0, "b", 0)  # whatever its at
    assert ledger.path.stat().st_size == size


def test_fault_repeat_is_a_no_op_and_bars_vindication(ledger: Ledger) -> None:
    play_round(ledger, 0, {"b": ("NO_UPLOAD", 1, 0)}, 1010)
    assert ledger.fault(RUN, 0, "b", 1020)
    assert not ledger.fault(RUN, 0, "b", 1020)
    refused(ledger, lambda: ledger.vindicate(RUN, 0, "b", 1030), "already faulted")


def test_a_round_with_no_miner_burns_its_budget(ledger: Ledger) -> None:
    play_round(ledger, 0, {}, 1010)
    play_round(ledger, 1, equal_round("a", "b"), 1010)
    totals = ledger.totals()
    assert (totals.minted, totals.burned, totals.pending) == (2 * 10**6, 10**6, 10**6)
