"""``hypertrain manifest``: the CPU test-mode manifest, its provenance, and sealing with K_owner.

Provenance rule under test: its keys are exactly the body's leaf paths, where a leaf is any
non-object value (an array such as ``auditors`` is one leaf; its items get no entries).
"""

from __future__ import annotations

import copy
import io
import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from hypertrain.beacon.chain import QUICKNET
from hypertrain.cli import build_parser, main
from hypertrain.datasets import BuildOptions, SourceRoot, build
from hypertrain.protocol import testmode
from hypertrain.protocol.converter import structure, unstructure
from hypertrain.protocol.envelope import NEVER, verify
from hypertrain.protocol.errors import SignatureError
from hypertrain.protocol.example import (
    EXAMPLE_AUDITOR_SEED,
    EXAMPLE_COORD_SEED,
    QUICKNET_CHAIN_HASH,
)
from hypertrain.protocol.jcs import body_digest
from hypertrain.protocol.keys import Keypair, write_seed_file
from hypertrain.protocol.manifest import Beacon, DatasetSpec, RunManifest
from hypertrain.protocol.tensorhash import th_hex
from hypertrain.trainer.params import init_params, init_state_hash
from tests.cli_support import one_error_line

Capture = pytest.CaptureFixture[str]

COORD = Keypair.from_seed(EXAMPLE_COORD_SEED)
AUDITOR = Keypair.from_seed(EXAMPLE_AUDITOR_SEED)
OTHER = Keypair.from_seed(b"\x31" * 32)
OWNER = Keypair.from_seed(b"\x77" * 32)


def _leaves(body: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in body.items():
        if isinstance(value, Mapping):
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def _run(argv: list[str], capsys: Capture) -> Any:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def owner_seed(tmp_path: Path) -> Path:
    path = tmp_path / "owner.seed"
    write_seed_file(path, OWNER.seed)
    return path


@pytest.fixture
def example(capsys: Capture) -> dict[str, Any]:
    doc: dict[str, Any] = _run(["manifest", "example"], capsys)
    return doc


def _write(path: Path, value: object) -> Path:
    path.write_text(json.dumps(value))
    return path


# --- the library -------------------------------------------------------------------------------


def test_param_count_matches_the_spec_example_dims() -> None:
    dims = {"n_layers": 4, "d_model": 256, "n_heads": 4, "n_kv_heads": 4, "d_ff": 1024}
    assert testmode.decoder_param_count(vocab=259, **dims) == 4_329_216


def test_byte_tokenizer_pin() -> None:
    assert testmode.BYTE_TOKENIZER_SHA256 == (
        "ca59f3def5da209643b28ffc6956f6710eb5b7051263ce3529fd587e4f07765f"
    )


def test_builder_values_and_exact_provenance() -> None:
    manifest, provenance = testmode.build_test_mode_manifest(
        coord_pubkey=COORD.ss58, auditors=[AUDITOR.ss58]
    )
    body = unstructure(manifest)
    assert set(provenance) == {path for path, _ in _leaves(body)}
    assert set(provenance) == set(testmode.leaf_paths(body))
    assert all(isinstance(text, str) and text for text in provenance.values())
    assert (manifest.inner.H, manifest.inner.J, manifest.model.d_model) == (6, 2, 64)
    assert manifest.verify.E_vest_rounds == 10
    assert manifest.verify.forgive_per_epoch == 1
    assert manifest.budget.epochs_per_round == 1
    assert manifest.reference_spec.env.cpu_threads == 1
    assert manifest.beacon == testmode.QUICKNET_BEACON
    assert manifest.model.param_count == testmode.decoder_param_count(
        vocab=259, n_layers=2, d_model=64, n_heads=2, n_kv_heads=2, d_ff=256
    )
    env = manifest.reference_spec.env
    assert (env.ATEN_CPU_CAPABILITY, env.MKL_CBWR) == ("default", "COMPATIBLE")
    assert body["reference_spec"]["env"]["ATEN_CPU_CAPABILITY"] == "default"


def test_every_placeholder_hash_is_labelled() -> None:
    manifest, provenance = testmode.build_test_mode_manifest(coord_pubkey=COORD.ss58)
    labels = [
        "dataset-merkle-root",
        "dataset-shard-sha256-root",
        "dataset-holdout-commit",
        "init-state",
        "cluster-rules",
        "spec-doc",
        "cpu-test-mode-image",
    ]
    pending = {testmode.pending_hash(label) for label in labels}
    flagged = set()
    for path, value in _leaves(unstructure(manifest)):
        if isinstance(value, str) and value.removeprefix("sha256:") in pending:
            assert provenance[path].startswith(testmode.PLACEHOLDER), path
            flagged.add(value.removeprefix("sha256:"))
    assert flagged == pending
    assert provenance["init_state_hash"].startswith(testmode.PLACEHOLDER)
    assert "hypertrain datasets build" in provenance["dataset.merkle_root"]


def test_given_dataset_init_state_and_beacon_are_not_placeholders() -> None:
    dataset = structure(
        DatasetSpec,
        {
            "merkle_root": "a" * 64,
            "depth": 3,
            "n_samples": 8,
            "sample_format": "u32[seq_len+1] token ids",
            "shard_uri_template": "{shard_sha256}",
            "shard_sha256_root": "b" * 64,
            "holdout_commit": "c" * 64,
            "assign_unit": 4,
            "unit_sha256_root": "d" * 64,
        },
    )
    beacon = Beacon(chain_hash="e" * 64, period=1, genesis_time=1_700_000_000)
    manifest, provenance = testmode.build_test_mode_manifest(
        coord_pubkey=COORD.ss58,
        beacon=beacon,
        dataset=dataset,
        init_state_hash="f" * 64,
        epochs_per_round=2,
        vest_rounds=12,
        forgive_per_epoch=0,
    )
    body = unstructure(manifest)
    assert set(provenance) == {path for path, _ in _leaves(body)}
    assert body["dataset"]["assign_unit"] == 4
    assert manifest.beacon == beacon
    assert manifest.init_state_hash == "f" * 64
    assert (manifest.budget.epochs_per_round, manifest.verify.E_vest_rounds) == (2, 12)
    assert manifest.verify.forgive_per_epoch == 0
    for path in ("init_state_hash", "dataset.merkle_root", "beacon.period"):
        assert not provenance[path].startswith(testmode.PLACEHOLDER)


def test_builder_refuses_repeated_auditors() -> None:
    with pytest.raises(ValueError, match="twice"):
        testmode.build_test_mode_manifest(coord_pubkey=COORD.ss58, auditors=[AUDITOR.ss58] * 2)


# --- manifest example --------------------------------------------------------------------------


def test_group_is_registered() -> None:
    assert "manifest" in build_parser().format_help()


def test_example_validates_and_its_run_id_is_the_body_digest(example: dict[str, Any]) -> None:
    assert set(example) == {"manifest", "provenance", "run_id"}
    body = example["manifest"]
    manifest = structure(RunManifest, body)
    assert unstructure(manifest) == body
    assert example["run_id"] == body_digest(body) == manifest.run_id()
    assert set(example["provenance"]) == {path for path, _ in _leaves(body)}
    assert body["coord_pubkey"] == COORD.ss58
    assert body["auditors"] == []
    assert body["beacon"]["chain_hash"] == QUICKNET_CHAIN_HASH
    assert example["provenance"]["coord_pubkey"].startswith("default")


def test_example_is_deterministic(example: dict[str, Any], capsys: Capture) -> None:
    assert _run(["manifest", "example"], capsys) == example


def test_example_options(tmp_path: Path, capsys: Capture) -> None:
    coord_key = tmp_path / "coord.key"
    write_seed_file(coord_key, OTHER.seed)
    info = QUICKNET.to_json() | {"hash": "9" * 64, "period": 2, "genesis_time": 1_700_000_000}
    chain = _write(tmp_path / "chain.json", info)
    argv = ["manifest", "example", "--coord-key", str(coord_key), "--chain", str(chain)]
    argv += ["--auditor", AUDITOR.ss58, "--auditor", COORD.ss58]
    doc = _run([*argv, "--epochs-per-round", "3", "--vest-rounds", "12"], capsys)
    body = doc["manifest"]
    assert body["coord_pubkey"] == OTHER.ss58
    assert body["auditors"] == [AUDITOR.ss58, COORD.ss58]
    assert body["beacon"] == {"chain_hash": "9" * 64, "period": 2, "genesis_time": 1_700_000_000}
    assert body["budget"]["epochs_per_round"] == 3
    assert body["verify"]["E_vest_rounds"] == 12
    assert body["operator_budget"]["auditor"]["instances"] == 2
    assert doc["run_id"] == body_digest(body)
    pubkey = _run(["manifest", "example", "--coord-pubkey", OTHER.ss58], capsys)
    assert pubkey["manifest"]["coord_pubkey"] == OTHER.ss58
    assert not pubkey["provenance"]["coord_pubkey"].startswith("default")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--vest-rounds", "9"], "ceil(1/q_base) = 10"),
        (["--vest-rounds", "0"], "not an int"),
        (["--auditor", "nope"], "not an SS58 address"),
        (["--auditor", AUDITOR.ss58, "--auditor", AUDITOR.ss58], "twice"),
        (["--coord-pubkey", COORD.ss58, "--coord-key", "k"], "not allowed with"),
        (["--chain", "/nonexistent/chain.json"], "no such file"),
        (["--coord-key", "/nonexistent/coord.key"], "no such key file"),
    ],
)
def test_example_usage_errors_exit_2(extra: list[str], message: str, capsys: Capture) -> None:
    assert main(["manifest", "example", *extra]) == 2
    assert message in one_error_line(capsys)


def test_example_refuses_a_sub_second_chain(tmp_path: Path, capsys: Capture) -> None:
    chain = _write(tmp_path / "chain.json", QUICKNET.to_json() | {"period": 0.5})
    assert main(["manifest", "example", "--chain", str(chain)]) == 2
    assert "whole positive seconds" in one_error_line(capsys)


# --- manifest seal -----------------------------------------------------------------------------


def test_seal_whole_example_and_bare_body_agree(
    example: dict[str, Any], owner_seed: Path, tmp_path: Path, capsys: Capture
) -> None:
    whole = _write(tmp_path / "example.json", example)
    bare = _write(tmp_path / "body.json", example["manifest"])
    first = _run(["manifest", "seal", "--owner-seed", str(owner_seed), "--in", str(whole)], capsys)
    second = _run(["manifest", "seal", "--owner-seed", str(owner_seed), "--in", str(bare)], capsys)
    assert first == second
    assert first["type"] == "RunManifest"
    assert first["signer"] == OWNER.ss58
    assert first["exp_drand"] == NEVER
    assert first["body"] == example["manifest"]
    assert first["run_id"] == body_digest(example["manifest"]) == example["run_id"]
    verified = verify(
        first,
        expected_run_id=example["run_id"],
        now_round=NEVER,
        signer_allowed=lambda kind, signer: kind == "RunManifest" and signer == OWNER.ss58,
    )
    assert verified.body_digest == first["run_id"]
    assert isinstance(verified.message, RunManifest)


def test_seal_from_stdin_with_exp(
    example: dict[str, Any], owner_seed: Path, monkeypatch: pytest.MonkeyPatch, capsys: Capture
) -> None:
    data = json.dumps(example["manifest"]).encode()
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data)))
    envelope = _run(["manifest", "seal", "--owner-seed", str(owner_seed), "--exp", "100"], capsys)
    assert envelope["exp_drand"] == 100
    assert verify(envelope).envelope.signer == OWNER.ss58


def test_tampered_envelope_is_refused(
    example: dict[str, Any], owner_seed: Path, tmp_path: Path, capsys: Capture
) -> None:
    path = _write(tmp_path / "example.json", example)
    envelope = _run(
        ["manifest", "seal", "--owner-seed", str(owner_seed), "--in", str(path)], capsys
    )
    body_changed = copy.deepcopy(envelope)
    body_changed["body"]["inner"]["H"] = 12
    run_changed = copy.deepcopy(envelope) | {"run_id": body_digest(body_changed["body"])}
    for tampered in (body_changed, run_changed):
        with pytest.raises(SignatureError):
            verify(tampered)


@pytest.mark.parametrize("problem", ["missing", "mode", "content"])
def test_bad_owner_seed_exits_2(
    problem: str, example: dict[str, Any], tmp_path: Path, capsys: Capture
) -> None:
    seed = tmp_path / "owner.seed"
    if problem != "missing":
        seed.write_text("zz" * 32 if problem == "content" else OWNER.seed.hex())
        os.chmod(seed, 0o600 if problem == "content" else 0o644)
    body = _write(tmp_path / "body.json", example["manifest"])
    assert main(["manifest", "seal", "--owner-seed", str(seed), "--in", str(body)]) == 2
    one_error_line(capsys)


def _with_null_od(body: dict[str, Any]) -> Any:
    body["model"]["od"] = None
    return body


def _with_bad_j(body: dict[str, Any]) -> Any:
    body["inner"]["J"] = 4
    return body


def _without_beacon(body: dict[str, Any]) -> Any:
    del body["beacon"]
    return body


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (_with_bad_j, "J: must divide H"),
        (_without_beacon, "beacon: required field missing"),
        (_with_null_od, "canonical model form"),
        (lambda body: [body], "expected a RunManifest body"),
        (lambda body: {"manifest": "x"}, "expected a RunManifest body"),
    ],
)
def test_invalid_manifest_exits_1(
    mutate: Any,
    message: str,
    example: dict[str, Any],
    owner_seed: Path,
    tmp_path: Path,
    capsys: Capture,
) -> None:
    path = _write(tmp_path / "bad.json", mutate(copy.deepcopy(example["manifest"])))
    assert main(["manifest", "seal", "--owner-seed", str(owner_seed), "--in", str(path)]) == 1
    assert message in one_error_line(capsys)


def test_bad_json_exits_1(owner_seed: Path, tmp_path: Path, capsys: Capture) -> None:
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    assert main(["manifest", "seal", "--owner-seed", str(owner_seed), "--in", str(path)]) == 1
    one_error_line(capsys)


# --- the real init state and a built data set --------------------------------------------------


def test_example_carries_the_trainers_init_state_hash(example: dict[str, Any]) -> None:
    manifest = structure(RunManifest, example["manifest"])
    assert manifest.init_state_hash == init_state_hash(manifest.model)
    assert manifest.init_state_hash == th_hex(init_params(manifest.model))
    assert not example["provenance"]["init_state_hash"].startswith(testmode.PLACEHOLDER)


def test_example_takes_the_dataset_section_of_a_built_data_set(
    tmp_path: Path, capsys: Capture
) -> None:
    built = build(
        BuildOptions(
            sources=(SourceRoot(path=_corpus(tmp_path), label="corpus"),),
            out=tmp_path / "data",
            seq_len=64,
            samples_per_shard=4,
            holdout_frac=0.1,
            salt=bytes(32),
        )
    )
    doc = _run(["manifest", "example", "--dataset-dir", str(tmp_path / "data")], capsys)
    assert doc["manifest"]["dataset"] == built.fragment()
    for name in built.fragment():
        assert "datasets build" in doc["provenance"][f"dataset.{name}"]


def test_a_data_set_of_another_seq_len_is_refused(tmp_path: Path, capsys: Capture) -> None:
    build(
        BuildOptions(
            sources=(SourceRoot(path=_corpus(tmp_path), label="corpus"),),
            out=tmp_path / "data",
            seq_len=32,
            samples_per_shard=4,
            holdout_frac=0.1,
            salt=bytes(32),
        )
    )
    assert main(["manifest", "example", "--dataset-dir", str(tmp_path / "data")]) == 2
    assert "seq_len 32" in one_error_line(capsys)
    assert main(["manifest", "example", "--dataset-dir", str(tmp_path / "nothing")]) == 2
    assert "manifest.json" in one_error_line(capsys)


def _corpus(tmp_path: Path) -> Path:
    path = tmp_path / "corpus.txt"
    path.write_text("def f(x):\n    return x * 2\n" * 200, encoding="utf-8")
    return path
