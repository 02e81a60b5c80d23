"""Fixtures of the ledger tests: an open ledger over a fresh state directory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hypertrain.ledger import Ledger
from tests.ledger.support import make_params


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    with Ledger.open(tmp_path, make_params()) as opened:
        yield opened
