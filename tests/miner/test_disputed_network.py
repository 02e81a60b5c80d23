"""Disputes over a whole network in virtual time (issue 14's acceptance): the real daemon, miners
and auditors as tasks, with test-only faults injected into one party's training or replay.

Every miner is on probation (q = 1), so every round it commits is audited; the run is ``carry``
(segment audits), and every fault is at the last inner step ``H``, inside the final window that
every segment audit replays. Checked, each over the daemon's own routes:

- a falsely accusing auditor (one element of its recomputation nudged at one op) posts a
  MISMATCH, the miner reruns (CONTEST) and contests, both bisect down to that op, the honest
  second auditor referees: the resolution names the op, the auditor loses, the miner ends MATCH
  with its forfeit gone and its blacklist lifted;
- a miner whose training nudged one op's output loses at that op: DISPUTE_LOST, a DISPUTE_LOST
  forfeit, blacklisted;
- an auditor silent in its dispute loses at the stage's deadline;
- an auditor that posts a MISMATCH naming no leaf (nothing to bisect) loses to the referee's
  new audit of the round;
- a glitch (only the committed training had the fault): the rerun equals the auditor's root, so
  TRANSIENT and no fault; a second glitch in the same ledger epoch is a FAULT; the first of the
  next epoch is forgiven again; a glitch under a full-mode audit (``reset``) is TRANSIENT too;
- a rerun that matches neither side (a cheat plus another glitch) is a FAULT, accepted.
"""

from __future__ import annotations

import functools
import io
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import httpx
import trio
import trio.testing

from hypertrain.auditor.progress import Progress as AuditorProgress
from hypertrain.auditor.session import Options, run_auditor
from hypertrain.auditor.verdict import cpu_replay_env
from hypertrain.daemon.main import DaemonHandle
from hypertrain.miner.faults import NO_FAULTS, Faults
from hypertrain.miner.progress import Progress
from hypertrain.miner.session import Summary, run_miner
from hypertrain.protocol.converter import unstructure
from hypertrain.protocol.envelope import seal
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.manifest import RunManifest
from hypertrain.trainer.fault import Fault
from nurseries import run_inline
from tests.coordinator.harness import WORKER_TOKEN, roster_of
from tests.miner.test_against_the_daemon import API, MINERS, _config
from tests.miner.test_audited_network import _daemon, _put, create_audited_run

RUN_TIMEOUT = 8000.0  # virtual seconds
AUDITORS = [Keypair.from_seed(bytes([0x0A + i]) * 32) for i in range(2)]
MINER = MINERS[0]


def _fault(manifest: RunManifest, op: str, layer: int = 1) -> Fault:
    """A change of 2^16 ulps (about 1%) of element 0 of ``op``'s output at step H: big enough
    that no later rounding swallows it, whatever the round's data."""
    return Fault(t=manifest.inner.H, layer=layer, op=op, index=0, ulps=2**16)


async def _launch(
    client: httpx.AsyncClient, manifest: RunManifest, data_dir: Path, objects: Path, rounds: int
) -> str:
    auditors = tuple(a.ss58 for a in AUDITORS)
    run_id = await create_audited_run(
        client, manifest, data_dir, objects, auditors=auditors, rounds=rounds
    )
    base = f"/v1/admin/runs/{run_id}"
    await _put(client, f"{base}/roster/{MINER.ss58}", {"probation": True})
    await _put(client, f"{base}/paused", {"paused": False})
    return run_id


@attrs.define
class Network:
    """One run of the network: what the test reads afterwards."""

    client: httpx.AsyncClient
    run_id: str
    summary: Summary | None = None

    async def view(self, w: int) -> dict[str, Any]:
        r = await self.client.get(f"/v1/runs/{self.run_id}/rounds/{w}", params={"full": "1"})
        assert r.status_code == 200, r.text
        view: dict[str, Any] = r.json()
        return view

    async def miner(self, w: int) -> dict[str, Any]:
        view = await self.view(w)
        row: dict[str, Any] = next(m for m in view["miners"] if m["hotkey"] == MINER.ss58)
        row["forfeits"] = [f["body"] for f in view["forfeits"] if f["body"]["hotkey"] == MINER.ss58]
        row["disputes"] = view["disputes"]
        return row

    async def blacklisted(self) -> bool:
        return bool((await roster_of(self.client, self.run_id))[MINER.ss58]["blacklisted"])


@asynccontextmanager
async def running_network(
    tmp_path: Path,
    data_dir: Path,
    manifest: RunManifest,
    *,
    rounds: int,
    miner_faults: Faults = NO_FAULTS,
    auditor_faults: tuple[Fault | None, Fault | None] = (None, None),
    on_rerun: Callable[[DaemonHandle, int], None] | None = None,
    silent_after_verdict: bool = False,
    forge_no_leaf: bool = False,
) -> AsyncIterator[Network]:
    """Run the daemon, MINER and both auditors until the miner is done, then yield the network
    (the daemon still up, for reads).

    The first auditor (the one that may lie) audits alone until its first verdict, so it is the
    one disputed; then the second starts (the referee). With ``silent_after_verdict`` the first
    auditor stops right after that verdict: it never answers the dispute. With
    ``forge_no_leaf`` the first auditor does not replay at all: it posts a MISMATCH naming no
    leaf (as if the delta did not match). ``on_rerun(handle, w)`` is called when the miner's
    rerun of round ``w`` was recorded."""
    finished = trio.Event()
    stops = [trio.Event(), finished]
    async with (
        _daemon(tmp_path) as (handle, transport),
        httpx.AsyncClient(transport=transport, base_url=API) as client,
        handle.ctx.events.subscribe(frozenset({"audit", "dispute"})) as events,
    ):
        run_id = await _launch(client, manifest, data_dir, tmp_path / "state" / "objects", rounds)
        net = Network(client, run_id)

        async def mine() -> None:
            net.summary = await run_miner(
                _config(tmp_path, MINER, data_dir),
                MINER,
                rounds=rounds,
                start=0,
                transport=transport,
                progress=Progress(io.StringIO()),
                configure=lambda env: None,
                faults=miner_faults,
                run_sync=run_inline,
            )

        async def audit(i: int) -> None:
            options = Options(
                api=API,
                run_id=run_id,
                token=WORKER_TOKEN,
                keypair=AUDITORS[i],
                data_dir=tmp_path / f"auditor-{i}",
            )
            await run_auditor(
                options,
                stop=stops[i].wait,
                transport=transport,
                configure=lambda env: None,
                progress=AuditorProgress(err=io.StringIO()),
                run_sync=run_inline,
                fault=auditor_faults[i],
            )

        async def forge() -> None:
            headers = {"Authorization": f"Bearer {WORKER_TOKEN}"}
            while True:
                r = await client.post("/v1/worker/lease", headers=headers)
                if r.status_code == 200:
                    break
                await trio.sleep(1.0)
            job = r.json()
            body = {
                "challenge_hash": job["challenge_hash"],
                "first_bad_leaf": None,
                "result": "MISMATCH",
                "recomputed_leaves_root": "ab" * 32,
                "replay_env": unstructure(cpu_replay_env(manifest)),
            }
            exp = job["challenge"]["serve_deadline"] + 1200
            verdict = seal(AUDITORS[0], "ReplayVerdict", run_id, body, exp).to_json()
            done = {"lease": job["lease"], "verdict": verdict}
            r = await client.post(
                f"/v1/worker/jobs/{job['id']}/complete", json=done, headers=headers
            )
            assert r.status_code == 200, r.text

        async def watch(nursery: trio.Nursery) -> None:
            second = False
            async for event in events:
                data = json.loads(event.json)
                if not second and event.kind == "audit" and data.get("change") == "verdict":
                    second = True
                    nursery.start_soon(audit, 1)
                    if silent_after_verdict:
                        stops[0].set()
                if on_rerun is not None and data.get("change") == "rerun":
                    on_rerun(handle, int(data["w"]))

        with trio.fail_after(RUN_TIMEOUT):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(forge if forge_no_leaf else functools.partial(audit, 0))
                nursery.start_soon(watch, nursery)
                await mine()
                finished.set()
                stops[0].set()
                nursery.cancel_scope.cancel()
        yield net


def _resolved(row: dict[str, Any]) -> dict[str, Any]:
    (dispute,) = row["disputes"]
    assert dispute["state"] == "resolved", dispute
    outcome: dict[str, Any] = dispute["outcome"]
    return outcome


async def test_a_falsely_accusing_auditor_loses_at_the_op_it_altered(
    tmp_path: Path,
    data_dir: Path,
    run_manifest: RunManifest,
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    lie = _fault(run_manifest, "mlp")
    async with running_network(
        tmp_path, data_dir, run_manifest, rounds=1, auditor_faults=(lie, None)
    ) as net:
        row = await net.miner(0)
        assert row["verdict"]["body"]["result"] == "MISMATCH"
        assert row["verdict"]["signer"] == AUDITORS[0].ss58
        outcome = _resolved(row)
        assert (outcome["loser"], outcome["cause"]) == (AUDITORS[0].ss58, "referee")
        assert outcome["op_spec"] == f"step={lie.t};layer={lie.layer};op=mlp"
        assert outcome["referee"] == AUDITORS[1].ss58
        assert row["status"] == "MATCH"
        assert row["forfeits"] == []
        assert not await net.blacklisted()
        dispute = row["disputes"][0]
        assert [b["level"] for b in dispute["bisects"]][::2] == ["step", "layer", "op"]
    assert net.summary is not None
    assert [(d.w, d.classification) for d in net.summary.disputes] == [(0, "CONTEST")]


async def test_an_auditor_that_names_no_leaf_loses_to_the_referees_new_audit(
    tmp_path: Path,
    data_dir: Path,
    run_manifest: RunManifest,
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with running_network(
        tmp_path, data_dir, run_manifest, rounds=1, forge_no_leaf=True
    ) as net:
        row = await net.miner(0)
        assert row["verdict"]["body"]["first_bad_leaf"] is None
        assert row["rerun"]["classification"] == "CONTEST"
        outcome = _resolved(row)
        assert (outcome["loser"], outcome["cause"], outcome["op_spec"]) == (
            AUDITORS[0].ss58,
            "referee",
            "verdict",
        )
        assert outcome["output_hash"] == row["rerun"]["leaves_root"]  # the committed leaves
        assert row["disputes"][0]["bisects"] == []
        assert (row["status"], row["forfeits"]) == ("MATCH", [])
        assert not await net.blacklisted()


async def test_an_auditor_silent_in_its_dispute_loses_at_the_deadline(
    tmp_path: Path,
    data_dir: Path,
    run_manifest: RunManifest,
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    lie = _fault(run_manifest, "mlp")
    async with running_network(
        tmp_path,
        data_dir,
        run_manifest,
        rounds=1,
        auditor_faults=(lie, None),
        silent_after_verdict=True,
    ) as net:
        row = await net.miner(0)
        assert row["verdict"]["signer"] == AUDITORS[0].ss58
        outcome = _resolved(row)
        assert (outcome["loser"], outcome["cause"]) == (AUDITORS[0].ss58, "timeout")
        (dispute,) = row["disputes"]
        assert [b["role"] for b in dispute["bisects"]] == ["miner"]  # the auditor said nothing
        assert outcome["resolved_round"] > dispute["opened_round"] + (
            run_manifest.verify.T.dispute_per_level
        )
        assert row["status"] == "MATCH"
        assert row["forfeits"] == []


async def test_a_miner_that_altered_one_op_loses_at_that_op(
    tmp_path: Path,
    data_dir: Path,
    run_manifest: RunManifest,
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    cheat = _fault(run_manifest, "mlp")
    async with running_network(
        tmp_path, data_dir, run_manifest, rounds=1, miner_faults=Faults(fault=cheat)
    ) as net:
        row = await net.miner(0)
        assert row["verdict"]["body"]["result"] == "MISMATCH"
        outcome = _resolved(row)
        assert (outcome["loser"], outcome["cause"]) == (MINER.ss58, "referee")
        assert outcome["op_spec"] == f"step={cheat.t};layer={cheat.layer};op=mlp"
        assert outcome["referee"] != row["verdict"]["signer"]
        assert row["status"] == "DISPUTE_LOST"
        assert [f["cause"] for f in row["forfeits"]] == ["DISPUTE_LOST"]
        assert await net.blacklisted()


async def test_a_glitch_is_forgiven_once_per_ledger_epoch(
    tmp_path: Path,
    data_dir: Path,
    run_manifest: RunManifest,
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    glitch = _fault(run_manifest, "update", layer=run_manifest.model.n_layers)

    def next_epoch_after_round_1(handle: DaemonHandle, w: int) -> None:
        # The ledger epoch is (chain time of D - genesis_unix) // epoch_seconds: after round 1's
        # rerun, move the origin ten epochs back, as if those epochs had passed.
        if w == 1:
            ctx = handle.ctx
            back = int(ctx.chain.genesis_time) - 10 * ctx.settings.epoch_seconds
            ctx.settings = attrs.evolve(ctx.settings, genesis_unix=back)

    faults = Faults(glitch=glitch)
    async with running_network(
        tmp_path,
        data_dir,
        run_manifest,
        rounds=3,
        miner_faults=faults,
        on_rerun=next_epoch_after_round_1,
    ) as net:
        rows = [await net.miner(w) for w in range(3)]
        # every rerun reproduced the auditor's root: round 1 is a FAULT only because round 0
        # used the epoch's forgiveness
        for r in rows:
            assert r["rerun"]["leaves_root"] == r["verdict"]["body"]["recomputed_leaves_root"]
        epochs = [r["rerun"]["epoch"] for r in rows]
        assert epochs[0] == epochs[1] < epochs[2]
        assert [r["verdict"]["body"]["result"] for r in rows] == ["MISMATCH"] * 3
        assert [r["status"] for r in rows] == ["TRANSIENT", "MISMATCH", "TRANSIENT"]
        assert [len(r["forfeits"]) for r in rows] == [0, 1, 0]
    assert net.summary is not None
    got = [(d.w, d.classification) for d in net.summary.disputes]
    assert got == [(0, "TRANSIENT"), (1, "FAULT"), (2, "TRANSIENT")]


async def test_a_glitch_in_a_full_mode_audit_is_transient_too(
    tmp_path: Path,
    data_dir: Path,
    run_manifest: RunManifest,
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    reset = attrs.evolve(run_manifest, inner=attrs.evolve(run_manifest.inner, state_policy="reset"))
    glitch = _fault(reset, "update", layer=reset.model.n_layers)
    async with running_network(
        tmp_path, data_dir, reset, rounds=1, miner_faults=Faults(glitch=glitch)
    ) as net:
        view = await net.view(0)
        assert view["jobs"][0]["challenge"]["body"]["mode"] == "full"
        row = await net.miner(0)
        assert row["rerun"]["classification"] == "TRANSIENT"
        assert row["rerun"]["leaves_root"] == row["verdict"]["body"]["recomputed_leaves_root"]
        assert (row["status"], row["forfeits"], row["disputes"]) == ("TRANSIENT", [], [])


async def test_a_rerun_that_matches_neither_side_accepts_the_fault(
    tmp_path: Path,
    data_dir: Path,
    run_manifest: RunManifest,
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    cheat = _fault(run_manifest, "mlp")
    other = attrs.evolve(cheat, layer=0)  # the committed training glitched somewhere else too
    async with running_network(
        tmp_path, data_dir, run_manifest, rounds=1, miner_faults=Faults(fault=cheat, glitch=other)
    ) as net:
        row = await net.miner(0)
        assert row["rerun"]["classification"] == "FAULT"
        (dispute,) = row["disputes"]
        assert (dispute["action"], dispute["state"], dispute["bisects"]) == (
            "accept",
            "accepted",
            [],
        )
        assert row["status"] == "MISMATCH"
        assert [f["cause"] for f in row["forfeits"]] == ["MISMATCH"]
