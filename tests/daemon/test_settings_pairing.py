"""The daemon's pairing and sybil settings (issue 19 items 1-2): defaults, environment, and the
demo's per-key test mode refused without a local beacon."""

from __future__ import annotations

import pytest

from hypertrain.daemon.settings import ConfigError, load_settings


def test_defaults_compare_addresses_and_limit_minting() -> None:
    c = load_settings([], {}).coordinator
    assert (c.compute_networks, c.trusted_proxies) == ("address", "")
    assert (c.compute_pair_min_age_s, c.compute_mint_per_minute) == (3600, 10)
    assert c.compute_probation_answers == 10


def test_environment_variables() -> None:
    env = {
        "HYPERTRAIN_COMPUTE_PAIR_MIN_AGE_S": "0",
        "HYPERTRAIN_COMPUTE_MINT_PER_MINUTE": "3",
        "HYPERTRAIN_COMPUTE_PROBATION_ANSWERS": "25",
        "HYPERTRAIN_TRUSTED_PROXIES": "10.0.0.1, 10.1.0.0/16",
    }
    c = load_settings([], env).coordinator
    assert (c.compute_pair_min_age_s, c.compute_mint_per_minute) == (0, 3)
    assert (c.compute_probation_answers, c.trusted_proxies) == (25, "10.0.0.1, 10.1.0.0/16")


def test_per_key_networks_only_with_a_local_beacon() -> None:
    env = {"HYPERTRAIN_COMPUTE_NETWORKS": "per-key"}
    with pytest.raises(ConfigError, match=r"per-key .* is the demo's test mode; it needs"):
        load_settings([], env)
    local = load_settings(["--beacon", "local"], env)
    assert local.coordinator.compute_networks == "per-key"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"HYPERTRAIN_COMPUTE_MINT_PER_MINUTE": "0"}, "HYPERTRAIN_COMPUTE_MINT_PER_MINUTE"),
        ({"HYPERTRAIN_COMPUTE_PAIR_MIN_AGE_S": "-1"}, "HYPERTRAIN_COMPUTE_PAIR_MIN_AGE_S"),
        ({"HYPERTRAIN_COMPUTE_NETWORKS": "loopback"}, "HYPERTRAIN_COMPUTE_NETWORKS"),
        ({"HYPERTRAIN_TRUSTED_PROXIES": "10.0.0.1 proxy.local"}, "trusted_proxies: not an"),
    ],
)
def test_bad_values_name_the_setting(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings([], env)
