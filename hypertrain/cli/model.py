"""``hypertrain sample`` and ``hypertrain export``: use a checkpoint's model.

``sample CHECKPOINT_DIR [--prompt TEXT] [--tokens N] [--temperature T] [--seed S]`` prints the
prompt followed by up to N generated tokens' text and one newline
(:mod:`hypertrain.trainer.generate`: temperature 0 is greedy and ignores the seed; otherwise
the same seed gives the same text on the same machine). torch is imported only here, after
:data:`SAMPLE_ENV` is applied: one thread, deterministic algorithms.

``export CHECKPOINT_DIR --out DIR`` writes the model for loaders outside hypertrain
(:mod:`hypertrain.aggregator.export`) into a fresh temporary directory beside ``DIR`` and
renames it to ``DIR`` (which must not exist or be empty), so ``DIR`` holds every file or none.
It prints one JSON line ``{"out", "files", "theta_hash"}``.

Both read ``CHECKPOINT_DIR/model.safetensors`` strictly; when ``MANIFEST.json`` is beside it,
its ``files["model.safetensors"]`` must be the file's sha256 (the manifest's signature is
``verify-checkpoint``'s business, not checked here).

Exit status: 0 ok; 1 a model file or manifest that does not parse, a sha256 that is not the
manifest's, a model this trainer does not implement, logits that are not finite; 2 usage: no
such directory or file, a prompt the model cannot read, a non-empty ``--out``.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Final

from hypertrain.aggregator.checkpoint import (
    MANIFEST_FILE,
    MODEL_FILE,
    CheckpointBody,
    ModelFile,
    parse_manifest,
    read_model,
)
from hypertrain.aggregator.export import export_files
from hypertrain.cli.common import (
    EXIT_INVALID,
    EXIT_OK,
    CliError,
    Subparsers,
    print_json,
    read_input,
)
from hypertrain.protocol.errors import Malformed
from hypertrain.protocol.manifest import ReferenceEnv
from hypertrain.trainer.errors import TrainerError

__all__ = ["MAX_TOKENS", "SAMPLE_ENV", "register"]

MAX_TOKENS: Final = 65536
SAMPLE_ENV: Final = ReferenceEnv(
    CUBLAS_WORKSPACE_CONFIG=":4096:8", CUDA_DISABLE_PTX_JIT="1", cpu_threads=1
)
"""How ``sample`` sets torch up: one thread, deterministic algorithms, "highest" matmul
precision. The CPU kernel path is left to the machine (the text is promised per machine)."""


def _tokens_arg(value: str) -> int:
    if not value.isascii() or not value.isdigit() or not 1 <= int(value) <= MAX_TOKENS:
        raise argparse.ArgumentTypeError(f"{value!r} is not an int in [1, {MAX_TOKENS}]")
    return int(value)


def _temperature_arg(value: str) -> float:
    try:
        temperature = float(value)
    except ValueError:
        temperature = math.nan
    if not math.isfinite(temperature) or temperature < 0:
        raise argparse.ArgumentTypeError(f"{value!r} is not a finite number >= 0")
    return temperature


def _seed_arg(value: str) -> int:
    if not value.isascii() or not value.isdigit() or int(value) >= 2**64:
        raise argparse.ArgumentTypeError(f"{value!r} is not an int in [0, 2^64-1]")
    return int(value)


def read_checkpoint_model(directory: str) -> tuple[ModelFile, CheckpointBody | None]:
    """The model of checkpoint ``directory`` and its manifest body, if it has one (module doc:
    what is checked, and the CliError each refusal is)."""
    root = Path(directory)
    if not root.is_dir():
        raise CliError(f"{root}: no such checkpoint directory")
    model_path = root / MODEL_FILE
    data = read_input(str(model_path))
    body = None
    if (root / MANIFEST_FILE).exists():
        manifest_path = root / MANIFEST_FILE
        try:
            body = parse_manifest(read_input(str(manifest_path))).body
        except Malformed as e:
            raise CliError(f"{manifest_path}: {e.detail}", EXIT_INVALID) from e
        digest = hashlib.sha256(data).hexdigest()
        if digest != body.files[MODEL_FILE]:
            raise CliError(
                f"{model_path}: sha256 {digest} is not the {MANIFEST_FILE}'s"
                f" {body.files[MODEL_FILE]}",
                EXIT_INVALID,
            )
    try:
        return read_model(data), body
    except (Malformed, TrainerError) as e:
        detail = e.detail if isinstance(e, Malformed) else str(e)
        raise CliError(f"{root}: {detail}", EXIT_INVALID) from e


def _sample(args: argparse.Namespace) -> int:
    model_file, _ = read_checkpoint_model(args.checkpoint_dir)
    from hypertrain.trainer.determinism import configure

    try:
        configure(SAMPLE_ENV)
    except TrainerError as e:  # DeterminismError: this process cannot be set up
        raise CliError(str(e)) from e
    from hypertrain.trainer.generate import NonFiniteLogits, generate_text

    try:
        pieces = generate_text(
            model_file.theta,
            model_file.model,
            args.prompt,
            tokens=args.tokens,
            temperature=args.temperature,
            seed=args.seed,
        )
    except ValueError as e:
        raise CliError(f"--prompt: {e}") from e
    out = sys.stdout
    out.write(args.prompt)
    try:
        for piece in pieces:
            out.write(piece)
            out.flush()
    except NonFiniteLogits as e:
        out.write("\n")
        raise CliError(f"{args.checkpoint_dir}: {e}", EXIT_INVALID) from e
    out.write("\n")
    return EXIT_OK


def _check_out(out: Path) -> None:
    if out.is_dir():
        if any(out.iterdir()):
            raise CliError(f"{out}: not empty (refusing to write into it)")
    elif out.exists() or out.is_symlink():
        raise CliError(f"{out}: exists and is not a directory")
    if not out.parent.is_dir():
        raise CliError(f"{out.parent}: no such directory")


def _write_dir(out: Path, files: dict[str, bytes]) -> None:
    """Write ``files`` into a temporary sibling of ``out``, fsync each, then rename it."""
    temp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".part", dir=out.parent))
    try:
        for name, data in files.items():
            with open(temp / name, "xb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        temp.chmod(0o777 & ~umask)  # mkdtemp's 0o700 is for the temporary name only
        os.rename(temp, out)  # replaces ``out`` only when it is an empty directory
    except OSError as e:
        raise CliError(f"{out}: cannot write ({e.strerror})") from e
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def _export(args: argparse.Namespace) -> int:
    out = Path(args.out)
    _check_out(out)
    model_file, body = read_checkpoint_model(args.checkpoint_dir)
    files = export_files(model_file, body)
    _write_dir(out, files)
    print_json({"out": str(out), "files": sorted(files), "theta_hash": model_file.theta_hash()})
    return EXIT_OK


def register(subparsers: Subparsers[Any]) -> None:
    """Add ``sample`` and ``export``."""
    sample = subparsers.add_parser("sample", help="print text generated by a checkpoint's model")
    sample.add_argument("checkpoint_dir", metavar="CHECKPOINT_DIR")
    sample.add_argument("--prompt", default="", help="text to continue (default: none)")
    sample.add_argument(
        "--tokens", type=_tokens_arg, default=200, help="tokens to generate at most (200)"
    )
    sample.add_argument(
        "--temperature", type=_temperature_arg, default=0.8, help="0 is greedy (0.8)"
    )
    sample.add_argument("--seed", type=_seed_arg, default=0, help="the sampling seed (0)")
    sample.set_defaults(handler=_sample)
    export = subparsers.add_parser(
        "export", help="write a checkpoint's model as plain safetensors + config.json"
    )
    export.add_argument("checkpoint_dir", metavar="CHECKPOINT_DIR")
    export.add_argument("--out", required=True, metavar="DIR", help="a new or empty directory")
    export.set_defaults(handler=_export)
