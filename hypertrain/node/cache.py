"""The node's input cache: content addressed, re-hashed before every use, bounded in size.

A job's inputs are :class:`~hypertrain.compute.wire.InputFile` records ``{name, sha256,
size}`` (names and digests already checked when the offer was decoded). Each is kept once, by
its digest whatever its name (so a hostile name can never choose a path), in an
:class:`~hypertrain.store.ObjectStore` under ``<node dir>/cache``: the object store's write is
the cache's write (a temp file under ``cache/tmp``, hashed and capped while it is written,
fsynced and renamed into place, the directory fsynced), so a crash never leaves a torn input
in place. Promises:

- **Start** (:meth:`InputCache.open`, also on first use): temp files a crash left behind are
  removed (and files of the old flat layout, ``cache/<sha256>``), and the inputs on disk are
  indexed, least recently used first by their modification time.
- **Re-hashed before use**: :meth:`InputCache.ensure` returns a path only after hashing the
  file's bytes again: a cached file edited or corrupted on disk is deleted and fetched anew,
  never trusted because a stamp says so (spec/compute-network.md scenario 33).
- **Refused downloads**: an input declared larger than :data:`MAX_INPUT_BYTES` is refused
  before anything is fetched; a body of another size or hash is discarded and reported
  (:class:`~hypertrain.node.errors.InputMismatch`); nothing is renamed into place.
- **Bounded**: once the inputs on disk add up to more than ``max_bytes``, the least recently
  used are deleted until they fit, except inputs in use by a job (from its first
  :meth:`~InputCache.ensure` with its ``job_id`` until :meth:`~InputCache.drop_job`), which are
  never evicted: the cache may stay above the bound while jobs hold it. Using an input (a hit or
  a fetch) makes it the most recent, and touches its modification time so that the order
  survives a restart.
- **Private views**: the job's scorer gets a fresh directory of hard links named by the input
  names (:meth:`InputCache.link_job`), which the names check
  (:func:`~hypertrain.scoring.inputs.check_input_name`) keeps inside it.

The cache belongs to one node process (one node per directory), like a store to its daemon.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections import OrderedDict
from collections.abc import AsyncGenerator, Callable, Iterable, Sequence
from pathlib import Path
from typing import Final

import attrs
import trio

from hypertrain.compute.wire import InputFile
from hypertrain.node.errors import InputMismatch
from hypertrain.protocol.errors import PayloadTooLarge
from hypertrain.protocol.validators import is_hex64
from hypertrain.scoring.inputs import check_input_name
from hypertrain.store.errors import ContentMismatch
from hypertrain.store.objects import ObjectStore

__all__ = ["CHUNK", "DEFAULT_MAX_BYTES", "MAX_INPUT_BYTES", "Fetch", "InputCache"]

CHUNK: Final = 1 << 20
MAX_INPUT_BYTES: Final = 1 << 32
"""The largest input a node stores (4 GiB)."""
DEFAULT_MAX_BYTES: Final = 2048 << 20
"""The cache's size bound by default (``--cache-max-mb 2048``)."""


Fetch = Callable[[InputFile], AsyncGenerator[bytes, None]]
"""Streams an input's bytes from the coordinator."""


async def _hash_file(path: Path) -> tuple[str, int]:
    """``(sha256, size)`` of ``path``, yielding to Trio between chunks (no worker thread, so
    virtual-time tests keep their clock)."""
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
            await trio.lowlevel.checkpoint()
    return digest.hexdigest(), size


@attrs.define
class InputCache:
    """The cache under ``root`` (module doc), at most ``max_bytes`` of inputs not in use."""

    root: Path
    max_bytes: int = DEFAULT_MAX_BYTES
    _store: ObjectStore | None = attrs.field(default=None, init=False)
    _lru: OrderedDict[str, int] = attrs.field(factory=OrderedDict, init=False)
    """sha256 -> size, least recently used first."""
    _jobs: dict[str, set[str]] = attrs.field(factory=dict, init=False)
    """job id -> the inputs it uses."""

    def open(self) -> ObjectStore:
        """Clean and index the cache directory once (module doc); the store. Idempotent."""
        if self._store is not None:
            return self._store
        directory = self.root / "cache"
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        for entry in directory.iterdir():
            if entry.is_file():  # the old flat layout and its ".<sha>.<pid>.tmp" temp files
                entry.unlink(missing_ok=True)
        store = ObjectStore.open(directory)
        found: list[tuple[int, str, int]] = []
        for shard in directory.iterdir():
            if shard.is_dir() and shard.name != "tmp":
                for path in shard.iterdir():
                    if path.is_dir() and not path.is_symlink():
                        shutil.rmtree(path, ignore_errors=True)  # the cache makes no such thing
                        continue
                    if (
                        path.is_symlink()
                        or not is_hex64(path.name)
                        or path.parent.name != path.name[:2]
                    ):
                        path.unlink(missing_ok=True)  # not an input this cache wrote
                        continue
                    st = path.stat()
                    found.append((st.st_mtime_ns, path.name, st.st_size))
        for _, sha256, size in sorted(found):
            self._lru[sha256] = size
        self._store = store
        self._evict()
        return store

    @property
    def size(self) -> int:
        """Bytes of inputs on disk (those indexed)."""
        return sum(self._lru.values())

    def cached(self) -> list[str]:
        """The digests on disk, least recently used first."""
        return list(self._lru)

    def path_of(self, sha256: str) -> Path:
        return self.open().path_of(sha256)

    async def _verified(self, spec: InputFile) -> Path | None:
        path = self.path_of(spec.sha256)
        if not path.is_file():
            self._lru.pop(spec.sha256, None)
            return None
        found = await _hash_file(path)
        if found == (spec.sha256, spec.size):
            return path
        path.unlink(missing_ok=True)
        self._lru.pop(spec.sha256, None)
        return None

    async def ensure(self, spec: InputFile, fetch: Fetch, *, job_id: str | None = None) -> Path:
        """The verified local copy of ``spec``, fetched when missing or damaged; in use by
        ``job_id`` (never evicted) from now until :meth:`drop_job`."""
        if spec.size > MAX_INPUT_BYTES:
            raise InputMismatch(
                f"input {spec.name}: {spec.size} bytes, over this node's {MAX_INPUT_BYTES}"
            )
        store = self.open()
        if job_id is not None:
            self._hold(job_id, [spec.sha256])
        path = await self._verified(spec)
        if path is None:
            try:
                await store.put_stream(
                    fetch(spec),
                    expected_sha256=spec.sha256,
                    size_cap=spec.size,
                    expected_size=spec.size,
                )
            except (ContentMismatch, PayloadTooLarge) as e:
                raise InputMismatch(f"input {spec.name}: {e.detail}") from e
            path = store.path_of(spec.sha256)
        else:
            os.utime(path)
        self._lru[spec.sha256] = spec.size
        self._lru.move_to_end(spec.sha256)
        self._evict()
        return path

    def _in_use(self) -> set[str]:
        return set().union(*self._jobs.values())

    def _evict(self) -> None:
        """Delete least recently used inputs not in use until the cache fits its bound."""
        over = self.size - self.max_bytes
        if over <= 0:
            return
        store, in_use = self.open(), self._in_use()
        for sha256 in [s for s in self._lru if s not in in_use]:
            if over <= 0:
                break
            store.path_of(sha256).unlink(missing_ok=True)
            over -= self._lru.pop(sha256)

    def link_job(self, job_id: str, specs: Sequence[InputFile]) -> dict[str, Path]:
        """A fresh ``jobs/<job_id>`` directory of hard links named by the input names."""
        self._hold(job_id, (spec.sha256 for spec in specs))
        directory = self.root / "jobs" / check_input_name(job_id)
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(mode=0o700, parents=True)
        paths = {}
        for spec in specs:
            target = directory / check_input_name(spec.name)
            os.link(self.path_of(spec.sha256), target)
            paths[spec.name] = target
        return paths

    def _hold(self, job_id: str, digests: Iterable[str]) -> None:
        self._jobs.setdefault(job_id, set()).update(digests)

    def drop_job(self, job_id: str) -> None:
        """Remove a job's directory of links; its inputs are no longer in use (they stay
        cached, and the cache shrinks to its bound if they held it above)."""
        shutil.rmtree(self.root / "jobs" / check_input_name(job_id), ignore_errors=True)
        if self._jobs.pop(job_id, None):
            self._evict()
