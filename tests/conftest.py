"""Suite-wide fixtures. Package-specific fixtures live in each tests/<package>/conftest.py."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import torch
from hypothesis import HealthCheck, settings

from hypertrain.trainer.determinism import configure, env_vars
from tests.trainer.helpers import in_process_env

# Property tests are judged by their examples, never by the clock: no per-example deadline and
# no "input generation is slow" health check, which a busy machine trips (a 1 s budget for
# generating big stacks failed tests/aggregator/test_screenpass.py in a full run). Loaded here,
# before any test module builds its @settings, so those inherit it.
settings.register_profile("hypertrain", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("hypertrain")


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
