"""The files of a built dataset directory and the ``manifest.json`` / ``holdout.json`` records.

A build directory holds::

    manifest.json          public record (below); pinned with the train shards
    shard-{i:05d}.u16      train shards: raw little-endian uint16, shape (samples_per_shard,
                           seq_len+1), every shard full
    holdout.json           private (mode 0600): the holdout's root and shard digests
    holdout-{i:05d}.u16    private (0600): holdout shards, same layout, only the last may be short
    holdout.salt           private (0600): the 32 raw salt bytes of the holdout commitment

``manifest.json`` is JSON with sorted keys and indent 2 (trailing newline); its fields are those
of :class:`DatasetManifest`: ``seq_len, samples_per_shard, n_shards, n_samples`` (= n_shards *
samples_per_shard), ``depth`` (= bitlen(n_samples-1)), ``merkle_root`` (Merkle over the raw LE
bytes of every train sample in global order), ``shard_sha256s``, ``shard_sha256_root`` (Merkle
over the 32-byte shard digests), ``tokenizer {name, sha256}``, ``sample_format`` (``"u16[seq_len+1]
token ids"``), ``shard_uri_template`` (``"{shard_sha256}"``), ``holdout {n_samples, commit}``,
``sources [{path, bytes}]`` and ``extra`` (build facts: packing, split, dropped samples).

The holdout's ``merkle_root`` and ``shard_sha256s`` are deliberately **not** in manifest.json:
``commit = sha256_hex(holdout_merkle_root || salt)`` is meant to hide the holdout until the owner
reveals it, and manifest.json is published, so the root lives in the private ``holdout.json``
(:class:`HoldoutRecord`) with the salt. A reveal publishes holdout.json, holdout.salt and the
holdout shards; anyone then recomputes the commit.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final, Literal, TypeVar

from attrs import field, frozen

from hypertrain.datasets.errors import DatasetError
from hypertrain.datasets.tokenizer import TOKENIZER_NAME, TOKENIZER_SHA256
from hypertrain.protocol.converter import structure, unstructure
from hypertrain.protocol.errors import SchemaError
from hypertrain.protocol.manifest import DatasetSpec
from hypertrain.protocol.validators import hex64, instance_of, list_of, pos_int, text, u_int

__all__ = [
    "HOLDOUT_FILE",
    "HOLDOUT_PREFIX",
    "MANIFEST_FILE",
    "SALT_FILE",
    "SAMPLE_FORMAT",
    "SHARD_URI_TEMPLATE",
    "TRAIN_PREFIX",
    "DatasetManifest",
    "HoldoutPublic",
    "HoldoutRecord",
    "SourceFile",
    "TokenizerPin",
    "depth_of",
    "dump_json",
    "load_record",
]

MANIFEST_FILE: Final = "manifest.json"
HOLDOUT_FILE: Final = "holdout.json"
SALT_FILE: Final = "holdout.salt"
TRAIN_PREFIX: Final = "shard"
HOLDOUT_PREFIX: Final = "holdout"
SAMPLE_FORMAT: Final = "u16[seq_len+1] token ids"
SHARD_URI_TEMPLATE: Final = "{shard_sha256}"
_MANY: Final = 1 << 24


def depth_of(n_samples: int) -> int:
    """``bitlen(n_samples - 1)``: 0 for one sample, 20 for 2^20."""
    return (n_samples - 1).bit_length()


@frozen
class SourceFile:
    """One document used: its display path and the number of its bytes used."""

    path: str = field(validator=text(4096))
    bytes: int = field(validator=u_int)


@frozen
class TokenizerPin:
    name: str = field(validator=text(128))
    sha256: str = field(validator=hex64)


@frozen
class HoldoutPublic:
    """The public face of the holdout: how many samples, and the commitment to their root."""

    n_samples: int = field(validator=pos_int)
    commit: str = field(validator=hex64)


@frozen
class DatasetManifest:
    """``manifest.json`` (see the module docstring for each field's meaning)."""

    seq_len: int = field(validator=pos_int)
    samples_per_shard: int = field(validator=pos_int)
    n_shards: int = field(validator=pos_int)
    n_samples: int = field(validator=pos_int)
    depth: int = field(validator=u_int)
    merkle_root: str = field(validator=hex64)
    shard_sha256s: tuple[str, ...] = field(validator=list_of(hex64, min_len=1, max_len=_MANY))
    shard_sha256_root: str = field(validator=hex64)
    tokenizer: TokenizerPin = field(validator=instance_of(TokenizerPin))
    sample_format: Literal["u16[seq_len+1] token ids"] = field(validator=text(64))
    shard_uri_template: str = field(validator=text(512))
    holdout: HoldoutPublic = field(validator=instance_of(HoldoutPublic))
    sources: tuple[SourceFile, ...] = field(
        validator=list_of(instance_of(SourceFile), max_len=_MANY)
    )
    extra: dict[str, Any] = field(validator=instance_of(dict))

    def check_counts(self) -> None:
        """DatasetError naming the first count, format or pin that contradicts the others."""
        expected = self.n_shards * self.samples_per_shard
        problems = [
            (len(self.shard_sha256s) != self.n_shards, "n_shards", len(self.shard_sha256s)),
            (self.n_samples != expected, "n_samples", expected),
            (self.depth != depth_of(self.n_samples), "depth", depth_of(self.n_samples)),
        ]
        for bad, name, want in problems:
            if bad:
                got = getattr(self, name)
                raise DatasetError(f"{MANIFEST_FILE}: {name} is {got}, the shards give {want}")
        if (self.tokenizer.name, self.tokenizer.sha256) != (TOKENIZER_NAME, TOKENIZER_SHA256):
            raise DatasetError(f"{MANIFEST_FILE}: tokenizer is not the pinned {TOKENIZER_NAME}")
        if self.sample_format != SAMPLE_FORMAT or self.shard_uri_template != SHARD_URI_TEMPLATE:
            raise DatasetError(f"{MANIFEST_FILE}: sample_format or shard_uri_template unknown")

    def fragment(self) -> dict[str, Any]:
        """The RunManifest ``dataset`` object of this build (a valid :class:`DatasetSpec`)."""
        return unstructure(self.dataset_spec())

    def dataset_spec(self) -> DatasetSpec:
        """This build's commitment as the RunManifest ``dataset`` sub-object."""
        return DatasetSpec(
            merkle_root=self.merkle_root,
            depth=self.depth,
            n_samples=self.n_samples,
            sample_format=SAMPLE_FORMAT,
            shard_uri_template=self.shard_uri_template,
            shard_sha256_root=self.shard_sha256_root,
            holdout_commit=self.holdout.commit,
        )


@frozen
class HoldoutRecord:
    """``holdout.json`` (private until reveal): the holdout shard set and its commitment.

    ``n_samples`` samples in ``n_shards`` shards of ``samples_per_shard`` (the last may be
    short); ``merkle_root`` over their raw LE bytes in order; ``commit`` =
    ``sha256_hex(bytes.fromhex(merkle_root) || salt)`` with the salt of ``holdout.salt``.
    """

    seq_len: int = field(validator=pos_int)
    samples_per_shard: int = field(validator=pos_int)
    n_shards: int = field(validator=pos_int)
    n_samples: int = field(validator=pos_int)
    merkle_root: str = field(validator=hex64)
    shard_sha256s: tuple[str, ...] = field(validator=list_of(hex64, min_len=1, max_len=_MANY))
    shard_sha256_root: str = field(validator=hex64)
    commit: str = field(validator=hex64)

    def check_counts(self) -> None:
        """DatasetError unless ``n_shards`` shards of ``samples_per_shard`` hold ``n_samples``."""
        want = -(-self.n_samples // self.samples_per_shard)
        if self.n_shards != want or len(self.shard_sha256s) != want:
            raise DatasetError(f"{HOLDOUT_FILE}: n_shards/shard_sha256s do not fit n_samples")


_R = TypeVar("_R", DatasetManifest, HoldoutRecord)


def dump_json(record: DatasetManifest | HoldoutRecord) -> bytes:
    """The file bytes of a record: JSON, sorted keys, indent 2, trailing newline."""
    return (json.dumps(unstructure(record), sort_keys=True, indent=2) + "\n").encode("utf-8")


def load_record(cls: type[_R], path: Path) -> _R:
    """Parse and validate ``path`` as ``cls``; DatasetError naming the file when it fails."""
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError as e:
        raise DatasetError(f"{path.name}: missing") from e
    except (OSError, ValueError) as e:
        raise DatasetError(f"{path.name}: not readable JSON ({e})") from e
    try:
        return structure(cls, data)
    except SchemaError as e:
        raise DatasetError(f"{path.name}: {e.detail}") from e
