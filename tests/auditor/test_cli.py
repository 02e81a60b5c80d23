"""The command line: help, one-line usage errors (exit 2), the env gate, and ``--once`` runs
against the fake coordinator (real time: the job takes a second of CPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import attrs
import pytest
import torch

from hypertrain.auditor.main import default_data_dir, main
from hypertrain.protocol.keys import Keypair, write_seed_file
from hypertrain.protocol.manifest import ReferenceEnv
from hypertrain.trainer.determinism import env_vars
from hypertrain.trainer.loop import RoundResult
from tests.auditor.fake import API, TOKEN, FakeCoordinator, coordinator
from tests.auditor.world import World, make_job
from tests.cli_support import one_error_line

ROOT = Path(__file__).resolve().parents[2]
RUN = "ab" * 32
Capture = pytest.CaptureFixture[str]


def _files(tmp_path: Path, seed: bytes = b"\x04" * 32) -> tuple[Path, Path]:
    key, token = tmp_path / "auditor.key", tmp_path / "token"
    write_seed_file(key, seed)
    token.write_text(TOKEN + "\n", encoding="utf-8")
    token.chmod(0o600)
    return key, token


def _argv(api: str, run: str, key: Path, token: Path, *extra: str) -> list[str]:
    return ["--api", api, "--run-id", run, "--token-file", str(token), "--keyfile", str(key),
            *extra]  # fmt: skip


def test_help(capsys: Capture) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["--help"])
    assert caught.value.code == 0
    out = capsys.readouterr().out
    for option in ("--api", "--run-id", "--token-file", "--keyfile", "--data-dir", "--once",
                   "--json"):  # fmt: skip
        assert option in out


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--api", API, "--run-id", RUN, "--token-file", "t"],
        ["--api", "ftp://x", "--run-id", RUN, "--token-file", "t", "--keyfile", "k"],
        ["--api", API, "--run-id", "nothex", "--token-file", "t", "--keyfile", "k"],
        ["--api", API, "--run-id", RUN, "--token-file", "t", "--keyfile", "k", "--bogus"],
    ],
)
def test_usage_errors_exit_2_with_one_line(argv: list[str], capsys: Capture) -> None:
    with pytest.raises(SystemExit) as caught:
        main(argv)
    assert caught.value.code == 2
    assert one_error_line(capsys).startswith("hypertrain-auditor: error: ")


def test_unreadable_token_and_key_files_exit_2(tmp_path: Path, capsys: Capture) -> None:
    key, token = _files(tmp_path)
    assert main(_argv(API, RUN, key, tmp_path / "absent")) == 2
    assert "--token-file" in one_error_line(capsys)
    token.write_text("two tokens\n", encoding="utf-8")
    assert main(_argv(API, RUN, key, token)) == 2
    assert "one token" in one_error_line(capsys)
    token.write_text(TOKEN, encoding="utf-8")
    assert main(_argv(API, RUN, tmp_path / "absent.key", token)) == 2
    assert "--keyfile" in one_error_line(capsys)
    os.chmod(key, 0o644)
    assert main(_argv(API, RUN, key, token)) == 2
    assert "--keyfile" in one_error_line(capsys)


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660], ids=oct)
def test_a_token_file_others_may_read_or_a_symlink_is_refused(
    tmp_path: Path, capsys: Capture, mode: int
) -> None:
    key, token = _files(tmp_path)
    token.chmod(mode)
    assert main(_argv(API, RUN, key, token)) == 2
    assert f"--token-file {token}: mode {mode:04o} lets others read it; run chmod 600 {token}" in (
        one_error_line(capsys)
    )
    token.chmod(0o600)
    link = tmp_path / "link"
    link.symlink_to(token)
    assert main(_argv(API, RUN, key, link)) == 2
    assert f"--token-file {link}: cannot open a symlink" in one_error_line(
        capsys, stdout_empty=False
    )


def _run(fake: FakeCoordinator, world: World, tmp_path: Path, *extra: str, **kw: object) -> int:
    key, token = _files(tmp_path, kw.pop("seed", b"\x04" * 32))  # type: ignore[arg-type]
    argv = _argv(API, world.run_id, key, token, "--data-dir", str(tmp_path / "data"), *extra)
    configure = kw.pop("configure", lambda env: None)
    return main(argv, transport=fake.transport(), configure=configure)  # type: ignore[arg-type]


def test_once_when_idle_exits_0(carry: World, tmp_path: Path, capsys: Capture) -> None:
    assert _run(coordinator(carry), carry, tmp_path, "--once") == 0
    assert "idle" in one_error_line(capsys)


def test_once_audits_one_job_and_prints_json(
    carry: World, honest_carry: RoundResult, tmp_path: Path, capsys: Capture
) -> None:
    fake = coordinator(carry, make_job(carry, honest_carry))
    assert _run(fake, carry, tmp_path, "--once", "--json") == 0
    (line,) = capsys.readouterr().out.splitlines()
    report = json.loads(line)
    assert (report["state"], report["result"], report["w"]) == ("done", "MATCH", 1)
    assert (tmp_path / "data" / "datasets").is_dir()


def test_once_exits_1_when_the_job_fails(
    carry: World, honest_carry: RoundResult, tmp_path: Path, capsys: Capture
) -> None:
    fake = coordinator(carry, make_job(carry, honest_carry, segments=[(2, 3)]))
    assert _run(fake, carry, tmp_path, "--once") == 1
    line = one_error_line(capsys)
    assert "-> failed" in line
    assert "retry=no" in line


def test_a_key_that_is_not_an_auditor_exits_2(
    carry: World, tmp_path: Path, capsys: Capture
) -> None:
    assert _run(coordinator(carry), carry, tmp_path, "--once", seed=b"\x09" * 32) == 2
    assert "is not an auditor" in one_error_line(capsys)


def test_an_env_the_process_cannot_match_exits_2(
    carry: World, tmp_path: Path, capsys: Capture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real determinism gate: the manifest pins a CPU kernel path other than the live one
    (torch is loaded in this process, so no setting can change it)."""
    from hypertrain.auditor.session import default_configure

    live = str(torch.backends.cpu.get_cpu_capability()).lower()
    env = ReferenceEnv(
        CUBLAS_WORKSPACE_CONFIG=":4096:8", CUDA_DISABLE_PTX_JIT="1", cpu_threads=1,
        ATEN_CPU_CAPABILITY="avx2" if live != "avx2" else "avx512",
    )  # fmt: skip
    for name in env_vars(env):  # restored by monkeypatch after the test
        monkeypatch.setenv(name, os.environ.get(name, ""))
    ref = attrs.evolve(carry.manifest.reference_spec, env=env)
    world = attrs.evolve(carry, manifest=attrs.evolve(carry.manifest, reference_spec=ref))
    fake = coordinator(world)
    assert _run(fake, world, tmp_path, "--once", configure=default_configure) == 2
    line = one_error_line(capsys)
    assert "determinism" in line
    assert "ATen" in line
    assert fake.paths("POST", "/v1/worker/lease") == []


def test_the_default_data_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert default_data_dir() == tmp_path / "hypertrain" / "auditor"
    monkeypatch.delenv("XDG_STATE_HOME")
    assert default_data_dir() == Path.home() / ".local" / "state" / "hypertrain" / "auditor"


def test_the_command_line_does_not_import_torch() -> None:
    code = (
        "import sys, hypertrain.auditor, hypertrain.auditor.main; "
        "sys.exit(1 if 'torch' in sys.modules else 0)"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], env=env, check=False, timeout=120)
    assert done.returncode == 0


def test_python_dash_m_help() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "hypertrain.auditor", "--help"],
        env=env, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0
    assert "--token-file" in done.stdout


def test_the_launcher_and_console_script_exist() -> None:
    launcher = ROOT / "bin" / "hypertrain-auditor"
    assert os.access(launcher, os.X_OK)
    assert "hypertrain-auditor" in launcher.read_text(encoding="utf-8")
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert 'hypertrain-auditor = "hypertrain.auditor.main:main"' in text


def test_keypair_of_the_default_seed_is_the_manifests_auditor(carry: World) -> None:
    assert Keypair.from_seed(b"\x04" * 32).ss58 in carry.manifest.auditors


def test_the_public_surface_resolves() -> None:
    import hypertrain.auditor as package

    assert len(set(package.__all__)) == len(package.__all__)
    assert [name for name in package.__all__ if not hasattr(package, name)] == []
