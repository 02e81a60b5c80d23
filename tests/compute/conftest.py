"""Fixtures of the compute tests: a real migrated database and a :class:`Book` driver."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from hypertrain.store import Database, open_database
from nurseries import FixedClock
from tests.compute.support import Book


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    async with open_database(tmp_path / "state.db", wall_clock=FixedClock(0.0)) as database:
        yield database


@pytest.fixture
def book(db: Database) -> Book:
    return Book(db)
