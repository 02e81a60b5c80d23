"""The Feistel PRP of spec 2.5 and the per-slot sample lists of spec 5.4.

Pinned vectors are checked against an independent in-test construction written from the spec
text (``_spec_prp``, ``_spec_assign``), so they pin the protocol, not just self-consistency.
"""

from __future__ import annotations

import hashlib
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hypertrain.protocol.converter import unstructure
from hypertrain.protocol.errors import Conflict, Malformed
from hypertrain.protocol.hashes import assignment_hash
from hypertrain.protocol.manifest import RunManifest
from hypertrain.protocol.messages import RosterEntry
from hypertrain.rounds import (
    Assignment,
    AssignmentError,
    AssignParams,
    FeistelPRP,
    assign,
    next_base,
    step_ids,
    window_ids,
)
from tests.rounds.conftest import HOTKEYS, RUN_HEX, SIG_A, SIG_B

KEY = hashlib.sha256(b"pin").digest()
RUN = bytes.fromhex(RUN_HEX)


def _spec_prp(n: int, key: bytes, x: int) -> int:
    """Spec 2.5, literally: 8 balanced rounds on 2*half bits, cycle walk while >= n."""
    bits = max(2, (n - 1).bit_length())
    bits += bits % 2
    half = bits // 2
    mask = (1 << half) - 1

    def f(r: int, v: int) -> int:
        pre = b"ht-feistel-v1" + n.to_bytes(8, "big") + key + bytes([r]) + v.to_bytes(8, "big")
        return int.from_bytes(hashlib.sha256(pre).digest()[:8], "big") & mask

    def enc(v: int) -> int:
        left, right = v >> half, v & mask
        for r in range(8):
            left, right = right, left ^ f(r, right)
        return (left << half) | right

    y = enc(x)
    while y >= n:
        y = enc(y)
    return y


def _spec_assign(
    n: int, batch: int, n_slots: int, w: int, sig: bytes, base: int, unit: int = 1
) -> list[list[int]]:
    """Spec 5.4 with the keys of spec 2.5, written out independently (unit = v2 variant)."""
    assign_key = hashlib.sha256(b"ht-assign" + RUN + w.to_bytes(8, "big") + sig).digest()
    epoch, off = divmod(base, n)
    epoch_key = hashlib.sha256(b"ht-epoch" + RUN + epoch.to_bytes(8, "big")).digest()
    bu = batch // unit
    out = []
    for slot in range(n_slots):
        units = [
            _spec_prp(
                n // unit,
                epoch_key,
                off // unit + _spec_prp(n_slots * bu, assign_key, slot * bu + j),
            )
            for j in range(bu)
        ]
        out.append([u * unit + i for u in units for i in range(unit)])
    return out


# --- the PRP ----------------------------------------------------------------------------------


def test_pinned_prp_vectors() -> None:
    expected = {
        1000: [227, 283, 331, 421, 12, 905, 697, 179],
        781250: [207129, 396767, 767969, 155494],
        2**30 + 7: [389409169, 50352179, 340792331],
    }
    for n, images in expected.items():
        prp = FeistelPRP(n, KEY)
        assert [prp.permute(x) for x in range(len(images))] == images
        assert [_spec_prp(n, KEY, x) for x in range(len(images))] == images
        assert [prp.inverse(y) for y in images] == list(range(len(images)))


@pytest.mark.parametrize(
    "n",
    [2**20 + 3, 3 * 2**26, 2**40 + 1],  # tables filled lazily, lazily, never (hashed each time)
)
def test_large_domains_follow_the_spec(n: int) -> None:
    prp = FeistelPRP(n, KEY)
    for x in (0, 1, n // 3, n - 1):
        y = prp.permute(x)
        assert y == _spec_prp(n, KEY, x)
        assert 0 <= y < n
        assert prp.inverse(y) == x


SIZES = [1, 2, 3, 4, 5, 7, 8, 13, 16, 31, 32, 97, 127, 128, 255, 256, 257, 1000, 1024, 1031]


@settings(max_examples=60, deadline=None)
@given(n=st.sampled_from(SIZES), key=st.binary(min_size=32, max_size=32))
def test_prp_is_a_bijection_with_inverse(n: int, key: bytes) -> None:
    prp = FeistelPRP(n, key)
    images = [prp.permute(x) for x in range(n)]
    assert sorted(images) == list(range(n))
    assert [prp.inverse(y) for y in images] == list(range(n))


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 5000), key=st.binary(min_size=32, max_size=32), data=st.data())
def test_prp_matches_spec_construction(n: int, key: bytes, data: st.DataObject) -> None:
    x = data.draw(st.integers(0, n - 1))
    assert FeistelPRP(n, key).permute(x) == _spec_prp(n, key, x)


def test_n_one_maps_zero_to_zero() -> None:
    prp = FeistelPRP(1, KEY)
    assert (prp.permute(0), prp.inverse(0)) == (0, 0)


@pytest.mark.parametrize("bad", [-1, 1000, True, 3.0])
def test_prp_refuses_out_of_domain(bad: object) -> None:
    prp = FeistelPRP(1000, KEY)
    with pytest.raises(ValueError, match="outside"):
        prp.permute(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="outside"):
        prp.inverse(bad)  # type: ignore[arg-type]


def test_prp_refuses_bad_construction() -> None:
    with pytest.raises(ValueError, match="domain"):
        FeistelPRP(0, KEY)
    with pytest.raises(ValueError, match="key"):
        FeistelPRP(10, KEY[:31])


def test_key_and_domain_change_the_permutation() -> None:
    a = [FeistelPRP(1000, KEY).permute(x) for x in range(20)]
    assert a != [FeistelPRP(1000, bytes(32)).permute(x) for x in range(20)]
    assert a != [FeistelPRP(1001, KEY).permute(x) for x in range(20)]


# --- per-slot samples -------------------------------------------------------------------------

PINNED = [
    (
        0,
        (74634, 714527, 531805, 37423, 302871),
        "89bbe3505238010446de16065b46c211c21b42983de76aeda672519bf45a3b03",
    ),
    (
        1,
        (343899, 236488, 71958, 171623, 774674),
        "2d87488222caf152b07b6a520197c03d793cf4653b0c99560a5e055f107b4177",
    ),
    (
        2,
        (714821, 348569, 170043, 728462, 487308),
        "12f3fff06fbfa15e69dc149720ac88a35c322dc57b5ed56fc09550726f73bf11",
    ),
]


def test_pinned_assignment(manifest: RunManifest) -> None:
    roster = [(HOTKEYS[i], i) for i in range(3)]
    got = assign(manifest, RUN_HEX, 3, SIG_A, roster, base=0)
    assert [(a.slot, a.samples[:5], a.assignment_hash) for a in got] == PINNED
    assert [a.hotkey for a in got] == list(HOTKEYS[:3])
    assert all(len(a.samples) == 8 * 1 * 30 for a in got)  # micro_batch * grad_accum * H
    spec = _spec_assign(781_250, 240, 3, 3, SIG_A, 0)
    assert [list(a.samples) for a in got] == spec


def test_assignment_hash_is_the_protocol_hash(manifest: RunManifest) -> None:
    for a in assign(manifest, RUN_HEX, 9, SIG_B, [(HOTKEYS[0], 0), (HOTKEYS[1], 1)], base=480):
        assert a.assignment_hash == assignment_hash(RUN, 9, a.slot, a.samples)
        layout = b"ht-assignment-v1" + RUN + struct.pack(">QQ", 9, a.slot)
        layout += b"".join(struct.pack("<Q", s) for s in a.samples)
        assert a.assignment_hash == hashlib.sha256(layout).hexdigest()


def test_assignment_is_deterministic_and_keyed(manifest: RunManifest) -> None:
    roster = [(h, i) for i, h in enumerate(HOTKEYS[:4])]
    first = assign(manifest, RUN_HEX, 5, SIG_A, roster, base=0)
    assert assign(manifest, RUN_HEX, 5, SIG_A, list(reversed(roster)), base=0) == first
    assert assign(manifest, RUN_HEX, 5, SIG_B, roster, base=0) != first
    assert assign(manifest, RUN_HEX, 6, SIG_A, roster, base=0) != first
    # same positions, other slot<->slice mapping: the union of one round's block is keyed only
    # by the epoch PRP and the base
    union = {s for a in first for s in a.samples}
    assert union == {
        s for a in assign(manifest, RUN_HEX, 5, SIG_B, roster, base=0) for s in a.samples
    }


def test_slots_are_disjoint_and_rounds_of_one_pass_too() -> None:
    params = AssignParams(n_samples=1000, batch=12)
    roster = [(h, i) for i, h in enumerate(HOTKEYS[:5])]
    seen: set[int] = set()
    base = next_base(0, 0, 5, params)
    for w in range(16):  # 16 rounds x 60 samples = 960 <= 1000: one data pass
        rows = assign(params, RUN_HEX, w, SIG_A, roster, base=base)
        ids = [s for a in rows for s in a.samples]
        assert len(ids) == 60 == len(set(ids))
        assert all(0 <= s < 1000 for s in ids)
        assert seen.isdisjoint(ids)
        seen.update(ids)
        assert [list(a.samples) for a in rows] == _spec_assign(1000, 12, 5, w, SIG_A, base)
        base = next_base(base, 5, 5, params)
    assert base == 1000  # the 17th block would straddle: the next pass starts at n_samples


def test_next_base_rules() -> None:
    p = AssignParams(n_samples=100, batch=12)
    assert next_base(0, 0, 3, p) == 0
    assert next_base(0, 3, 3, p) == 36
    assert next_base(36, 3, 3, p) == 100  # [72, 108) would straddle
    assert next_base(36, 3, 2, p) == 72  # [72, 96) fits
    assert next_base(100, 3, 0, p) == 136  # nobody rostered: no move
    assert next_base(64, 0, 3, p) == 64  # [64, 100) ends exactly at the pass boundary
    with pytest.raises(AssignmentError) as info:
        next_base(0, 3, 9, p)
    assert info.value.status == 409


def test_next_base_from_manifest(manifest: RunManifest) -> None:
    assert next_base(0, 8, 8, manifest) == 8 * 240
    assert next_base(781_250 - 1920, 8, 8, manifest) == 781_250
    assert next_base(781_250 - 3840, 8, 8, manifest) == 781_250 - 1920


def test_second_pass_uses_the_next_epoch_key() -> None:
    params = AssignParams(n_samples=100, batch=10)
    roster = [(HOTKEYS[0], 0), (HOTKEYS[1], 1)]
    rows = assign(params, RUN_HEX, 4, SIG_A, roster, base=120)
    assert [list(a.samples) for a in rows] == _spec_assign(100, 10, 2, 4, SIG_A, 120)
    other = assign(params, RUN_HEX, 4, SIG_A, roster, base=20)  # same offset, epoch 0
    assert rows != other


def test_assign_unit_variant() -> None:
    params = AssignParams(n_samples=1000, batch=12, unit=4)
    roster = [(h, i) for i, h in enumerate(HOTKEYS[:3])]
    rows = assign(params, RUN_HEX, 2, SIG_B, roster, base=40)
    assert [list(a.samples) for a in rows] == _spec_assign(1000, 12, 3, 2, SIG_B, 40, unit=4)
    for a in rows:
        runs = [a.samples[i : i + 4] for i in range(0, 12, 4)]
        assert all(r[0] % 4 == 0 and list(r) == list(range(r[0], r[0] + 4)) for r in runs)
    ids = [s for a in rows for s in a.samples]
    assert len(set(ids)) == len(ids)


def test_params_from_manifest(manifest: RunManifest) -> None:
    assert AssignParams.from_manifest(manifest) == AssignParams(n_samples=781_250, batch=240)
    with pytest.raises(ValueError, match="multiples"):
        AssignParams(n_samples=1000, batch=10, unit=4)


def test_roster_entries_are_accepted(manifest: RunManifest) -> None:
    entries = [RosterEntry(hotkey=h, slot=i, q_i="0000803f") for i, h in enumerate(HOTKEYS[:2])]
    pairs = [(h, i) for i, h in enumerate(HOTKEYS[:2])]
    assert assign(manifest, RUN_HEX, 1, SIG_A, entries, base=0) == assign(
        manifest, RUN_HEX, 1, SIG_A, pairs, base=0
    )


def test_assign_refusals(manifest: RunManifest) -> None:
    p = AssignParams(n_samples=100, batch=12)
    two = [(HOTKEYS[0], 0), (HOTKEYS[1], 1)]
    assert assign(p, RUN_HEX, 0, SIG_A, [], base=0) == []
    with pytest.raises(ValueError, match="slots"):
        assign(p, RUN_HEX, 0, SIG_A, [(HOTKEYS[0], 0), (HOTKEYS[1], 2)], base=0)
    with pytest.raises(ValueError, match="two slots"):
        assign(p, RUN_HEX, 0, SIG_A, [(HOTKEYS[0], 0), (HOTKEYS[0], 1)], base=0)
    with pytest.raises(Conflict):
        assign(p, RUN_HEX, 0, SIG_A, [(h, i) for i, h in enumerate(HOTKEYS[:9])], base=0)
    with pytest.raises(AssignmentError, match="straddles"):
        assign(p, RUN_HEX, 0, SIG_A, two, base=80)
    with pytest.raises(ValueError, match="base"):
        assign(p, RUN_HEX, 0, SIG_A, two, base=-1)
    with pytest.raises(ValueError, match="base"):
        assign(AssignParams(n_samples=100, batch=12, unit=4), RUN_HEX, 0, SIG_A, two, base=2)
    with pytest.raises(Malformed):
        assign(p, RUN_HEX, 0, SIG_A[:47], two, base=0)
    with pytest.raises(Malformed):
        assign(p, RUN_HEX.upper(), 0, SIG_A, two, base=0)


def test_assignment_json() -> None:
    a = Assignment(HOTKEYS[0], 2, (5, 1), "ab" * 32)
    assert unstructure(a) == {
        "hotkey": HOTKEYS[0],
        "slot": 2,
        "samples": [5, 1],
        "assignment_hash": "ab" * 32,
    }


def test_step_and_window_ids() -> None:
    samples = list(range(100, 130))  # H = 5 steps of mb*ga = 6
    assert step_ids(samples, 1, 6) == (100, 101, 102, 103, 104, 105)
    assert step_ids(samples, 5, 6) == tuple(range(124, 130))
    assert window_ids(samples, 0, 5, 6) == ()
    assert window_ids(samples, 5, 5, 6) == tuple(samples)
    assert window_ids(list(range(60)), 10, 5, 6) == tuple(range(30, 60))
    with pytest.raises(ValueError, match="outside"):
        step_ids(samples, 6, 6)
    with pytest.raises(ValueError, match="outside"):
        step_ids(samples, 0, 6)
    with pytest.raises(ValueError, match="multiple"):
        window_ids(samples, 3, 5, 6)
