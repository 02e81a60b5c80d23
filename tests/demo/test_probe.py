"""The demo's training probe: one round of the demo's model timed in a real child process, as a
miner runs it; a probe that cannot run fails with its reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hypertrain.beacon.chain import ChainInfo
from hypertrain.demo.children import open_children
from hypertrain.demo.probe import (
    LIFELINE_CUT_STATUS,
    PROBE_SECONDS,
    ProbeFailed,
    measure_training,
)
from hypertrain.demo.workspace import build_dataset, create_workspace, demo_manifest
from hypertrain.protocol.converter import unstructure
from hypertrain.protocol.manifest import RunManifest
from nurseries import open_lifeline

CHAIN = ChainInfo(
    public_key="00" * 48, period_ms=1000, genesis_ms=1_700_000_000_000, hash="ab" * 32
)


def _manifest(root: Path) -> RunManifest:
    ws = create_workspace(root)
    return demo_manifest(ws, CHAIN, build_dataset(ws, 64))


@pytest.mark.slow
async def test_the_probe_times_one_round_of_the_demo_model(tmp_path: Path) -> None:
    manifest = _manifest(tmp_path / "demo")
    async with open_children(grace=5.0) as children:
        seconds = await measure_training(
            children, manifest, tmp_path / "demo" / "dataset", tmp_path / "probe"
        )
    answer = json.loads((tmp_path / "probe" / "stdout.txt").read_text())
    assert answer["train_seconds"] == seconds
    assert 0 < seconds < PROBE_SECONDS
    assert answer["setup_seconds"] > 0  # torch and determinism: not part of the round


@pytest.mark.slow
async def test_a_probe_that_cannot_train_says_why(tmp_path: Path) -> None:
    manifest = _manifest(tmp_path / "demo")
    async with open_children(grace=5.0) as children:
        with pytest.raises(ProbeFailed, match=r"exited with status 1:\n(.|\n)*missing"):
            await measure_training(children, manifest, tmp_path / "missing", tmp_path / "probe")


def test_a_probe_whose_lifeline_is_cut_exits_at_once(tmp_path: Path) -> None:
    """Cut before it could have imported torch: it ends with the lifeline status, unmeasured."""
    manifest_file = tmp_path / "manifest.json"
    manifest_file.write_text(json.dumps(unstructure(_manifest(tmp_path / "demo"))))
    argv = [sys.executable, "-m", "hypertrain.demo.probe", str(manifest_file)]
    with open_lifeline() as lifeline:
        child = subprocess.Popen(
            [*argv, str(tmp_path / "demo" / "dataset")],
            env=os.environ | lifeline.env,
            pass_fds=lifeline.pass_fds,
            stdout=subprocess.PIPE,
        )
        lifeline.close()
        out, _ = child.communicate(timeout=PROBE_SECONDS)
    assert (child.returncode, out) == (LIFELINE_CUT_STATUS, b"")
