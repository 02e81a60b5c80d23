"""A whole audited network in virtual time: the daemon, honest miners, one honeypot of each mode
and an auditor, over three rounds (issue 13's acceptance).

Every miner is on probation (q = 1), so every miner is audited every round it commits. The run
is ``carry``: each audit is a segment audit whose windows the miners serve. Checked: every bad
honeypot's verdict is MISMATCH (``last_step`` through the final window), every honest miner's
and the honest honeypot's MATCH; a caught honeypot is blacklisted, off the roster of the rounds
opened after its verdict, and a miner of its cluster carries the ``cluster`` reason; after the
reveal, auditor-stats shows a catch rate of 1.0 and a false-positive rate of 0.0.
"""

from __future__ import annotations

import io
import json
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import httpx
import trio
import trio.testing

from hypertrain.auditor.progress import Progress as AuditorProgress
from hypertrain.auditor.session import Options, run_auditor
from hypertrain.beacon import ChainInfo
from hypertrain.daemon.main import DaemonHandle
from hypertrain.datasets.pin import pin_async
from hypertrain.miner.honeypot import HoneypotMode
from hypertrain.miner.progress import Progress
from hypertrain.miner.session import Summary, run_miner
from hypertrain.protocol.envelope import NEVER, seal
from hypertrain.protocol.hashes import honeypot_commit
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.manifest import Beacon, RunManifest
from nurseries import run_inline
from nurseries.testing import open_asgi_transport
from tests.coordinator.harness import WORKER_TOKEN, admin_headers, roster_of, write_secret
from tests.daemon.support import running_daemon
from tests.miner.test_against_the_daemon import API, COORD, MINERS, OWNER, _config, _settings

ROUNDS = 3
RUN_TIMEOUT = 6000.0  # virtual seconds
AUDITOR = Keypair.from_seed(b"\x0a" * 32)
HONEYPOTS = {
    mode: Keypair.from_seed(bytes([0x71 + i]) * 32)
    for i, mode in enumerate(
        (HoneypotMode.FABRICATE, HoneypotMode.LAST_STEP, HoneypotMode.NOISE, HoneypotMode.HONEST)
    )
}
BAD = {key.ss58 for mode, key in HONEYPOTS.items() if mode is not HoneypotMode.HONEST}
UPLOAD_AFTER_COMMIT = 4
CLUSTER = "rack-7"
"""The fabricate honeypot and the first honest miner share it."""


@asynccontextmanager
async def _daemon(tmp_path: Path) -> AsyncIterator[tuple[DaemonHandle, httpx.AsyncBaseTransport]]:
    """The miner tests' daemon with the worker token configured (the auditor needs it)."""
    settings = _settings(tmp_path)
    worker = write_secret(tmp_path / "secrets" / "worker_token", WORKER_TOKEN)
    coordinator = attrs.evolve(settings.coordinator, worker_token_file=worker)
    async with (
        running_daemon(attrs.evolve(settings, coordinator=coordinator)) as handle,
        open_asgi_transport(handle.app, lifespan=False) as transport,
    ):
        yield handle, transport


async def _put(client: httpx.AsyncClient, path: str, body: object) -> Any:
    r = await client.put(path, json=body, headers=admin_headers())
    assert r.status_code == 200, r.text
    return r.json()


async def create_audited_run(
    client: httpx.AsyncClient,
    manifest: RunManifest,
    data_dir: Path,
    objects_dir: Path,
    *,
    auditors: tuple[str, ...],
    rounds: int,
) -> str:
    """Create the run on the daemon's chain (K_coord, ``auditors``, a short upload window),
    register the data and configure ``rounds`` rounds; the run id (still paused)."""
    info = ChainInfo.from_json((await client.get("/v1/beacon/info")).json())
    beacon = Beacon(
        chain_hash=info.hash, period=info.period_ms // 1000, genesis_time=info.genesis_ms // 1000
    )
    # Uploads close 4 rounds after d_commit, long before d_audit (40 after): round w + 1 is
    # merged before round w's audits, so only the w + 2 rule keeps round w + 2 from opening.
    timeouts = attrs.evolve(manifest.verify.T, upload_after_commit=UPLOAD_AFTER_COMMIT)
    manifest = attrs.evolve(
        manifest,
        coord_pubkey=COORD.ss58,
        beacon=beacon,
        auditors=auditors,
        verify=attrs.evolve(manifest.verify, T=timeouts),
    )
    envelope = seal(OWNER, "RunManifest", manifest.run_id(), manifest, NEVER).to_json()
    created = await client.post("/v1/admin/runs", json=envelope, headers=admin_headers())
    assert created.status_code == 201, created.text
    run_id: str = created.json()["run_id"]
    base = f"/v1/admin/runs/{run_id}"
    pinned = await pin_async(data_dir, objects_dir)
    await _put(client, f"{base}/dataset", {"manifest_sha256": pinned.manifest_sha256})
    config = {"train_rounds": 20, "final_after_upload": 5, "total_rounds": rounds}
    await _put(client, f"{base}/config", config)
    return run_id


async def _launch(
    client: httpx.AsyncClient, manifest: RunManifest, data_dir: Path, objects_dir: Path
) -> tuple[str, dict[str, Any]]:
    """Create, register the data, configure, admit everyone, commit the honeypots, unpause."""
    run_id = await create_audited_run(
        client, manifest, data_dir, objects_dir, auditors=(AUDITOR.ss58,), rounds=ROUNDS
    )
    base = f"/v1/admin/runs/{run_id}"
    for i, key in enumerate(MINERS):
        await _put(client, f"{base}/roster/{key.ss58}", {"cluster": CLUSTER} if i == 0 else {})
    for mode, key in HONEYPOTS.items():
        body = {"probation": True}
        if mode is HoneypotMode.FABRICATE:
            body["cluster"] = CLUSTER  # type: ignore[assignment]
        await _put(client, f"{base}/roster/{key.ss58}", body)
    members = sorted((key.ss58, mode.value) for mode, key in HONEYPOTS.items())
    salt = secrets.token_bytes(32)
    commitment = honeypot_commit(members, salt)
    await _put(client, f"{base}/honeypot", {"commitment": commitment})
    await _put(client, f"{base}/paused", {"paused": False})
    reveal = {
        "commitment": commitment,
        "members": [{"hotkey": h, "mode": m} for h, m in members],
        "salt": salt.hex(),
    }
    return run_id, reveal


async def _views(client: httpx.AsyncClient, run_id: str) -> list[dict[str, Any]]:
    path = f"/v1/runs/{run_id}/rounds"
    return [(await client.get(f"{path}/{w}", params={"full": "1"})).json() for w in range(ROUNDS)]


def _settled(views: list[dict[str, Any]]) -> bool:
    def done(view: dict[str, Any]) -> bool:
        return all(job["state"] in ("done", "failed") for job in view["jobs"])

    return all(view["selected"] is not None and done(view) for view in views)


async def test_an_audited_network_catches_every_bad_honeypot_and_flags_no_honest_miner(
    tmp_path: Path,
    data_dir: Path,
    run_manifest: RunManifest,
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    summaries: dict[str, Summary] = {}
    audited = trio.Event()
    async with (
        _daemon(tmp_path) as (handle, transport),
        httpx.AsyncClient(transport=transport, base_url=API) as client,
        handle.ctx.events.subscribe(frozenset({"audit"})) as events,
    ):
        objects_dir = tmp_path / "state" / "objects"
        run_id, reveal = await _launch(client, run_manifest, data_dir, objects_dir)

        async def mine(key: Keypair, mode: HoneypotMode) -> None:
            summaries[key.ss58] = await run_miner(
                _config(tmp_path, key, data_dir),
                key,
                rounds=ROUNDS,
                start=0,
                mode=mode,
                transport=transport,
                progress=Progress(io.StringIO()),
                configure=lambda env: None,
            )

        async def audit() -> None:
            options = Options(
                api=API,
                run_id=run_id,
                token=WORKER_TOKEN,
                keypair=AUDITOR,
                data_dir=tmp_path / "auditor",
            )
            await run_auditor(
                options,
                stop=audited.wait,
                transport=transport,
                configure=lambda env: None,
                progress=AuditorProgress(err=io.StringIO()),
                run_sync=run_inline,
            )

        with trio.fail_after(RUN_TIMEOUT):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(audit)
                async with trio.open_nursery() as miners:
                    for key in MINERS:
                        miners.start_soon(mine, key, HoneypotMode.HONEST)
                    for mode, key in HONEYPOTS.items():
                        miners.start_soon(mine, key, mode)
                while not _settled(views := await _views(client, run_id)):
                    await events.receive()  # a verdict (or any audit change) may settle it
                audited.set()
        r = await client.post(
            f"/v1/admin/runs/{run_id}/honeypot/reveal", json=reveal, headers=admin_headers()
        )
        assert r.status_code == 200, r.text
        stats = (await client.get(f"/run/{run_id}/auditor-stats")).json()
        roster = await roster_of(client, run_id)

    results: dict[str, list[tuple[int, str]]] = {}
    verdicts: dict[tuple[int, str], dict[str, Any]] = {}
    for view in views:
        assert sorted(view["selected"]) == sorted(
            m["hotkey"] for m in view["miners"] if m["commit"] is not None
        )
        for job in view["jobs"]:
            assert job["state"] == "done", job
            results.setdefault(job["target"], []).append((view["w"], job["result"]))
            miner = next(m for m in view["miners"] if m["hotkey"] == job["target"])
            verdicts[view["w"], job["target"]] = miner["verdict"]["body"]
    for key in MINERS:
        assert results[key.ss58] == [(w, "MATCH") for w in range(ROUNDS)], key.ss58
    assert results[HONEYPOTS[HoneypotMode.HONEST].ss58] == [(w, "MATCH") for w in range(ROUNDS)]
    for hotkey in BAD:
        assert results[hotkey], hotkey
        assert {r for _, r in results[hotkey]} == {"MISMATCH"}, results[hotkey]
    n_last = run_manifest.inner.H // run_manifest.inner.J
    last_step = HONEYPOTS[HoneypotMode.LAST_STEP].ss58
    assert {verdicts[w, last_step]["first_bad_leaf"] for w, _ in results[last_step]} <= {
        n_last - 1,
        n_last,
        None,
    }
    # The w + 2 rule: round w + 2 opened only once every audit of round w had its verdict.
    for w in range(ROUNDS - 2):
        verdict_rounds = [job["verdict_round"] for job in views[w]["jobs"]]
        opened = views[w + 2]["round_open"]["body"]["d_open"]
        assert opened >= max(verdict_rounds) > views[w + 1]["round_open"]["body"]["d_upload"]
    # Caught honeypots are blacklisted and off the rosters opened after their verdict.
    assert {h for h, m in roster.items() if m["blacklisted"]} == BAD
    last_roster = {e["hotkey"] for e in views[-1]["round_open"]["body"]["roster"]}
    assert not (last_roster & BAD)
    assert MINERS[0].ss58 in last_roster
    last_challenge = next(
        j["challenge"]["body"] for j in views[-1]["jobs"] if j["target"] == MINERS[0].ss58
    )
    assert "cluster" in last_challenge["reasons"]
    # auditor-stats after the reveal
    epochs = stats["epochs"]
    assert epochs
    assert all(e["honeypot_catch_rate"] == 1.0 for e in epochs if e["hp_bad"])
    assert all(e["honeypot_false_positive_rate"] == 0.0 for e in epochs if e["hp_honest"])
    assert sum(e["hp_bad"] for e in epochs) == sum(len(results[h]) for h in BAD)
    assert sum(e["hp_honest"] for e in epochs) == ROUNDS
    print("audits:", json.dumps({h[:8]: r for h, r in results.items()}))
    assert {hk: s.exit_code for hk, s in summaries.items() if hk not in BAD} == dict.fromkeys(
        [k.ss58 for k in MINERS] + [HONEYPOTS[HoneypotMode.HONEST].ss58], 0
    )
