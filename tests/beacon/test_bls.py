"""BLS verification of drand rounds: real quicknet vectors, forgeries, garbage, local signing."""

from __future__ import annotations

import hashlib
from typing import Any

import blspy
import pytest
from attrs import evolve
from hypothesis import given, settings
from hypothesis import strategies as st

from hypertrain.beacon import bls
from hypertrain.beacon.bls import (
    BLS12_381_R,
    LocalSigner,
    check_round,
    drand_chain_hash,
    local_chain_hash,
    round_message,
    verify_round,
)
from hypertrain.beacon.chain import (
    DST_G1,
    QUICKNET,
    SCHEME_UNCHAINED_G1,
    BeaconRound,
    ChainInfo,
    InvalidRound,
)

# Field modulus of BLS12-381 (for crafting off-subgroup and non-canonical encodings).
P = int(
    "1a0111ea397fe69a4b1ba7b6434bacd764774b84f38512bf6730d2a0f6b0f6241eabfffeb153ffffb9feffffffffaaab",
    16,
)
X_MASK = (1 << 381) - 1
COMPRESSED = 1 << 383
INFINITY = 1 << 382
SIGN = 1 << 381


def quicknet_round(round_: int, signature: str, randomness: str) -> BeaconRound:
    return BeaconRound(round=round_, signature=signature, randomness=randomness)


# spec/protocol.md 4.2; round 1000 is the vector published in drand's ecosystem (tlock
# tests, drand verifiers): signature b44679..., randomness fe290b..., the same in every source.
VECTORS = [
    quicknet_round(
        1000,
        "b44679b9a59af2ec876b1a6b1ad52ea9b1615fc3982b19576350f93447cb1125e342b73a8dd2bacbe47e4b6b63ed5e39",
        "fe290beca10872ef2fb164d2aa4442de4566183ec51c56ff3cd603d930e54fdd",
    ),
    quicknet_round(
        1000000,
        "83ad29e4c409f9470fc2ef02f90214df49e02b441a1a241a82d622d9f608ef98fd8b11a029f1bee9d9e83b45088abe72",
        "b22aad4794f7451896f7a371aa46106fd84d919f3f569acd5b2fddf1d1440af3",
    ),
    quicknet_round(
        20000000,
        "96892582a33552a7b67ba44ef09c3ccd535bbebe760c93ecf45be8958d0c0f06390c6d19d7bf492eb806af7eef6b125c",
        "f39c98df5525968e6622e0c63edb3d1f9c5607cf780db78abdded36e4b3dba95",
    ),
]
R1M = VECTORS[1]


def with_signature(rnd: BeaconRound, signature: bytes) -> BeaconRound:
    """``rnd`` carrying ``signature`` and its matching randomness (so the BLS check is reached)."""
    return evolve(rnd, signature=signature.hex(), randomness=hashlib.sha256(signature).hexdigest())


def assert_invalid(info: ChainInfo, rnd: BeaconRound, reason: str | None = None) -> None:
    with pytest.raises(InvalidRound, match=reason):
        check_round(info, rnd)
    assert verify_round(info, rnd) is False


# --- crafted points ----------------------------------------------------------------------


def g1_on_curve_outside_subgroup() -> bytes:
    """A compressed G1 point on y^2 = x^3 + 4 whose order is not r (the smallest such x)."""
    x = 0
    while True:
        x += 1
        rhs = (x**3 + 4) % P
        y = pow(rhs, (P + 1) // 4, P)
        if y * y % P == rhs:
            break
    point = blspy.G1Element.from_bytes_unchecked((COMPRESSED | x).to_bytes(48, "big"))
    # Outside the subgroup: r * point != infinity. Check with a scalar ladder over additions.
    assert bytes(bls._scalar_mul(point, BLS12_381_R)) != bytes(blspy.G1Element())
    return (COMPRESSED | x).to_bytes(48, "big")


def g1_off_curve() -> bytes:
    x = 0
    while True:
        x += 1
        rhs = (x**3 + 4) % P
        if pow(rhs, (P - 1) // 2, P) == P - 1:  # not a square: no point with this x
            return (COMPRESSED | x).to_bytes(48, "big")


def g1_non_canonical() -> tuple[bytes, bytes]:
    """(canonical, non-canonical) encodings of one subgroup point: x and x + p."""
    g = blspy.G1Element.generator()
    point = g
    while True:
        canonical = bytes(point)
        value = int.from_bytes(canonical, "big")
        x = value & X_MASK
        if x + P <= X_MASK:
            return canonical, ((value & ~X_MASK) | (x + P)).to_bytes(48, "big")
        point = point + g


# --- genuine rounds ----------------------------------------------------------------------


@pytest.mark.parametrize("rnd", VECTORS, ids=lambda r: f"round{r.round}")
def test_real_quicknet_rounds_verify(rnd: BeaconRound) -> None:
    check_round(QUICKNET, rnd)
    assert verify_round(QUICKNET, rnd) is True


def test_round_message_is_sha256_of_u64be() -> None:
    assert round_message(1) == hashlib.sha256(b"\x00" * 7 + b"\x01").digest()
    with pytest.raises(ValueError, match="u64"):
        round_message(2**64)


def test_quicknet_chain_hash_is_reproduced_from_its_fields() -> None:
    assert (
        drand_chain_hash(
            period_ms=QUICKNET.period_ms,
            genesis_ms=QUICKNET.genesis_ms,
            public_key=bytes.fromhex(QUICKNET.public_key),
            group_hash=bytes.fromhex(QUICKNET.group_hash),
            beacon_id=QUICKNET.beacon_id,
        )
        == QUICKNET.hash
    )


def test_drand_chain_hash_omits_the_default_beacon_id_and_needs_whole_seconds() -> None:
    fields: dict[str, Any] = {
        "period_ms": 30000,
        "genesis_ms": 1595431050000,
        "public_key": b"k",
        "group_hash": b"g",
    }
    assert drand_chain_hash(**fields, beacon_id="") == drand_chain_hash(
        **fields, beacon_id="default"
    )
    assert drand_chain_hash(**fields, beacon_id="") != drand_chain_hash(**fields, beacon_id="x")
    with pytest.raises(ValueError, match="whole-second"):
        drand_chain_hash(**{**fields, "period_ms": 250}, beacon_id="")


def test_local_chain_hash_layout_and_sensitivity() -> None:
    pk = bytes(96)
    base: dict[str, Any] = {"period_ms": 250, "genesis_ms": 1_700_000_000_123, "public_key": pk}
    expected = hashlib.sha256(
        b"hypertrain-local-chain-v1"
        + (250).to_bytes(8, "big")
        + (1_700_000_000_123).to_bytes(8, "big")
        + pk
        + len(SCHEME_UNCHAINED_G1).to_bytes(2, "big")
        + SCHEME_UNCHAINED_G1.encode()
        + (3).to_bytes(2, "big")
        + b"abc"
    ).hexdigest()
    assert local_chain_hash(**base, scheme_id=SCHEME_UNCHAINED_G1, beacon_id="abc") == expected
    variants = {
        local_chain_hash(**{**base, "period_ms": 251}, scheme_id="s", beacon_id="b"),
        local_chain_hash(**{**base, "genesis_ms": 1}, scheme_id="s", beacon_id="b"),
        local_chain_hash(**{**base, "public_key": b"\x01" * 96}, scheme_id="s", beacon_id="b"),
        local_chain_hash(**base, scheme_id="s", beacon_id="b"),
        local_chain_hash(**base, scheme_id="sb", beacon_id=""),
    }
    assert len(variants) == 5


# --- forgeries and garbage ---------------------------------------------------------------


def test_unsupported_scheme_is_refused() -> None:
    info = evolve(QUICKNET, scheme_id="pedersen-bls-chained")
    assert_invalid(info, R1M, "unsupported scheme")


@pytest.mark.parametrize("bit", [0, 1, 2, 3, 7, 8, 100, 200, 300, 383])
def test_flipped_signature_bits_fail(bit: int) -> None:
    sig = bytearray(R1M.signature_bytes)
    sig[bit // 8] ^= 0x80 >> (bit % 8)
    # with the old randomness: caught by the randomness check
    assert_invalid(QUICKNET, evolve(R1M, signature=bytes(sig).hex()), "randomness")
    # with matching randomness: caught by parsing or by the pairing check
    assert_invalid(QUICKNET, with_signature(R1M, bytes(sig)))


def test_wrong_round_number_fails() -> None:
    assert_invalid(QUICKNET, evolve(R1M, round=R1M.round + 1), "does not verify")
    assert_invalid(QUICKNET, evolve(R1M, round=0), "round must be")


def test_swapped_randomness_fails() -> None:
    assert_invalid(QUICKNET, evolve(R1M, randomness=VECTORS[2].randomness), "randomness")


def test_signature_of_another_round_fails() -> None:
    other = VECTORS[2]
    assert_invalid(QUICKNET, evolve(other, round=R1M.round), "does not verify")


@pytest.mark.parametrize(
    ("signature", "reason"),
    [
        ("00" * 47, "96 lowercase hex"),
        ("00" * 49, "96 lowercase hex"),
        (R1M.signature.upper(), "96 lowercase hex"),
        ("zz" * 48, "96 lowercase hex"),
        (" " + R1M.signature[1:], "96 lowercase hex"),
    ],
)
def test_malformed_signature_text_fails(signature: str, reason: str) -> None:
    assert_invalid(QUICKNET, evolve(R1M, signature=signature), reason)


@pytest.mark.parametrize(
    "name",
    [
        "zeros",
        "ones",
        "infinity",
        "compressed-zero",
        "off-curve",
        "outside-subgroup",
        "uncompressed",
    ],
)
def test_garbage_signature_points_fail(name: str) -> None:
    signature = {
        "zeros": bytes(48),
        "ones": b"\xff" * 48,
        "infinity": (COMPRESSED | INFINITY).to_bytes(48, "big"),
        "compressed-zero": COMPRESSED.to_bytes(48, "big"),
        "off-curve": g1_off_curve(),
        "outside-subgroup": g1_on_curve_outside_subgroup(),
        "uncompressed": R1M.signature_bytes[:1].replace(b"\x83", b"\x03") + R1M.signature_bytes[1:],
    }[name]
    assert_invalid(QUICKNET, with_signature(R1M, signature))


def test_blspy_parses_what_we_refuse_and_refuses_what_we_expect() -> None:
    """Pins blspy's behaviour our checks rely on (a blspy upgrade that changes it fails here)."""
    infinity = (COMPRESSED | INFINITY).to_bytes(48, "big")
    assert bytes(blspy.G1Element.from_bytes(infinity)) == infinity  # accepted: we refuse it
    for bad in (g1_on_curve_outside_subgroup(), g1_off_curve(), g1_non_canonical()[1]):
        with pytest.raises(ValueError, match="G1"):
            blspy.G1Element.from_bytes(bad)


def test_non_canonical_encoding_of_a_valid_point_fails() -> None:
    canonical, non_canonical = g1_non_canonical()
    assert bls.parse_g1(canonical, "x") == blspy.G1Element.from_bytes(canonical)
    with pytest.raises(InvalidRound):
        bls.parse_g1(non_canonical, "sig")
    assert_invalid(QUICKNET, with_signature(R1M, non_canonical))


def test_infinity_key_and_signature_are_refused_although_the_pairing_would_accept() -> None:
    """e(inf, g2) == e(H, inf) == 1: without the explicit check this forgery would pass."""
    sig_inf = (COMPRESSED | INFINITY).to_bytes(48, "big")
    pk_inf = b"\xc0" + bytes(95)
    info = evolve(QUICKNET, public_key=pk_inf.hex())
    g2_inf, g1_inf = blspy.G2Element.from_bytes(pk_inf), blspy.G1Element.from_bytes(sig_inf)
    h = blspy.G1Element.from_message(round_message(5), DST_G1)
    assert g1_inf.pair(blspy.G2Element.generator()) == h.pair(g2_inf)
    assert_invalid(info, with_signature(evolve(R1M, round=5), sig_inf), "infinity")


@pytest.mark.parametrize(
    "public_key", ["", "00" * 96, "ff" * 96, "83" * 48, QUICKNET.public_key.upper(), "zz" * 96]
)
def test_garbage_public_key_fails_as_an_invalid_round(public_key: str) -> None:
    assert_invalid(evolve(QUICKNET, public_key=public_key), R1M)


def test_the_public_key_is_parsed_once_per_chain(monkeypatch: pytest.MonkeyPatch) -> None:
    bls._public_key.cache_clear()
    calls: list[bytes] = []
    real = bls.parse_g2

    def counting(data: bytes, what: str) -> object:
        calls.append(data)
        return real(data, what)

    monkeypatch.setattr(bls, "parse_g2", counting)
    for _ in range(3):
        check_round(QUICKNET, R1M)
    assert calls == [bytes.fromhex(QUICKNET.public_key)]


@settings(max_examples=300, deadline=None)
@given(signature=st.binary(min_size=48, max_size=48), round_=st.integers(1, 2**64 - 1))
def test_random_signatures_never_verify_and_never_raise_anything_else(
    signature: bytes, round_: int
) -> None:
    assert verify_round(QUICKNET, with_signature(BeaconRound(round_, "", ""), signature)) is False


@settings(max_examples=100, deadline=None)
@given(
    signature=st.text(max_size=100),
    randomness=st.text(max_size=70),
    round_=st.integers(-(2**70), 2**70),
)
def test_random_round_fields_fail_cleanly(signature: str, randomness: str, round_: int) -> None:
    assert verify_round(QUICKNET, BeaconRound(round_, signature, randomness)) is False


@settings(max_examples=100, deadline=None)
@given(public_key=st.binary(min_size=96, max_size=96))
def test_random_public_keys_fail_cleanly(public_key: bytes) -> None:
    assert verify_round(evolve(QUICKNET, public_key=public_key.hex()), R1M) is False


# --- local signing -----------------------------------------------------------------------


def local_info(signer: LocalSigner) -> ChainInfo:
    return ChainInfo(public_key=signer.public_key_hex, period_ms=1000, genesis_ms=0, hash="00" * 32)


def test_double_and_add_matches_blspy_on_the_g1_generator() -> None:
    for sk in (1, 2, 3, 0xDEADBEEF, BLS12_381_R - 1):
        expected = blspy.PrivateKey.from_bytes(sk.to_bytes(32, "big")).get_g1()
        assert bls._scalar_mul(blspy.G1Element.generator(), sk) == expected


def test_locally_signed_rounds_pass_check_round() -> None:
    signer = LocalSigner.from_seed(b"\x07" * 32)
    info = local_info(signer)
    for r in (1, 2, 3, 1000, 2**64 - 1):
        rnd = signer.sign_round(r)
        assert rnd.randomness == hashlib.sha256(rnd.signature_bytes).hexdigest()
        check_round(info, rnd)
    assert_invalid(info, evolve(signer.sign_round(7), round=8), "does not verify")


def test_a_local_round_does_not_verify_under_another_chain() -> None:
    a, b = LocalSigner.from_seed(b"\x01" * 32), LocalSigner.from_seed(b"\x02" * 32)
    assert verify_round(local_info(a), a.sign_round(5))
    assert not verify_round(local_info(b), a.sign_round(5))
    assert not verify_round(QUICKNET, a.sign_round(5))


def test_local_signer_is_deterministic_in_its_seed() -> None:
    seed = bytes(range(32))
    a, b = LocalSigner.from_seed(seed), LocalSigner.from_seed(seed)
    assert a.public_key == b.public_key
    assert len(a.public_key) == 96
    assert a.sign_round(9) == b.sign_round(9)
    digest = hashlib.sha256(b"hypertrain-local-beacon|" + seed).digest()
    sk = int.from_bytes(digest, "big") % (BLS12_381_R - 1) + 1
    assert LocalSigner(sk).public_key == a.public_key
    with pytest.raises(ValueError, match="32 bytes"):
        LocalSigner.from_seed(seed[:31])
    with pytest.raises(ValueError, match=r"\[1, r\)"):
        LocalSigner(0)
    with pytest.raises(ValueError, match="start at 1"):
        a.sign_round(0)
