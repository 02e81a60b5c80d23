"""``hypertrain manifest``: print the CPU test-mode manifest, and seal a manifest with K_owner.

``manifest example`` prints one JSON line ``{"manifest": body, "provenance": {path: source},
"run_id": sha256(JCS(body))}`` (see :mod:`hypertrain.protocol.testmode`; values marked
``PLACEHOLDER`` in the provenance are not real yet).

``manifest seal`` reads either a bare RunManifest body or a whole ``manifest example`` output,
whose ``"manifest"`` field it then uses (its ``run_id`` and ``provenance`` are ignored: the run id
is recomputed from the body). The body must be a valid RunManifest in canonical form (optional
fields omitted, never null). It prints the owner-signed envelope: type ``RunManifest``,
``run_id = sha256(JCS(body))``, ``exp_drand`` by default 2^53-1 (never expires).

Exit status: 0 ok; 1 an invalid manifest or bad JSON; 2 usage, key file or chain file errors.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from hypertrain.beacon.chain import ChainInfo
from hypertrain.cli.beacon import load_chain
from hypertrain.cli.common import (
    EXIT_INVALID,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    Subparsers,
    positive_int_arg,
    print_json,
    read_json,
    ss58_arg,
)
from hypertrain.datasets.errors import DatasetError
from hypertrain.datasets.manifest import MANIFEST_FILE, DatasetManifest, load_record
from hypertrain.protocol.converter import structure, unstructure
from hypertrain.protocol.envelope import NEVER, json_equal, seal
from hypertrain.protocol.errors import SchemaError
from hypertrain.protocol.example import EXAMPLE_COORD_SEED
from hypertrain.protocol.keys import Keypair, load_keypair
from hypertrain.protocol.manifest import Beacon, DatasetSpec, ModelSpec, RunManifest
from hypertrain.protocol.testmode import build_test_mode_manifest
from hypertrain.trainer.params import init_state_hash

__all__ = ["beacon_of_chain", "register"]

_DEFAULT_COORD_SOURCE = (
    "default: the example coordinator key (seed 00..1f, as the operator guide's test server); "
    "not an operational key, pass --coord-pubkey or --coord-key"
)


def beacon_of_chain(chain: ChainInfo) -> Beacon:
    """The manifest's beacon of a drand chain; CliError (exit 2) unless it keeps whole seconds."""
    if chain.period_ms % 1000 or chain.genesis_ms % 1000 or chain.genesis_ms <= 0:
        raise CliError(
            f"--chain: period {chain.period} s and genesis {chain.genesis_time} must be whole "
            "positive seconds (the manifest's beacon carries ints)"
        )
    return Beacon(
        chain_hash=chain.hash, period=chain.period_ms // 1000, genesis_time=chain.genesis_ms // 1000
    )


def _test_mode_model() -> ModelSpec:
    """The test-mode model section (the coordinator and beacon do not change it)."""
    manifest, _ = build_test_mode_manifest(coord_pubkey=Keypair.from_seed(EXAMPLE_COORD_SEED).ss58)
    return manifest.model


def _dataset_of(directory: Path, seq_len: int) -> DatasetSpec:
    """The ``dataset`` section of a built data set; CliError (exit 2) if it does not fit."""
    try:
        built = load_record(DatasetManifest, directory / MANIFEST_FILE)
        built.check_counts()
    except DatasetError as e:
        raise CliError(f"--dataset-dir {directory}: {e}") from e
    if built.seq_len != seq_len:
        raise CliError(
            f"--dataset-dir {directory}: samples of seq_len {built.seq_len}, the model needs "
            f"{seq_len} (datasets build --seq-len {seq_len})"
        )
    return built.dataset_spec()


def _example(args: argparse.Namespace) -> int:
    if args.coord_key is not None:
        coord = load_keypair(args.coord_key).ss58
    else:
        coord = args.coord_pubkey or Keypair.from_seed(EXAMPLE_COORD_SEED).ss58
    beacon = None if args.chain == "quicknet" else beacon_of_chain(load_chain(args.chain))
    model = _test_mode_model()
    dataset = (
        None if args.dataset_dir is None else _dataset_of(Path(args.dataset_dir), model.seq_len)
    )
    try:
        manifest, provenance = build_test_mode_manifest(
            coord_pubkey=coord,
            auditors=tuple(args.auditor),
            beacon=beacon,
            epochs_per_round=args.epochs_per_round,
            vest_rounds=args.vest_rounds,
            dataset=dataset,
            init_state_hash=init_state_hash(model),
        )
    except SchemaError as e:
        raise CliError(f"the options give an invalid manifest: {e.detail}", EXIT_USAGE) from e
    except ValueError as e:
        raise CliError(str(e), EXIT_USAGE) from e
    if args.coord_key is None and args.coord_pubkey is None:
        provenance["coord_pubkey"] = _DEFAULT_COORD_SOURCE
    provenance["init_state_hash"] = (
        "TH of the initial parameters: hypertrain.trainer.init_params of the model section "
        "(Philox init keyed by init_seed, spec section 5.2)"
    )
    if dataset is not None:
        for name in unstructure(dataset):
            provenance[f"dataset.{name}"] = f"{args.dataset_dir}/manifest.json (datasets build)"
    body = unstructure(manifest)
    print_json({"manifest": body, "provenance": provenance, "run_id": manifest.run_id()})
    return EXIT_OK


def _manifest_body(data: object, name: str) -> dict[str, Any]:
    """The manifest body of a bare body or of a ``manifest example`` document."""
    if isinstance(data, dict) and "manifest" in data and "model" not in data:
        data = data["manifest"]
        name = f"{name}: manifest"
    if not isinstance(data, dict):
        raise CliError(f"{name}: expected a RunManifest body (a JSON object)", EXIT_INVALID)
    return data


def _seal(args: argparse.Namespace) -> int:
    owner = load_keypair(args.owner_seed)
    body = _manifest_body(read_json(args.input), "stdin" if args.input == "-" else args.input)
    manifest = structure(RunManifest, body)
    if not json_equal(unstructure(manifest), body):
        raise CliError(
            "RunManifest body: not in canonical model form (omit optional fields, never null)",
            EXIT_INVALID,
        )
    envelope = seal(owner, "RunManifest", manifest.run_id(), manifest, args.exp)
    print_json(envelope.to_json())
    return EXIT_OK


def _add_example(commands: Subparsers[Any]) -> None:
    example = commands.add_parser(
        "example", help="print the CPU test-mode manifest, its provenance and run id"
    )
    coord = example.add_mutually_exclusive_group()
    coord.add_argument(
        "--coord-pubkey", type=ss58_arg, metavar="SS58", help="the service's K_coord address"
    )
    coord.add_argument("--coord-key", metavar="FILE", help="K_coord key file (its address is used)")
    example.add_argument(
        "--auditor",
        action="append",
        default=[],
        type=ss58_arg,
        metavar="SS58",
        help="an auditor hotkey (repeatable; default none)",
    )
    example.add_argument(
        "--chain",
        default="quicknet",
        metavar="quicknet|FILE",
        help="drand quicknet (default) or a chain's /info JSON file (its hash, period, genesis)",
    )
    example.add_argument(
        "--dataset-dir",
        metavar="DIR",
        help="a data set built by 'hypertrain datasets build' (default: labelled placeholders)",
    )
    example.add_argument(
        "--epochs-per-round",
        type=positive_int_arg,
        default=1,
        metavar="N",
        help="budget.epochs_per_round: the service's HYPERTRAIN_EPOCHS_PER_ROUND (default 1)",
    )
    example.add_argument(
        "--vest-rounds",
        type=positive_int_arg,
        default=10,
        metavar="N",
        help="verify.E_vest_rounds (>= 10): the service's HYPERTRAIN_VEST_ROUNDS (default 10)",
    )
    example.set_defaults(handler=_example)


def _add_seal(commands: Subparsers[Any]) -> None:
    sealer = commands.add_parser(
        "seal", help="validate a manifest and print its envelope signed by K_owner"
    )
    sealer.add_argument("--owner-seed", required=True, metavar="FILE", help="K_owner key file")
    sealer.add_argument(
        "--in",
        dest="input",
        default="-",
        metavar="FILE",
        help="a manifest body or a `manifest example` output; - for stdin (default)",
    )
    sealer.add_argument(
        "--exp",
        type=positive_int_arg,
        default=NEVER,
        metavar="N",
        help="exp_drand (default 2^53-1: never expires)",
    )
    sealer.set_defaults(handler=_seal)


def register(subparsers: Subparsers[Any]) -> None:
    """Add ``manifest example`` and ``manifest seal``."""
    group = subparsers.add_parser("manifest", help="build and seal RunManifests")
    commands = group.add_subparsers(title="manifest commands", metavar="COMMAND", required=True)
    _add_example(commands)
    _add_seal(commands)
