"""The content-addressed object store: ``<root>/<sha[:2]>/<sha>`` (DESIGN.md section 5).

``root`` is conventionally ``<state_dir>/objects``. Promises:

- Keys are exactly 64 lowercase hex characters; anything else (uppercase, short, ``../``) is
  refused with :class:`~hypertrain.protocol.errors.Malformed` naming the key, before any I/O.
- :meth:`ObjectStore.put_stream` writes to a temp file under ``<root>/tmp/``, hashing while it
  writes; it refuses with ``PayloadTooLarge`` as soon as the stream passes ``size_cap`` and with
  ``ContentMismatch`` when the sha256 (or size) differs from the declared one. Only a complete,
  verified, fsynced file is renamed into place (``os.replace``), then the directory is fsynced.
  On any failure or cancellation the temp file is removed and nothing is stored. Putting an
  existing object again is harmless (and replaces a corrupted copy with the verified one).
- A put with ``private=True`` (a hidden scoring trace) writes its file with mode 0600 from the
  first byte on, temp file included, so no other user of the machine can read it; putting it
  again privately replaces a readable copy. :meth:`ObjectStore.make_private` restricts an
  object stored before.
- :meth:`ObjectStore.get` and :meth:`ObjectStore.open_read` verify the content hash: a corrupted
  file is reported as ``CorruptObject`` and its bytes are never returned (``open_read`` hashes
  the whole file before the first chunk is handed out, and again while streaming).
- Temp files left by a crash are removed by :meth:`ObjectStore.open`, which assumes one owning
  process per root (one daemon per state directory). Another process writing into a root it
  does not own (``hypertrain datasets pin`` into a running daemon's store) opens it with
  ``clean_tmp=False``: only the owning process cleans temp files, since another one's may be
  in flight.

The store knows nothing of the database: a higher layer records accepted objects (see
``hypertrain.store.catalog``) after ``put_stream`` returned, so a row never names an object that
is not durable. File I/O runs on the Trio thread; with ``offload_fsync=True`` the fsyncs run in a
worker thread (production, large objects); the default keeps virtual-time tests exact.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import stat
from collections.abc import AsyncIterable, AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import BinaryIO

import attrs
import trio

from hypertrain.protocol.errors import NotFound, PayloadTooLarge
from hypertrain.store.errors import ContentMismatch, CorruptObject
from hypertrain.store.keys import ObjectInfo, check_key

__all__ = [
    "READ_CHUNK_SIZE",
    "ObjectInfo",
    "ObjectReader",
    "ObjectStore",
    "ObjectStoreStatistics",
    "check_key",
    "fsync_dir",
]

READ_CHUNK_SIZE = 1 << 20
"""Bytes per chunk handed out by :class:`ObjectReader` and read while verifying."""

_TMP = "tmp"
_PRIVATE_MODE = 0o600
_PUBLIC_MODE = 0o666  # less the umask, as open() creates files


@attrs.frozen
class ObjectStoreStatistics:
    """Counts since open, for status pages."""

    root: str
    puts: int
    bytes_put: int
    failed_puts: int
    reads: int
    corrupt_found: int
    temp_files_cleaned: int


class ObjectReader:
    """Chunks of one verified object; ``async for chunk in reader``. Re-verifies at the end."""

    def __init__(self, info: ObjectInfo, file: BinaryIO, chunk_size: int, store: ObjectStore):
        self.info = info
        self._file = file
        self._chunk_size = chunk_size
        self._store = store
        self._hasher = hashlib.sha256()
        self._done = False

    def __aiter__(self) -> ObjectReader:
        return self

    async def __anext__(self) -> bytes:
        await trio.lowlevel.checkpoint()
        if self._done:
            raise StopAsyncIteration
        chunk = self._file.read(self._chunk_size)
        if chunk:
            self._hasher.update(chunk)
            return chunk
        self._done = True
        if self._hasher.hexdigest() != self.info.sha256:
            raise self._store._corrupt(self.info.sha256, "changed while being read")
        raise StopAsyncIteration


class ObjectStore:
    """Content-addressed files under one root; build it with :meth:`ObjectStore.open`."""

    def __init__(self, root: Path, *, offload_fsync: bool, temp_files_cleaned: int) -> None:
        self._root = root
        self._tmp = root / _TMP
        self._offload_fsync = offload_fsync
        self._temp_files_cleaned = temp_files_cleaned
        self._puts = 0
        self._bytes_put = 0
        self._failed = 0
        self._reads = 0
        self._corrupt_found = 0

    @classmethod
    def open(
        cls, root: str | Path, *, offload_fsync: bool = False, clean_tmp: bool = True
    ) -> ObjectStore:
        """Create ``root`` (and ``root/tmp``) if needed and, with ``clean_tmp`` (the owning
        process only), remove temp files left by a crash."""
        root = Path(root)
        tmp = root / _TMP
        tmp.mkdir(parents=True, exist_ok=True)
        cleaned = 0
        for leftover in tmp.iterdir() if clean_tmp else ():
            leftover.unlink(missing_ok=True)
            cleaned += 1
        if cleaned:
            fsync_dir(tmp)
        return cls(root, offload_fsync=offload_fsync, temp_files_cleaned=cleaned)

    @property
    def root(self) -> Path:
        """The directory holding the ``<sha[:2]>`` shard folders and ``tmp``."""
        return self._root

    def path_of(self, sha256: str) -> Path:
        """Where the object ``sha256`` lives (or would live); refuses bad keys."""
        key = check_key(sha256)
        return self._root / key[:2] / key

    def exists(self, sha256: str) -> bool:
        """Whether a file for ``sha256`` is in place (one stat; content not verified)."""
        return self.path_of(sha256).is_file()

    def size_of(self, sha256: str) -> int:
        """The size in bytes of the stored object ``sha256``; ``NotFound`` if absent."""
        path = self.path_of(sha256)
        try:
            return path.stat().st_size
        except FileNotFoundError:
            raise NotFound(f"object {sha256} not found") from None

    async def put_stream(
        self,
        chunks: AsyncIterable[bytes],
        *,
        expected_sha256: str | None,
        size_cap: int,
        expected_size: int | None = None,
        private: bool = False,
    ) -> ObjectInfo:
        """Store the bytes of ``chunks`` under their sha256 and return what was stored.

        ``expected_sha256``/``expected_size`` are what the uploader declared (None: not
        declared); ``size_cap`` is the most bytes accepted; ``private`` stores the file with
        mode 0600 (module doc). When the put stops before the end of ``chunks`` (refusal,
        error, cancellation) an async generator given as ``chunks`` is closed (``aclose``) and
        the temp file is removed.
        """
        if expected_sha256 is not None:
            check_key(expected_sha256)
        await trio.lowlevel.checkpoint()
        if expected_size is not None and expected_size > size_cap:
            self._failed += 1
            raise PayloadTooLarge(f"object of {expected_size} bytes is over the cap of {size_cap}")
        temp = _TempFile.create(self._tmp, _PRIVATE_MODE if private else _PUBLIC_MODE)
        iterator = aiter(chunks)
        exhausted = False
        try:
            hasher = hashlib.sha256()
            size = 0
            async for chunk in iterator:
                size += len(chunk)
                if size > size_cap:
                    raise PayloadTooLarge(f"object is over the cap of {size_cap} bytes")
                if expected_size is not None and size > expected_size:
                    raise ContentMismatch(f"object is longer than the declared {expected_size}")
                hasher.update(chunk)
                temp.write(chunk)
                await trio.lowlevel.checkpoint()
            exhausted = True
            digest = hasher.hexdigest()
            if expected_size is not None and size != expected_size:
                raise ContentMismatch(f"object is {size} bytes, declared {expected_size}")
            if expected_sha256 is not None and digest != expected_sha256:
                raise ContentMismatch(f"object has sha256 {digest}, declared {expected_sha256}")
            temp.flush()
            await self._fsync(temp.fileno())
            temp.close()
            shard = self._root / digest[:2]
            new_shard = not shard.is_dir()
            shard.mkdir(exist_ok=True)
            os.replace(temp.path, shard / digest)
        except BaseException:
            self._failed += 1
            temp.discard()
            raise
        finally:
            if not exhausted:
                await _aclose(iterator)
        # The object is in place and complete; make the rename durable even if cancelled now.
        with trio.CancelScope(shield=True):
            await self._fsync_dirs([shard, self._root] if new_shard else [shard])
        self._puts += 1
        self._bytes_put += size
        return ObjectInfo(sha256=digest, size=size)

    async def put_bytes(
        self,
        data: bytes,
        *,
        expected_sha256: str | None = None,
        size_cap: int | None = None,
        private: bool = False,
    ) -> ObjectInfo:
        """:meth:`put_stream` for bytes in memory (cap defaults to ``len(data)``)."""

        async def one_chunk() -> AsyncIterator[bytes]:
            yield data

        return await self.put_stream(
            one_chunk(),
            expected_sha256=expected_sha256,
            size_cap=len(data) if size_cap is None else size_cap,
            private=private,
        )

    def make_private(self, sha256: str) -> None:
        """Restrict the stored file of ``sha256`` to mode 0600 (``NotFound`` if absent)."""
        path = self.path_of(sha256)
        try:
            mode = stat.S_IMODE(path.stat().st_mode)
            if mode != _PRIVATE_MODE:
                path.chmod(_PRIVATE_MODE)
        except FileNotFoundError:
            raise NotFound(f"object {sha256} not found") from None

    async def get(self, sha256: str) -> bytes:
        """The verified content of ``sha256``: ``NotFound`` if absent, ``CorruptObject`` if bad."""
        path = self.path_of(sha256)
        await trio.lowlevel.checkpoint()
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise NotFound(f"object {sha256} not found") from None
        if hashlib.sha256(data).hexdigest() != sha256:
            raise self._corrupt(sha256, "does not hash to its key")
        self._reads += 1
        return data

    @asynccontextmanager
    async def open_read(
        self, sha256: str, *, chunk_size: int = READ_CHUNK_SIZE
    ) -> AsyncIterator[ObjectReader]:
        """Open ``sha256`` for streaming; the whole file is verified before the first chunk."""
        path = self.path_of(sha256)
        try:
            file = _open_for_reading(path)
        except FileNotFoundError:
            raise NotFound(f"object {sha256} not found") from None
        try:
            hasher = hashlib.sha256()
            size = 0
            while chunk := file.read(chunk_size):
                hasher.update(chunk)
                size += len(chunk)
                await trio.lowlevel.checkpoint()
            if hasher.hexdigest() != sha256:
                raise self._corrupt(sha256, "does not hash to its key")
            file.seek(0)
            self._reads += 1
            yield ObjectReader(ObjectInfo(sha256, size), file, chunk_size, self)
        finally:
            file.close()

    def statistics(self) -> ObjectStoreStatistics:
        """Counts since open."""
        return ObjectStoreStatistics(
            root=str(self._root),
            puts=self._puts,
            bytes_put=self._bytes_put,
            failed_puts=self._failed,
            reads=self._reads,
            corrupt_found=self._corrupt_found,
            temp_files_cleaned=self._temp_files_cleaned,
        )

    def _corrupt(self, sha256: str, what: str) -> CorruptObject:
        self._corrupt_found += 1
        return CorruptObject(f"object {sha256} at {self.path_of(sha256)} {what}")

    async def _fsync(self, fd: int) -> None:
        if self._offload_fsync:
            await trio.to_thread.run_sync(os.fsync, fd)
        else:
            os.fsync(fd)

    async def _fsync_dirs(self, dirs: list[Path]) -> None:
        for directory in dirs:
            if self._offload_fsync:
                await trio.to_thread.run_sync(fsync_dir, directory)
            else:
                fsync_dir(directory)


@attrs.define
class _TempFile:
    """A temp file being filled; ``discard`` closes and removes it (safe to call twice)."""

    path: Path
    file: BinaryIO

    @classmethod
    def create(cls, directory: Path, mode: int) -> _TempFile:
        path = directory / f"{secrets.token_hex(16)}.part"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
        try:
            return cls(path, os.fdopen(fd, "wb"))
        except BaseException:
            os.close(fd)
            raise

    def write(self, chunk: bytes) -> None:
        self.file.write(chunk)

    def flush(self) -> None:
        self.file.flush()

    def fileno(self) -> int:
        return self.file.fileno()

    def close(self) -> None:
        self.file.close()

    def discard(self) -> None:
        self.file.close()
        self.path.unlink(missing_ok=True)


async def _aclose(iterator: AsyncIterator[bytes]) -> None:
    """Close an abandoned async generator now rather than leaving it to the GC."""
    aclose = getattr(iterator, "aclose", None)
    if aclose is not None:
        await aclose()


def _open_for_reading(path: Path) -> BinaryIO:
    return path.open("rb")


def fsync_dir(directory: Path) -> None:
    """Make the entries of ``directory`` (creations, renames, removals) durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
