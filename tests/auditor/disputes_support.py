"""DisputeViews as the coordinator shows them (notes/disputes-wire.md), built from a test job,
and a :class:`DisputeWorker` wired to the fake coordinator."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from hypertrain.auditor.casework import DisputeWorker
from hypertrain.auditor.client import AuditorClient, ClientSettings
from hypertrain.auditor.datacache import DatasetCache
from hypertrain.auditor.dispute import Recomputer
from hypertrain.auditor.progress import Progress
from hypertrain.auditor.worker import WorkerSettings
from hypertrain.protocol.keys import Keypair
from hypertrain.rounds.bisection import Party, Point, RefereeCase, Stage, inputs_hash, points
from nurseries import Backoff, RunSync, run_inline
from tests.auditor.fake import API, TOKEN, FakeCoordinator
from tests.auditor.world import AUDITOR, MINER, Built, W, World

DISPUTE_ID: Final = "d1" * 32
OTHER: Final = Keypair.from_seed(b"\x05" * 32)
"""Another auditor of the run (the disputed one when AUDITOR referees)."""
SETTINGS: Final = WorkerSettings(dispute_poll_interval=10.0)
RETRY: Final = ClientSettings(backoff=Backoff(initial=1.0, maximum=30.0), retry_budget=15.0)


def stage_json(stage: Stage, awaiting: Sequence[Party] = ("miner", "auditor")) -> dict[str, Any]:
    return {
        "level": stage.level,
        "t": stage.t,
        "layer": stage.layer,
        "interval": [stage.a, stage.b],
        "N": stage.n,
        "points": points(stage.a, stage.b, stage.n),
        "deadline_round": 300,
        "awaiting": list(awaiting),
    }


def point_json(point: Point | None) -> dict[str, Any] | None:
    if point is None:
        return None
    return {"level": point.level, "t": point.t, "layer": point.layer, "index": point.index}


def referee_json(case: RefereeCase) -> dict[str, Any]:
    return {
        "kind": case.kind,
        "op_spec": case.op_spec,
        "point": point_json(case.point),
        "agreed": point_json(case.agreed),
        "agreed_hash": case.agreed_hash,
        "agreed_step": case.agreed_step,
        "miner_hash": case.miner_hash,
        "auditor_hash": case.auditor_hash,
        "leaf": case.leaf,
        "inputs_hash": inputs_hash(case.agreed_step, case.agreed_hash),
    }


def view_json(
    built: Built,
    *,
    auditor: str = AUDITOR.ss58,
    stage: dict[str, Any] | None = None,
    referee: dict[str, Any] | None = None,
    first_bad_leaf: int = 1,
    dispute_id: str = DISPUTE_ID,
    state: str = "open",
) -> dict[str, Any]:
    """A DisputeView of ``built``'s job (every key of the contract)."""
    return {
        "dispute_id": dispute_id,
        "run_id": built.job["run_id"],
        "w": W,
        "miner": MINER.ss58,
        "auditor": auditor,
        "job_id": built.job["id"],
        "challenge_hash": built.job["challenge_hash"],
        "verdict_hash": "ab" * 32,
        "first_bad_leaf": first_bad_leaf,
        "action": "contest",
        "state": state,
        "opened_round": 200,
        "stage": stage,
        "referee": referee,
        "outcome": None,
        "bisects": [],
    }


def job_view(built: Built) -> dict[str, Any]:
    """``GET /v1/worker/jobs/{id}`` of ``built``: the job with ``lease`` null."""
    return {**built.job, "lease": None, "lease_expires_round": None}


def dispute_worker(
    fake: FakeCoordinator,
    world: World,
    tmp_path: Path,
    *,
    party: Recomputer,
    referee: Recomputer,
    keypair: Keypair = AUDITOR,
    run_sync: RunSync = run_inline,
    progress: Progress | None = None,
) -> DisputeWorker:
    client = AuditorClient(
        API, TOKEN, transport=fake.transport(), settings=RETRY,
        jitter=lambda: 1.0,
    )  # fmt: skip
    return DisputeWorker(
        client=client, keypair=keypair, manifest=world.manifest,
        data=DatasetCache(tmp_path, client.get_object), progress=progress or Progress(),
        party=lambda: party, referee=lambda: referee, settings=SETTINGS, run_sync=run_sync,
    )  # fmt: skip
