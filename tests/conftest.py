"""Suite-wide fixtures. Package-specific fixtures live in each tests/<package>/conftest.py."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import torch

from hypertrain.trainer.determinism import configure, env_vars
from tests.trainer.helpers import in_process_env


@pytest.fixture(scope="session")
def configured() -> Iterator[None]:
    """``configure`` this process (1 thread, no pinned kernel path: torch is already loaded)."""
    env = in_process_env()
    saved_env = {name: os.environ.get(name) for name in env_vars(env)}
    threads = torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    precision = torch.get_float32_matmul_precision()
    configure(env)
    yield
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(deterministic)
    torch.set_float32_matmul_precision(precision)
    for name, value in saved_env.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
