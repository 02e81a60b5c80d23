"""Compute-node keys, lease tokens and handles (DESIGN.md section 6, "Compute-node keys").

Promises:

- :func:`mint_key` returns ``"ht_"`` + 32 base62 characters drawn with :mod:`secrets`;
  :func:`is_node_key` accepts exactly that shape.
- Keys and lease tokens are stored only as :func:`secret_hash` (sha256 hex of the UTF-8 text);
  :func:`secret_matches` compares two such digests with :func:`hmac.compare_digest`, so a wrong
  key costs the same time whatever its first differing character.
- :func:`mint_lease_token` returns ``"lt_"`` + 32 base62 characters; it is handed out once, in
  the lease answer, and a result must carry it.
- Handles: :func:`check_handle` accepts 1-32 characters of ``[A-Za-z0-9_.-]`` starting with a
  letter or digit (``Malformed`` otherwise); :func:`new_handle` makes ``"node-"`` + 8 random
  lower-case hex characters. Uniqueness (case-insensitive) is the store's job.

Pure: no clock, no I/O.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import string
from typing import Final

from hypertrain.protocol.errors import Malformed

__all__ = [
    "KEY_PREFIX",
    "TOKEN_PREFIX",
    "check_handle",
    "is_node_key",
    "mint_key",
    "mint_lease_token",
    "new_handle",
    "secret_hash",
    "secret_matches",
]

KEY_PREFIX: Final = "ht_"
TOKEN_PREFIX: Final = "lt_"
_BASE62: Final = string.digits + string.ascii_letters
_SECRET_CHARS: Final = 32
_KEY_SHAPE: Final = re.compile(r"ht_[0-9A-Za-z]{32}")
_HANDLE_SHAPE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,31}")


_UNBIASED: Final = 256 - 256 % len(_BASE62)
"""Random bytes below this map to base62 without bias (``byte % 62``); the rest are skipped."""


def _random_base62() -> str:
    """32 uniform base62 characters from ONE read of the system's randomness (``secrets``):
    each byte under :data:`_UNBIASED` gives one character (one ``secrets.choice`` per
    character cost a system call each, 32 a lease)."""
    chars: list[str] = []
    while len(chars) < _SECRET_CHARS:
        chars += [_BASE62[b % 62] for b in secrets.token_bytes(40) if b < _UNBIASED]
    return "".join(chars[:_SECRET_CHARS])


def mint_key() -> str:
    """A fresh node key: ``ht_`` + 32 base62 characters (about 190 bits)."""
    return KEY_PREFIX + _random_base62()


def mint_lease_token() -> str:
    """A fresh lease token: ``lt_`` + 32 base62 characters."""
    return TOKEN_PREFIX + _random_base62()


def is_node_key(value: object) -> bool:
    """True when ``value`` is a string shaped like a node key."""
    return isinstance(value, str) and _KEY_SHAPE.fullmatch(value) is not None


def secret_hash(secret: str) -> str:
    """The stored form of a key or lease token: sha256 hex of its UTF-8 bytes."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def secret_matches(secret: str, stored_hash: str) -> bool:
    """Constant-time check that ``secret`` hashes to ``stored_hash``."""
    return hmac.compare_digest(secret_hash(secret).encode(), stored_hash.encode())


def check_handle(handle: object) -> str:
    """``handle`` when it is a valid handle (module doc); ``Malformed`` naming the rule if not."""
    if not isinstance(handle, str) or _HANDLE_SHAPE.fullmatch(handle) is None:
        raise Malformed(
            "handle: 1-32 characters of A-Z a-z 0-9 _ . -, starting with a letter or digit"
        )
    return handle


def new_handle() -> str:
    """A generated handle: ``node-`` + 8 random lower-case hex characters."""
    return "node-" + secrets.token_hex(4)
