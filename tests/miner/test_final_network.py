"""A whole network in virtual time through finality, rollback and payment (issue 15).

The daemon (its own aggregator), three honest miners, a ``noise`` honeypot and an auditor, over
three rounds; every miner is on probation (q = 1), so every miner is audited every round it
commits. Uploads close 4 drand rounds after ``d_commit``, long before ``d_audit``, so round 0
is merged with the honeypot's delta before its MISMATCH verdict: merging round 1 then rolls
round 0 back (and round 1 with it), and round 2 opens from the corrected theta. Checked:

- every round becomes FINAL, in order, with a K_coord Finalize whose ``included`` are the
  honest miners and whose ``entitlements_root`` commits to the stored entries; the honeypot's
  verdict is FAULT;
- the Rollback of round 0: K_coord-sealed, excluding the honeypot; rounds 0 and 1's applied
  tapes no longer merge it; RoundOpen(2) carries the new theta, not the old one; each Finalize's
  ``final_theta_hash_w1`` is the applied (corrected) theta;
- the rounds turn VESTING, then RELEASED as ledger rounds pass; one ``get_weights`` answer pays
  the honest miners (its epoch's 10^6 units, oldest escrow first) and nothing to the honeypot,
  a repeat returns the same bytes, and the ledger's ``minted = burned + paid + pending`` holds.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import attrs
import httpx
import trio
import trio.testing

from hypertrain.aggregator.checkpoint import (
    LINEAGE_FILE,
    MANIFEST_FILE,
    MODEL_FILE,
    object_keys,
    parse_lineage,
    parse_manifest,
    read_model,
    verify_manifest_signature,
)
from hypertrain.aggregator.checkpoint_dir import checkpoint_dir
from hypertrain.aggregator.checkpoint_verify import verify_checkpoint
from hypertrain.aggregator.tape import parse_signed_tape, tape_key
from hypertrain.miner.honeypot import HoneypotMode
from hypertrain.protocol.envelope import NEVER, seal, verify
from hypertrain.protocol.hashes import honeypot_commit
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.manifest import RunManifest
from hypertrain.rounds.finality import Entry, Verdict, entitlements_root
from nurseries.testing import open_asgi_transport
from tests.coordinator.harness import WORKER_TOKEN, admin_headers, write_secret
from tests.daemon.support import running_daemon
from tests.miner.network_support import audit, mine
from tests.miner.test_against_the_daemon import API, COORD, MINERS, _settings
from tests.miner.test_audited_network import AUDITOR, create_audited_run

ROUNDS = 3
RUN_TIMEOUT = 8000.0  # virtual seconds
EPOCH_SECONDS = 10
HONEYPOT = Keypair.from_seed(b"\x77" * 32)
HONEST = sorted(key.ss58 for key in MINERS)


async def _put(client: httpx.AsyncClient, path: str, body: object) -> Any:
    r = await client.put(path, json=body, headers=admin_headers())
    assert r.status_code == 200, r.text
    return r.json()


async def _views(client: httpx.AsyncClient, run_id: str) -> list[dict[str, Any]]:
    return [(await client.get(f"/v1/runs/{run_id}/rounds/{w}")).json() for w in range(ROUNDS)]


async def _tape(client: httpx.AsyncClient, key: str) -> Any:
    r = await client.get(f"/v1/objects/{key}", headers={"Authorization": f"Bearer {WORKER_TOKEN}"})
    assert r.status_code == 200, r.text
    return parse_signed_tape(r.content)


async def _status(client: httpx.AsyncClient, method: str, path: str, body: object) -> int:
    r = await client.request(method, path, json=body, headers=admin_headers())
    assert r.headers["content-type"].startswith("application/json"), r.text
    if r.status_code >= 400:
        assert r.json()["detail"], r.text
    return r.status_code


async def _hostile_requests(
    client: httpx.AsyncClient,
    run_id: str,
    views: list[dict[str, Any]],
    internal: dict[str, str],
    epoch: int,
) -> None:
    """The finality and ledger routes' refusals, after the run (every round final)."""
    base = f"/v1/aggregator/runs/{run_id}/rounds/0"
    final = views[0]["finalize"]["envelope"]
    body = final["body"]
    assert await _status(client, "POST", f"{base}/finalize", final) == 409  # already final
    stranger = seal(HONEYPOT, "Finalize", run_id, _sealed(final, run_id), NEVER).to_json()
    assert await _status(client, "POST", f"{base}/finalize", stranger) == 403
    wrong_w = f"/v1/aggregator/runs/{run_id}/rounds/1/finalize"
    assert await _status(client, "POST", wrong_w, final) == 400  # body w 0, path w 1
    assert await _status(client, "POST", f"{base}/finalize", {"body": body}) == 400
    not_final = f"/v1/aggregator/runs/{run_id}/rounds/9/finalize"
    assert await _status(client, "POST", not_final, final) == 400
    rollback = views[0]["rollback"]
    request = {
        "rollback": rollback["envelope"],
        "old_tape_w1": rollback["old_tapes"][1],
        "new_tapes": rollback["new_tapes"],
    }
    assert await _status(client, "POST", f"{base}/rollback", request) == 409  # final
    assert await _status(client, "POST", f"{base}/rollback", {**request, "new_tapes": []}) == 400
    unauthorised = await client.post(f"{base}/rollback", json=request)
    assert unauthorised.status_code == 401
    # get_weights: bad parameters are 400 naming them; an earlier epoch is out of order
    weights = "/internal/v1/get_weights"
    future = (f"?epoch={epoch + 2}", f"?epoch={2**53 - 1}", f"?epoch=0&epoch_at={2**53 - 1}")
    for query in ("", "?epoch=x", "?epoch=-1", f"?epoch={2**53}", "?epoch=1&epoch_at=1.5", *future):
        r = await client.get(weights + query, headers=internal)
        assert r.status_code == 400, (query, r.text)
        assert "epoch" in r.json()["detail"]
    late = json.loads((await client.get(f"{weights}?epoch={epoch - 1}", headers=internal)).content)
    assert late["metadata"]["reason"] == "out_of_order"
    assert late["weights"] == {}
    # clawback: escrow burns first, the rest becomes debt
    claw = f"/v1/admin/runs/{run_id}/clawback"
    pending = json.loads((await client.get(f"{weights}?epoch={epoch}", headers=internal)).content)
    assert pending["metadata"]["ledger_pending"] > 0
    r = await client.post(claw, json={"hotkey": HONEST[0], "units": 10**9}, headers=admin_headers())
    assert r.status_code == 200, r.text
    split = r.json()
    assert split["burned"] + split["debt"] == 10**9
    assert split["debt"] > 0
    assert await _status(client, "POST", claw, {"hotkey": "nope", "units": 1}) == 400
    assert await _status(client, "POST", claw, {"hotkey": HONEST[0], "units": 0}) == 400
    unknown = f"/v1/admin/runs/{'ab' * 32}/clawback"
    assert await _status(client, "POST", unknown, {"hotkey": HONEST[0], "units": 1}) == 404


async def _checkpoints(
    client: httpx.AsyncClient,
    run_id: str,
    views: list[dict[str, Any]],
    published: list[dict[str, Any]],
    manifest: RunManifest,
    state_dir: Path,
) -> None:
    """Every round has a final checkpoint (every = 1) whose lineage is the applied tapes and
    which replays from the objects its route serves; round 0's was provisional with the
    honeypot's delta, rebuilt without it by the rollback, then final. The last one verifies
    with every merge replayed from what the checkpoint routes serve."""
    base = f"/v1/runs/{run_id}/checkpoints"
    listing = (await client.get(base)).json()
    assert [c["w"] for c in listing["checkpoints"]] == list(range(ROUNDS))
    assert all(c["status"] == "final" for c in listing["checkpoints"])
    first = [p for p in published if p["w"] == 0]
    assert [p["status"] for p in first] == ["provisional", "provisional", "final"], first
    assert first[0]["theta_hash"] != first[1]["theta_hash"] == first[2]["theta_hash"]
    last = listing["checkpoints"][-1]
    files = {}
    for name, key in last["files"].items():
        r = await client.get(f"{base}/{ROUNDS - 1}/{name}")
        assert r.status_code == 200, r.text
        assert hashlib.sha256(r.content).hexdigest() == key
        files[name] = r.content
    on_disk = checkpoint_dir(state_dir, run_id, ROUNDS - 1)
    assert {p.name: p.read_bytes() for p in on_disk.iterdir()} == files
    assert sorted(p.name for p in on_disk.parent.iterdir()) == [str(w) for w in range(ROUNDS)]
    signed = parse_manifest(files[MANIFEST_FILE])
    verify_manifest_signature(signed, signer=COORD.ss58)
    assert signed.body.included == tuple(HONEST)
    assert (signed.body.license, signed.body.status) == ("Apache-2.0", "final")
    tapes = parse_lineage(files[LINEAGE_FILE]).tapes
    assert [tape_key(t) for t in tapes] == [v["tape_key"] for v in views]
    for c in listing["checkpoints"]:
        assert c["theta_hash"] == tapes[c["w"]].body.theta_hash
    stored: dict[str, bytes] = {}
    for key in object_keys(tapes):
        r = await client.get(f"{base}/{ROUNDS - 1}/objects/{key}")
        assert r.status_code == 200, r.text
        stored[key] = r.content
    report = verify_checkpoint(files, signer=COORD.ss58, load_object=stored.__getitem__)
    assert (report.replayed, report.replayed_rounds, report.genesis) == (True, ROUNDS, True)
    assert (
        report.theta_hash == read_model(files[MODEL_FILE]).theta_hash() == tapes[-1].body.theta_hash
    )
    assert report.rounds == (0, ROUNDS - 1)
    assert report.dataset.merkle_root == manifest.dataset.merkle_root
    # what is not part of a checkpoint is not served
    for path, status in (
        (f"{base}/{ROUNDS - 1}/objects/{'ab' * 32}", 404),
        (f"{base}/{ROUNDS - 1}/objects/{views[0]['tape_key']}", 404),
        (f"{base}/{ROUNDS - 1}/objects/XYZ", 400),
        (f"{base}/{ROUNDS - 1}/README", 404),
        (f"{base}/{ROUNDS}/{MANIFEST_FILE}", 404),
        (f"{base}/{2**53}/{MANIFEST_FILE}", 400),
        (f"/v1/runs/{'cd' * 32}/checkpoints", 404),
    ):
        r = await client.get(path)
        assert r.status_code == status, (path, r.text)
        assert r.json()["detail"]


def _sealed(envelope: dict[str, Any], run_id: str) -> Any:
    """The body of a K_coord envelope of the run (its signature checked)."""
    return verify(
        envelope,
        expected_run_id=run_id,
        now_round=0,
        signer_allowed=lambda _type, signer: signer == COORD.ss58,
    ).message


async def test_rounds_become_final_a_caught_delta_is_rolled_back_and_the_honest_are_paid(
    tmp_path: Path,
    data_dir: Path,
    run_manifest: RunManifest,
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    settings = _settings(tmp_path)
    worker = write_secret(tmp_path / "secrets" / "worker_token", WORKER_TOKEN)
    coordinator = attrs.evolve(
        settings.coordinator,
        worker_token_file=worker,
        epoch_seconds=EPOCH_SECONDS,
        checkpoint_every=1,
        checkpoint_license="Apache-2.0",
    )
    settings = attrs.evolve(settings, coordinator=coordinator)
    internal = {
        "Authorization": f"Bearer {settings.coordinator.internal_token_file.read_text().strip()}",  # type: ignore[union-attr]
        "X-Platform-Challenge-Slug": settings.coordinator.slug,
    }
    finished = trio.Event()
    async with (
        running_daemon(settings) as handle,
        open_asgi_transport(handle.app, lifespan=False) as transport,
        httpx.AsyncClient(transport=transport, base_url=API) as client,
        handle.ctx.events.subscribe(frozenset({"round_state", "checkpoint"})) as events,
    ):
        objects_dir = tmp_path / "state" / "objects"
        run_id = await create_audited_run(
            client, run_manifest, data_dir, objects_dir, auditors=(AUDITOR.ss58,), rounds=ROUNDS
        )
        base = f"/v1/admin/runs/{run_id}"
        for key in MINERS:
            await _put(client, f"{base}/roster/{key.ss58}", {})
        await _put(client, f"{base}/roster/{HONEYPOT.ss58}", {"probation": True})
        salt = b"\x05" * 32
        commitment = honeypot_commit([(HONEYPOT.ss58, HoneypotMode.NOISE.value)], salt)
        await _put(client, f"{base}/honeypot", {"commitment": commitment})
        await _put(client, f"{base}/paused", {"paused": False})

        async def miner(key: Keypair, mode: HoneypotMode) -> None:
            await mine(tmp_path, key, data_dir, transport, rounds=ROUNDS, mode=mode)

        async def auditor() -> None:
            await audit(tmp_path / "a", run_id, AUDITOR, transport, finished.wait)

        released: list[dict[str, Any]] = []
        published: list[dict[str, Any]] = []
        with trio.fail_after(RUN_TIMEOUT):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(auditor)
                async with trio.open_nursery() as miners:
                    for key in MINERS:
                        miners.start_soon(miner, key, HoneypotMode.HONEST)
                    miners.start_soon(miner, HONEYPOT, HoneypotMode.NOISE)
                while True:
                    views = await _views(client, run_id)
                    if all(v["state"] == "RELEASED" for v in views):
                        break
                    event = await events.receive()
                    data = json.loads(event.json)
                    if event.kind == "checkpoint":
                        published.append(data)
                    if data.get("state") == "RELEASED":
                        released.append(data)
                finished.set()
        epoch = handle.ctx.ledger.clock.params.epoch_of(int(handle.ctx.wall.now()))  # type: ignore[union-attr]
        answer = await client.get(f"/internal/v1/get_weights?epoch={epoch}", headers=internal)
        again = await client.get(f"/internal/v1/get_weights?epoch={epoch}", headers=internal)
        unauthorised = await client.get(f"/internal/v1/get_weights?epoch={epoch + 1}")
        wrong_slug = await client.get(
            f"/internal/v1/get_weights?epoch={epoch + 1}",
            headers={**internal, "X-Platform-Challenge-Slug": "other"},
        )
        health = (await client.get("/health")).json()
        tapes = {w: await _tape(client, views[w]["tape_key"]) for w in range(ROUNDS)}
        await _hostile_requests(client, run_id, views, internal, epoch)
        await _checkpoints(client, run_id, views, published, run_manifest, tmp_path / "state")

    # Rollback of round 0 (and 1) without the honeypot, round 2 opened from the new theta.
    rollback = views[0]["rollback"]
    assert rollback is not None
    body = _sealed(rollback["envelope"], run_id)
    assert body.excluded == (HONEYPOT.ss58,)
    assert rollback["new_tapes"] == [views[0]["tape_key"], views[1]["tape_key"]]
    assert rollback["old_tapes"] != rollback["new_tapes"]
    for w in (0, 1, 2):
        ids = [item.id for item in tapes[w].body.inputs]
        assert ids == HONEST, (w, ids)
    opened_theta = views[2]["round_open"]["body"]["theta_hash"]
    assert opened_theta == body.new_theta_hash_w2 == tapes[1].body.theta_hash
    assert body.old_theta_hash_w2 != body.new_theta_hash_w2
    assert views[1]["rollback"] is None
    assert views[2]["rollback"] is None
    # Finality: in order, K_coord-sealed, verdicts as audited, committed entries.
    final_rounds = [v["finalize"]["final_round"] for v in views]
    assert final_rounds == sorted(final_rounds)
    for w, view in enumerate(views):
        final = view["finalize"]
        message = _sealed(final["envelope"], run_id)
        assert message.w == w
        assert list(message.included) == HONEST
        assert message.final_theta_hash_w1 == tapes[w].body.theta_hash
        entries = final["entries"]
        assert {h: e["verdict"] for h, e in entries.items() if h in HONEST} == dict.fromkeys(
            HONEST, "MATCH"
        )
        if HONEYPOT.ss58 in entries:
            assert entries[HONEYPOT.ss58]["verdict"] == "FAULT"
        assert message.entitlements_root == entitlements_root(
            [
                Entry(h, Verdict(e["verdict"]), e["tokens"], e["soft_score_ppm"])
                for h, e in entries.items()
            ]
        )
        assert final["ledger_synced"] is True
    assert HONEYPOT.ss58 in views[0]["finalize"]["entries"]
    # Payment: every round's escrow vested; the honeypot gets nothing.
    assert answer.status_code == 200, answer.text
    assert again.content == answer.content
    assert (unauthorised.status_code, wrong_slug.status_code) == (401, 403)
    weights = json.loads(answer.content)
    print("get_weights:", answer.content.decode())
    assert sorted(weights["weights"]) == HONEST
    assert HONEYPOT.ss58 not in weights["weights"]
    meta = weights["metadata"]
    assert meta["ledger_minted"] == ROUNDS * 10**6
    assert (
        meta["ledger_minted"]
        == meta["ledger_burned"] + meta["ledger_paid"] + meta["ledger_pending"]
    )
    assert meta["units_paid"] == sum(int(v) for v in weights["weights"].values()) == 10**6
    assert health["ok"] is True
    assert health["ledger"]["minted"] == ROUNDS * 10**6
    assert released, "RELEASED was published as a round_state event"
