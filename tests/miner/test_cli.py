"""The command line: help, join, one-line errors and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hypertrain.miner.errors import ApiError, MinerFatal
from hypertrain.miner.main import _classify, main
from hypertrain.protocol.hashes import join_request_bytes
from hypertrain.protocol.keys import Keypair, verify_signature, write_seed_file

RUN = "ab" * 32


def _key(tmp_path: Path) -> tuple[Path, Keypair]:
    path = tmp_path / "miner.key"
    write_seed_file(path, b"\x05" * 32)
    return path, Keypair.from_seed(b"\x05" * 32)


def test_join_prints_a_signed_request(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, key = _key(tmp_path)
    hardware = '{"cpu": "x86_64", "threads": 1}'
    assert main(["join", "--api", "http://127.0.0.1:1", "--run-id", RUN, "--keyfile", str(path),
                 "--hardware", hardware]) == 0  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert out["hotkey"] == key.ss58
    assert out["run_id"] == RUN
    message = join_request_bytes(RUN, key.ss58, json.loads(hardware))
    assert verify_signature(key.public_key, message, bytes.fromhex(out["sig"]))


@pytest.mark.parametrize(
    "args",
    [
        ["join", "--api", "x", "--run-id", "nothex", "--keyfile", "k"],
        ["join", "--api", "x", "--run-id", RUN, "--keyfile", "/nonexistent/key"],
        ["join", "--api", "x", "--run-id", RUN, "--keyfile", "k", "--hardware", "[1]"],
    ],
)
def test_join_errors_exit_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("hypertrain-miner: ")
    assert err.count("\n") == 1


def test_run_config_and_key_errors_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "miner.toml"
    conf.write_text('api = "http://127.0.0.1:1"\nbogus = 1\n', encoding="utf-8")
    assert main(["run", "--config", str(conf)]) == 2
    assert "unknown key 'bogus'" in capsys.readouterr().err
    conf.write_text(
        'api = "http://127.0.0.1:1"\nkeyfile = "absent.key"\nworkdir = "w"\ndata_dir = "d"\n',
        encoding="utf-8",
    )
    assert main(["run", "--config", str(conf)]) == 2
    assert "no such key file" in capsys.readouterr().err


def test_run_unreachable_api_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, _ = _key(tmp_path)
    conf = tmp_path / "miner.toml"
    conf.write_text(
        f'api = "http://127.0.0.1:1"\nkeyfile = "{path}"\nworkdir = "w"\ndata_dir = "d"\n',
        encoding="utf-8",
    )
    assert main(["run", "--config", str(conf), "--start-wait", "0"]) == 1
    assert capsys.readouterr().err.count("\n") == 1
    assert main(["run", "--config", str(conf), "--start-wait", "-1"]) == 2
    assert "--start-wait" in capsys.readouterr().err


def test_classify_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    assert _classify(ExceptionGroup("g", [MinerFatal("bad receipt")])) == 2
    assert _classify(ApiError("GET", "/v1/runs", 500, {"detail": "boom"})) == 1
    with pytest.raises(ValueError, match="other"):
        _classify(ValueError("other"))
