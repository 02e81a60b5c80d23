"""SS58 addresses (prefix 42), ed25519 keypairs and seed files (spec 2.1, DESIGN 6)."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import base58
import nacl.signing
import pytest

from hypertrain.protocol.errors import KeyfileError, Malformed
from hypertrain.protocol.keys import (
    Keypair,
    load_keypair,
    load_seed,
    verify_signature,
    write_seed_file,
)
from hypertrain.protocol.ss58 import is_ss58, ss58_decode, ss58_encode

VECTORS = [
    (
        "5HB7kpn92RS7uF9uWn8bXSvPVKFPg8kPUFDd5sbveGjX6Dbi",
        "e2111779981618705ecacea1af6ff9350bce2b2dccd03e0c3e01eb0c823d2666",
    ),
    (
        "5DP4qTec9XxffaALGWsEPhS1oWrDWMBjzhBmyzShREMJpymt",
        "3a3d45dc55b57bf542f4c6ff41af080ec675317f4ed50ae1d2713bf9f892692d",
    ),
]
ALPHABET = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"


def hand_address(prefix: bytes, body: bytes, checksum: bytes | None = None) -> str:
    payload = prefix + body
    if checksum is None:
        checksum = hashlib.blake2b(b"SS58PRE" + payload, digest_size=64).digest()[:2]
    encoded: bytes = base58.b58encode(payload + checksum)
    return encoded.decode("ascii")


# --- SS58 ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("address", "pub_hex"), VECTORS)
def test_spec_vectors(address: str, pub_hex: str) -> None:
    pub = bytes.fromhex(pub_hex)
    assert ss58_decode(address) == pub
    assert ss58_encode(pub) == address
    assert hand_address(b"\x2a", pub) == address
    assert is_ss58(address)


def test_keypair_address_is_ss58_of_its_ed25519_public_key() -> None:
    kp = Keypair.from_seed(bytes(range(32)))
    expected = bytes(nacl.signing.SigningKey(bytes(range(32))).verify_key)
    assert kp.public_key == expected
    assert kp.ss58 == ss58_encode(expected)
    assert ss58_decode(kp.ss58) == expected


def test_checksum_failure_is_refused() -> None:
    address, pub_hex = VECTORS[0]
    pub = bytes.fromhex(pub_hex)
    good = hashlib.blake2b(b"SS58PRE\x2a" + pub, digest_size=64).digest()[:2]
    bad = bytes([good[0] ^ 1, good[1]])
    with pytest.raises(Malformed, match="checksum"):
        ss58_decode(hand_address(b"\x2a", pub, bad))
    # Flip one character of a real address (to another base58 character).
    for position in (1, len(address) // 2, len(address) - 1):
        ch = address[position]
        other = ALPHABET[(ALPHABET.index(ch) + 1) % len(ALPHABET)]
        flipped = address[:position] + other + address[position + 1 :]
        with pytest.raises(Malformed):
            ss58_decode(flipped)
        assert not is_ss58(flipped)


@pytest.mark.parametrize("prefix", [b"\x00", b"\x2b", b"\x02"])
def test_wrong_prefix_is_refused(prefix: bytes) -> None:
    pub = bytes.fromhex(VECTORS[0][1])
    address = hand_address(prefix, pub)  # a valid checksum for the wrong network
    assert 46 <= len(address) <= 50
    with pytest.raises(Malformed, match="prefix"):
        ss58_decode(address)


@pytest.mark.parametrize("size", [31, 33])
def test_wrong_length_is_refused(size: int) -> None:
    address = hand_address(b"\x2a", bytes(range(1, size + 1)))
    with pytest.raises(Malformed):
        ss58_decode(address)
    with pytest.raises(Malformed):
        ss58_encode(bytes(size))


@pytest.mark.parametrize("bad_char", ["0", "O", "I", "l", "+", " ", "é"])
def test_non_base58_characters_are_refused(bad_char: str) -> None:
    address = VECTORS[0][0]
    with pytest.raises(Malformed):
        ss58_decode(address[:10] + bad_char + address[11:])


@pytest.mark.parametrize(
    "address", ["", "5HB7kpn9", VECTORS[0][0] + "1" * 3, VECTORS[0][0][:45], None, 42, b"5HB7"]
)
def test_bad_shapes_are_refused(address: object) -> None:
    with pytest.raises(Malformed):
        ss58_decode(address)  # type: ignore[arg-type]
    assert not is_ss58(address)


# --- ed25519 ------------------------------------------------------------------------------------


def test_rfc8032_vector_1() -> None:
    seed = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
    kp = Keypair.from_seed(seed)
    assert kp.public_key.hex() == (
        "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
    )
    sig = kp.sign(b"")
    assert sig.hex() == (
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e"
        "39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
    )
    assert verify_signature(kp.public_key, b"", sig)


def test_sign_and_verify_agree_with_pynacl() -> None:
    kp = Keypair.from_seed(bytes(range(32)))
    message = b"hypertrain/1|Accept|" + b"0" * 64
    sig = kp.sign(message)
    assert len(sig) == 64
    nacl.signing.VerifyKey(kp.public_key).verify(message, sig)  # raises if invalid
    other = nacl.signing.SigningKey(bytes(32))
    their_sig = bytes(other.sign(message).signature)
    assert verify_signature(bytes(other.verify_key), message, their_sig)
    assert not verify_signature(kp.public_key, message, their_sig)
    assert not verify_signature(kp.public_key, message + b"!", sig)
    assert not verify_signature(kp.public_key, message, sig[:-1] + bytes([sig[-1] ^ 1]))
    assert not verify_signature(kp.public_key[:31], message, sig)
    assert not verify_signature(kp.public_key, message, sig[:63])
    assert not verify_signature(bytes(32), message, sig)


def test_keypair_needs_a_32_byte_seed() -> None:
    for size in (0, 31, 33, 64):
        with pytest.raises(KeyfileError):
            Keypair.from_seed(bytes(size))


# --- seed files ---------------------------------------------------------------------------------

SEED = bytes(range(32))


def seed_file(tmp_path: Path, content: bytes, mode: int = 0o600) -> Path:
    path = tmp_path / "key"
    path.write_bytes(content)
    path.chmod(mode)
    return path


@pytest.mark.parametrize(
    "content",
    [
        SEED,
        SEED.hex().encode(),
        SEED.hex().encode() + b"\n",
        b"  \t" + SEED.hex().encode() + b"\r\n\n",
        SEED.hex().upper().encode(),
    ],
    ids=["raw", "hex", "hex-newline", "hex-whitespace", "hex-upper"],
)
def test_accepted_seed_forms(tmp_path: Path, content: bytes) -> None:
    path = seed_file(tmp_path, content)
    assert load_seed(path) == SEED
    assert load_keypair(path).public_key == Keypair.from_seed(SEED).public_key


def test_raw_seed_bytes_are_never_stripped(tmp_path: Path) -> None:
    raw = b"\n" + bytes(range(30)) + b" "  # 32 raw bytes that start and end with whitespace
    assert load_seed(seed_file(tmp_path, raw)) == raw


@pytest.mark.parametrize(
    "content",
    [
        b"",
        SEED[:31],
        SEED + b"\x00",
        SEED.hex().encode()[:63],
        SEED.hex().encode() + b"0",
        b"g" * 64,
        b"0x" + SEED.hex().encode()[:62],
        SEED.hex().encode() + b" " + SEED.hex().encode(),
        b"0" * 5000,
    ],
    ids=["empty", "31", "33", "63hex", "65hex", "non-hex", "0x", "two", "huge"],
)
def test_malformed_seed_content_is_refused(tmp_path: Path, content: bytes) -> None:
    with pytest.raises(KeyfileError):
        load_seed(seed_file(tmp_path, content))


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660, 0o644, 0o610, 0o601, 0o700 | 0o004])
def test_group_or_other_permission_bits_are_refused(tmp_path: Path, mode: int) -> None:
    with pytest.raises(KeyfileError, match="chmod 600"):
        load_seed(seed_file(tmp_path, SEED, mode))


@pytest.mark.parametrize("mode", [0o600, 0o400, 0o700])
def test_owner_only_modes_are_accepted(tmp_path: Path, mode: int) -> None:
    assert load_seed(seed_file(tmp_path, SEED, mode)) == SEED


def test_symlink_is_refused(tmp_path: Path) -> None:
    target = seed_file(tmp_path, SEED)
    link = tmp_path / "link"
    link.symlink_to(target)
    with pytest.raises(KeyfileError, match="symlink"):
        load_seed(link)


def test_directory_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "dir"
    directory.mkdir(mode=0o700)
    with pytest.raises(KeyfileError):
        load_seed(directory)


def test_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(KeyfileError, match="regular"):
        load_seed(fifo)


def test_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(KeyfileError):
        load_seed(tmp_path / "absent")


@pytest.mark.skipif(os.geteuid() != 0, reason="changing a file's owner needs root")
def test_file_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    path = seed_file(tmp_path, SEED)
    os.chown(path, 1, -1)
    with pytest.raises(KeyfileError, match="owned by uid 1"):
        load_seed(path)


def test_write_seed_file_round_trips_with_mode_0600(tmp_path: Path) -> None:
    path = tmp_path / "new.key"
    write_seed_file(path, SEED)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_bytes() == SEED.hex().encode() + b"\n"
    assert load_seed(path) == SEED
    with pytest.raises(KeyfileError):
        write_seed_file(path, bytes(32))  # never overwrites
    assert load_seed(path) == SEED
    with pytest.raises(KeyfileError):
        write_seed_file(tmp_path / "short.key", bytes(31))
    assert not (tmp_path / "short.key").exists()
