"""The ``hypertrain`` command line: keys, envelopes, jcs, and one-line errors for mistakes."""

from __future__ import annotations

import argparse
import io
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from hypertrain.cli import COMMANDS, GROUPS, build_parser, main
from tests.cli_support import one_error_line
from tests.protocol.wire_samples import RUN_ID, bodies

Capture = pytest.CaptureFixture[str]


@pytest.fixture
def key_file(tmp_path: Path, capsys: Capture) -> Path:
    path = tmp_path / "miner.key"
    assert main(["keys", "new", "--out", str(path)]) == 0
    capsys.readouterr()
    return path


def _hotkey(path: Path, capsys: Capture) -> str:
    assert main(["keys", "show", str(path)]) == 0
    return str(json.loads(capsys.readouterr().out)["ss58"])


def test_groups_register_on_one_parser() -> None:
    assert len(GROUPS) >= 3
    help_text = build_parser().format_help()
    for command in ("keys", "envelope", "jcs"):
        assert command in help_text


def _commands(parser: argparse.ArgumentParser) -> list[str]:
    (subparsers,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return list(subparsers.choices)


def test_the_command_map_names_each_groups_commands_and_nothing_else() -> None:
    assert _commands(build_parser()) == list(COMMANDS)
    for name in GROUPS:
        assert _commands(build_parser([name])) == [c for c, g in COMMANDS.items() if g == name]


def test_a_command_imports_its_own_group_only(tmp_path: Path) -> None:
    """``hypertrain keys new`` starts in a fraction of a second: it never imports the other
    groups' dependencies (a fresh interpreter, since this one has imported everything)."""
    probe = (
        "import sys\n"
        "from hypertrain.cli import main\n"
        f"assert main(['keys', 'new', '--out', {str(tmp_path / 'k')!r}]) == 0\n"
        "heavy = ['hypertrain.cli.aggregate', 'hypertrain.cli.beacon', 'httpx', 'trio', 'numpy']\n"
        "print([m for m in heavy if m in sys.modules])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.splitlines()[-1] == "[]"


def test_keys_new_and_show(tmp_path: Path, capsys: Capture) -> None:
    path = tmp_path / "k"
    assert main(["keys", "new", "--out", str(path)]) == 0
    made = json.loads(capsys.readouterr().out)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    content = path.read_text().strip()
    assert len(content) == 64
    assert int(content, 16) >= 0
    assert main(["keys", "show", str(path)]) == 0
    assert json.loads(capsys.readouterr().out) == made
    assert set(made) == {"ss58", "public_key"}
    assert len(made["public_key"]) == 64


def test_keys_new_refuses_to_overwrite(key_file: Path, capsys: Capture) -> None:
    before = key_file.read_bytes()
    assert main(["keys", "new", "--out", str(key_file)]) == 2
    assert "refusing to overwrite" in one_error_line(capsys)
    assert key_file.read_bytes() == before


def test_unsafe_key_file_is_refused(key_file: Path, capsys: Capture) -> None:
    os.chmod(key_file, 0o644)
    assert main(["keys", "show", str(key_file)]) == 2
    assert "mode 0644" in one_error_line(capsys)
    args = ["envelope", "seal", "--key", str(key_file), "--type", "Commit", "--run-id", RUN_ID]
    assert main([*args, "--exp", "5", "--body", "-"]) == 2
    assert "mode 0644" in one_error_line(capsys)


@pytest.mark.parametrize(
    ("content", "message"), [(b"zz" * 32, "expected 32 raw bytes or 64 hex"), (b"", "found 0")]
)
def test_malformed_key_file(tmp_path: Path, capsys: Capture, content: bytes, message: str) -> None:
    path = tmp_path / "bad.key"
    path.write_bytes(content)
    path.chmod(0o600)
    assert main(["keys", "show", str(path)]) == 2
    assert message in one_error_line(capsys)
    assert main(["keys", "show", str(tmp_path / "missing.key")]) == 2
    assert "no such key file" in one_error_line(capsys)


def _seal_args(key_file: Path, body: str, *, type_name: str = "Commit") -> list[str]:
    return [
        "envelope", "seal", "--key", str(key_file), "--type", type_name,
        "--run-id", RUN_ID, "--exp", "77", "--body", body,
    ]  # fmt: skip


def test_seal_from_stdin_and_verify_from_stdin(
    key_file: Path, capsys: Capture, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = bodies()["Commit"]
    body["hotkey"] = _hotkey(key_file, capsys)
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(json.dumps(body).encode())))
    assert main(_seal_args(key_file, "-")) == 0
    envelope = capsys.readouterr().out
    assert json.loads(envelope)["body"] == body
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(envelope.encode())))
    assert main(["envelope", "verify", "-", "--now", "77"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["valid"] is True
    assert summary["exp_drand"] == 77


def test_seal_refuses_missing_and_invalid_bodies(
    key_file: Path, tmp_path: Path, capsys: Capture
) -> None:
    assert main(_seal_args(key_file, str(tmp_path / "nope.json"))) == 2
    assert "nope.json: no such file" in one_error_line(capsys)
    bad_json = tmp_path / "bad.json"
    bad_json.write_text('{"w": 1,')
    assert main(_seal_args(key_file, str(bad_json))) == 1
    assert "bad.json: JSON:" in one_error_line(capsys)
    dup = tmp_path / "dup.json"
    dup.write_text('{"w": 1, "w": 2}')
    assert main(_seal_args(key_file, str(dup))) == 1
    assert "duplicate key 'w'" in one_error_line(capsys)
    invalid = tmp_path / "invalid.json"
    invalid.write_text(json.dumps({**bodies()["Commit"], "w": True}))
    assert main(_seal_args(key_file, str(invalid))) == 1
    assert "SchemaError: Commit body: $.w: expected an int" in one_error_line(capsys)
    invalid.write_text("[1, 2]")
    assert main(_seal_args(key_file, str(invalid))) == 1
    assert "expected a JSON object" in one_error_line(capsys)
    assert main(_seal_args(key_file, str(tmp_path))) == 2
    assert "is a directory" in one_error_line(capsys)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("--run-id", RUN_ID.upper()), "--run-id"),
        (("--exp", "0"), "--exp"),
        (("--exp", "1.5"), "--exp"),
        (("--type", "LeafPreimage"), "--type"),
    ],
)
def test_seal_usage_errors(
    key_file: Path, capsys: Capture, change: tuple[str, str], message: str
) -> None:
    args = _seal_args(key_file, "-")
    args[args.index(change[0]) + 1] = change[1]
    assert main(args) == 2
    assert message in one_error_line(capsys)


def test_verify_errors(tmp_path: Path, capsys: Capture) -> None:
    assert main(["envelope", "verify", str(tmp_path / "none.json")]) == 2
    assert "no such file" in one_error_line(capsys)
    bad = tmp_path / "env.json"
    bad.write_text("{not json")
    assert main(["envelope", "verify", str(bad)]) == 1
    assert "JSON:" in one_error_line(capsys)
    bad.write_text(json.dumps({"v": "ht/1"}))
    assert main(["envelope", "verify", str(bad)]) == 1
    assert "invalid envelope: Malformed: envelope: missing key(s)" in one_error_line(capsys)
    assert main(["envelope", "verify", str(bad), "--now", "-3"]) == 2
    one_error_line(capsys)


def test_verify_reports_the_reason(key_file: Path, tmp_path: Path, capsys: Capture) -> None:
    body = bodies()["Accept"]  # hotkey is not this key's: sealing works, binding fails
    assert main(_seal_args(key_file, json_file(tmp_path, body), type_name="Accept")) == 0
    env_path = tmp_path / "env.json"
    env_path.write_text(capsys.readouterr().out)
    assert main(["envelope", "verify", str(env_path)]) == 1
    assert "UnauthorizedSigner: Accept: body hotkey is not the signer" in one_error_line(capsys)
    assert main(["envelope", "verify", str(env_path), "--run-id", "ab" * 32]) == 1
    assert "RunMismatch" in one_error_line(capsys)


def json_file(tmp_path: Path, value: object) -> str:
    path = tmp_path / "value.json"
    path.write_text(json.dumps(value))
    return str(path)


def test_jcs(tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    path = json_file(tmp_path, {"b": [1, "é", {"z": None, "a": True}], "a": "\u000f"})
    assert main(["jcs", path]) == 0
    assert (
        capsysbinary.readouterr().out == b'{"a":"\\u000f","b":[1,"\xc3\xa9",{"a":true,"z":null}]}'
    )
    Path(path).write_text('{"x": 1.5}')
    assert main(["jcs", path]) == 1
    err = capsysbinary.readouterr().err.decode()
    assert err.count("\n") == 1
    assert "floats are not allowed" in err


def test_usage(capsys: Capture) -> None:
    assert main([]) == 2
    assert "required" in one_error_line(capsys)
    assert main(["keys"]) == 2
    one_error_line(capsys)
    assert main(["--help"]) == 0
    assert "envelope" in capsys.readouterr().out
