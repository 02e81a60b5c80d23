"""The held-out loss settings: ``holdout_dir`` (TOML, env, flag) and ``heldout_samples``."""

from __future__ import annotations

from pathlib import Path

import pytest

from hypertrain.coordinator.settings import CoordinatorSettings
from hypertrain.daemon.settings import ConfigError, load_settings


def test_unset_by_default() -> None:
    c = load_settings([], {}).coordinator
    assert (c.holdout_dir, c.heldout_samples) == (None, 64)


def test_environment() -> None:
    env = {"HYPERTRAIN_HOLDOUT_DIR": "/srv/holdout", "HYPERTRAIN_HELDOUT_SAMPLES": "8"}
    c = load_settings([], env).coordinator
    assert (c.holdout_dir, c.heldout_samples) == (Path("/srv/holdout"), 8)


def test_flag_over_environment_over_toml(tmp_path: Path) -> None:
    toml = tmp_path / "d.toml"
    toml.write_text('holdout_dir = "/toml"\nheldout_samples = 5\n')
    config = ["--config", str(toml)]
    assert load_settings(config, {}).coordinator.holdout_dir == Path("/toml")
    assert load_settings(config, {}).coordinator.heldout_samples == 5
    env = {"HYPERTRAIN_HOLDOUT_DIR": "/env", "HYPERTRAIN_HELDOUT_SAMPLES": "6"}
    c = load_settings(config, env).coordinator
    assert (c.holdout_dir, c.heldout_samples) == (Path("/env"), 6)
    flagged = load_settings([*config, "--holdout-dir", "/flag"], env).coordinator
    assert flagged.holdout_dir == Path("/flag")


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (
            [],
            {"HYPERTRAIN_HELDOUT_SAMPLES": "0"},
            "HYPERTRAIN_HELDOUT_SAMPLES: expected an integer",
        ),
        (["--holdout-dir", " "], {}, "--holdout-dir: expected a non-empty string"),
    ],
)
def test_invalid_values_name_the_setting(
    argv: list[str], env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(argv, env)
    assert message in info.value.detail


def test_coordinator_settings_check_heldout_samples(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="heldout_samples"):
        CoordinatorSettings(state_dir=tmp_path, heldout_samples=0)
    assert CoordinatorSettings(state_dir=tmp_path, holdout_dir="x").holdout_dir == Path("x")
