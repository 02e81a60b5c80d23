"""POST /v1/runs/{id}/accept: window, assignment hash, image/driver, roster, envelope errors."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import attrs
import trio.testing

from hypertrain.protocol.envelope import seal
from tests.coordinator.lifecycle_support import EXP, manifest, open_runs
from tests.coordinator.miner_support import KEYS, OUTSIDER, at_assign, open_flow, sha


def seen_count(db_path: Path, type_name: str) -> int:
    with sqlite3.connect(db_path) as conn:
        (n,) = conn.execute("SELECT count(*) FROM seen WHERE type = ?", (type_name,)).fetchone()
    return int(n)


async def test_accept_answers_slot_and_the_view_shows_accepted(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        flow = await at_assign(h)
        view = await flow.view()
        slots = {m["hotkey"]: m["slot"] for m in view["miners"]}
        assert await flow.status(KEYS[0]) == "ASSIGNED"
        r = await flow.post("accept", flow.accept(KEYS[0], await flow.assignment_hash(KEYS[0])))
        assert r.status_code == 200, r.text
        assert r.json() == {
            "w": 0,
            "hotkey": KEYS[0].ss58,
            "status": "ACCEPTED",
            "slot": slots[KEYS[0].ss58],
        }
        assert await flow.status(KEYS[0]) == "ACCEPTED"
        assert await flow.status(KEYS[1]) == "ASSIGNED"


async def test_accept_window_is_d_assign_to_d_commit(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        flow = await open_flow(h)
        await flow.to(flow.d.d_assign - 1)
        r = await flow.post("accept", flow.accept(KEYS[0], sha("any")))
        assert r.status_code == 409, r.text
        await flow.to(flow.d.d_assign)
        ahash = await flow.assignment_hash(KEYS[1])
        await flow.to(flow.d.d_commit)
        r = await flow.post("accept", flow.accept(KEYS[1], ahash))
        assert r.status_code == 409, r.text
        assert "Accept is taken while" in r.json()["detail"]
        assert await flow.status(KEYS[1]) == "ASSIGNED"


async def test_wrong_assignment_hash_records_nothing_and_a_corrected_resend_works(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        flow = await at_assign(h)
        r = await flow.post("accept", flow.accept(KEYS[0], sha("wrong")))
        assert r.status_code == 422, r.text
        assert "assignment_hash" in r.json()["detail"]
        assert await flow.status(KEYS[0]) == "ASSIGNED"
        assert seen_count(h.ctx.settings.db_path, "Accept") == 0
        # Another miner's hash is wrong for this one too.
        r = await flow.post("accept", flow.accept(KEYS[0], await flow.assignment_hash(KEYS[1])))
        assert r.status_code == 422
        r = await flow.post("accept", flow.accept(KEYS[0], await flow.assignment_hash(KEYS[0])))
        assert r.status_code == 200, r.text
        assert seen_count(h.ctx.settings.db_path, "Accept") == 1


async def test_image_digest_and_driver_allowlist(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    m = manifest()
    m = attrs.evolve(m, reference_spec=attrs.evolve(m.reference_spec, driver_allowlist=("ok",)))
    async with open_runs(tmp_path) as h:
        flow = await at_assign(h, m)
        ahash = await flow.assignment_hash(KEYS[0])
        r = await flow.post(
            "accept", flow.accept(KEYS[0], ahash, image_digest="sha256:" + sha("x"))
        )
        assert r.status_code == 422, r.text
        assert "image_digest" in r.json()["detail"]
        r = await flow.post("accept", flow.accept(KEYS[0], ahash, driver_version="drv-1"))
        assert r.status_code == 422, r.text
        assert "driver_allowlist" in r.json()["detail"]
        assert await flow.status(KEYS[0]) == "ASSIGNED"
        r = await flow.post("accept", flow.accept(KEYS[0], ahash, driver_version="ok"))
        assert r.status_code == 200, r.text


async def test_replay_and_second_accept_are_409(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        flow = await at_assign(h)
        ahash = await flow.assignment_hash(KEYS[0])
        envelope = flow.accept(KEYS[0], ahash)
        assert (await flow.post("accept", envelope)).status_code == 200
        r = await flow.post("accept", envelope)
        assert r.status_code == 409, r.text
        r = await flow.post("accept", flow.accept(KEYS[0], ahash, n_gpus=2))
        assert r.status_code == 409, r.text


async def test_envelope_errors_map_per_spec(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        flow = await at_assign(h)
        ahash = await flow.assignment_hash(KEYS[0])
        good = flow.accept(KEYS[0], ahash)
        # Not rostered in the round: 403.
        r = await flow.post("accept", flow.accept(OUTSIDER, ahash))
        assert r.status_code == 403, r.text
        # Body hotkey is not the signer: 403.
        body = dict(good["body"], hotkey=KEYS[1].ss58)
        r = await flow.post("accept", seal(KEYS[0], "Accept", flow.run_id, body, EXP).to_json())
        assert r.status_code == 403, r.text
        # Bad signature: 401.
        r = await flow.post("accept", dict(good, sig="00" * 64))
        assert r.status_code == 401, r.text
        # Expired: 400.
        r = await flow.post(
            "accept", seal(KEYS[0], "Accept", flow.run_id, good["body"], 1).to_json()
        )
        assert r.status_code == 400, r.text
        assert "expired" in r.json()["detail"]
        # Another run: 400.
        r = await flow.post(
            "accept", seal(KEYS[0], "Accept", sha("run"), good["body"], EXP).to_json()
        )
        assert r.status_code == 400, r.text
        # A Commit envelope posted to /accept: 400.
        r = await flow.post("accept", flow.commit(KEYS[0]))
        assert r.status_code == 400, r.text
        # Unknown round: 404.
        other = seal(KEYS[0], "Accept", flow.run_id, dict(good["body"], w=1), EXP).to_json()
        assert (await flow.post("accept", other)).status_code == 404
        # Removed from the run's roster after the round opened: 403.
        r = await h.client.delete(
            f"/v1/admin/runs/{flow.run_id}/roster/{KEYS[0].ss58}",
            headers={"Authorization": "Bearer admin-token.1"},
        )
        assert r.status_code == 200
        assert (await flow.post("accept", good)).status_code == 403
        assert await flow.status(KEYS[0]) == "ASSIGNED"
