"""Byte-tokenized u16 datasets with Merkle commitments (spec/protocol.md sections 10 and 2.5).

``hypertrain datasets build`` turns text files (by default the running Python's standard library)
into shards of ``u16[seq_len+1]`` samples with a ``manifest.json`` committing to them;
``verify`` re-checks a build, ``pin`` copies it into a content-addressed object store and prints
the RunManifest ``dataset`` fragment, and :class:`Dataset` serves samples and Merkle proofs to
the trainer. Formats: :mod:`~hypertrain.datasets.tokenizer` (ids),
:mod:`~hypertrain.datasets.packing` (samples, split), :mod:`~hypertrain.datasets.shards` (files,
roots), :mod:`~hypertrain.datasets.manifest` (directory layout, records). docs/datasets.md is the
user guide.
"""

from hypertrain.datasets.build import (
    DEFAULT_HOLDOUT_FRAC,
    DEFAULT_MAX_BYTES,
    DEFAULT_SAMPLES_PER_SHARD,
    BuildOptions,
    build,
)
from hypertrain.datasets.errors import DatasetError
from hypertrain.datasets.manifest import (
    SAMPLE_FORMAT,
    DatasetManifest,
    HoldoutRecord,
)
from hypertrain.datasets.packing import pack, split
from hypertrain.datasets.pin import PinResult, pin
from hypertrain.datasets.reader import Dataset, sample_bytes, verify_sample
from hypertrain.datasets.sources import SourceRoot, collect, stdlib_sources
from hypertrain.datasets.tokenizer import (
    BOS,
    EOS,
    PAD,
    TOKENIZER_NAME,
    TOKENIZER_SHA256,
    VOCAB,
    decode,
    encode,
    encode_docs,
)
from hypertrain.datasets.verify import VerifyReport, verify

__all__ = [
    "BOS",
    "DEFAULT_HOLDOUT_FRAC",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_SAMPLES_PER_SHARD",
    "EOS",
    "PAD",
    "SAMPLE_FORMAT",
    "TOKENIZER_NAME",
    "TOKENIZER_SHA256",
    "VOCAB",
    "BuildOptions",
    "Dataset",
    "DatasetError",
    "DatasetManifest",
    "HoldoutRecord",
    "PinResult",
    "SourceRoot",
    "VerifyReport",
    "build",
    "collect",
    "decode",
    "encode",
    "encode_docs",
    "pack",
    "pin",
    "sample_bytes",
    "split",
    "stdlib_sources",
    "verify",
    "verify_sample",
]
