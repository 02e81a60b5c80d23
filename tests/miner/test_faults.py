"""The miner's test fault variable (``HYPERTRAIN_TEST_MINER_FAULT``): what it reads, what it
refuses, and that a malformed value stops ``hypertrain-miner run`` with a usage error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hypertrain.miner.faults import (
    DRILL_ULPS,
    NO_FAULTS,
    TEST_FAULT_ENV,
    fault_from_spec,
    faults_from_env,
)
from hypertrain.trainer.fault import Fault


def test_an_op_spec_is_a_fault_with_the_drill_size_by_default() -> None:
    assert fault_from_spec("step=6;layer=1;op=mlp") == Fault(6, 1, "mlp", 0, DRILL_ULPS)
    spec = "step=3;layer=2;op=update;index=7;ulps=1"
    assert fault_from_spec(spec) == Fault(3, 2, "update", 7, 1)
    assert faults_from_env({}) == NO_FAULTS
    assert faults_from_env({TEST_FAULT_ENV: ""}) == NO_FAULTS
    faults = faults_from_env({TEST_FAULT_ENV: "step=6;layer=1;op=mlp"})
    assert faults.fault == faults.recompute == Fault(6, 1, "mlp", 0, DRILL_ULPS)
    assert faults.training(0) == faults.fault  # stands by it: training, rerun, Bisects


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ("step=6;layer=1", "required"),
        ("step=6;layer=1;op=conv", "not an op"),
        ("step=x;layer=1;op=mlp", "non-negative integer"),
        ("step=6;layer=1;op=mlp;op=attn", "expected"),
        ("step=6;layer=1;op=mlp;colour=red", "expected"),
        ("step=-1;layer=1;op=mlp", "non-negative integer"),
    ],
)
def test_a_malformed_spec_is_refused_naming_the_problem(spec: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        fault_from_spec(spec)


def test_a_malformed_variable_is_a_usage_error_of_the_miner(tmp_path: Path) -> None:
    config = tmp_path / "miner.toml"
    config.write_text('api = "http://127.0.0.1:1"\nkeyfile = "k"\nworkdir = "w"\n')
    (tmp_path / "k").write_text("00" * 32)
    (tmp_path / "k").chmod(0o600)
    done = subprocess.run(
        [sys.executable, "-m", "hypertrain.miner", "run", "--config", str(config)],
        env={"PATH": "/usr/bin:/bin", TEST_FAULT_ENV: "step=6;op=mlp"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    assert f"{TEST_FAULT_ENV}: " in done.stderr
    assert "required" in done.stderr
