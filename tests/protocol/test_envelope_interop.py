"""Envelopes checked against an independent re-implementation of spec section 2.3.

The helpers here use pynacl, rfc8785, hashlib and base58 directly, never our modules, so a
mistake shared by our sealing and our verification cannot hide. Envelopes come from the CLI,
both in-process (``main``) and as a real ``python -m hypertrain`` subprocess.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import base58
import nacl.signing
import pytest
import rfc8785

from hypertrain.cli import main
from hypertrain.protocol.envelope import verify
from hypertrain.protocol.messages import Accept, RoundOpen
from tests.protocol.wire_samples import RUN_ID, bodies

ROOT = Path(__file__).resolve().parents[2]
EXP = 4242


def _ss58(public_key: bytes) -> str:
    payload = b"\x2a" + public_key
    checksum = hashlib.blake2b(b"SS58PRE" + payload, digest_size=64).digest()[:2]
    return str(base58.b58encode(payload + checksum).decode("ascii"))


def _message(env: dict[str, Any]) -> bytes:
    digest = hashlib.sha256(rfc8785.dumps(env["body"])).hexdigest()
    parts = (env["type"], digest, str(env["exp_drand"]), env["run_id"])
    return b"hypertrain/1|" + "|".join(parts).encode()


def independent_verify(env: dict[str, Any]) -> None:
    """Raise unless ``env`` is a valid ht/1 envelope per the spec's text."""
    assert set(env) == {"v", "type", "run_id", "body", "signer", "exp_drand", "sig"}
    assert env["v"] == "ht/1"
    assert type(env["exp_drand"]) is int
    raw = base58.b58decode(env["signer"])
    assert len(raw) == 35
    assert raw[0] == 42
    assert _ss58(raw[1:33]) == env["signer"]
    nacl.signing.VerifyKey(raw[1:33]).verify(_message(env), bytes.fromhex(env["sig"]))


def independent_seal(seed: bytes, type_name: str, body: Any, exp: int) -> dict[str, Any]:
    key = nacl.signing.SigningKey(seed)
    env = {"v": "ht/1", "type": type_name, "run_id": RUN_ID, "body": body, "exp_drand": exp}
    env["signer"] = _ss58(bytes(key.verify_key))
    env["sig"] = key.sign(_message(env)).signature.hex()
    return env


def _seed_of(key_file: Path) -> bytes:
    return bytes.fromhex(key_file.read_text().strip())


def _run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "hypertrain", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=60,
        check=False,
    )


def test_in_process_cli_envelope_verifies_independently(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key_file, body_file = tmp_path / "miner.key", tmp_path / "accept.json"
    assert main(["keys", "new", "--out", str(key_file)]) == 0
    shown = json.loads(capsys.readouterr().out)
    public = bytes(nacl.signing.SigningKey(_seed_of(key_file)).verify_key)
    assert shown == {"ss58": _ss58(public), "public_key": public.hex()}

    body = bodies()["Accept"]
    body["hotkey"] = shown["ss58"]
    body_file.write_text(json.dumps(body, indent=2))
    args = ["envelope", "seal", "--key", str(key_file), "--type", "Accept"]
    args += ["--run-id", RUN_ID, "--exp", str(EXP), "--body", str(body_file)]
    assert main(args) == 0
    env = json.loads(capsys.readouterr().out)
    independent_verify(env)
    assert env["body"] == body
    assert env["signer"] == shown["ss58"]
    message = verify(env, expected_run_id=RUN_ID, now_round=EXP).message
    assert isinstance(message, Accept)
    assert message.hotkey == shown["ss58"]


def test_subprocess_cli_seal_verify_and_tamper(tmp_path: Path) -> None:
    key_file, body_file, env_file = tmp_path / "k", tmp_path / "body.json", tmp_path / "env.json"
    made = _run_cli("keys", "new", "--out", str(key_file))
    assert made.returncode == 0, made.stderr
    hotkey = json.loads(made.stdout)["ss58"]
    body = bodies()["Commit"]
    body["hotkey"] = hotkey
    body_file.write_text(json.dumps(body))
    sealed = _run_cli(
        "envelope", "seal", "--key", str(key_file), "--type", "Commit", "--run-id", RUN_ID,
        "--exp", str(EXP), "--body", str(body_file),
    )  # fmt: skip
    assert sealed.returncode == 0, sealed.stderr
    env = json.loads(sealed.stdout)
    independent_verify(env)

    env_file.write_text(sealed.stdout)
    checked = _run_cli("envelope", "verify", str(env_file), "--now", str(EXP))
    assert checked.returncode == 0, checked.stderr
    summary = json.loads(checked.stdout)
    assert summary["valid"] is True
    assert summary["type"] == "Commit"
    assert summary["replay_key"] == [RUN_ID, "0", "Commit", hotkey, hotkey]

    env["body"]["tokens"] += 1
    env_file.write_text(json.dumps(env))
    tampered = _run_cli("envelope", "verify", str(env_file))
    assert tampered.returncode == 1
    assert tampered.stdout == ""
    assert tampered.stderr.strip().splitlines() == [
        "hypertrain: invalid envelope: SignatureError: envelope: signature does not verify"
    ]


def test_independently_sealed_envelope_passes_our_verify(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seed = bytes(range(32))
    body = bodies()["RoundOpen"]
    env = independent_seal(seed, "RoundOpen", body, EXP)
    message = verify(env, expected_run_id=RUN_ID, now_round=EXP).message
    assert isinstance(message, RoundOpen)
    assert message.w == 0
    path = tmp_path / "env.json"
    path.write_text(json.dumps(env))
    assert main(["envelope", "verify", str(path), "--now", str(EXP), "--run-id", RUN_ID]) == 0
    assert json.loads(capsys.readouterr().out)["signer"] == env["signer"]
    assert main(["envelope", "verify", str(path), "--now", str(EXP + 1)]) == 1
    assert "Expired" in capsys.readouterr().err
