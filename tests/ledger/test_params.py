"""The clock (epoch_of, round_of), the constants and the params' validation."""

from __future__ import annotations

import pytest

from hypertrain.ledger import (
    F_MIN_PPM,
    FULL_SHARE_MASS,
    MAX_ENTRIES,
    UNIT,
    LedgerParams,
    LedgerRefused,
)
from tests.ledger.support import make_params


def test_constants_are_the_specs() -> None:
    assert UNIT == FULL_SHARE_MASS == 10**6
    assert MAX_ENTRIES == 65_536
    assert F_MIN_PPM == 800_000


def test_defaults_are_the_specs() -> None:
    params = LedgerParams(challenge_slug="hypertrain")
    assert params.genesis_unix == 1_692_803_367  # drand quicknet
    assert (params.epoch_seconds, params.epochs_per_round) == (4320, 1)
    assert (params.vest_rounds, params.forgive_per_epoch) == (10, 1)
    assert params.max_entries == MAX_ENTRIES
    assert params.round_budget == 10**6


def test_epoch_and_round_of() -> None:
    params = make_params(epochs_per_round=3)
    assert params.round_budget == 3 * 10**6
    assert params.epoch_of(999) == params.round_of(999) == -1
    assert params.epoch_of(0) == -1
    assert [params.epoch_of(t) for t in (1000, 1099, 1100, 1299, 1300)] == [0, 0, 1, 2, 3]
    assert [params.round_of(t) for t in (1000, 1299, 1300, 1599, 1600)] == [0, 0, 1, 1, 2]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("challenge_slug", ""),
        ("challenge_slug", "a b"),
        ("genesis_unix", -1),
        ("epoch_seconds", 0),
        ("epochs_per_round", 0),
        ("vest_rounds", -1),
        ("forgive_per_epoch", -1),
        ("max_entries", 0),
        ("epoch_seconds", True),
        ("epoch_seconds", 1.5),
    ],
)
def test_bad_params_are_refused(field: str, value: object) -> None:
    with pytest.raises(LedgerRefused, match=field):
        make_params(**{field: value})


def test_params_record_every_field() -> None:
    assert make_params().to_record() == {
        "challenge_slug": "hypertrain",
        "genesis_unix": 1000,
        "epoch_seconds": 100,
        "epochs_per_round": 1,
        "vest_rounds": 2,
        "forgive_per_epoch": 1,
        "max_entries": 65_536,
    }
