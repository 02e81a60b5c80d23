"""What names a stored object: its key (the sha256 of its content) and :class:`ObjectInfo`.

Pure: shared by the object store (:mod:`hypertrain.store.objects`) and the catalog's
transaction functions (:mod:`hypertrain.store.catalog`), which must not depend on trio.
"""

from __future__ import annotations

import re
from typing import Final

import attrs

from hypertrain.protocol.errors import Malformed

__all__ = ["ObjectInfo", "check_key"]

_KEY: Final = re.compile(r"[0-9a-f]{64}")


def check_key(key: object) -> str:
    """Return ``key`` if it is 64 lowercase hex characters, else raise ``Malformed``."""
    if not isinstance(key, str) or _KEY.fullmatch(key) is None:
        raise Malformed(f"object key {key!r} is not 64 lowercase hex characters")
    return key


@attrs.frozen
class ObjectInfo:
    """A stored object: its key (sha256 hex of its content) and its size in bytes."""

    sha256: str
    size: int
