"""The domain-separated hashes of spec 2.5, each pinned by an independent in-test construction."""

from __future__ import annotations

import collections
import hashlib
import json
import struct
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hypertrain.protocol import hashes as hh
from hypertrain.protocol.errors import Malformed
from hypertrain.protocol.merkle import merkle_root

RUN = bytes(range(32))
RUN_HEX = RUN.hex()
SIG = bytes(range(100, 148))  # 48 bytes, a drand quicknet signature
HOTKEY = "5HB7kpn92RS7uF9uWn8bXSvPVKFPg8kPUFDd5sbveGjX6Dbi"
D32 = [hashlib.sha256(bytes([i])).digest() for i in range(8)]


def sha(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def le(x: int, size: int = 8) -> bytes:
    return x.to_bytes(size, "little")


def be(x: int, size: int = 8) -> bytes:
    return x.to_bytes(size, "big")


def test_constants() -> None:
    assert hh.ZERO_STATE == "9faa1d0825ce3e3ff33a71fa169b016be3781ead8e6ff0af7f094b276e252f7e"
    assert hh.NO_HONEYPOT == "8b1a383e419f35c68e1be2c1d8681298e97af205a07c0e1f7f05453f7bdf914c"
    assert hh.sha256_hex(b"abc") == (
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    )


def test_parse_hex32() -> None:
    assert hh.parse_hex32(RUN_HEX) == RUN
    for bad in (RUN_HEX.upper(), RUN_HEX[:-1], RUN_HEX + "0", "zz" * 32, RUN):
        with pytest.raises(Malformed):
            hh.parse_hex32(bad)  # type: ignore[arg-type]


# --- leaves ------------------------------------------------------------------------------------


def test_leaf_digest_layout() -> None:
    loss, norm = bytes.fromhex("cdcccc3d"), bytes.fromhex("0000803f")
    preimage = b"ht-leaf-v1" + RUN + le(3) + le(10) + D32[0] + D32[1] + le(2**53 - 1) + loss + norm
    assert len(preimage) == 138
    got = hh.leaf_digest(
        run_id=RUN,
        w=3,
        t=10,
        stage_root=D32[0],
        batch_ids_sha256=D32[1],
        rng_ctr=2**53 - 1,
        loss_f32=loss,
        norm_f32=norm,
    )
    assert got == sha(preimage)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("run_id", RUN[:31]),
        ("run_id", RUN_HEX),
        ("stage_root", D32[0] + b"\x00"),
        ("batch_ids_sha256", b""),
        ("loss_f32", "cdcccc3d"),
        ("loss_f32", b"\x00" * 8),
        ("norm_f32", b"\x00" * 3),
        ("w", -1),
        ("w", 2**64),
        ("t", True),
        ("rng_ctr", 1.0),
    ],
)
def test_leaf_digest_refuses_bad_fields(field: str, value: object) -> None:
    args: dict[str, Any] = {
        "run_id": RUN,
        "w": 0,
        "t": 0,
        "stage_root": D32[0],
        "batch_ids_sha256": D32[1],
        "rng_ctr": 0,
        "loss_f32": b"\x00" * 4,
        "norm_f32": b"\x00" * 4,
    }
    args[field] = value
    with pytest.raises(Malformed):
        hh.leaf_digest(**args)


def test_stage_root_metrics_leaf_and_batch_ids() -> None:
    stages = [(D32[0], D32[1], D32[2]), (D32[3], D32[4], D32[5])]
    leaf0, leaf1 = D32[0] + D32[1] + D32[2], D32[3] + D32[4] + D32[5]
    expected = sha(b"\x01" + sha(b"\x00" + leaf0) + sha(b"\x00" + leaf1))
    assert hh.stage_root(stages) == expected
    assert hh.stage_root(stages[:1]) == sha(b"\x00" + leaf0)
    with pytest.raises(Malformed):
        hh.stage_root([])
    with pytest.raises(Malformed):
        hh.stage_root([(D32[0], D32[1], D32[2][:31])])
    assert hh.metrics_leaf(b"\x01\x02\x03\x04", b"\x05\x06\x07\x08") == bytes(range(1, 9))
    assert hh.batch_ids_sha256([]) == sha(b"")
    assert hh.batch_ids_sha256([1, 2**64 - 1]) == sha(le(1) + le(2**64 - 1))
    bad_ids: list[list[Any]] = [[-1], [2**64], [1.5], [True]]
    for bad in bad_ids:
        with pytest.raises(Malformed):
            hh.batch_ids_sha256(bad)


def test_tensor_root_layout() -> None:
    expected = sha(D32[0] + D32[1] + D32[2] + le(7)).hex()
    assert hh.tensor_root(D32[0], D32[1], D32[2], 7) == expected
    assert hh.tensor_root(D32[1], D32[0], D32[2], 7) != expected
    with pytest.raises(Malformed):
        hh.tensor_root(D32[0].hex(), D32[1], D32[2], 7)  # type: ignore[arg-type]
    with pytest.raises(Malformed):
        hh.tensor_root(D32[0], D32[1], D32[2], -1)


# --- assignment and audit selection ------------------------------------------------------------


def test_assignment_hash_layout() -> None:
    samples = [5, 0, 2**40 + 3]
    preimage = b"ht-assignment-v1" + RUN + be(4) + be(1) + b"".join(le(s) for s in samples)
    assert hh.assignment_hash(RUN, 4, 1, samples) == sha(preimage).hex()
    # Endianness differs per field: w and slot big-endian, samples little-endian.
    swapped = b"ht-assignment-v1" + RUN + le(4) + le(1) + b"".join(be(s) for s in samples)
    assert hh.assignment_hash(RUN, 4, 1, samples) != sha(swapped).hex()
    with pytest.raises(Malformed):
        hh.assignment_hash(RUN, 4, 1, [-1])
    with pytest.raises(Malformed):
        hh.assignment_hash(RUN[:16], 4, 1, [])


def test_audit_selection_hash_layout() -> None:
    expected = sha(b"ht-audit" + RUN + be(9) + SIG + HOTKEY.encode())
    assert hh.audit_selection_hash(RUN, 9, SIG, HOTKEY) == expected
    with pytest.raises(Malformed):
        hh.audit_selection_hash(RUN, 9, SIG[:47], HOTKEY)
    with pytest.raises(Malformed):
        hh.audit_selection_hash(RUN, 9, SIG.hex(), HOTKEY)  # type: ignore[arg-type]
    with pytest.raises(Malformed):
        hh.audit_selection_hash(RUN, 9, SIG, "")


MAX_HASH = b"\xff" * 32
ZERO_HASH = b"\x00" * 32


def test_audit_selected_boundaries() -> None:
    # q = 0 never selects, q = 1.0 always does, at both ends of the hash range.
    assert not hh.audit_selected(ZERO_HASH, "00000000")
    assert not hh.audit_selected(ZERO_HASH, "00000080")  # -0.0
    assert hh.audit_selected(MAX_HASH, "0000803f")
    assert hh.audit_selected(ZERO_HASH, "0000803f")
    # q = 0.5 splits exactly at 2^255.
    assert hh.audit_selected(be(2**255 - 1, 32), "0000003f")
    assert not hh.audit_selected(be(2**255, 32), "0000003f")


def test_audit_selected_uses_the_exact_f32_value() -> None:
    q32 = Fraction(float.fromhex("0x1.99999ap-4"))  # f32(0.1) = 0.100000001490116...
    assert q32 > Fraction(0.1)
    threshold = q32 * 2**256
    assert threshold.denominator == 1
    t = int(threshold)
    assert hh.audit_selected(be(t - 1, 32), "cdcccc3d")
    assert not hh.audit_selected(be(t, 32), "cdcccc3d")
    # A hash between the float64 0.1 and the f32 0.1 thresholds is selected: q is the f32 value.
    between = int(Fraction(0.1) * 2**256) + 1
    assert between < t
    assert hh.audit_selected(be(between, 32), "cdcccc3d")


@pytest.mark.parametrize("q", ["0000c07f", "0000807f", "000080bf", "00000040", "CDCCCC3D", "0.1"])
def test_audit_selected_refuses_bad_q(q: str) -> None:
    with pytest.raises(Malformed):
        hh.audit_selected(ZERO_HASH, q)


def test_audit_selected_refuses_bad_hash() -> None:
    with pytest.raises(Malformed):
        hh.audit_selected(b"\x00" * 31, "0000803f")


@given(st.binary(min_size=32, max_size=32), st.integers(min_value=0, max_value=2**23))
def test_audit_selected_matches_integer_definition(h: bytes, mantissa: int) -> None:
    q = Fraction(mantissa, 2**23)  # every such q is an exact f32 in [0, 1]
    q_f32 = struct.pack("<f", float(q)).hex()
    assert hh.audit_selected(h, q_f32) == (int.from_bytes(h, "big") < q * 2**256)


def test_segments_seed_layout() -> None:
    sig_sha = "ab" * 32
    expected = f"ht-segments|{RUN_HEX}|12|{sig_sha}|{HOTKEY}".encode("ascii")
    assert hh.segments_seed(RUN_HEX, 12, sig_sha, HOTKEY) == expected
    for args in (
        (RUN_HEX.upper(), 12, sig_sha, HOTKEY),
        (RUN, 12, sig_sha, HOTKEY),
        (RUN_HEX, -1, sig_sha, HOTKEY),
        (RUN_HEX, 12, sig_sha[:-2], HOTKEY),
        (RUN_HEX, 12, sig_sha, "a|b"),
        (RUN_HEX, 12, sig_sha, ""),
    ):
        with pytest.raises(Malformed):
            hh.segments_seed(*args)


def reference_draw(seed: bytes, n: int, ctr: int) -> tuple[int, int]:
    limit = 2**256 - 2**256 % n
    while True:
        x = int.from_bytes(sha(seed + le(ctr)), "big")
        ctr += 1
        if x < limit:
            return x % n, ctr


def test_uniform_draw_matches_the_rejection_rule() -> None:
    seed = b"ht-segments|test"
    for n in (1, 2, 3, 7, 30, 2**64 + 1, 2**255 + 1, 2**256):
        ctr = 0
        for _ in range(20):
            got = hh.uniform_draw(seed, n, ctr)
            assert got == reference_draw(seed, n, ctr)
            assert 0 <= got[0] < n
            ctr = got[1]


def test_uniform_draw_rejects_above_the_limit() -> None:
    # n = 2^255 + 1: limit = 2^255 + 1, so about half of all tries are rejected.
    n = 2**255 + 1
    seed = b"reject"
    ctr = 0
    while int.from_bytes(sha(seed + le(ctr)), "big") <= 2**255:
        ctr += 1  # find a counter whose first try is rejected
    value, next_ctr = hh.uniform_draw(seed, n, ctr)
    assert next_ctr >= ctr + 2
    assert (value, next_ctr) == reference_draw(seed, n, ctr)


def test_uniform_draw_edge_n_1() -> None:
    for ctr in (0, 1, 99):
        assert hh.uniform_draw(b"s", 1, ctr) == (0, ctr + 1)


def test_uniform_draw_refusals() -> None:
    for n in (0, -1, 2**256 + 1, True):
        with pytest.raises(Malformed):
            hh.uniform_draw(b"s", n)
    with pytest.raises(Malformed):
        hh.uniform_draw("s", 3)  # type: ignore[arg-type]
    with pytest.raises(Malformed):
        hh.uniform_draw(b"s", 3, -1)


def test_uniform_draw_is_roughly_uniform() -> None:
    n, draws = 7, 7000
    counts: collections.Counter[int] = collections.Counter()
    ctr = 0
    for _ in range(draws):
        value, ctr = hh.uniform_draw(b"uniformity", n, ctr)
        counts[value] += 1
    assert set(counts) == set(range(n))
    expected = draws / n
    chi2 = sum((counts[k] - expected) ** 2 / expected for k in range(n))
    assert chi2 < 30  # 6 degrees of freedom; p < 1e-4 beyond 30


# --- Feistel -----------------------------------------------------------------------------------


def test_assign_and_epoch_keys() -> None:
    assert hh.assign_key(RUN, 5, SIG) == sha(b"ht-assign" + RUN + be(5) + SIG)
    assert hh.epoch_key(RUN, 2) == sha(b"ht-epoch" + RUN + be(2))
    with pytest.raises(Malformed):
        hh.assign_key(RUN, 5, SIG[:10])
    with pytest.raises(Malformed):
        hh.epoch_key(RUN + b"\x00", 2)


def test_feistel_round_layout() -> None:
    key = D32[3]
    digest = sha(b"ht-feistel-v1" + be(1000) + key + bytes([7]) + be(21))
    full = int.from_bytes(digest[:8], "big")
    assert hh.feistel_round(1000, key, 7, 21, 5) == full & 0b11111
    assert hh.feistel_round(2**64 - 1, key, 255, 2**32 - 1, 32) == int.from_bytes(
        sha(b"ht-feistel-v1" + be(2**64 - 1) + key + b"\xff" + be(2**32 - 1))[:8], "big"
    ) & (2**32 - 1)
    bad = [(0, key, 0, 0, 1), (10, key[:31], 0, 0, 1), (10, key, 256, 0, 1), (10, key, 0, 0, 0)]
    for args in bad:
        with pytest.raises(Malformed):
            hh.feistel_round(*args)


@given(
    st.integers(min_value=1, max_value=2**64 - 1),
    st.binary(min_size=32, max_size=32),
    st.integers(min_value=0, max_value=255),
    st.integers(min_value=0, max_value=2**32 - 1),
    st.integers(min_value=1, max_value=32),
)
def test_the_fast_round_function_is_the_round_function(
    n: int, key: bytes, r: int, x: int, half: int
) -> None:
    assert hh.feistel_round_fn(n, key, half)(r, x) == hh.feistel_round(n, key, r, x, half)


@pytest.mark.parametrize(
    ("n", "half"), [(1, 1), (2, 1), (4, 1), (5, 2), (16, 2), (17, 3), (781250, 10), (2**20, 10)]
)
def test_feistel_half(n: int, half: int) -> None:
    assert hh.feistel_half(n) == half


def prp(n: int, key: bytes, x: int) -> int:
    """The spec's PRP, built on the round function under test."""
    half = hh.feistel_half(n)
    mask = (1 << half) - 1

    def enc(v: int) -> int:
        left, right = v >> half, v & mask
        for r in range(hh.FEISTEL_ROUNDS):
            left, right = right, left ^ hh.feistel_round(n, key, r, right, half)
        return (left << half) | right

    y = enc(x)
    while y >= n:
        y = enc(y)
    return y


@pytest.mark.parametrize("n", [1, 2, 3, 10, 64, 100, 1000])
def test_feistel_prp_built_on_the_round_is_a_permutation(n: int) -> None:
    key = hh.epoch_key(RUN, 0)
    image = [prp(n, key, x) for x in range(n)]
    assert sorted(image) == list(range(n))
    if n >= 10:
        assert image != list(range(n))


def test_rng_ctr_layout() -> None:
    digest = sha(b"ht-rng|" + RUN_HEX.encode() + le(3) + le(12) + b"\xff" * 8)
    assert hh.rng_ctr(RUN_HEX, 3, 12, -1) == int.from_bytes(digest[:8], "little") & (2**53 - 1)
    digest = sha(b"ht-rng|init:0" + le(0) + le(0) + le(5))
    assert hh.rng_ctr("init:0", 0, 0, 5) == int.from_bytes(digest[:8], "little") & (2**53 - 1)
    assert all(hh.rng_ctr(RUN_HEX, 0, t, -1) < 2**53 for t in range(200))
    assert max(hh.rng_ctr(RUN_HEX, 0, t, -1) for t in range(200)) >= 2**52
    for args in ((RUN, 0, 0, 0), (RUN_HEX, -1, 0, 0), (RUN_HEX, 0, 0, 2**63)):
        with pytest.raises(Malformed):
            hh.rng_ctr(*args)


# --- commitments and signed bytes --------------------------------------------------------------


def test_honeypot_commit_layout() -> None:
    salt = bytes(range(32))
    members = {"5Zb": "noise", "5Aa": "honest", "5Mm": "last_step"}
    listing = (
        b'[{"hotkey":"5Aa","mode":"honest"},{"hotkey":"5Mm","mode":"last_step"},'
        b'{"hotkey":"5Zb","mode":"noise"}]'
    )
    assert hh.honeypot_commit(members.items(), salt) == sha(listing + salt).hex()
    assert hh.honeypot_commit(reversed(list(members.items())), salt) == sha(listing + salt).hex()
    assert hh.honeypot_commit([], salt) == sha(b"[]" + salt).hex()


@pytest.mark.parametrize(
    ("members", "salt"),
    [
        ([("5Aa", "honest")], b"\x00" * 15),
        ([("5Aa", "honest")], "00" * 32),
        ([("5Aa", "honest"), ("5Aa", "noise")], b"\x00" * 32),
        ([("5Aa", "sneaky")], b"\x00" * 32),
        ([("", "honest")], b"\x00" * 32),
    ],
)
def test_honeypot_commit_refusals(members: list[tuple[str, str]], salt: bytes) -> None:
    with pytest.raises(Malformed):
        hh.honeypot_commit(members, salt)


def test_holdout_commit_layout() -> None:
    salt = b"s" * 16
    assert hh.holdout_commit(D32[0], salt) == sha(D32[0] + salt).hex()
    with pytest.raises(Malformed):
        hh.holdout_commit(D32[0], b"s" * 15)
    with pytest.raises(Malformed):
        hh.holdout_commit(D32[0][:31], salt)


def test_roster_hash_layout() -> None:
    roster = [
        {"slot": 0, "hotkey": "5Aa", "q_i": "cdcccc3d"},
        {"q_i": "0000803f", "hotkey": "5Bb", "slot": 1},
    ]
    text = '[{"hotkey":"5Aa","q_i":"cdcccc3d","slot":0},{"hotkey":"5Bb","q_i":"0000803f","slot":1}]'
    assert hh.roster_hash(roster) == sha(text.encode()).hex()
    assert hh.roster_hash(roster) != hh.roster_hash(roster[::-1])  # a list, order matters
    with pytest.raises(Malformed):
        hh.roster_hash({"hotkey": "5Aa"})  # type: ignore[arg-type]
    with pytest.raises(Malformed):
        hh.roster_hash([{"q_i": 0.1}])


def test_rerun_claim_bytes() -> None:
    root = "cd" * 32
    expected = f"hypertrain/1|Rerun|{RUN_HEX}|7|{HOTKEY}|{root}".encode()
    assert hh.rerun_claim_bytes(RUN_HEX, 7, HOTKEY, root) == expected
    with pytest.raises(Malformed):
        hh.rerun_claim_bytes(RUN_HEX, 7, HOTKEY, root.upper())
    with pytest.raises(Malformed):
        hh.rerun_claim_bytes(RUN_HEX, 7, "x|y", root)


def test_join_request_bytes() -> None:
    hardware = {"gpu": "cpu", "sm_count": 1, "driver": "\u00e9"}
    got = hh.join_request_bytes(RUN_HEX, HOTKEY, hardware)
    body = (
        '{"hardware":{"driver":"\u00e9","gpu":"cpu","sm_count":1},'
        f'"hotkey":"{HOTKEY}","run_id":"{RUN_HEX}"}}'
    )
    assert got == b"hypertrain/1|Join|" + body.encode("utf-8")
    assert json.loads(got.split(b"|", 2)[2]) == {
        "run_id": RUN_HEX,
        "hotkey": HOTKEY,
        "hardware": hardware,
    }
    with pytest.raises(Malformed):
        hh.join_request_bytes(RUN_HEX, HOTKEY, {"ram_gb": 1.5})
    with pytest.raises(Malformed):
        hh.join_request_bytes(RUN_HEX[:10], HOTKEY, {})


def test_event_tape_and_checkpoint_signed_bytes() -> None:
    body = {"v": "ht-tape-v1", "w": 3, "run_id": RUN_HEX, "kind": "global"}
    digest = sha(f'{{"kind":"global","run_id":"{RUN_HEX}","v":"ht-tape-v1","w":3}}'.encode()).hex()
    assert hh.event_tape_signed_bytes(body, RUN_HEX) == (
        b"hypertrain/1|EventTape|" + digest.encode() + b"|" + RUN_HEX.encode()
    )
    assert hh.checkpoint_signed_bytes(body) == b"hypertrain/1|Checkpoint|" + digest.encode()
    with pytest.raises(Malformed):
        hh.event_tape_signed_bytes(body, RUN)  # type: ignore[arg-type]
    with pytest.raises(Malformed):
        hh.checkpoint_signed_bytes({"lr": 0.4})


def test_merkle_root_of_leaf_digests_is_the_leaves_root() -> None:
    # The pieces compose: leaves_root = Merkle over the 32-byte leaf digests.
    digests = [
        hh.leaf_digest(
            run_id=RUN,
            w=0,
            t=t,
            stage_root=D32[0],
            batch_ids_sha256=hh.batch_ids_sha256([t]),
            rng_ctr=hh.rng_ctr(RUN_HEX, 0, t, -1),
            loss_f32=b"\x00" * 4,
            norm_f32=b"\x00" * 4,
        )
        for t in (0, 5, 10)
    ]
    assert merkle_root(digests) == sha(
        b"\x01" + sha(b"\x01" + sha(b"\x00" + digests[0]) + sha(b"\x00" + digests[1]))
        + sha(b"\x00" + digests[2])
    )  # fmt: skip
