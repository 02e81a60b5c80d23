"""``hypertrain sample`` and ``hypertrain export`` on a real checkpoint (three merged rounds of
the tiny model, :mod:`tests.aggregator.chain`)."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.numpy import load_file

from hypertrain.aggregator.checkpoint import MANIFEST_FILE, MODEL_FILE, parse_manifest
from hypertrain.cli import main
from hypertrain.protocol.tensorhash import th_hex
from hypertrain.trainer.params import param_shapes
from tests.aggregator.chain import make_chain
from tests.cli_support import one_error_line

Capture = pytest.CaptureFixture[str]
ROOT = Path(__file__).resolve().parents[1]
PROMPT = "1+2="  # bytes below 64: the tiny model's vocabulary

# sample sets torch up in-process (one thread, deterministic): the suite's fixture restores it
pytestmark = pytest.mark.usefixtures("configured")


@pytest.fixture(scope="module")
def files() -> dict[str, bytes]:
    return make_chain().checkpoint()


@pytest.fixture
def ckpt(tmp_path: Path, files: dict[str, bytes]) -> Path:
    root = tmp_path / "ckpt"
    root.mkdir()
    for name, data in files.items():
        (root / name).write_bytes(data)
    return root


def _sample(ckpt: Path, capsys: Capture, *args: str) -> str:
    assert main(["sample", str(ckpt), "--prompt", PROMPT, "--tokens", "30", *args]) == 0
    out = capsys.readouterr().out
    assert out.startswith(PROMPT)
    assert out.endswith("\n")
    return out


def test_sample_is_seeded_and_greedy_ignores_the_seed(ckpt: Path, capsys: Capture) -> None:
    first = _sample(ckpt, capsys, "--seed", "0")
    assert len(first) == len(PROMPT) + 30 + 1
    assert _sample(ckpt, capsys, "--seed", "0") == first
    assert _sample(ckpt, capsys, "--seed", "1") != first
    greedy = _sample(ckpt, capsys, "--temperature", "0", "--seed", "0")
    assert _sample(ckpt, capsys, "--temperature", "0", "--seed", "99") == greedy
    assert greedy != first


def test_sample_runs_as_a_program_and_matches_in_process(ckpt: Path, capsys: Capture) -> None:
    in_process = _sample(ckpt, capsys, "--seed", "5")
    args = ["sample", str(ckpt), "--prompt", PROMPT, "--tokens", "30", "--seed", "5"]
    done = subprocess.run(
        [sys.executable, "-m", "hypertrain", *args],
        capture_output=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode("utf-8") == in_process


def test_sample_without_a_manifest_reads_the_model_alone(ckpt: Path, capsys: Capture) -> None:
    with_manifest = _sample(ckpt, capsys)
    (ckpt / MANIFEST_FILE).unlink()
    assert _sample(ckpt, capsys) == with_manifest


def test_a_model_file_that_is_not_the_manifests_is_refused(
    ckpt: Path, files: dict[str, bytes], capsys: Capture
) -> None:
    data = bytearray(files[MODEL_FILE])
    data[-1] ^= 0x01  # still a valid model file: one weight's last byte
    (ckpt / MODEL_FILE).write_bytes(bytes(data))
    for command in (["sample", str(ckpt)], ["export", str(ckpt), "--out", str(ckpt.parent / "x")]):
        assert main(command) == 1
        line = one_error_line(capsys, stdout_empty=False)
        assert f"{ckpt / MODEL_FILE}: sha256" in line
        assert "MANIFEST.json" in line
    assert not (ckpt.parent / "x").exists()


def test_a_damaged_model_file_or_manifest_exits_1(ckpt: Path, capsys: Capture) -> None:
    (ckpt / MANIFEST_FILE).write_bytes(b"{}")
    assert main(["sample", str(ckpt)]) == 1
    assert str(ckpt / MANIFEST_FILE) in one_error_line(capsys, stdout_empty=False)
    (ckpt / MANIFEST_FILE).unlink()
    (ckpt / MODEL_FILE).write_bytes(b"not safetensors")
    assert main(["sample", str(ckpt)]) == 1
    assert "model.safetensors" in one_error_line(capsys, stdout_empty=False)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tokens", "0"], "--tokens"),
        (["--tokens", "65537"], "--tokens"),
        (["--tokens", "x"], "--tokens"),
        (["--temperature", "-1"], "--temperature"),
        (["--temperature", "inf"], "--temperature"),
        (["--seed", "-3"], "--seed"),
        (["--prompt", "abc"], "byte 0x61 is outside the model's vocabulary"),
    ],
)
def test_bad_arguments_exit_2(ckpt: Path, capsys: Capture, args: list[str], message: str) -> None:
    assert main(["sample", str(ckpt), *args]) == 2
    assert message in one_error_line(capsys, stdout_empty=False)


def test_a_missing_directory_or_model_file_exits_2(ckpt: Path, capsys: Capture) -> None:
    assert main(["sample", str(ckpt.parent / "nope")]) == 2
    assert "no such checkpoint directory" in one_error_line(capsys, stdout_empty=False)
    (ckpt / MODEL_FILE).unlink()
    assert main(["sample", str(ckpt)]) == 2
    assert f"{ckpt / MODEL_FILE}: no such file" in one_error_line(capsys, stdout_empty=False)


def test_export_loads_with_safetensors_alone(
    ckpt: Path, files: dict[str, bytes], tmp_path: Path, capsys: Capture
) -> None:
    out = tmp_path / "export"
    assert main(["export", str(ckpt), "--out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    body = parse_manifest(files[MANIFEST_FILE]).body
    assert printed == {
        "out": str(out),
        "files": ["config.json", "model.safetensors", "tokenizer.json"],
        "theta_hash": body.theta_hash,
    }
    assert sorted(p.name for p in out.iterdir()) == printed["files"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    weights = load_file(str(out / MODEL_FILE))
    assert th_hex(weights) == body.theta_hash
    data = (out / MODEL_FILE).read_bytes()
    (size,) = struct.unpack("<Q", data[:8])
    assert json.loads(data[8 : 8 + size])["__metadata__"] == {"format": "pt"}
    config = json.loads((out / "config.json").read_text())
    model = make_chain(rounds=1).manifest.model
    assert config["architecture"] == "hypertrain-decoder"
    dims = ("n_layers", "d_model", "n_heads", "n_kv_heads", "d_ff", "seq_len", "rope_theta")
    assert {k: config[k] for k in dims} == {k: getattr(model, k) for k in dims}
    assert config["vocab_size"] == model.vocab
    assert config["tensors"] == {n: list(s) for n, s in param_shapes(model).items()}
    assert {n: list(a.shape) for n, a in weights.items()} == config["tensors"]
    assert (config["run_id"], config["round"], config["rounds"]) == (body.run_id, 2, [0, 2])
    assert (config["license"], config["rms_norm_eps"]) == ("Apache-2.0", 1e-6)
    assert json.loads((out / "tokenizer.json").read_text())["name"] == "ht-byte-259"


def test_export_is_byte_deterministic_into_an_empty_dir(ckpt: Path, tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    second.mkdir()
    assert main(["export", str(ckpt), "--out", str(first)]) == 0
    assert main(["export", str(ckpt), "--out", str(second)]) == 0
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        assert (first / name).read_bytes() == (second / name).read_bytes()


def test_export_refuses_a_non_empty_out(ckpt: Path, tmp_path: Path, capsys: Capture) -> None:
    out = tmp_path / "busy"
    out.mkdir()
    (out / "keep").write_text("mine")
    assert main(["export", str(ckpt), "--out", str(out)]) == 2
    assert "not empty" in one_error_line(capsys, stdout_empty=False)
    assert [p.name for p in out.iterdir()] == ["keep"]
    assert main(["export", str(ckpt), "--out", str(out / "keep")]) == 2
    assert "not a directory" in one_error_line(capsys, stdout_empty=False)


def test_the_cli_starts_without_importing_torch() -> None:
    code = "import sys, hypertrain.cli; sys.exit('torch' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
        check=False,
    )
    assert done.returncode == 0


def test_the_operator_guides_loading_snippet_runs(
    ckpt: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Capture
) -> None:
    guide = (ROOT / "docs" / "operator.md").read_text(encoding="utf-8")
    section = guide.split("### Loading a checkpoint outside hypertrain", 1)[1]
    snippet = section.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    assert main(["export", str(ckpt), "--out", "exported"]) == 0
    capsys.readouterr()
    exec(compile(snippet, "operator.md", "exec"), {})
    assert capsys.readouterr().out.startswith("hypertrain-decoder 2 layers, d_model 32\n")
