"""The node's input cache: content addressed, re-hashed before every use.

A job's inputs are :class:`~hypertrain.compute.wire.InputFile` records ``{name, sha256,
size}`` (names and digests already checked when the offer was decoded). Each is kept once under
``<node dir>/cache/<sha256>`` whatever its name (so a hostile name can never choose a path),
and :meth:`InputCache.ensure` returns a path only after hashing the file's bytes again: a cached
file edited or corrupted on disk is deleted and fetched anew, never trusted because a stamp says
so (spec/compute-network.md scenario 33). An input declared larger than
:data:`MAX_INPUT_BYTES` is refused before anything is fetched. A fetch streams into a temporary
file with the declared size as a hard cap; a body of another size or hash is discarded and
reported (:class:`~hypertrain.node.errors.InputMismatch`), nothing is renamed into place. The
job's scorer gets a private view (:meth:`InputCache.link_job`): a fresh directory of hard links
named by the input names, which the names check
(:func:`~hypertrain.scoring.inputs.check_input_name`) keeps inside it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import AsyncGenerator, Callable, Sequence
from contextlib import aclosing
from pathlib import Path
from typing import Final

import attrs
import trio

from hypertrain.compute.wire import InputFile
from hypertrain.node.errors import InputMismatch
from hypertrain.scoring.inputs import check_input_name

__all__ = ["CHUNK", "MAX_INPUT_BYTES", "Fetch", "InputCache"]

CHUNK: Final = 1 << 20
MAX_INPUT_BYTES: Final = 1 << 32
"""The largest input a node stores (4 GiB)."""


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
    """The cache under ``root`` (module doc)."""

    root: Path

    def path_of(self, sha256: str) -> Path:
        return self.root / "cache" / sha256

    async def _verified(self, spec: InputFile) -> Path | None:
        path = self.path_of(spec.sha256)
        if not path.is_file():
            return None
        found = await _hash_file(path)
        if found == (spec.sha256, spec.size):
            return path
        path.unlink(missing_ok=True)
        return None

    async def ensure(self, spec: InputFile, fetch: Fetch) -> Path:
        """The verified local copy of ``spec``, fetched when missing or damaged."""
        if spec.size > MAX_INPUT_BYTES:
            raise InputMismatch(
                f"input {spec.name}: {spec.size} bytes, over this node's {MAX_INPUT_BYTES}"
            )
        cached = await self._verified(spec)
        if cached is not None:
            return cached
        directory = self.root / "cache"
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = directory / f".{spec.sha256}.{os.getpid()}.tmp"
        digest = hashlib.sha256()
        size = 0
        try:
            with tmp.open("wb") as out:
                async with aclosing(fetch(spec)) as chunks:
                    async for chunk in chunks:
                        size += len(chunk)
                        if size > spec.size:
                            raise InputMismatch(f"input {spec.name}: longer than {spec.size} bytes")
                        digest.update(chunk)
                        out.write(chunk)
            if size != spec.size:
                raise InputMismatch(f"input {spec.name}: {size} bytes, declared {spec.size}")
            if digest.hexdigest() != spec.sha256:
                raise InputMismatch(f"input {spec.name}: did not match its sha256")
            os.replace(tmp, self.path_of(spec.sha256))
        finally:
            tmp.unlink(missing_ok=True)
        return self.path_of(spec.sha256)

    def link_job(self, job_id: str, specs: Sequence[InputFile]) -> dict[str, Path]:
        """A fresh ``jobs/<job_id>`` directory of hard links named by the input names."""
        directory = self.root / "jobs" / check_input_name(job_id)
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(mode=0o700, parents=True)
        paths = {}
        for spec in specs:
            target = directory / check_input_name(spec.name)
            os.link(self.path_of(spec.sha256), target)
            paths[spec.name] = target
        return paths

    def drop_job(self, job_id: str) -> None:
        """Remove a job's directory of links (the cached files stay)."""
        shutil.rmtree(self.root / "jobs" / check_input_name(job_id), ignore_errors=True)
