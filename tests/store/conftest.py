"""Fixtures for the store tests: an inline database and an object store in ``tmp_path``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from hypertrain.store import Database, ObjectStore, open_database
from nurseries import FixedClock

EPOCH = 1_700_000_000.0


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    async with open_database(tmp_path / "state.db", wall_clock=FixedClock(EPOCH)) as database:
        yield database


@pytest.fixture
def objects(tmp_path: Path) -> ObjectStore:
    return ObjectStore.open(tmp_path / "objects")
