"""Shard files and the hashes over them.

A shard ``<prefix>-{i:05d}.u16`` holds consecutive samples as raw little-endian uint16, row after
row, shape ``(rows, seq_len+1)``; its digest is ``sha256`` of the file bytes. For a shard set of
``n_samples`` samples with ``samples_per_shard`` per shard, shard ``i`` holds global samples
``[i*samples_per_shard, ...)`` and only the last shard may be short (train sets are always full).

Roots (spec/protocol.md section 2.5): the sample ``merkle_root`` has one leaf per sample, the
sample's ``2*(seq_len+1)`` raw LE bytes, in global order; ``shard_sha256_root`` has one leaf per
shard, its 32-byte digest. Both use :mod:`hypertrain.protocol.merkle` (odd node promoted).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import overload

import attrs
import numpy as np

from hypertrain.datasets.errors import DatasetError
from hypertrain.datasets.tokenizer import VOCAB, Tokens
from hypertrain.protocol.merkle import MerkleTree, merkle_root

__all__ = ["SampleRows", "ShardSet", "digests_root", "shard_name", "write_shards"]

_LE_U16 = np.dtype("<u2")
_CHUNK = 1 << 20


def shard_name(prefix: str, index: int) -> str:
    """``f"{prefix}-{index:05d}.u16"``."""
    return f"{prefix}-{index:05d}.u16"


def digests_root(sha256s: Sequence[str]) -> str:
    """``shard_sha256_root``: Merkle root (hex) over the raw 32-byte shard digests."""
    return merkle_root([bytes.fromhex(d) for d in sha256s]).hex()


def write_shards(
    directory: Path, prefix: str, samples: Tokens, samples_per_shard: int, *, mode: int = 0o644
) -> tuple[str, ...]:
    """Write ``samples`` as shards (exclusive create, file ``mode``); returns their sha256s."""
    digests: list[str] = []
    for i, start in enumerate(range(0, len(samples), samples_per_shard)):
        data = samples[start : start + samples_per_shard].astype(_LE_U16).tobytes()
        fd = os.open(directory / shard_name(prefix, i), os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        digests.append(hashlib.sha256(data).hexdigest())
    return tuple(digests)


class SampleRows(Sequence[bytes]):
    """The samples of 2-d arrays as a lazy sequence of raw LE row bytes (Merkle leaves)."""

    def __init__(self, arrays: Sequence[Tokens]) -> None:
        self._arrays = list(arrays)
        self._starts = np.cumsum([0] + [len(a) for a in self._arrays])

    def __len__(self) -> int:
        return int(self._starts[-1])

    @overload
    def __getitem__(self, index: int) -> bytes: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[bytes]: ...
    def __getitem__(self, index: int | slice) -> bytes | Sequence[bytes]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if not 0 <= index < len(self):
            raise IndexError(index)
        k = int(np.searchsorted(self._starts, index, side="right")) - 1
        row: Tokens = self._arrays[k][index - self._starts[k]]
        return row.astype(_LE_U16).tobytes()

    def __iter__(self) -> Iterator[bytes]:
        for array in self._arrays:
            for row in array:
                yield row.astype(_LE_U16).tobytes()


@attrs.frozen
class ShardSet:
    """The shards of one split as a manifest declares them, under ``directory``."""

    directory: Path
    prefix: str
    seq_len: int
    samples_per_shard: int
    n_samples: int
    sha256s: tuple[str, ...]

    def path(self, index: int) -> Path:
        return self.directory / shard_name(self.prefix, index)

    def rows(self, index: int) -> int:
        """How many samples shard ``index`` holds."""
        return min(self.samples_per_shard, self.n_samples - index * self.samples_per_shard)

    def check_files(self) -> None:
        """Re-hash every shard in order; DatasetError naming the first missing/resized/bad one."""
        for i in range(len(self.sha256s)):
            self.check_file(i)

    def check_file(self, index: int) -> None:
        """Re-hash shard ``index``; DatasetError naming it when missing, resized or bad."""
        expected = self.sha256s[index]
        path = self.path(index)
        size = self.rows(index) * (self.seq_len + 1) * 2
        try:
            actual_size = path.stat().st_size
            if actual_size != size:
                raise DatasetError(f"{path.name}: {actual_size} bytes, expected {size}")
            digest = hashlib.sha256()
            with path.open("rb") as f:
                while chunk := f.read(_CHUNK):
                    digest.update(chunk)
        except FileNotFoundError as e:
            raise DatasetError(f"{path.name}: missing") from e
        except OSError as e:
            raise DatasetError(f"{path.name}: unreadable ({e.strerror})") from e
        if digest.hexdigest() != expected:
            raise DatasetError(f"{path.name}: sha256 {digest.hexdigest()} != manifest {expected}")

    def map(self, index: int) -> Tokens:
        """A read-only memory map of shard ``index``, shape ``(rows(index), seq_len+1)``."""
        shape = (self.rows(index), self.seq_len + 1)
        return np.memmap(self.path(index), dtype=_LE_U16, mode="r", shape=shape)

    def maps(self) -> list[Tokens]:
        """Read-only memory maps of the shards, shape ``(rows(i), seq_len+1)``, LE uint16."""
        return [self.map(i) for i in range(len(self.sha256s))]

    def check_tokens(self, maps: Sequence[Tokens]) -> None:
        """DatasetError naming the first shard holding an id outside the vocabulary."""
        for i, array in enumerate(maps):
            if array.size and int(array.max()) >= VOCAB:
                raise DatasetError(f"{self.path(i).name}: token id >= {VOCAB}")

    def root(self, maps: Sequence[Tokens]) -> str:
        """The sample ``merkle_root`` (hex) of the shards; one level of digests in memory."""
        return merkle_root(SampleRows(maps)).hex()

    def tree(self, maps: Sequence[Tokens]) -> MerkleTree:
        """The sample Merkle tree (leaves: raw LE sample bytes, global order)."""
        return MerkleTree.from_leaves(SampleRows(maps))
