"""Trainer fixtures (the process is configured by the suite-wide ``configured`` fixture)."""

from __future__ import annotations

import pytest

from hypertrain.protocol.manifest import RunManifest
from tests.trainer.helpers import in_process_env, tiny_manifest


@pytest.fixture
def manifest(configured: None) -> RunManifest:
    """The tiny carry manifest with the in-process env."""
    return tiny_manifest(env=in_process_env())
