"""The dispute loops against the real coordinator app (in process, virtual time): a contested
MISMATCH is bisected to one op with the auditor's Bisects posted by its DisputeWorker, and
another auditor's DisputeWorker referees it; the disputed auditor never does.

The coordinator's round is audit_support's (made-up leaves, nothing trained), so the
recomputation is a stand-in whose hashes are a function of the canonical point; a dataset row
is registered for the run and the dataset cache is a stand-in too (the torch side and the real
dataset are tested in test_disputes.py)."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path
from typing import Any

import attrs
import httpx
import numpy as np
import trio.testing

from hypertrain.auditor.casework import DisputeWorker
from hypertrain.auditor.client import AuditorClient
from hypertrain.auditor.dispute import RecomputeStart
from hypertrain.auditor.job import AuditJob
from hypertrain.auditor.progress import Progress
from hypertrain.auditor.verdict import Samples
from hypertrain.protocol.keys import Keypair
from hypertrain.rounds.bisection import Point, RefereeCase, Ruling, Stage, stage_points
from tests.coordinator.audit_support import AUDITOR, BODY, AuditFlow, J, uploaded_round
from tests.coordinator.harness import API, WORKER_TOKEN
from tests.coordinator.lifecycle_support import open_runs
from tests.coordinator.test_disputes import MINER, REFEREE, TWO_AUDITORS, _bisect, _contested

N_LAYERS = BODY.model.n_layers


def _hash(salt: str, point: Point) -> str:
    return hashlib.sha256(f"{salt}|{point.key()}".encode()).hexdigest()


def _wrong_for_miner(point: Point) -> bool:
    """The miner's values differ from the op ``attn_residual`` (op 3) of layer 1, step 1 on."""
    if point.level == "step":
        return point.t >= 1
    if point.t != 1:
        return False
    if point.level == "layer":
        assert point.index is not None
        return point.index >= 2
    assert point.layer is not None
    assert point.index is not None
    return point.layer > 1 or (point.layer == 1 and point.index >= 3)


def miner_hashes(stage: Stage) -> list[str]:
    return [
        _hash("miner" if _wrong_for_miner(p) else "auditor", p)
        for p in stage_points(N_LAYERS, stage)
    ]


@attrs.define
class PointRecomputation:
    start: RecomputeStart
    stages: list[Stage] = attrs.Factory(list)
    cases: list[RefereeCase] = attrs.Factory(list)

    def hashes(self, stage: Stage) -> list[str]:
        self.stages.append(stage)
        return [_hash("auditor", p) for p in stage_points(N_LAYERS, stage)]

    def judge(self, case: RefereeCase, committed_leaf: str | None = None) -> tuple[Ruling, str]:
        self.cases.append(case)
        return Ruling("auditor", "the stand-in says so"), _hash("miner", case.point)


@attrs.define
class PointRecomputer:
    built: list[PointRecomputation] = attrs.Factory(list)

    def recompute(self, job: AuditJob, start: RecomputeStart, samples: Samples) -> Any:
        made = PointRecomputation(start)
        self.built.append(made)
        return made


@attrs.frozen
class _Dataset:
    def samples(self, ids: Any) -> Any:
        return np.zeros((len(ids), BODY.model.seq_len + 1), dtype=np.int64)


class _Data:
    async def ensure(self, sha256: str, manifest: Any, ids: Any) -> _Dataset:
        return _Dataset()


def _register_dataset(conn: sqlite3.Connection, run_id: str) -> None:
    conn.execute("INSERT INTO run_datasets VALUES (?, ?, 0)", (run_id, "ab" * 32))


def _worker(a: AuditFlow, key: Keypair, party: PointRecomputer, referee: PointRecomputer,
            progress: Progress) -> DisputeWorker:  # fmt: skip
    mounted = a.h.client._transport_for_url(httpx.URL(API))  # the app's in-process transport
    client = AuditorClient(API, WORKER_TOKEN, transport=mounted)
    return DisputeWorker(
        client=client, keypair=key, manifest=TWO_AUDITORS, data=_Data(),  # type: ignore[arg-type]
        progress=progress, party=lambda: party, referee=lambda: referee,
    )  # fmt: skip


async def _view(a: AuditFlow, did: str) -> dict[str, Any]:
    r = await a.h.client.get(f"/v1/runs/{a.run_id}/disputes/{did}")
    assert r.status_code == 200, r.text
    view: dict[str, Any] = r.json()
    return view


async def test_a_dispute_bisected_by_the_auditor_and_refereed_by_another(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as hs:
        a = await uploaded_round(hs, body=TWO_AUDITORS)
        await hs.ctx.db.write(_register_dataset, a.run_id)
        did = await _contested(a)
        party, progress = PointRecomputer(), Progress()
        auditor = _worker(a, AUDITOR, party, PointRecomputer(), progress)
        refs = PointRecomputer()
        referee = _worker(a, REFEREE, PointRecomputer(), refs, progress)

        levels = []
        for _ in range(3):  # step, layer, op: one round each (ARITY 16)
            (report,) = await auditor.answer_disputes()
            assert report.state == "bisect", report
            assert await auditor.answer_disputes() == []  # the stage waits for the miner
            stage = (await _view(a, did))["stage"]
            assert stage["awaiting"] == ["miner"]
            levels.append(stage["level"])
            (made,) = party.built
            hashes = miner_hashes(made.stages[-1])
            r = await a.flow.post("bisect", _bisect(a, MINER, did, stage, hashes))
            assert r.status_code == 200, r.text
        assert levels == ["step", "layer", "op"]
        (made,) = party.built
        assert made.start.t == 0  # the served state at leaf 0 (window [0, 1] holds leaf 1)
        assert made.start.state.step == 0 * J
        view = await _view(a, did)
        assert view["referee"]["op_spec"] == "step=1;layer=1;op=attn_residual"

        # the disputed auditor does not referee its own dispute; the other auditor does
        assert await auditor.referee_disputes() == []
        (ruled,) = await referee.referee_disputes()
        assert (ruled.state, ruled.loser) == ("ruled", "auditor")
        assert [c.op_spec for c in refs.built[0].cases] == ["step=1;layer=1;op=attn_residual"]
        view = await _view(a, did)
        assert view["state"] == "resolved"
        assert view["outcome"]["loser"] == AUDITOR.ss58
        assert view["outcome"]["referee"] == REFEREE.ss58
        assert await referee.referee_disputes() == []
        assert await auditor.answer_disputes() == []
