"""``verify``: re-check a built dataset directory from its files alone.

Checks, in order, stopping at the first failure (a DatasetError naming the file or root):

1. ``manifest.json`` parses and its counts agree (``n_shards``, ``n_samples = n_shards *
   samples_per_shard``, ``depth``, tokenizer pin, sample format);
2. ``shard_sha256_root`` is the Merkle root of ``shard_sha256s``;
3. every train shard exists, has the right size and hashes to its ``shard_sha256s`` entry;
4. every id is below 259, and the Merkle root over all samples is ``merkle_root``;
5. when ``holdout.json`` is present (the owner's copy, or after a reveal): the same for the
   holdout shards, its ``n_samples`` equals ``manifest.holdout.n_samples``, and when
   ``holdout.salt`` is present too, ``sha256_hex(root || salt)`` equals both commits.

A public copy (manifest and train shards only) verifies with ``holdout = "absent"``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import attrs

from hypertrain.datasets.errors import DatasetError
from hypertrain.datasets.manifest import (
    HOLDOUT_FILE,
    MANIFEST_FILE,
    SALT_FILE,
    DatasetManifest,
    HoldoutRecord,
    load_record,
)
from hypertrain.datasets.reader import check_shard_root, load_split
from hypertrain.datasets.shards import ShardSet
from hypertrain.protocol.errors import Malformed
from hypertrain.protocol.hashes import holdout_commit

__all__ = ["HoldoutState", "VerifyReport", "verify"]

HoldoutState = Literal["absent", "root", "commit"]
"""``absent``: no holdout.json; ``root``: shards and root checked, no salt; ``commit``: also the
commitment recomputed from the salt."""


@attrs.frozen
class VerifyReport:
    """What a successful :func:`verify` checked."""

    n_samples: int
    n_shards: int
    merkle_root: str
    holdout: HoldoutState


def _check_set(shards: ShardSet, root: str, shard_root: str, file_name: str) -> None:
    check_shard_root(shards, shard_root, file_name)
    shards.check_files()
    maps = shards.maps()
    shards.check_tokens(maps)
    actual = shards.root(maps)
    if actual != root:
        raise DatasetError(f"{file_name}: merkle_root {root} != recomputed {actual}")


def _check_holdout(directory: Path, manifest: DatasetManifest) -> HoldoutState:
    if not (directory / HOLDOUT_FILE).exists():
        return "absent"
    shards, root, shard_root = load_split(directory, "holdout")
    if shards.n_samples != manifest.holdout.n_samples or shards.seq_len != manifest.seq_len:
        raise DatasetError(f"{HOLDOUT_FILE}: n_samples or seq_len differs from {MANIFEST_FILE}")
    _check_set(shards, root, shard_root, HOLDOUT_FILE)
    record = load_record(HoldoutRecord, directory / HOLDOUT_FILE)
    try:
        salt = (directory / SALT_FILE).read_bytes()
    except FileNotFoundError:
        return "root"
    try:
        commit = holdout_commit(bytes.fromhex(root), salt)
    except Malformed as e:
        raise DatasetError(f"{SALT_FILE}: {e.detail}") from e
    for name, declared in ((HOLDOUT_FILE, record.commit), (MANIFEST_FILE, manifest.holdout.commit)):
        if commit != declared:
            raise DatasetError(f"{name}: holdout commit {declared} != recomputed {commit}")
    return "commit"


def verify(directory: str | Path) -> VerifyReport:
    """Run every check of the module docstring on ``directory``; DatasetError on the first miss."""
    directory = Path(directory)
    shards, root, shard_root = load_split(directory, "train")
    _check_set(shards, root, shard_root, MANIFEST_FILE)
    manifest = load_record(DatasetManifest, directory / MANIFEST_FILE)
    holdout = _check_holdout(directory, manifest)
    return VerifyReport(
        n_samples=manifest.n_samples,
        n_shards=manifest.n_shards,
        merkle_root=manifest.merkle_root,
        holdout=holdout,
    )
