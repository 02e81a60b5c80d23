"""Node keys, lease tokens and handles."""

from __future__ import annotations

import hashlib
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hypertrain.compute import (
    check_handle,
    is_node_key,
    mint_key,
    mint_lease_token,
    new_handle,
    secret_hash,
    secret_matches,
)
from hypertrain.protocol.errors import Malformed


def test_minted_keys_are_ht_and_32_base62_and_distinct() -> None:
    keys = {mint_key() for _ in range(200)}
    assert len(keys) == 200
    for key in keys:
        assert re.fullmatch(r"ht_[0-9A-Za-z]{32}", key)
        assert is_node_key(key)
    assert re.fullmatch(r"lt_[0-9A-Za-z]{32}", mint_lease_token())
    assert not is_node_key(mint_lease_token())


@pytest.mark.parametrize(
    "value",
    [None, 5, "", "ht_", "ht_" + "a" * 31, "ht_" + "a" * 33, "dmi_" + "a" * 32, "ht_" + "-" * 32],
)
def test_malformed_keys_are_not_keys(value: object) -> None:
    assert not is_node_key(value)


@given(st.text(max_size=80))
def test_secret_hash_is_sha256_hex_and_matches_only_itself(secret: str) -> None:
    digest = secret_hash(secret)
    assert digest == hashlib.sha256(secret.encode()).hexdigest()
    assert secret_matches(secret, digest)
    assert not secret_matches(secret + "x", digest)


def test_handles() -> None:
    assert check_handle("alice_01.x-y") == "alice_01.x-y"
    for bad in ["", "-lead", "a" * 33, "sp ace", "ü", 7]:
        with pytest.raises(Malformed, match="handle"):
            check_handle(bad)
    handle = new_handle()
    assert re.fullmatch(r"node-[0-9a-f]{8}", handle)
    assert check_handle(handle) == handle


def test_secrets_draw_base62_without_bias_from_one_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each random byte under 248 (4 x 62) is one character (byte % 62); 248..255 are skipped
    (they would make the first eight characters likelier), and one read usually suffices."""
    from hypertrain.compute import keys

    reads: list[int] = []

    def token_bytes(n: int) -> bytes:
        reads.append(n)
        return bytes([247, 248, 255, 0, 61, 62, 123, 124] * 5)[:n]

    monkeypatch.setattr(keys.secrets, "token_bytes", token_bytes)
    token = keys.mint_lease_token()
    digits = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    one_read = [digits[b % 62] for b in [247, 0, 61, 62, 123, 124] * 5 if b < 248]
    assert token == "lt_" + "".join((one_read * 2)[:32])
    assert reads == [40, 40]  # 30 characters from the first 40 bytes: a second read
