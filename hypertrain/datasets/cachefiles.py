"""Files of a local dataset cache (the miner's and the auditor's): which shards hold some
sample ids, a cached file's sha256, and a durable atomic write.

A cached file is trusted only when its sha256 is the pinned one (:func:`file_sha256`); a fetched
file goes to a temp file in the same directory, is fsynced, renamed into place and the
directory fsynced (:func:`write_atomically`), so a crash never leaves a half-written shard under
its real name.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from collections.abc import Iterable
from pathlib import Path
from typing import Final

__all__ = ["file_sha256", "needed_shards", "write_atomically"]

_CHUNK: Final = 1 << 20


def needed_shards(ids: Iterable[int], samples_per_shard: int) -> list[int]:
    """The shard indices holding sample ``ids``, ascending."""
    return sorted({int(i) // samples_per_shard for i in ids})


def file_sha256(path: Path) -> str | None:
    """The sha256 hex of the file at ``path``, None when it does not exist."""
    try:
        digest = hashlib.sha256()
        with path.open("rb") as f:
            while chunk := f.read(_CHUNK):
                digest.update(chunk)
    except FileNotFoundError:
        return None
    return digest.hexdigest()


def write_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` durably and atomically (module doc)."""
    temp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.part")
    try:
        with temp.open("xb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
