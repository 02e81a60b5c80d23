"""Audit rates q_i (spec 6.1), the RoundOpen roster and audit selection (spec 6.2)."""

from __future__ import annotations

import hashlib
import struct
from fractions import Fraction

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hypertrain.protocol.f32 import f32_from_hex, f32_hex
from hypertrain.protocol.manifest import RunManifest, VerifySpec
from hypertrain.protocol.messages import RosterEntry
from hypertrain.protocol.validators import FieldError
from hypertrain.rounds import (
    Q_ONE,
    RosterMember,
    audit_rate,
    audit_reasons,
    roster_entries,
    select_for_audit,
)
from tests.rounds.conftest import HOTKEYS, RUN_HEX, SIG_A, SIG_B

Q_BASE = f32_hex(0.1)  # the example manifest's q_base; probation_rounds = 10


def test_constants(manifest: RunManifest) -> None:
    assert Q_ONE == "0000803f"
    assert manifest.verify.q_base == Q_BASE == "cdcccc3d"
    assert manifest.verify.probation_rounds == 10


@pytest.mark.parametrize(
    ("member", "w", "reasons"),
    [
        # unbonded: probation for its first probation_rounds rounds after admission, then q_base
        (RosterMember(HOTKEYS[0]), 0, ("probation",)),  # not yet admitted: admitted now
        (RosterMember(HOTKEYS[0], admitted_w=3), 3, ("probation",)),
        (RosterMember(HOTKEYS[0], admitted_w=3), 12, ("probation",)),
        (RosterMember(HOTKEYS[0], admitted_w=3), 13, ("random",)),
        (RosterMember(HOTKEYS[0], admitted_w=3), 500, ("random",)),
        # bonded: never auto-probated
        (RosterMember(HOTKEYS[0], bond=True), 0, ("random",)),
        (RosterMember(HOTKEYS[0], bond=True, admitted_w=3), 4, ("random",)),
        # the operator's probation flag wins over bond and age
        (RosterMember(HOTKEYS[0], bond=True, probation=True, admitted_w=0), 99, ("probation",)),
        # flagged
        (RosterMember(HOTKEYS[0], bond=True, flags={"outlier"}), 5, ("outlier",)),
        (RosterMember(HOTKEYS[0], bond=True, flags={"copy", "x"}), 5, ("outlier",)),
        (RosterMember(HOTKEYS[0], bond=True, flags={"slow"}), 5, ("random",)),
        # cluster of a blacklisted member
        (RosterMember(HOTKEYS[0], bond=True, cluster="dc-1"), 5, ("cluster",)),
        (RosterMember(HOTKEYS[0], bond=True, cluster="dc-2"), 5, ("random",)),
        # several reasons, in spec order
        (
            RosterMember(HOTKEYS[0], flags={"copy"}, cluster="dc-1"),
            0,
            ("probation", "outlier", "cluster"),
        ),
    ],
)
def test_reasons_and_rates(
    manifest: RunManifest, member: RosterMember, w: int, reasons: tuple[str, ...]
) -> None:
    verify = manifest.verify
    assert audit_reasons(member, w, verify, {"dc-1"}) == reasons
    expected = Q_BASE if reasons == ("random",) else Q_ONE
    assert audit_rate(member, w, verify, {"dc-1"}) == expected


def test_rate_follows_the_manifest_q_base(manifest: RunManifest) -> None:
    verify = attrs.evolve(manifest.verify, q_base=f32_hex(0.25))
    member = RosterMember(HOTKEYS[0], bond=True)
    assert audit_rate(member, 0, verify) == f32_hex(0.25) == "0000803e"


def test_member_validation() -> None:
    with pytest.raises(FieldError):
        RosterMember(HOTKEYS[0], bond=1)  # type: ignore[arg-type]
    with pytest.raises(FieldError):
        RosterMember(HOTKEYS[0], admitted_w=-1)
    assert RosterMember(HOTKEYS[0], flags=["a", "a"]).flags == frozenset({"a"})


def test_roster_entries_sorted_with_slots(manifest: RunManifest) -> None:
    members = [
        RosterMember(HOTKEYS[3], bond=True),
        RosterMember(HOTKEYS[1]),
        RosterMember(HOTKEYS[2], bond=True, flags={"outlier"}),
        RosterMember(HOTKEYS[0], bond=True),
    ]
    entries = roster_entries(members, 7, manifest.verify)
    order = sorted(HOTKEYS[:4])
    assert [e.hotkey for e in entries] == order
    assert [e.slot for e in entries] == [0, 1, 2, 3]
    rate = {HOTKEYS[0]: Q_BASE, HOTKEYS[1]: Q_ONE, HOTKEYS[2]: Q_ONE, HOTKEYS[3]: Q_BASE}
    assert [e.q_i for e in entries] == [rate[h] for h in order]
    assert all(isinstance(e, RosterEntry) for e in entries)
    assert roster_entries([], 0, manifest.verify) == ()


def test_roster_refuses_duplicates(manifest: RunManifest) -> None:
    with pytest.raises(ValueError, match="twice"):
        roster_entries([RosterMember(HOTKEYS[0]), RosterMember(HOTKEYS[0])], 0, manifest.verify)


def _independent_selected(w: int, sig: bytes, hotkey: str, q_hex: str) -> bool:
    digest = hashlib.sha256(
        b"ht-audit" + bytes.fromhex(RUN_HEX) + struct.pack(">Q", w) + sig + hotkey.encode()
    ).digest()
    q = Fraction(struct.unpack("<f", bytes.fromhex(q_hex))[0])
    return int.from_bytes(digest, "big") * q.denominator < q.numerator * 2**256


def _entries(q_hex: str, n: int = 12) -> list[RosterEntry]:
    return [RosterEntry(hotkey=h, slot=i, q_i=q_hex) for i, h in enumerate(sorted(HOTKEYS[:n]))]


def test_q_one_selects_all_and_q_zero_none() -> None:
    assert select_for_audit(RUN_HEX, 4, SIG_A, _entries(Q_ONE)) == sorted(HOTKEYS)
    assert select_for_audit(RUN_HEX, 4, SIG_A, _entries(f32_hex(0.0))) == []
    assert select_for_audit(RUN_HEX, 4, SIG_A, []) == []


def test_selection_pinned_and_independent() -> None:
    entries = _entries(f32_hex(0.5))
    got = select_for_audit(RUN_HEX, 4, SIG_A, entries)
    expected = [e.hotkey for e in entries if _independent_selected(4, SIG_A, e.hotkey, e.q_i)]
    assert got == expected
    assert 0 < len(got) < len(entries)  # q = 0.5 over 12 hotkeys: some, not all (pinned seed)
    assert select_for_audit(RUN_HEX, 4, SIG_B, entries) != got  # the beacon decides


@settings(max_examples=40, deadline=None)
@given(
    w=st.integers(0, 2**40),
    sig=st.binary(min_size=48, max_size=48),
    q=st.sampled_from([0.0, 0.03, 0.1, 0.25, 0.5, 0.9, 1.0]),
)
def test_selection_matches_independent_computation(w: int, sig: bytes, q: float) -> None:
    q_hex = f32_hex(q)
    pairs = [(h, q_hex) for h in reversed(HOTKEYS)]  # input order does not matter
    got = select_for_audit(RUN_HEX, w, sig, pairs)
    assert got == sorted(h for h in HOTKEYS if _independent_selected(w, sig, h, q_hex))


def test_per_miner_rates_apply() -> None:
    hot, cold = sorted(HOTKEYS[:2])
    entries: list[RosterEntry | tuple[str, str]] = [
        RosterEntry(hotkey=hot, slot=0, q_i=Q_ONE),
        (cold, f32_hex(0.0)),
    ]
    assert select_for_audit(RUN_HEX, 1, SIG_A, entries) == [hot]
    assert f32_from_hex(Q_ONE) == 1.0


def test_verify_spec_type(manifest: RunManifest) -> None:
    assert isinstance(manifest.verify, VerifySpec)
