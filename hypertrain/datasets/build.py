"""``build``: text files in, a verified-by-construction dataset directory out.

Steps: collect the documents (:mod:`hypertrain.datasets.sources`), encode them with
``ht-byte-259`` each followed by EOS, pack into non-overlapping ``u16[seq_len+1]`` samples and
split off the holdout tail (:mod:`hypertrain.datasets.packing`), then write into a new directory
(layout in :mod:`hypertrain.datasets.manifest`): the train shards, the holdout shards, the salt,
``holdout.json`` and last ``manifest.json`` (so a directory without a manifest is an unfinished
build). Private files are created with mode 0600.

The salt is 32 bytes from :func:`secrets.token_bytes` unless given (``--salt-file``); everything
else is a function of the inputs, so two builds of the same sources with the same options and salt
give byte-identical directories, and without a given salt they differ only in ``holdout.salt`` and
the commitment (``holdout.commit`` of manifest.json and ``commit`` of holdout.json).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import attrs

from hypertrain.datasets.errors import DatasetError
from hypertrain.datasets.manifest import (
    HOLDOUT_FILE,
    HOLDOUT_PREFIX,
    MANIFEST_FILE,
    SALT_FILE,
    SAMPLE_FORMAT,
    SHARD_URI_TEMPLATE,
    TRAIN_PREFIX,
    DatasetManifest,
    HoldoutPublic,
    HoldoutRecord,
    SourceFile,
    TokenizerPin,
    depth_of,
    dump_json,
)
from hypertrain.datasets.packing import pack, split
from hypertrain.datasets.shards import ShardSet, digests_root, write_shards
from hypertrain.datasets.sources import Collected, SourceRoot, collect
from hypertrain.datasets.tokenizer import TOKENIZER_NAME, TOKENIZER_SHA256, Tokens, encode_docs
from hypertrain.protocol.hashes import MIN_SALT_BYTES, holdout_commit

__all__ = [
    "DEFAULT_HOLDOUT_FRAC",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_SAMPLES_PER_SHARD",
    "SALT_BYTES",
    "BuildOptions",
    "build",
]

DEFAULT_MAX_BYTES = 8 << 20
DEFAULT_SAMPLES_PER_SHARD = 1024
DEFAULT_HOLDOUT_FRAC = 0.05
SALT_BYTES = 32
_PRIVATE = 0o600


@attrs.frozen
class BuildOptions:
    """What to build: ``sources`` in order, cut at ``max_bytes``, into ``out`` (new or empty).

    ``salt`` None draws 32 random bytes; a given salt must be at least 16 bytes.
    """

    sources: tuple[SourceRoot, ...]
    out: Path
    seq_len: int
    max_bytes: int = DEFAULT_MAX_BYTES
    samples_per_shard: int = DEFAULT_SAMPLES_PER_SHARD
    holdout_frac: float = DEFAULT_HOLDOUT_FRAC
    salt: bytes | None = None


def _write_new(path: Path, data: bytes, mode: int = _PRIVATE) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _check_out(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(f"{out}: exists and is not an empty directory")


def _sources(collected: Collected) -> tuple[SourceFile, ...]:
    return tuple(SourceFile(path=d.name, bytes=len(d.data)) for d in collected.documents)


def build(options: BuildOptions) -> DatasetManifest:
    """Build the dataset ``options`` describe and return its manifest (also written to disk).

    Raises DatasetError when the corpus gives fewer train samples than one shard (nothing is
    written then) and FileExistsError when ``out`` is a non-empty directory or a file.
    """
    salt = secrets.token_bytes(SALT_BYTES) if options.salt is None else options.salt
    if len(salt) < MIN_SALT_BYTES:
        raise DatasetError(f"the holdout salt must be at least {MIN_SALT_BYTES} bytes")
    _check_out(options.out)
    collected = collect(options.sources, options.max_bytes)
    if not collected.documents:
        raise DatasetError("no text found in the sources")
    samples = pack(encode_docs(d.data for d in collected.documents), options.seq_len)
    parts = split(
        samples, holdout_frac=options.holdout_frac, samples_per_shard=options.samples_per_shard
    )
    _check_out(options.out)
    options.out.mkdir(parents=True, exist_ok=True)
    per_shard = options.samples_per_shard
    train = _write_set(options, TRAIN_PREFIX, parts.train, 0o644)
    holdout = _write_set(options, HOLDOUT_PREFIX, parts.holdout, _PRIVATE)
    holdout_root = holdout.root(holdout.maps())
    commit = holdout_commit(bytes.fromhex(holdout_root), salt)
    _write_new(options.out / SALT_FILE, salt)
    record = HoldoutRecord(
        seq_len=options.seq_len,
        samples_per_shard=per_shard,
        n_shards=len(holdout.sha256s),
        n_samples=holdout.n_samples,
        merkle_root=holdout_root,
        shard_sha256s=holdout.sha256s,
        shard_sha256_root=digests_root(holdout.sha256s),
        commit=commit,
    )
    _write_new(options.out / HOLDOUT_FILE, dump_json(record))
    manifest = DatasetManifest(
        seq_len=options.seq_len,
        samples_per_shard=per_shard,
        n_shards=len(train.sha256s),
        n_samples=train.n_samples,
        depth=depth_of(train.n_samples),
        merkle_root=train.root(train.maps()),
        shard_sha256s=train.sha256s,
        shard_sha256_root=digests_root(train.sha256s),
        tokenizer=TokenizerPin(name=TOKENIZER_NAME, sha256=TOKENIZER_SHA256),
        sample_format=SAMPLE_FORMAT,
        shard_uri_template=SHARD_URI_TEMPLATE,
        holdout=HoldoutPublic(n_samples=holdout.n_samples, commit=commit),
        sources=_sources(collected),
        extra=_extra(options, collected, len(samples), parts.dropped_tail_samples),
    )
    _write_new(options.out / MANIFEST_FILE, dump_json(manifest), 0o644)
    return manifest


def _write_set(options: BuildOptions, prefix: str, samples: Tokens, mode: int) -> ShardSet:
    sha256s = write_shards(options.out, prefix, samples, options.samples_per_shard, mode=mode)
    return ShardSet(
        directory=options.out,
        prefix=prefix,
        seq_len=options.seq_len,
        samples_per_shard=options.samples_per_shard,
        n_samples=len(samples),
        sha256s=sha256s,
    )


def _extra(
    options: BuildOptions, collected: Collected, packed: int, dropped: int
) -> dict[str, object]:
    return {
        "format": "ht-datasets-u16-v1",
        "packing": "docs + EOS(257), non-overlapping seq_len+1 windows, trailing partial dropped",
        "holdout_split": f"last ceil({options.holdout_frac!r} * packed_samples) samples",
        "holdout_frac": repr(options.holdout_frac),
        "max_bytes": options.max_bytes,
        "source_bytes": collected.n_bytes,
        "source_files": len(collected.documents),
        "skipped_files": collected.skipped_files,
        "packed_samples": packed,
        "dropped_tail_samples": dropped,
    }
