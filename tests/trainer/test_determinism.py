"""Process setup and cross-process bitwise training (spec 5.1, DESIGN.md section 8)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import attrs
import pytest
import torch

from hypertrain.trainer.determinism import check_live, live_problems
from hypertrain.trainer.errors import DeterminismError
from tests.trainer.helpers import in_process_env

ROOT = Path(__file__).resolve().parents[2]

_TRAIN_CHILD = """
import hashlib, json, sys
from tests.trainer.helpers import RUN_ID, synthetic_round, tiny_manifest
from hypertrain.trainer.determinism import configure
manifest = tiny_manifest()
assert "torch" not in sys.modules
configure(manifest.reference_spec.env)
import torch
from hypertrain.protocol.tensorhash import th_hex
from hypertrain.trainer.codec import compress
from hypertrain.trainer.loop import train_round
from hypertrain.trainer.params import init_params
ids, rows = synthetic_round(manifest, 11)
r = train_round(manifest, RUN_ID, 0, init_params(manifest.model), ids, rows)
raw = b"".join(r.delta[n].astype("<f4").tobytes() for n in sorted(r.delta))
print(json.dumps({
    "leaves_root": r.leaves_root,
    "metrics_root": r.metrics_root,
    "final_theta_hash": th_hex(r.theta_end),
    "delta_raw_sha256": hashlib.sha256(raw).hexdigest(),
    "delta_hash": hashlib.sha256(compress(r.delta, None, 0.0).payload).hexdigest(),
    "capability": torch.backends.cpu.get_cpu_capability(),
    "threads": torch.get_num_threads(),
    "deterministic": torch.are_deterministic_algorithms_enabled(),
    "inductor": "torch._inductor" in sys.modules,
}))
"""

_LATE_CHILD = """
import json, torch
from tests.trainer.helpers import tiny_manifest
from hypertrain.trainer.determinism import configure
from hypertrain.trainer.errors import DeterminismError
live = torch.backends.cpu.get_cpu_capability()
try:
    configure(tiny_manifest().reference_spec.env)
    print(json.dumps({"live": live, "error": None}))
except DeterminismError as e:
    print(json.dumps({"live": live, "error": str(e)}))
"""


def _start(code: str) -> subprocess.Popen[str]:
    """A fresh interpreter (no inherited kernel-path or thread variables) running ``code``."""
    env = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", "MKL_CBWR")}
    env["PYTHONPATH"] = str(ROOT)
    env.pop("OMP_NUM_THREADS", None)
    return subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _result(proc: subprocess.Popen[str]) -> dict[str, object]:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    result: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return result


def _child(code: str) -> dict[str, object]:
    return _result(_start(code))


def test_two_processes_train_the_same_round_bit_for_bit() -> None:
    procs = [_start(_TRAIN_CHILD), _start(_TRAIN_CHILD)]  # concurrently: separate processes
    first, second = (_result(p) for p in procs)
    assert first == second
    assert str(first["capability"]).lower() == "default"  # set before torch was imported
    assert first["threads"] == 1
    # deterministic algorithms on without importing torch.compile's inductor (1.1 s a process)
    assert (first["deterministic"], first["inductor"]) == (True, False)


def test_torch_imported_before_configure_is_refused() -> None:
    result = _child(_LATE_CHILD)
    if str(result["live"]).lower() == "default":
        pytest.skip("this CPU's best kernel path already is the generic one")
    assert "ATen runs" in str(result["error"])


def test_check_live_names_each_difference(configured: None) -> None:
    check_live(in_process_env())
    with pytest.raises(DeterminismError, match="threads"):
        check_live(in_process_env(threads=torch.get_num_threads() + 2))
    env = attrs.evolve(in_process_env(), MKL_CBWR="COMPATIBLE")
    assert any("MKL_CBWR" in p for p in live_problems(env))
    torch.use_deterministic_algorithms(False)
    try:
        with pytest.raises(DeterminismError, match="deterministic"):
            check_live(in_process_env())
    finally:
        torch.use_deterministic_algorithms(True)
    live = str(torch.backends.cpu.get_cpu_capability())
    other = "default" if live.lower() != "default" else "avx2"
    pinned = attrs.evolve(in_process_env(), ATEN_CPU_CAPABILITY=other)
    os.environ["ATEN_CPU_CAPABILITY"] = other
    try:
        assert any("ATen runs" in p for p in live_problems(pinned))
    finally:
        del os.environ["ATEN_CPU_CAPABILITY"]


def test_training_refuses_a_mismatched_process(configured: None) -> None:
    from hypertrain.trainer.loop import train_round
    from hypertrain.trainer.params import init_params
    from tests.trainer.helpers import RUN_ID, synthetic_round, tiny_manifest

    manifest = tiny_manifest(env=in_process_env(threads=torch.get_num_threads() + 1))
    ids, rows = synthetic_round(manifest, 1)
    with pytest.raises(DeterminismError):
        train_round(manifest, RUN_ID, 0, init_params(manifest.model), ids, rows)
