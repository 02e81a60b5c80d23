"""Every uploaded delta becomes delta-loss scoring steps; with no node online the daemon's
fallback pool scores them (issue 8), in virtual time with three real miners.

Checked: a public job and four hidden slice jobs per uploaded miner, their inputs (the
manifest's model section, round 0's genesis start state, the miner's delta, the traces: the
first ``trace_samples`` rows of the first train shard, and a quarter of the first
``trace_samples`` rows of the holdout for each slice), a hidden slice is a private object
(404 on ``/v1/objects`` to anyone but the admin), every step is settled by the
fallback at the end of its window with a loss, and the round view shows each miner's scores
and its soft score (the ledger's read of the same book, from the hidden losses).
"""

from __future__ import annotations

import json
import math
import stat
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import trio
import trio.testing

from hypertrain.coordinator.flows.softscores import round_soft_scores
from hypertrain.datasets.manifest import DatasetManifest, load_record
from hypertrain.datasets.reader import Dataset
from hypertrain.protocol.converter import unstructure
from hypertrain.protocol.f32 import f32_from_hex
from hypertrain.protocol.jcs import canonical_json
from hypertrain.protocol.manifest import RunManifest
from hypertrain.rounds.softscore import soft_scores
from hypertrain.trainer.params import init_params
from hypertrain.trainer.state import pack_state
from tests.coordinator.harness import WORKER_TOKEN, admin_headers
from tests.miner.rounds_support import launch_with_dataset, mine_rounds
from tests.miner.test_against_the_daemon import API, MINERS
from tests.miner.test_aggregated_rounds import _daemon_with_holdout

TIMEOUT = 2000.0  # virtual seconds
TRACE_SAMPLES = 32
SLICES = 4
"""HYPERTRAIN_HIDDEN_SLICES's default: each hidden step is four jobs of 8 holdout rows."""


def _jobs(conn: Any) -> list[dict[str, Any]]:
    rows = conn.execute(
        "SELECT subject, step, inputs, state, settled_how, result FROM compute_jobs"
        " ORDER BY subject, step"
    ).fetchall()
    return [
        {
            "subject": json.loads(subject),
            "step": step,
            "inputs": {i["name"]: i["sha256"] for i in json.loads(inputs)},
            "state": state,
            "how": how,
            "result": None if result is None else json.loads(result),
        }
        for subject, step, inputs, state, how, result in rows
    ]


async def test_uploaded_deltas_are_scored_by_the_fallback_when_no_node_is_online(
    tmp_path: Path,
    data_dir: Path,
    run_manifest: RunManifest,
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with (
        _daemon_with_holdout(tmp_path, data_dir) as (handle, transport),
        httpx.AsyncClient(transport=transport, base_url=API) as client,
    ):
        objects_dir = tmp_path / "state" / "objects"
        run_id = await launch_with_dataset(client, run_manifest, data_dir, objects_dir, 1)
        with trio.fail_after(TIMEOUT):
            await mine_rounds(tmp_path, data_dir, transport, 1)
            while True:
                jobs = await handle.ctx.db.read(_jobs)
                if len(jobs) == 3 + 3 * SLICES and all(j["state"] == "settled" for j in jobs):
                    break
                await trio.sleep(1.0)
        view = (await client.get(f"/v1/runs/{run_id}/rounds/0?full=1")).json()
        hotkeys = [m["hotkey"] for m in view["miners"]]
        ledger_reads = await handle.ctx.db.read(round_soft_scores, run_id, 0, hotkeys)
        objects = handle.ctx.objects
        read = {
            sha: objects.path_of(sha).read_bytes() for j in jobs for sha in j["inputs"].values()
        }
        hidden = jobs[0]["inputs"]["trace.u16"] if jobs[0]["step"] == "hidden" else None
        assert hidden is not None
        public = next(j["inputs"]["trace.u16"] for j in jobs if j["step"] == "public")
        hidden_mode = stat.S_IMODE(objects.path_of(hidden).stat().st_mode)
        worker = {"Authorization": f"Bearer {WORKER_TOKEN}"}
        as_worker = await client.get(f"/v1/objects/{hidden}", headers=worker)
        as_admin = await client.get(f"/v1/objects/{hidden}", headers=admin_headers())
        public_as_worker = await client.get(f"/v1/objects/{public}", headers=worker)

    assert hidden_mode == 0o600  # like its holdout source: no other user reads it
    dataset = load_record(DatasetManifest, data_dir / "manifest.json")
    row_bytes = 2 * (dataset.seq_len + 1)
    shard0 = (data_dir / "shard-00000.u16").read_bytes()
    holdout = Dataset.open(data_dir, split="holdout").samples(range(TRACE_SAMPLES))
    genesis = pack_state(init_params(run_manifest.model))
    uploads = {m["hotkey"]: m["delta_manifest"]["body"]["delta_hash"] for m in view["miners"]}
    assert sorted((j["subject"]["hotkey"], j["step"], j["subject"].get("slice")) for j in jobs) == (
        sorted(
            [(key.ss58, "public", None) for key in MINERS]
            + [(key.ss58, "hidden", k) for key in MINERS for k in range(SLICES)]
        )
    )
    rows = len(holdout) // SLICES
    for job in jobs:
        inputs = job["inputs"]
        assert list(inputs) == ["model.json", "state.bin", "delta.bin", "trace.u16"]
        assert read[inputs["model.json"]] == canonical_json(unstructure(run_manifest.model))
        assert read[inputs["state.bin"]] == genesis
        assert inputs["delta.bin"] == uploads[job["subject"]["hotkey"]]
        trace = read[inputs["trace.u16"]]
        if job["step"] == "public":
            assert trace == shard0[: TRACE_SAMPLES * row_bytes]
        else:  # slice k of the hidden window: its rows only
            k = job["subject"]["slice"]
            part = holdout[k * rows : (k + 1) * rows]
            assert trace == np.ascontiguousarray(part, dtype="<u2").tobytes()
        assert (job["state"], job["how"]) == ("settled", "fallback")
        loss = f32_from_hex(job["result"]["objective"])
        assert 0 < loss < math.log(259) + 0.5
    # The hidden trace looks like no object at all; a public one asks for the worker token
    # (which this daemon does not configure: 503).
    assert as_worker.status_code == 404
    assert as_admin.status_code == 200
    assert public_as_worker.status_code == 503
    for miner in view["miners"]:
        scores = miner["scores"]
        assert set(scores) == {"public", "hidden"}
        assert {s["how"] for s in scores.values()} == {"fallback"}
        assert all(len(s["loss"]) == 8 for s in scores.values())
    assert len(view["scoring_jobs"]) == 6
    hidden = {m["hotkey"]: m["scores"]["hidden"]["loss"] for m in view["miners"]}
    soft = {m["hotkey"]: m["soft_score_ppm"] for m in view["miners"]}
    assert soft == ledger_reads == soft_scores(hidden)
    low, mid, high = sorted(soft.values())  # three distinct losses: worst 0, best 10^6
    assert (low, high) == (0, 1_000_000)
    assert 0 < mid < 1_000_000
