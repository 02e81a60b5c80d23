"""Daemon settings: CLI > environment > TOML > defaults; every problem is one named line."""

from __future__ import annotations

from pathlib import Path

import pytest

from hypertrain.beacon import DEFAULT_RELAYS
from hypertrain.daemon.settings import ConfigError, load_settings


def test_defaults() -> None:
    s = load_settings([], {})
    assert (s.host, s.port, s.beacon, s.relays, s.grace, s.log_format) == (
        "127.0.0.1",
        8000,
        "relays",
        DEFAULT_RELAYS,
        5.0,
        "text",
    )
    assert s.local_period is None
    c = s.coordinator
    assert c.state_dir == Path("/data")
    assert c.slug == "hypertrain"
    assert c.master_url is None  # unset: the roster alone is the registry
    assert (c.epoch_seconds, c.epochs_per_round, c.vest_rounds) == (4320, 1, 10)
    assert (c.admin_token_file, c.coord_key_file, c.genesis_unix) == (None, None, None)
    assert c.body_limit == 1048576


def test_environment_variables_of_the_operator_guide() -> None:
    env = {
        "CHALLENGE_SLUG": "ht-test",
        "CHALLENGE_STATE_DIR": "/srv/ht",
        "CHALLENGE_MASTER_URL": "http://master:1",
        "CHALLENGE_INTERNAL_TOKEN_FILE": "/s/internal",
        "CHALLENGE_ADMIN_TOKEN_FILE": "/s/admin",
        "CHALLENGE_WORKER_TOKEN_FILE": "/s/worker",
        "HYPERTRAIN_COORD_KEY_FILE": "/s/coord.key",
        "HYPERTRAIN_OWNER_HOTKEY": "5Owner",
        "HYPERTRAIN_EPOCH_SECONDS": "360",
        "HYPERTRAIN_EPOCHS_PER_ROUND": "2",
        "HYPERTRAIN_VEST_ROUNDS": "7",
        "HYPERTRAIN_GENESIS_UNIX": "1700000000",
        "HYPERTRAIN_UNRELATED": "ignored",
    }
    c = load_settings([], env).coordinator
    assert c.slug == "ht-test"
    assert c.state_dir == Path("/srv/ht")
    assert c.master_url == "http://master:1"
    assert (c.internal_token_file, c.admin_token_file, c.worker_token_file) == (
        Path("/s/internal"),
        Path("/s/admin"),
        Path("/s/worker"),
    )
    assert c.coord_key_file == Path("/s/coord.key")
    assert c.owner_hotkey == "5Owner"
    assert (c.epoch_seconds, c.epochs_per_round, c.vest_rounds, c.genesis_unix) == (
        360,
        2,
        7,
        1700000000,
    )


def test_empty_environment_variable_is_unset() -> None:
    c = load_settings([], {"CHALLENGE_ADMIN_TOKEN_FILE": "", "HYPERTRAIN_VEST_ROUNDS": " "})
    assert c.coordinator.admin_token_file is None
    assert c.coordinator.vest_rounds == 10


def test_precedence_cli_over_env_over_toml_over_defaults(tmp_path: Path) -> None:
    toml = tmp_path / "d.toml"
    toml.write_text(
        'port = 9000\nhost = "0.0.0.0"\nvest_rounds = 3\nepoch_seconds = 100\n'
        'beacon = "local"\nlocal_period = 0.25\nrelays = ["http://r1", "http://r2/"]\n'
        "body_limit = 2048\n"
    )
    s = load_settings(
        ["--config", str(toml), "--port", "9001"],
        {"HYPERTRAIN_VEST_ROUNDS": "4"},
    )
    assert s.port == 9001  # CLI over TOML
    assert s.host == "0.0.0.0"  # TOML over default
    assert s.coordinator.vest_rounds == 4  # env over TOML
    assert s.coordinator.epoch_seconds == 100  # TOML over default
    assert (s.beacon, s.local_period) == ("local", 0.25)
    assert s.relays == ("http://r1", "http://r2")
    assert s.coordinator.body_limit == 2048


def test_cli_flags() -> None:
    s = load_settings(
        [
            "--host=10.0.0.1",
            "--port=0",
            "--beacon=local",
            "--local-period=0.5",
            "--grace=2",
            "--log-format=json",
            "--relay=http://a",
            "--relay=http://b",
        ],
        {},
    )
    assert (s.host, s.port, s.beacon, s.local_period, s.grace, s.log_format) == (
        "10.0.0.1",
        0,
        "local",
        0.5,
        2.0,
        "json",
    )
    assert s.relays == ("http://a", "http://b")


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--port", "99999"], {}, "--port: expected an integer 0..65535, got 99999"),
        (["--port", "http"], {}, "--port: expected an integer 0..65535, got 'http'"),
        (["--beacon", "sky"], {}, "--beacon: expected relays or local, got 'sky'"),
        (["--grace", "nan"], {}, "--grace: expected a number >= 0, got 'nan'"),
        (["--local-period", "0"], {}, "--local-period: expected a number > 0, got '0'"),
        (["--log-format", "xml"], {}, "--log-format: expected text or json, got 'xml'"),
        (["--relay", "ftp://x", "--relay", "http://y"], {}, "--relay: relay 'ftp://x' is not"),
        (["--relay", "http://x"], {}, "relays: the relays beacon needs at least 2 distinct"),
        (["--bogus"], {}, "unrecognized arguments: --bogus"),
        ([], {"HYPERTRAIN_EPOCH_SECONDS": "0"}, "HYPERTRAIN_EPOCH_SECONDS: expected an integer"),
        ([], {"HYPERTRAIN_VEST_ROUNDS": "1.5"}, "HYPERTRAIN_VEST_ROUNDS: expected an integer"),
        ([], {"HYPERTRAIN_GENESIS_UNIX": "-1"}, "HYPERTRAIN_GENESIS_UNIX: expected an integer"),
        ([], {"CHALLENGE_SLUG": "two words"}, "settings: slug must be a non-empty token"),
    ],
)
def test_invalid_values_are_one_line_naming_the_setting(
    argv: list[str], env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(argv, env)
    assert message in info.value.detail
    assert "\n" not in info.value.detail


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("prot = 8000\n", "unknown key 'prot'"),
        ("port = true\n", "port: expected an integer 0..65535, got True"),
        ('port = "8000"\n', None),  # a string of digits is accepted, as in the environment
        ("grace = -1\n", "grace: expected a number >= 0, got -1"),
        ('relays = "http://a"\n', "relays: expected a non-empty list of relay URLs"),
        ("[coordinator]\nslug = 'x'\n", "unknown key 'coordinator'"),
        ("port = \n", "not valid TOML"),
    ],
)
def test_toml_errors_name_file_and_key(tmp_path: Path, content: str, message: str | None) -> None:
    toml = tmp_path / "d.toml"
    toml.write_text(content)
    if message is None:
        assert load_settings(["--config", str(toml)], {}).port == 8000
        return
    with pytest.raises(ConfigError) as info:
        load_settings(["--config", str(toml)], {})
    assert message in info.value.detail
    assert str(toml) in info.value.detail
    assert "\n" not in info.value.detail


def test_missing_toml_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_settings(["--config", str(tmp_path / "nope.toml")], {})


def test_the_fallback_scorer_is_warm_unless_turned_off(tmp_path: Path) -> None:
    toml = tmp_path / "d.toml"
    toml.write_text('scorer = "cold"\n')
    assert load_settings([], {}).scorer == "warm"
    assert load_settings([], {"HYPERTRAIN_SCORER": "cold"}).scorer == "cold"
    assert load_settings(["--config", str(toml)], {}).scorer == "cold"
    with pytest.raises(ConfigError, match="HYPERTRAIN_SCORER: expected warm or cold"):
        load_settings([], {"HYPERTRAIN_SCORER": "hot"})
