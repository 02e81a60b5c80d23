"""Shared values for the round-logic tests: the example manifest, hotkeys, a run id."""

from __future__ import annotations

import pytest

from hypertrain.protocol.example import example_manifest
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.manifest import RunManifest

HOTKEYS = tuple(Keypair.from_seed(bytes([i + 1]) * 32).ss58 for i in range(12))
RUN_HEX = bytes(range(32)).hex()
SIG_A = bytes(range(48))
SIG_B = bytes(range(100, 148))


@pytest.fixture(scope="session")
def manifest() -> RunManifest:
    return example_manifest()
