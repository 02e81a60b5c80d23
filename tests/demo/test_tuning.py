"""The demo's DiLoCo settings (issue 22): the demo manifest takes them, the test-mode manifest
keeps its own (they feed hashes and stored fixtures), and no honest demo delta is preclipped.

The delta check trains round 0 as three demo miners do (the miner's ``train_round`` from the
initial theta on the demo dataset, their own samples of the round's assignment, the int8 codec)
and hands the decoded deltas to the merge's preclip with the demo's ``preclip_norm``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import attrs
import numpy as np
import pytest

from hypertrain.aggregator.merge import norm, preclip_scale
from hypertrain.beacon.chain import ChainInfo
from hypertrain.datasets.reader import Dataset
from hypertrain.demo.tuning import (
    DEMO_CCLIP_TAU,
    DEMO_H,
    DEMO_OUTER_LR,
    DEMO_OUTER_MOMENTUM,
    DEMO_PRECLIP_NORM,
)
from hypertrain.demo.workspace import build_dataset, create_workspace, demo_manifest
from hypertrain.protocol.example import example_manifest
from hypertrain.protocol.f32 import f32_from_hex
from hypertrain.protocol.manifest import RunManifest
from hypertrain.protocol.testmode import build_test_mode_manifest
from hypertrain.rounds.assignment import assign, next_base
from hypertrain.trainer.codec import compress, decode_payload
from hypertrain.trainer.loop import train_round
from hypertrain.trainer.params import init_params
from tests.trainer.helpers import in_process_env

CHAIN = ChainInfo(
    public_key="00" * 48, period_ms=1000, genesis_ms=1_700_000_000_000, hash="ab" * 32
)
MARGIN = 1.5
"""The smallest ratio of ``preclip_norm`` to an honest round-0 delta norm the demo keeps."""


def _demo(root: Path) -> tuple[RunManifest, Path]:
    ws = create_workspace(root)
    return demo_manifest(ws, CHAIN, build_dataset(ws, 64)), ws.dataset


def test_the_demo_manifest_takes_the_measured_settings_and_test_mode_keeps_its_own(
    tmp_path: Path,
) -> None:
    demo, _ = _demo(tmp_path / "demo")
    assert demo.inner.H == DEMO_H
    assert demo.inner.H % demo.inner.J == 0
    outer = demo.outer
    assert f32_from_hex(outer.lr) == np.float32(DEMO_OUTER_LR)
    assert f32_from_hex(outer.momentum) == np.float32(DEMO_OUTER_MOMENTUM)
    assert f32_from_hex(outer.preclip_norm) == np.float32(DEMO_PRECLIP_NORM)
    assert f32_from_hex(outer.cclip_tau) == np.float32(DEMO_CCLIP_TAU)
    test_mode, _ = build_test_mode_manifest(coord_pubkey=example_manifest().coord_pubkey)
    assert (test_mode.inner.H, test_mode.outer) == (6, example_manifest().outer)
    assert test_mode.outer.preclip_norm == test_mode.outer.cclip_tau == "0000803f"  # 1.0


@pytest.mark.usefixtures("configured")
def test_no_honest_delta_of_the_demos_first_round_is_preclipped(tmp_path: Path) -> None:
    demo, dataset = _demo(tmp_path / "demo")
    manifest = attrs.evolve(
        demo, reference_spec=attrs.evolve(demo.reference_spec, env=in_process_env())
    )
    data = Dataset.open(dataset)
    run_id = manifest.run_id()
    roster = [(f"miner-{i}", i) for i in range(3)]
    sig = hashlib.sha384(b"a stand-in drand signature").digest()
    theta = init_params(manifest.model)
    beta = float(f32_from_hex(manifest.outer.ef_beta))
    norms = []
    for a in assign(manifest, run_id, 0, sig, roster, base=next_base(0, 0, 3, manifest)):
        result = train_round(manifest, run_id, 0, theta, a.samples, data.samples)
        delta = decode_payload(compress(result.delta, None, beta).payload)
        clipped, _ = preclip_scale(delta, DEMO_PRECLIP_NORM)
        assert not clipped, (a.hotkey, norm(delta), DEMO_PRECLIP_NORM)
        norms.append(norm(delta))
    assert max(norms) * MARGIN <= DEMO_PRECLIP_NORM, (norms, DEMO_PRECLIP_NORM)
