"""miner.toml parsing: required and unknown keys, types, env overrides, relative paths."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from hypertrain.miner.config import DEFAULT_CHUNK_BYTES, load_config
from hypertrain.miner.errors import ConfigError
from hypertrain.miner.main import round_settings
from hypertrain.miner.round import DEFAULT_SETTINGS

BASE = (
    'api = "http://127.0.0.1:8000"\nkeyfile = "k.key"\nworkdir = "work"\ndata_dir = "/abs/data"\n'
)


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "conf" / "miner.toml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_and_relative_paths(tmp_path: Path) -> None:
    cfg = load_config(_write(tmp_path, BASE), environ={})
    assert cfg.keyfile == tmp_path / "conf" / "k.key"
    assert cfg.workdir == tmp_path / "conf" / "work"
    assert cfg.data_dir == Path("/abs/data")
    assert (cfg.poll_seconds, cfg.chunk_bytes, cfg.device) == (2.0, DEFAULT_CHUNK_BYTES, "cpu")
    assert cfg.allow_file_upload is False
    assert cfg.run_id is None
    assert cfg.retry_max_seconds == 10.0


def test_unknown_key_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown key 'pol_seconds'"):
        load_config(_write(tmp_path, BASE + "pol_seconds = 1\n"), environ={})


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        ('poll_seconds = "x"\n', "poll_seconds must be a float"),
        ("chunk_bytes = 0\n", "chunk_bytes"),
        ('device = "cuda"\n', "device"),
        ('run_id = "xyz"\n', "run_id"),
        ('owner_hotkey = "nope"\n', "owner_hotkey"),
        ("allow_file_upload = 1\n", "allow_file_upload must be a bool"),
        ("retry_max_seconds = 0.25\n", r"retry_max_seconds must be in \[0.5, 3600\]"),
        ("retry_max_seconds = 3601\n", "retry_max_seconds must be in"),
        ("retry_max_seconds = nan\n", "retry_max_seconds must be in"),
    ],
)
def test_bad_values(tmp_path: Path, extra: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_config(_write(tmp_path, BASE + extra), environ={})


def test_missing_key_and_bad_toml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="missing required key 'api'"):
        load_config(_write(tmp_path, BASE.split("\n", 1)[1]), environ={})
    with pytest.raises(ConfigError, match="invalid TOML"):
        load_config(_write(tmp_path, "api = \n"), environ={})
    with pytest.raises(ConfigError, match="no such config file"):
        load_config(tmp_path / "absent.toml", environ={})


def test_env_overrides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    env = {
        "HYPERTRAIN_MINER_POLL_SECONDS": "0.5",
        "HYPERTRAIN_MINER_ALLOW_FILE_UPLOAD": "true",
        "HYPERTRAIN_MINER_WORKDIR": "elsewhere",
        "HYPERTRAIN_MINER_CHUNK_BYTES": "1024",
        "HYPERTRAIN_MINER_RETRY_MAX_SECONDS": "2",
        "OTHER": "ignored",
    }
    cfg = load_config(_write(tmp_path, BASE), environ=env)
    assert cfg.poll_seconds == 0.5
    assert cfg.allow_file_upload is True
    assert cfg.workdir == tmp_path / "elsewhere"
    assert cfg.chunk_bytes == 1024
    assert cfg.retry_max_seconds == 2.0
    with pytest.raises(ConfigError, match="HYPERTRAIN_MINER_BOGUS"):
        load_config(_write(tmp_path, BASE), environ={"HYPERTRAIN_MINER_BOGUS": "1"})
    with pytest.raises(ConfigError, match="not a valid int"):
        load_config(_write(tmp_path, BASE), environ={"HYPERTRAIN_MINER_CHUNK_BYTES": "big"})


def test_the_command_line_takes_its_longest_retry_wait_from_the_config(tmp_path: Path) -> None:
    cfg = load_config(_write(tmp_path, BASE + "retry_max_seconds = 2.5\n"), environ={})
    settings = round_settings(cfg, start_wait=7.0)
    assert (settings.backoff.maximum, settings.backoff.initial) == (2.5, 0.5)
    assert settings.start_wait_seconds == 7.0
    assert attrs.evolve(settings, backoff=DEFAULT_SETTINGS.backoff, start_wait_seconds=120.0) == (
        DEFAULT_SETTINGS
    )
