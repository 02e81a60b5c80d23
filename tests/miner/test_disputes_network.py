"""The dispute follower against the real coordinator (issue 14), in virtual time: the daemon,
one miner on probation (audited every round), the real auditor for its verdict, and a test
party standing in for the auditor's side of a dispute (its Bisects) and for the referee (its
Resolution): both recompute honestly with :class:`~hypertrain.trainer.recompute.Recompute`
from the state the miner served (its kept ``leaf_state_{a}.bin``, the bytes the coordinator
holds). A glitched round reruns to TRANSIENT; a faulty miner contests, bisects down to the op
it miscomputed and loses there (DISPUTE_LOST); against a silent auditor it wins by timeout.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio
import trio.testing

from hypertrain.auditor.progress import Progress as AuditorProgress
from hypertrain.auditor.session import Options, run_auditor
from hypertrain.beacon import ChainInfo
from hypertrain.datasets.pin import pin_async
from hypertrain.datasets.reader import Dataset
from hypertrain.miner.artifacts import RoundDir
from hypertrain.miner.disputeplan import dispute_start
from hypertrain.miner.faults import Faults
from hypertrain.miner.progress import Progress
from hypertrain.miner.rerun import dispute_recompute
from hypertrain.miner.session import Summary, run_miner
from hypertrain.protocol.converter import structure
from hypertrain.protocol.envelope import NEVER, seal
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.manifest import Beacon, RunManifest
from hypertrain.protocol.messages import AuditChallenge
from hypertrain.rounds import bisection
from hypertrain.trainer.fault import Fault
from hypertrain.trainer.recompute import Recompute
from nurseries import run_inline
from tests.coordinator.harness import WORKER_TOKEN, admin_headers
from tests.miner.test_against_the_daemon import API, COORD, MINERS, OWNER, _config
from tests.miner.test_audited_network import AUDITOR, _daemon, _put

MINER = MINERS[0]
REFEREE = Keypair.from_seed(b"\x0b" * 32)
EXP = 2**40
RUN_TIMEOUT = 3000.0  # virtual seconds
FAULT = Fault(t=3, layer=2, op="update", index=0)


async def _launch(
    client: httpx.AsyncClient, manifest: RunManifest, data_dir: Path, objects_dir: Path
) -> str:
    """One round, the miner on probation, two auditors (the referee is never the disputed)."""
    info = ChainInfo.from_json((await client.get("/v1/beacon/info")).json())
    beacon = Beacon(
        chain_hash=info.hash, period=info.period_ms // 1000, genesis_time=info.genesis_ms // 1000
    )
    manifest = attrs.evolve(
        manifest, coord_pubkey=COORD.ss58, beacon=beacon, auditors=(AUDITOR.ss58, REFEREE.ss58)
    )
    envelope = seal(OWNER, "RunManifest", manifest.run_id(), manifest, NEVER).to_json()
    created = await client.post("/v1/admin/runs", json=envelope, headers=admin_headers())
    assert created.status_code == 201, created.text
    run_id: str = created.json()["run_id"]
    base = f"/v1/admin/runs/{run_id}"
    pinned = await pin_async(data_dir, objects_dir)
    await _put(client, f"{base}/dataset", {"manifest_sha256": pinned.manifest_sha256})
    await _put(client, f"{base}/config", {"train_rounds": 20, "final_after_upload": 5,
                                          "total_rounds": 1})  # fmt: skip
    await _put(client, f"{base}/roster/{MINER.ss58}", {"probation": True})
    await _put(client, f"{base}/paused", {"paused": False})
    return run_id


@attrs.define
class _OtherSide:
    """The disputed auditor's Bisects and the referee's Resolution (module docstring)."""

    client: httpx.AsyncClient
    run_id: str
    manifest: RunManifest
    workdir: Path
    samples: Any
    silent: bool = False
    """The disputed auditor never bisects (it loses at the stage's deadline)."""
    honest: dict[str, Recompute] = attrs.Factory(dict)
    resolved: list[str] = attrs.Factory(list)

    async def _recompute(self, dispute: dict[str, Any]) -> Recompute:
        if dispute["dispute_id"] not in self.honest:
            view = (await self.client.get(f"/v1/runs/{self.run_id}/rounds/0")).json()
            job = next(j for j in view["jobs"] if j["target"] == MINER.ss58)
            challenge = structure(AuditChallenge, job["challenge"]["body"])
            start = dispute_start(challenge, dispute["first_bad_leaf"])
            rd = RoundDir(self.workdir, 0)
            self.honest[dispute["dispute_id"]] = dispute_recompute(
                self.manifest, self.run_id, rd, start, self.samples
            )
        return self.honest[dispute["dispute_id"]]

    async def _post(self, route: str, key: Keypair, kind: str, body: dict[str, Any]) -> None:
        envelope = seal(key, kind, self.run_id, body, EXP).to_json()
        headers = {"Authorization": f"Bearer {WORKER_TOKEN}"} if kind == "Resolution" else {}
        r = await self.client.post(f"/v1/runs/{self.run_id}/{route}", json=envelope,
                                   headers=headers)  # fmt: skip
        assert r.status_code == 200, r.text

    async def run(self) -> None:
        while True:
            r = await self.client.get(f"/v1/runs/{self.run_id}/disputes?state=open")
            for d in r.json()["disputes"]:
                honest = await self._recompute(d)
                stage = d["stage"]
                if stage is not None and "auditor" in stage["awaiting"] and not self.silent:
                    a, b = stage["interval"]
                    where = {k: stage[k] for k in ("t", "layer") if stage[k] is not None}
                    s = bisection.Stage(stage["level"], a, b, stage["N"], **where)
                    await self._post("bisect", AUDITOR, "Bisect", {
                        "dispute_id": d["dispute_id"], "level": s.level, "interval": [a, b],
                        "N": s.n, "hashes": honest.hashes(s), "party": AUDITOR.ss58,
                    })  # fmt: skip
                if d["referee"] is not None:
                    await self._resolve(d, honest)
            await trio.sleep(1.0)

    async def _resolve(self, d: dict[str, Any], honest: Recompute) -> None:
        raw = d["referee"]
        case = bisection.RefereeCase(
            kind=raw["kind"], point=bisection.Point(**raw["point"]), op_spec=raw["op_spec"],
            miner_hash=raw["miner_hash"], auditor_hash=raw["auditor_hash"],
            agreed=None if raw["agreed"] is None else bisection.Point(**raw["agreed"]),
            agreed_hash=raw["agreed_hash"], agreed_step=raw["agreed_step"], leaf=raw["leaf"],
        )  # fmt: skip
        ruling, output_hash = honest.judge(case)
        loser = MINER.ss58 if ruling.loser == "miner" else AUDITOR.ss58
        await self._post("resolution", REFEREE, "Resolution", {
            "dispute_id": d["dispute_id"], "op_spec": case.op_spec,
            "inputs_hash": raw["inputs_hash"], "output_hash": output_hash, "loser": loser,
        })  # fmt: skip
        self.resolved.append(d["dispute_id"])


async def _network(
    tmp_path: Path, data_dir: Path, manifest: RunManifest, faults: Faults, *, silent: bool = False
) -> tuple[Summary, dict[str, Any], list[dict[str, Any]]]:
    """Run the network until the miner is done: its summary, the round view, its disputes."""
    done = trio.Event()
    async with (
        _daemon(tmp_path) as (_handle, transport),
        httpx.AsyncClient(transport=transport, base_url=API) as client,
    ):
        run_id = await _launch(client, manifest, data_dir, tmp_path / "state" / "objects")
        config = _config(tmp_path, MINER, data_dir)
        summary: list[Summary] = []

        async def mine() -> None:
            summary.append(await run_miner(
                config, MINER, rounds=1, start=0, transport=transport,
                progress=Progress(io.StringIO()), configure=lambda env: None, faults=faults,
                run_sync=run_inline,
            ))  # fmt: skip
            done.set()

        options = Options(api=API, run_id=run_id, token=WORKER_TOKEN, keypair=AUDITOR,
                          data_dir=tmp_path / "auditor")  # fmt: skip
        samples = Dataset.open(data_dir).samples
        other = _OtherSide(client, run_id, manifest, config.workdir, samples, silent)

        async def audit() -> None:
            await run_auditor(
                options, stop=done.wait, transport=transport, configure=lambda env: None,
                progress=AuditorProgress(err=io.StringIO()), run_sync=run_inline,
            )  # fmt: skip

        with trio.fail_after(RUN_TIMEOUT):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(audit)
                nursery.start_soon(other.run)
                await mine()
                nursery.cancel_scope.cancel()
        view = (await client.get(f"/v1/runs/{run_id}/rounds/0")).json()
        disputes = (await client.get(f"/v1/runs/{run_id}/disputes")).json()["disputes"]
    return summary[0], view, disputes


def _status(view: dict[str, Any]) -> str:
    return str(next(m for m in view["miners"] if m["hotkey"] == MINER.ss58)["status"])


@pytest.mark.parametrize("policy", ["carry", "reset"])
async def test_a_glitch_reruns_to_transient_at_the_real_coordinator(
    policy: str,
    tmp_path: Path,
    data_dir: Path,
    run_manifest: RunManifest,
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Segment audits under carry, a full-mode audit under reset: the rerun root is the
    auditor's either way."""
    inner = attrs.evolve(run_manifest.inner, state_policy=policy)
    manifest = attrs.evolve(run_manifest, inner=inner)
    summary, view, disputes = await _network(tmp_path, data_dir, manifest, Faults(glitch=FAULT))
    job = next(j for j in view["jobs"] if j["target"] == MINER.ss58)
    assert job["challenge"]["body"]["mode"] == ("segments" if policy == "carry" else "full")
    assert [(d.reason, d.classification) for d in summary.disputes] == [("transient", "TRANSIENT")]
    assert _status(view) == "TRANSIENT"
    assert disputes == []


async def test_a_faulty_miner_bisects_to_its_op_and_loses_at_the_real_referee(
    tmp_path: Path,
    data_dir: Path,
    run_manifest: RunManifest,
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    summary, view, disputes = await _network(tmp_path, data_dir, run_manifest, Faults(fault=FAULT))
    (record,) = summary.disputes
    assert (record.classification, record.reason, record.action) == (
        "CONTEST",
        "resolved",
        "contest",
    )
    assert (record.loser, record.loser_role, record.cause) == (MINER.ss58, "miner", "referee")
    assert record.op_spec == "step=3;layer=2;op=update"
    (dispute,) = disputes
    assert dispute["dispute_id"] == record.dispute_id
    levels = {b["level"] for b in dispute["bisects"] if b["role"] == "miner"}
    assert levels == {"step", "layer", "op"}
    assert _status(view) == "DISPUTE_LOST"


async def test_a_silent_auditor_loses_at_the_stage_deadline_and_the_miner_is_cleared(
    tmp_path: Path,
    data_dir: Path,
    run_manifest: RunManifest,
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    summary, view, disputes = await _network(
        tmp_path, data_dir, run_manifest, Faults(fault=FAULT), silent=True
    )
    (record,) = summary.disputes
    assert (record.reason, record.loser, record.loser_role) == ("resolved", AUDITOR.ss58, "auditor")
    assert (record.cause, record.op_spec) == ("timeout", None)
    (dispute,) = disputes
    assert [b["role"] for b in dispute["bisects"]] == ["miner"]
    assert _status(view) == "MATCH"


async def test_a_rerun_that_matches_neither_side_accepts_the_fault_at_the_real_coordinator(
    tmp_path: Path,
    data_dir: Path,
    run_manifest: RunManifest,
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    other = Fault(t=3, layer=2, op="update", index=1)  # the committed training's glitch
    faults = Faults(fault=FAULT, glitch=other)
    summary, view, disputes = await _network(tmp_path, data_dir, run_manifest, faults)
    (record,) = summary.disputes
    assert (record.classification, record.action, record.state) == ("FAULT", "accept", "accepted")
    (dispute,) = disputes
    assert (dispute["state"], dispute["bisects"]) == ("accepted", [])
    assert _status(view) == "MISMATCH"
