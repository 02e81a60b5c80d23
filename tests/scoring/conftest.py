"""Scoring fixtures: a delta-loss job's input files on disk."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.scoring.helpers import write_job


@pytest.fixture
def job(tmp_path: Path) -> dict[str, Path]:
    """model.json, state.bin, delta.bin and trace.u16 of the test-mode model."""
    return write_job(tmp_path / "job")
