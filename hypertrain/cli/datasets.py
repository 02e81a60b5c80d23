"""``hypertrain datasets``: build, verify and pin byte-tokenized u16 datasets (docs/datasets.md).

``datasets build --seq-len N --out DIR [--source PATH]... [--max-bytes N] [--holdout-frac F]
[--samples-per-shard N] [--salt-file FILE]`` tokenizes text files (default: the running Python's
standard library, never a download) into a new directory and prints one JSON line summarising it.
``datasets verify DIR`` re-hashes every shard and root and prints one ``OK ...`` line.
``datasets pin --data-dir DIR --out-objects DIR`` verifies, stores the train shards and the
manifest as ``<objects>/<sha[:2]>/<sha>`` and prints the RunManifest ``dataset`` fragment as one
JSON line. Formats: :mod:`hypertrain.datasets`.

Exit status: 0 ok; 1 invalid data (a corpus too small for one shard, a shard or root that does
not verify, a bad manifest); 2 usage errors (missing source, existing output, bad options).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypertrain.cli.common import (
    EXIT_INVALID,
    EXIT_OK,
    CliError,
    Subparsers,
    positive_int_arg,
    print_json,
)
from hypertrain.datasets.build import (
    DEFAULT_HOLDOUT_FRAC,
    DEFAULT_MAX_BYTES,
    DEFAULT_SAMPLES_PER_SHARD,
    BuildOptions,
    build,
)
from hypertrain.datasets.errors import DatasetError
from hypertrain.datasets.pin import pin
from hypertrain.datasets.sources import SourceRoot, stdlib_sources
from hypertrain.datasets.verify import verify
from hypertrain.protocol.hashes import MIN_SALT_BYTES

__all__ = ["register"]

Handler = Callable[[argparse.Namespace], int]


def _fraction_arg(value: str) -> float:
    """argparse type: a decimal in the open interval (0, 1)."""
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if not 0 < number < 1:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number in (0, 1)")
    return number


def _data_errors(handler: Handler) -> Handler:
    """Report a DatasetError as one line with exit status 1."""

    def run(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except DatasetError as e:
            raise CliError(e.detail, EXIT_INVALID) from e

    return run


def _existing_dir(value: str, what: str) -> Path:
    path = Path(value)
    if not path.is_dir():
        raise CliError(f"{what} {value}: no such directory")
    return path


def _source_roots(values: list[str]) -> tuple[SourceRoot, ...]:
    if not values:
        return tuple(stdlib_sources())
    for value in values:
        if not Path(value).exists():
            raise CliError(f"--source {value}: no such file or directory")
    return tuple(SourceRoot(Path(v), v) for v in values)


def _salt(path: str | None) -> bytes | None:
    if path is None:
        return None
    try:
        salt = Path(path).read_bytes()
    except OSError as e:
        raise CliError(f"--salt-file {path}: cannot read ({e.strerror})") from e
    if len(salt) < MIN_SALT_BYTES:
        raise CliError(f"--salt-file {path}: a salt is at least {MIN_SALT_BYTES} raw bytes")
    return salt


@_data_errors
def _build(args: argparse.Namespace) -> int:
    options = BuildOptions(
        sources=_source_roots(args.source),
        out=Path(args.out),
        seq_len=args.seq_len,
        max_bytes=args.max_bytes,
        samples_per_shard=args.samples_per_shard,
        holdout_frac=args.holdout_frac,
        salt=_salt(args.salt_file),
    )
    try:
        manifest = build(options)
    except FileExistsError as e:
        raise CliError(f"--out {e}") from e
    except OSError as e:
        raise CliError(f"--out {args.out}: cannot write ({e.strerror})") from e
    extra = manifest.extra
    print_json(
        {
            "out": str(options.out),
            "n_samples": manifest.n_samples,
            "n_shards": manifest.n_shards,
            "merkle_root": manifest.merkle_root,
            "shard_sha256_root": manifest.shard_sha256_root,
            "holdout_n_samples": manifest.holdout.n_samples,
            "holdout_commit": manifest.holdout.commit,
            "source_files": extra["source_files"],
            "source_bytes": extra["source_bytes"],
            "packed_samples": extra["packed_samples"],
            "dropped_tail_samples": extra["dropped_tail_samples"],
        }
    )
    return EXIT_OK


@_data_errors
def _verify(args: argparse.Namespace) -> int:
    report = verify(_existing_dir(args.dir, "DIR"))
    sys.stdout.write(
        f"OK n_samples={report.n_samples} n_shards={report.n_shards} "
        f"merkle_root={report.merkle_root} holdout={report.holdout}\n"
    )
    return EXIT_OK


@_data_errors
def _pin(args: argparse.Namespace) -> int:
    result = pin(_existing_dir(args.data_dir, "--data-dir"), Path(args.out_objects))
    print_json(result.fragment)
    return EXIT_OK


def _add_build(commands: Subparsers[Any]) -> None:
    parser = commands.add_parser("build", help="tokenize text files into u16 shards + manifest")
    parser.add_argument(
        "--source",
        action="append",
        default=[],
        metavar="PATH",
        help="a text file or a folder (recursive, sorted); repeatable; default: the Python "
        "standard library's sources (and docs if installed)",
    )
    parser.add_argument(
        "--max-bytes",
        type=positive_int_arg,
        default=DEFAULT_MAX_BYTES,
        metavar="N",
        help=f"source bytes to use at most (default {DEFAULT_MAX_BYTES})",
    )
    parser.add_argument("--seq-len", type=positive_int_arg, required=True, metavar="N")
    parser.add_argument("--out", required=True, metavar="DIR", help="a new or empty directory")
    parser.add_argument(
        "--holdout-frac",
        type=_fraction_arg,
        default=DEFAULT_HOLDOUT_FRAC,
        metavar="F",
        help=f"the last ceil(F * samples) samples are the holdout (default {DEFAULT_HOLDOUT_FRAC})",
    )
    parser.add_argument(
        "--samples-per-shard",
        type=positive_int_arg,
        default=DEFAULT_SAMPLES_PER_SHARD,
        metavar="N",
        help=f"samples per shard (default {DEFAULT_SAMPLES_PER_SHARD})",
    )
    parser.add_argument(
        "--salt-file",
        metavar="FILE",
        help="reuse this holdout salt (raw bytes, >= 16; e.g. an earlier holdout.salt) "
        "instead of 32 random bytes",
    )
    parser.set_defaults(handler=_build)


def register(subparsers: Subparsers[Any]) -> None:
    """Add ``datasets build``, ``datasets verify`` and ``datasets pin``."""
    group = subparsers.add_parser("datasets", help="build, verify and pin training datasets")
    commands = group.add_subparsers(title="datasets commands", metavar="COMMAND", required=True)
    _add_build(commands)
    verifier = commands.add_parser("verify", help="re-hash every shard and root of a build")
    verifier.add_argument("dir", metavar="DIR", help="a directory written by `datasets build`")
    verifier.set_defaults(handler=_verify)
    pinner = commands.add_parser(
        "pin", help="store a build's shards and manifest by sha256; print the dataset fragment"
    )
    pinner.add_argument("--data-dir", required=True, metavar="DIR")
    pinner.add_argument(
        "--out-objects",
        required=True,
        metavar="DIR",
        help="the object store root (the coordinator's <state_dir>/objects)",
    )
    pinner.set_defaults(handler=_pin)
