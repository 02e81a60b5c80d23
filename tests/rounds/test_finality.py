"""Finality rules (hypertrain/rounds/finality.py): blockers, verdicts, included, the root."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hypertrain.protocol.hashes import sha256_hex
from hypertrain.protocol.jcs import canonical_json
from hypertrain.rounds.finality import (
    ENTITLEMENTS_DOMAIN,
    Entry,
    MinerFacts,
    RoundFacts,
    Verdict,
    blockers,
    entitlements_root,
    included,
    verdict_of,
)

READY = RoundFacts(w=3, D=600, d_final=600, previous_final=True, applied=True, drawn=True)


def miner(
    status: str = "UPLOADED",
    *,
    hotkey: str = "m1",
    selected: bool = False,
    audit: str | None = None,
    open_dispute: bool = False,
    in_chain: bool = True,
) -> MinerFacts:
    return MinerFacts(hotkey, status, selected, audit, open_dispute, in_chain)


@pytest.mark.parametrize(
    ("facts", "verdict"),
    [
        (miner("UPLOADED"), Verdict.UNSAMPLED),
        (miner("MATCH", selected=True, audit="done"), Verdict.MATCH),
        (miner("MISMATCH", selected=True, audit="done", in_chain=False), Verdict.FAULT),
        (miner("WITHHELD", selected=True, audit="done"), Verdict.FAULT),
        (miner("BAD_PROOF", selected=True, audit="done"), Verdict.FAULT),
        (miner("ASSIGNMENT_VIOLATION", selected=True, audit="done"), Verdict.FAULT),
        (miner("DISPUTE_LOST", selected=True, audit="done"), Verdict.FAULT),
        (miner("TRANSIENT", selected=True, audit="done"), Verdict.TRANSIENT),
        (miner("COMMITTED", in_chain=False), Verdict.NO_UPLOAD),
        # a delta the merge could not use is not paid for
        (miner("UPLOADED", in_chain=False), Verdict.NO_UPLOAD),
        # an open dispute forgoes the slice (payable on vindication), whatever the status
        (
            miner("MISMATCH", selected=True, audit="done", open_dispute=True, in_chain=False),
            Verdict.NO_UPLOAD,
        ),
        # drawn, rolled back while the audit was still out
        (miner("UPLOADED", selected=True, audit="leased", in_chain=False), Verdict.NO_UPLOAD),
        # drawn, and the audit failed for good without a verdict
        (miner("UPLOADED", selected=True, audit="failed"), Verdict.NO_UPLOAD),
    ],
)
def test_verdict_of(facts: MinerFacts, verdict: Verdict) -> None:
    assert verdict_of(facts) is verdict


def test_a_ready_round_has_no_blockers() -> None:
    assert blockers(READY, [miner(), miner("MATCH", selected=True, audit="done")]) == []


def test_each_round_blocker_is_named() -> None:
    facts = RoundFacts(w=3, D=599, d_final=600, previous_final=False, applied=False, drawn=False)
    assert blockers(facts, []) == [
        "D is before d_final = 600",
        "round 2 is not final",
        "round 3 was not merged",
        "the audit draw of round 3 has not run",
    ]


def miner_out(serve_deadline: int) -> MinerFacts:
    return MinerFacts("m1", "UPLOADED", True, "leased", False, False, serve_deadline)


def test_an_unresolved_audit_blocks_while_the_delta_is_merged_or_until_its_serve_deadline() -> None:
    pending = miner(selected=True, audit="leased")
    assert blockers(READY, [pending]) == ["the audit of m1 is not resolved"]
    assert blockers(READY, [miner_out(READY.D)]) == [
        "the audit of m1 is not resolved (it holds finality until its serve deadline 600)"
    ]
    assert blockers(READY, [miner_out(READY.D - 1)]) == []  # rolled back, deadline passed


def test_a_mismatch_holds_finality_while_it_may_be_contested() -> None:
    fresh = MinerFacts("m1", "MISMATCH", True, "done", False, False, 500, dispute_until=601)
    assert blockers(READY, [fresh]) == ["m1 may contest its MISMATCH until D = 601"]
    late = MinerFacts("m1", "MISMATCH", True, "done", False, False, 500, dispute_until=600)
    assert blockers(READY, [late]) == []


def test_an_open_dispute_blocks_only_while_the_delta_is_merged() -> None:
    merged = miner("MATCH", selected=True, audit="done", open_dispute=True)
    assert blockers(READY, [merged]) == ["m1 has an open dispute and its delta is merged"]
    out = miner("MISMATCH", selected=True, audit="done", open_dispute=True, in_chain=False)
    assert blockers(READY, [out]) == []


def test_included_is_the_sorted_paid_verdicts() -> None:
    entries = [
        Entry("c", Verdict.MATCH, 10, 0),
        Entry("a", Verdict.UNSAMPLED, 10, 0),
        Entry("b", Verdict.FAULT, 10, 0),
        Entry("d", Verdict.NO_UPLOAD, 10, 0),
        Entry("e", Verdict.TRANSIENT, 10, 0),
    ]
    assert included(entries) == ("a", "c")


def test_entitlements_root_is_the_domain_hash_of_the_sorted_entries() -> None:
    a = Entry("a", Verdict.MATCH, 7, 1_000_000)
    b = Entry("b", Verdict.FAULT, 9, 0)
    expected = sha256_hex(ENTITLEMENTS_DOMAIN + canonical_json([a.to_json(), b.to_json()]))
    assert entitlements_root([b, a]) == expected
    assert entitlements_root([a, Entry("b", Verdict.FAULT, 9, 1)]) != expected


@given(
    st.lists(
        st.tuples(
            st.sampled_from(list(Verdict)),
            st.integers(0, 2**53 - 1),
            st.integers(0, 10**6),
        ),
        max_size=8,
    ),
    st.randoms(),
)
def test_entitlements_root_ignores_entry_order(rows: list[tuple[Verdict, int, int]], rnd) -> None:  # type: ignore[no-untyped-def]
    entries = [Entry(f"h{i}", v, t, s) for i, (v, t, s) in enumerate(rows)]
    shuffled = list(entries)
    rnd.shuffle(shuffled)
    assert entitlements_root(shuffled) == entitlements_root(entries)


def test_a_merged_fault_holds_finality_while_a_rollback_can_still_take_it_out() -> None:
    caught = miner("MISMATCH", selected=True, audit="done")
    rollable = RoundFacts(
        w=3, D=600, d_final=600, previous_final=True, applied=True, drawn=True,
        rollback_possible=True,
    )  # fmt: skip
    assert blockers(rollable, [caught]) == [
        "m1 is faulted and its delta merged: awaiting the rollback"
    ]
    assert blockers(READY, [caught]) == []  # round w + 2 is open (or w is the last): money only
    assert verdict_of(caught) is Verdict.FAULT
    rolled_back = miner("MISMATCH", selected=True, audit="done", in_chain=False)
    assert blockers(rollable, [rolled_back]) == []
