"""The scoring feed rotates the hidden window (issue 19 item 5), in virtual time with three real
miners over two rounds and the hidden window moving every round
(``HYPERTRAIN_HIDDEN_ROTATE_ROUNDS = 1``); no node is online, so the fallback pool scores.

Checked: round 0 is scored on window 0 (the holdout's first ``trace_samples`` samples), round 1
on window 1 (the next ``trace_samples``, wrapping around the holdout's end), cut into slices;
window 0 is retired when window 1 opens; round 0's hidden steps (the old window's last round)
are scored again on window 1, and so is theta(1), the last merged theta, as the loss of a zero
delta; each miner's hidden score is then that of the newest window all of whose slices settled.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import trio
import trio.testing

from hypertrain.datasets.reader import Dataset
from hypertrain.protocol.manifest import RunManifest
from hypertrain.scoring.inputs import parse_delta
from hypertrain.scoring.slices import combine
from tests.miner.rounds_support import launch_with_dataset, mine_rounds
from tests.miner.test_against_the_daemon import API
from tests.miner.test_aggregated_rounds import _daemon_with_holdout

TIMEOUT = 4000.0  # virtual seconds
SAMPLES = 32
SLICES = 2


def _book(conn: Any) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    windows = conn.execute(
        "SELECT epoch, window, first_sample, slices, retired_ms IS NOT NULL FROM hidden_windows"
        " ORDER BY epoch"
    ).fetchall()
    slices = conn.execute(
        "SELECT s.step_subject, w.epoch, s.slice, j.state, j.inputs, j.result"
        " FROM hidden_slice_jobs s JOIN hidden_windows w USING (window)"
        " JOIN compute_jobs j USING (job_id) ORDER BY w.epoch, s.step_subject, s.slice"
    ).fetchall()
    return windows, slices


async def test_the_hidden_window_rotates_and_the_frontier_is_scored_again(
    tmp_path: Path,
    data_dir: Path,
    run_manifest: RunManifest,
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with (
        _daemon_with_holdout(tmp_path, data_dir, hidden_slices=SLICES, hidden_rotate_rounds=1) as (
            handle,
            transport,
        ),
        httpx.AsyncClient(transport=transport, base_url=API) as client,
    ):
        objects_dir = tmp_path / "state" / "objects"
        run_id = await launch_with_dataset(client, run_manifest, data_dir, objects_dir, 2)
        with trio.fail_after(TIMEOUT):
            await mine_rounds(tmp_path, data_dir, transport, 2)
            while True:
                windows, slices = await handle.ctx.db.read(_book)
                # 3 + 3 steps on window 1 (rounds 0 and 1) and theta(1), 3 on window 0.
                done = len(slices) == SLICES * (3 + 3 + 3 + 1)
                if done and all(s[3] in ("settled", "unscored") for s in slices):
                    break
                await trio.sleep(1.0)
        view = (await client.get(f"/v1/runs/{run_id}/rounds/0")).json()
        read = handle.ctx.objects.path_of

    holdout = Dataset.open(data_dir, split="holdout")
    total = holdout.n_samples
    assert [(e, first, retired) for e, _, first, _, retired in windows] == [
        (0, 0, True),
        (1, SAMPLES, False),
    ]
    for _, window, first, files, _ in windows:
        rows = holdout.samples([(first + i) % total for i in range(SAMPLES)])
        assert read(window).read_bytes() == np.ascontiguousarray(rows, dtype="<u2").tobytes()
        parts = [read(f["sha256"]).read_bytes() for f in json.loads(files)]
        assert b"".join(parts) == read(window).read_bytes()
        assert len(parts) == SLICES
    steps: dict[tuple[int, str], list[tuple[str, dict[str, Any], Any]]] = {}
    for subject, epoch, _, state, inputs, result in slices:
        files = {f["name"]: f["sha256"] for f in json.loads(inputs)}
        steps.setdefault((epoch, subject), []).append((state, files, json.loads(result or "null")))
    by_round = sorted((e, json.loads(s)["w"], "theta" in json.loads(s)) for e, s in steps)
    assert by_round == [(0, 0, False)] * 3 + [(1, 0, False)] * 3 + [(1, 1, False)] * 3 + [
        (1, 1, True)
    ]
    theta = next(v for (e, s), v in steps.items() if "theta" in json.loads(s))
    delta = parse_delta(read(theta[0][1]["delta.bin"]).read_bytes(), run_manifest.model)
    assert all(not a.any() for a in delta.values())  # the merged theta itself
    assert all(state == "settled" for state, _, _ in theta)
    for miner in view["miners"]:
        subject = json.dumps(
            {"hotkey": miner["hotkey"], "run_id": run_id, "w": 0}, separators=(",", ":")
        )
        again = steps[(1, subject)]
        assert all(state == "settled" for state, _, _ in again)
        newest = combine([result["losses"] for _, _, result in again])
        assert miner["scores"]["hidden"]["loss"] == newest["loss"]
