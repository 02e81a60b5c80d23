"""Auditor fixtures: one built dataset, a carry (segments) and a reset (full) world over it,
and the honest round ``W`` of each, trained once (the process is configured for bitwise CPU
training by the suite-wide ``configured`` fixture of tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hypertrain.trainer.loop import RoundResult
from tests.auditor.world import World, build_dataset, make_world


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_dataset(tmp_path_factory.mktemp("auditor-data"))


@pytest.fixture(scope="session")
def carry(configured: None, data_dir: Path) -> World:
    """The segments-mode world (state_policy carry)."""
    return make_world(data_dir, "carry")


@pytest.fixture(scope="session")
def reset(configured: None, data_dir: Path) -> World:
    """The full-mode world (state_policy reset)."""
    return make_world(data_dir, "reset")


@pytest.fixture(scope="session")
def honest_carry(carry: World) -> RoundResult:
    return carry.train()


@pytest.fixture(scope="session")
def honest_reset(reset: World) -> RoundResult:
    return reset.train()
