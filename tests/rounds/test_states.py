"""Derived round state (spec 1.3): every boundary, the implementation order, transitions."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hypertrain.rounds import (
    FAULT_STATUSES,
    Deadlines,
    MinerStatus,
    RoundState,
    round_state,
    transitions,
)

# d_open 100, d_assign 120, d_commit 220, d_audit 260, d_upload 520, d_final 600
DL = Deadlines(100, 120, 220, 260, 520, 600)
S = RoundState


@pytest.mark.parametrize(
    ("now", "state"),
    [
        (1, S.OPEN),
        (99, S.OPEN),
        (100, S.OPEN),
        (101, S.OPEN),
        (119, S.OPEN),
        (120, S.ASSIGNED),
        (121, S.TRAINING),
        (219, S.TRAINING),
        (220, S.COMMIT_CLOSED),
        (221, S.COMMIT_CLOSED),
        (259, S.COMMIT_CLOSED),
        (260, S.COMMIT_CLOSED),  # d_audit is no state boundary
        (261, S.COMMIT_CLOSED),
        (519, S.COMMIT_CLOSED),
        (520, S.UPLOAD_CLOSED),
        (521, S.UPLOAD_CLOSED),
        (599, S.UPLOAD_CLOSED),
        (600, S.UPLOAD_CLOSED),  # d_final alone does not finalize
        (601, S.UPLOAD_CLOSED),
        (10**9, S.UPLOAD_CLOSED),
    ],
)
def test_state_of_a_round_never_aggregated(now: int, state: RoundState) -> None:
    assert round_state(now, DL) is state


@pytest.mark.parametrize(
    ("now", "state"),
    [(529, S.APPLIED), (530, S.APPLIED), (549, S.APPLIED), (550, S.AUDIT), (551, S.AUDIT)],
)
def test_applied_until_next_round_assigns(now: int, state: RoundState) -> None:
    assert round_state(now, DL, next_round_d_assign=550) is state


def test_applied_takes_precedence_over_deadline_states() -> None:
    # aggregation is only possible after d_upload, but the order must not depend on that
    assert round_state(150, DL, next_round_d_assign=170) is S.APPLIED
    assert round_state(170, DL, next_round_d_assign=170) is S.AUDIT


def test_a_merged_last_round_is_applied_for_good() -> None:
    # total_rounds: no round w + 1 will open, so a merge is all that ever applies it.
    for now in (520, 600, 10_000):
        assert round_state(now, DL, merged_last=True) is S.APPLIED
        assert round_state(now, DL) is S.UPLOAD_CLOSED
    assert round_state(700, DL, merged_last=True, has_open_dispute=True) is S.DISPUTE
    assert round_state(700, DL, merged_last=True, finalized_ledger_round=3) is S.FINAL


def test_dispute_precedes_applied_and_audit() -> None:
    assert round_state(700, DL, next_round_d_assign=550, has_open_dispute=True) is S.DISPUTE
    assert round_state(530, DL, next_round_d_assign=550, has_open_dispute=True) is S.DISPUTE
    assert round_state(530, DL, has_open_dispute=True) is S.DISPUTE


@pytest.mark.parametrize(
    ("ledger_round", "state"),
    [
        (None, S.FINAL),
        (7, S.FINAL),
        (8, S.VESTING),
        (16, S.VESTING),
        (17, S.RELEASED),
        (99, S.RELEASED),
    ],
)
def test_finalize_based_states(ledger_round: int | None, state: RoundState) -> None:
    got = round_state(
        700,
        DL,
        next_round_d_assign=550,
        has_open_dispute=True,  # a finalised round ignores the dispute flag
        finalized_ledger_round=7,
        ledger_round=ledger_round,
        vest_rounds=10,
    )
    assert got is state


def test_without_vest_rounds_a_final_round_only_vests() -> None:
    got = round_state(700, DL, finalized_ledger_round=3, ledger_round=10**6)
    assert got is S.VESTING


def test_finalized_state_ignores_d() -> None:
    assert round_state(1, DL, finalized_ledger_round=0, ledger_round=0, vest_rounds=1) is S.FINAL


def test_transitions_list() -> None:
    assert transitions(DL) == [
        (100, S.OPEN),
        (120, S.ASSIGNED),
        (121, S.TRAINING),
        (220, S.COMMIT_CLOSED),
        (520, S.UPLOAD_CLOSED),
    ]


def test_one_round_training_window_skips_training() -> None:
    dl = Deadlines(10, 30, 31, 71, 331, 332)
    assert transitions(dl) == [
        (10, S.OPEN),
        (30, S.ASSIGNED),
        (31, S.COMMIT_CLOSED),
        (331, S.UPLOAD_CLOSED),
    ]
    assert [round_state(d, dl) for d in (29, 30, 31)] == [S.OPEN, S.ASSIGNED, S.COMMIT_CLOSED]


@st.composite
def deadlines(draw: st.DrawFn) -> Deadlines:
    d_open = draw(st.integers(1, 10**6))
    d_assign = d_open + draw(st.integers(1, 50))
    d_commit = d_assign + draw(st.integers(1, 50))
    d_audit = d_commit + draw(st.integers(1, 50))
    d_upload = d_commit + draw(st.integers(1, 100))
    d_final = max(d_audit, d_upload) + draw(st.integers(0, 50))
    if d_final == d_audit:
        d_final += 1
    return Deadlines(d_open, d_assign, d_commit, d_audit, d_upload, d_final)


@given(deadlines())
def test_transitions_happen_exactly_where_listed(dl: Deadlines) -> None:
    steps = transitions(dl)
    points = [d for d, _ in steps]
    assert points == sorted(set(points))
    for d, state in steps:
        assert round_state(d, dl) is state
        if state is not S.OPEN:
            assert round_state(d - 1, dl) is not state
    # between listed points the state does not change
    for now in range(dl.d_open, dl.d_final + 3):
        current = [s for d, s in steps if d <= now][-1]
        assert round_state(now, dl) is current


def test_miner_statuses() -> None:
    assert [s.value for s in MinerStatus] == [
        "ASSIGNED",
        "ACCEPTED",
        "COMMITTED",
        "UPLOADED",
        "EXCLUDED",
        "MATCH",
        "MISMATCH",
        "WITHHELD",
        "BAD_PROOF",
        "ASSIGNMENT_VIOLATION",
        "TRANSIENT",
        "DISPUTE_LOST",
    ]
    assert {s.value for s in FAULT_STATUSES} == {
        "MISMATCH",
        "WITHHELD",
        "BAD_PROOF",
        "ASSIGNMENT_VIOLATION",
        "DISPUTE_LOST",
    }


def test_round_states_are_strings() -> None:
    assert [s.value for s in RoundState] == [
        "OPEN",
        "ASSIGNED",
        "TRAINING",
        "COMMIT_CLOSED",
        "UPLOAD_CLOSED",
        "APPLIED",
        "AUDIT",
        "DISPUTE",
        "FINAL",
        "VESTING",
        "RELEASED",
    ]
    assert f"{RoundState.AUDIT}" == "AUDIT"
