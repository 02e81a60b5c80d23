"""POST /v1/admin/runs: an owner-signed RunManifest creates the one run of a state directory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hypertrain.beacon import latest_round
from hypertrain.coordinator.flows.runview import runs_list
from hypertrain.protocol.converter import unstructure
from hypertrain.protocol.envelope import seal
from hypertrain.protocol.example import example_bodies, example_manifest
from hypertrain.protocol.manifest import Beacon
from tests.coordinator.harness import admin_headers
from tests.coordinator.lifecycle_support import (
    CHAIN_BEACON,
    COORD,
    OWNER,
    STRANGER,
    admin,
    manifest,
    open_runs,
    push,
    sealed,
)

RUNS = "/v1/admin/runs"


def _seen_rows(conn: Any) -> list[tuple[str, str, str, int]]:
    return list(conn.execute("SELECT key, run_id, type, accepted_round FROM seen"))


async def test_create_answers_201_and_the_run_is_listed(tmp_path: Path) -> None:
    async with open_runs(tmp_path) as h:
        await push(h, 1)
        envelope = sealed()
        r = await admin(h, "POST", RUNS, envelope)
        assert r.status_code == 201
        run_id = manifest().run_id()
        assert r.json() == {"run_id": run_id, "status": "created"}
        listed = await h.client.get("/v1/runs")
        assert listed.json() == {"runs": [{"run_id": run_id, "status": "created"}]}
        view = (await h.client.get(f"/v1/runs/{run_id}")).json()
        assert view["manifest_envelope"] == envelope
        assert view["status"] == "created"
        assert view["config"] is None
        assert view["now_round"] == 1
        assert view["rounds"] == []
        assert view["roster_counts"] == {"total": 0, "active": 0, "removed": 0, "blacklisted": 0}
        seen = await h.ctx.db.read(_seen_rows)
        key = ["RunManifest", OWNER.ss58]
        assert [(json.loads(k)[2:4], r_id, t, d) for k, r_id, t, d in seen] == [
            (key, run_id, "RunManifest", 1)
        ]


async def test_no_runs_listed_before_creation(tmp_path: Path) -> None:
    async with open_runs(tmp_path) as h:
        assert (await h.client.get("/v1/runs")).json() == {"runs": []}


async def test_admin_token_is_required(tmp_path: Path) -> None:
    async with open_runs(tmp_path) as h:
        await push(h, 1)
        r = await h.client.post(RUNS, json=sealed())
        assert r.status_code == 401
        r = await h.client.post(RUNS, json=sealed(), headers=admin_headers("wrong"))
        assert r.status_code == 401


async def test_owner_not_configured_is_503(tmp_path: Path) -> None:
    async with open_runs(tmp_path, owner_hotkey=None) as h:
        await push(h, 1)
        r = await admin(h, "POST", RUNS, sealed())
        assert r.status_code == 503
        assert "HYPERTRAIN_OWNER_HOTKEY" in r.json()["detail"]


async def test_coord_key_not_configured_is_503(tmp_path: Path) -> None:
    async with open_runs(tmp_path, coord_key_file=None) as h:
        await push(h, 1)
        r = await admin(h, "POST", RUNS, sealed())
        assert r.status_code == 503
        assert "K_coord" in r.json()["detail"]


async def test_signer_other_than_the_owner_is_403(tmp_path: Path) -> None:
    async with open_runs(tmp_path) as h:
        await push(h, 1)
        r = await admin(h, "POST", RUNS, sealed(signer=STRANGER))
        assert r.status_code == 403
        assert (await h.client.get("/v1/runs")).json() == {"runs": []}


async def test_expired_envelope_is_400(tmp_path: Path) -> None:
    async with open_runs(tmp_path) as h:
        await push(h, 1, 2, 3)
        r = await admin(h, "POST", RUNS, sealed(exp=2))
        assert r.status_code == 400
        assert "expired" in r.json()["detail"]
        assert (await admin(h, "POST", RUNS, sealed(exp=3))).status_code == 201


async def test_bad_signature_is_401(tmp_path: Path) -> None:
    async with open_runs(tmp_path) as h:
        await push(h, 1)
        envelope = sealed()
        envelope["sig"] = ("0" if envelope["sig"][0] != "0" else "1") + envelope["sig"][1:]
        assert (await admin(h, "POST", RUNS, envelope)).status_code == 401


async def test_relabelled_type_is_401(tmp_path: Path) -> None:
    async with open_runs(tmp_path) as h:
        await push(h, 1)
        run_id = manifest().run_id()
        dispute = example_bodies(OWNER.ss58, STRANGER.ss58)["Dispute"]
        envelope = seal(OWNER, "Dispute", run_id, dispute, 2**40).to_json()
        envelope["type"] = "RunManifest"
        assert (await admin(h, "POST", RUNS, envelope)).status_code == 401


async def test_envelope_of_another_type_is_400(tmp_path: Path) -> None:
    async with open_runs(tmp_path) as h:
        await push(h, 1)
        dispute = example_bodies(OWNER.ss58, STRANGER.ss58)["Dispute"]
        envelope = seal(OWNER, "Dispute", manifest().run_id(), dispute, 2**40).to_json()
        r = await admin(h, "POST", RUNS, envelope)
        assert r.status_code == 400
        assert "RunManifest" in r.json()["detail"]


async def test_run_id_of_another_manifest(tmp_path: Path) -> None:
    other = manifest(auditors=[STRANGER.ss58]).run_id()
    async with open_runs(tmp_path) as h:
        await push(h, 1)
        relabelled = sealed()
        relabelled["run_id"] = other
        assert (await admin(h, "POST", RUNS, relabelled)).status_code == 401
        r = await admin(h, "POST", RUNS, sealed(run_id=other))
        assert r.status_code == 422
        assert "sha256(JCS(body))" in r.json()["detail"]


async def test_coord_pubkey_mismatch_is_422(tmp_path: Path) -> None:
    async with open_runs(tmp_path) as h:
        await push(h, 1)
        r = await admin(h, "POST", RUNS, sealed(manifest(coord_pubkey=STRANGER.ss58)))
        assert r.status_code == 422
        assert "coord_pubkey" in r.json()["detail"]


@pytest.mark.parametrize(
    "beacon",
    [
        None,  # drand quicknet, while this coordinator follows its own local chain
        Beacon(chain_hash=CHAIN_BEACON.chain_hash, period=1, genesis_time=1_700_000_000),
        Beacon(chain_hash=CHAIN_BEACON.chain_hash, period=3, genesis_time=1_700_000_001),
    ],
    ids=["other-chain", "other-period", "other-genesis"],
)
async def test_a_manifest_for_another_chain_is_422(tmp_path: Path, beacon: Beacon | None) -> None:
    async with open_runs(tmp_path) as h:
        await push(h, 1)
        r = await admin(
            h, "POST", RUNS, sealed(example_manifest(coord_pubkey=COORD.ss58, beacon=beacon))
        )
        assert r.status_code == 422
        assert "not this coordinator's chain" in r.json()["detail"]
        info = (await h.client.get("/v1/beacon/info")).json()
        assert info == h.chain.info.to_json()
        assert unstructure(await h.ctx.db.read(runs_list)) == {"runs": []}


@pytest.mark.parametrize(
    ("setting", "value", "named"),
    [
        ("epochs_per_round", 2, "budget.epochs_per_round"),
        ("vest_rounds", 11, "verify.E_vest_rounds"),
        ("forgive_per_epoch", 0, "verify.forgive_per_epoch"),
    ],
)
async def test_ledger_param_mismatch_is_422(
    tmp_path: Path, setting: str, value: int, named: str
) -> None:
    async with open_runs(tmp_path, **{setting: value}) as h:
        await push(h, 1)
        r = await admin(h, "POST", RUNS, sealed())
        assert r.status_code == 422
        assert named in r.json()["detail"]


async def test_second_run_is_409_even_identical(tmp_path: Path) -> None:
    async with open_runs(tmp_path) as h:
        await push(h, 1)
        assert (await admin(h, "POST", RUNS, sealed())).status_code == 201
        again = await admin(h, "POST", RUNS, sealed())
        assert again.status_code == 409
        other = await admin(h, "POST", RUNS, sealed(manifest(auditors=[STRANGER.ss58])))
        assert other.status_code == 409
        assert len((await h.client.get("/v1/runs")).json()["runs"]) == 1


async def test_no_beacon_round_is_409(tmp_path: Path) -> None:
    async with open_runs(tmp_path) as h:
        r = await admin(h, "POST", RUNS, sealed())
        assert r.status_code == 409
        assert "beacon" in r.json()["detail"]
        assert await h.ctx.db.read(latest_round) == 0
        assert (await h.client.get("/v1/runs")).json() == {"runs": []}


async def test_oversized_body_is_413(tmp_path: Path) -> None:
    async with open_runs(tmp_path) as h:
        await push(h, 1)
        envelope = sealed()
        padded = json.dumps(envelope)[:-1] + ', "pad": "' + "x" * (1 << 20) + '"}'
        r = await admin(h, "POST", RUNS, content=padded.encode())
        assert r.status_code == 413


async def test_duplicate_keys_and_malformed_json_are_400(tmp_path: Path) -> None:
    async with open_runs(tmp_path) as h:
        await push(h, 1)
        text = json.dumps(sealed())
        duplicated = text[:-1] + ', "v": "ht/1"}'
        assert (await admin(h, "POST", RUNS, content=duplicated.encode())).status_code == 400
        assert (await admin(h, "POST", RUNS, content=b"{not json")).status_code == 400
        assert (await admin(h, "POST", RUNS, [1, 2])).status_code == 400
        missing = sealed()
        del missing["sig"]
        assert (await admin(h, "POST", RUNS, missing)).status_code == 400
        assert (await h.client.get("/v1/runs")).json() == {"runs": []}
