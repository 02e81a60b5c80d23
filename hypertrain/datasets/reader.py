"""The trainer's reader: :class:`Dataset` serves samples by global index with Merkle proofs.

``Dataset.open(dir)`` reads ``manifest.json`` (or, with ``split="holdout"``, the private
``holdout.json``), checks its counts and, unless ``verify=False``, re-hashes every shard against
its sha256 and the shard root before returning (one sequential read of the data). With
``lazy=True`` (a partial copy, e.g. the miner's cache of the shards it needs) only the shard root
is checked at open; each shard is re-hashed against the manifest's ``shard_sha256s`` on its first
use, so only the shards actually read must exist. The shards are memory-mapped read-only;
:meth:`Dataset.sample` and :meth:`Dataset.samples` copy rows out as
``uint16`` arrays of ``seq_len + 1`` ids in native order.

The sample Merkle tree is built lazily, on the first :meth:`Dataset.proof` (or
:meth:`Dataset.check_root`): every sample is hashed once, the root compared with the manifest's
``merkle_root`` (DatasetError if it differs) and all levels kept (``2 * n_samples`` digests) so
later proofs are cheap. A proof verifies with :func:`verify_sample` against the manifest's root.
Files changed on disk after ``open`` are not noticed (the maps read whatever is there).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
import numpy.typing as npt

from hypertrain.datasets.errors import DatasetError
from hypertrain.datasets.manifest import (
    HOLDOUT_FILE,
    HOLDOUT_PREFIX,
    MANIFEST_FILE,
    TRAIN_PREFIX,
    DatasetManifest,
    HoldoutRecord,
    load_record,
)
from hypertrain.datasets.shards import ShardSet, digests_root
from hypertrain.datasets.tokenizer import Tokens
from hypertrain.protocol.merkle import MerkleTree, verify_proof

__all__ = ["Dataset", "check_shard_root", "load_split", "sample_bytes", "verify_sample"]

Split = Literal["train", "holdout"]


def sample_bytes(sample: npt.ArrayLike) -> bytes:
    """The Merkle leaf of a sample: its ids as raw little-endian uint16 bytes."""
    return np.asarray(sample).astype("<u2").tobytes()


def verify_sample(
    sample: npt.ArrayLike, index: int, n_samples: int, proof: Sequence[bytes], merkle_root: str
) -> bool:
    """True iff ``proof`` shows ``sample`` is sample ``index`` of ``n_samples`` under the root.

    ``merkle_root`` is the 64-hex-char root of a manifest; never raises on bad input.
    """
    try:
        root = bytes.fromhex(merkle_root)
    except (TypeError, ValueError):
        return False
    return verify_proof(sample_bytes(sample), index, n_samples, proof, root)


def load_split(directory: Path, split: Split) -> tuple[ShardSet, str, str]:
    """The shard set of ``split``, its declared sample root and shard root."""
    if split == "train":
        manifest = load_record(DatasetManifest, directory / MANIFEST_FILE)
        manifest.check_counts()
        shards = ShardSet(
            directory,
            TRAIN_PREFIX,
            manifest.seq_len,
            manifest.samples_per_shard,
            manifest.n_samples,
            manifest.shard_sha256s,
        )
        return shards, manifest.merkle_root, manifest.shard_sha256_root
    record = load_record(HoldoutRecord, directory / HOLDOUT_FILE)
    record.check_counts()
    shards = ShardSet(
        directory,
        HOLDOUT_PREFIX,
        record.seq_len,
        record.samples_per_shard,
        record.n_samples,
        record.shard_sha256s,
    )
    return shards, record.merkle_root, record.shard_sha256_root


def check_shard_root(shards: ShardSet, declared: str, file_name: str) -> None:
    """DatasetError unless the shard digests' Merkle root is ``declared``."""
    actual = digests_root(shards.sha256s)
    if actual != declared:
        raise DatasetError(f"{file_name}: shard_sha256_root {declared} != recomputed {actual}")


class Dataset:
    """Memory-mapped samples of one split of a built dataset directory; use :meth:`open`."""

    def __init__(self, shards: ShardSet, merkle_root: str, *, lazy: bool = False) -> None:
        self._shards = shards
        self._merkle_root = merkle_root
        self._maps: list[Tokens | None] = (
            [None] * len(shards.sha256s) if lazy else list(shards.maps())
        )
        self._tree: MerkleTree | None = None

    @classmethod
    def open(
        cls,
        directory: str | Path,
        *,
        split: Split = "train",
        verify: bool = True,
        lazy: bool = False,
    ) -> Dataset:
        """Open ``split`` of ``directory``; ``verify`` re-hashes the shards first, ``lazy``
        re-hashes each shard on its first use instead (see module)."""
        directory = Path(directory)
        shards, root, shard_root = load_split(directory, split)
        name = MANIFEST_FILE if split == "train" else HOLDOUT_FILE
        if verify or lazy:
            check_shard_root(shards, shard_root, name)
        if verify and not lazy:
            shards.check_files()
        return cls(shards, root, lazy=lazy)

    def _map(self, shard: int) -> Tokens:
        """The map of ``shard``; a lazy reader verifies and maps it on first use."""
        mapped = self._maps[shard]
        if mapped is None:
            self._shards.check_file(shard)
            mapped = self._maps[shard] = self._shards.map(shard)
        return mapped

    @property
    def seq_len(self) -> int:
        return self._shards.seq_len

    @property
    def n_samples(self) -> int:
        return self._shards.n_samples

    @property
    def merkle_root(self) -> str:
        """The declared sample root (64 hex chars)."""
        return self._merkle_root

    def __len__(self) -> int:
        return self.n_samples

    def _locate(self, index: int) -> tuple[int, int]:
        if isinstance(index, bool) or not 0 <= int(index) < self.n_samples:
            raise IndexError(f"sample {index} is outside [0, {self.n_samples})")
        return divmod(int(index), self._shards.samples_per_shard)

    def sample(self, index: int) -> Tokens:
        """Sample ``index`` (global order): a new ``uint16`` array of ``seq_len + 1`` ids."""
        shard, row = self._locate(index)
        return np.array(self._map(shard)[row], dtype=np.uint16)

    def samples(self, ids: Sequence[int] | npt.NDArray[np.integer]) -> Tokens:
        """The samples ``ids`` in the order given: ``uint16`` array ``(len(ids), seq_len+1)``."""
        out = np.empty((len(ids), self.seq_len + 1), dtype=np.uint16)
        for k, index in enumerate(ids):
            shard, row = self._locate(int(index))
            out[k] = self._map(shard)[row]
        return out

    def check_root(self) -> MerkleTree:
        """Build (once) the sample tree; DatasetError if its root is not the declared one."""
        if self._tree is None:
            tree = self._shards.tree([self._map(i) for i in range(len(self._maps))])
            if tree.root.hex() != self._merkle_root:
                raise DatasetError(
                    f"merkle_root {self._merkle_root} != recomputed {tree.root.hex()}"
                )
            self._tree = tree
        return self._tree

    def proof(self, index: int) -> list[bytes]:
        """The Merkle proof (32-byte siblings, bottom-up) of sample ``index``."""
        self._locate(index)
        return self.check_root().proof(int(index))
