"""POST /v1/runs/{id}/commit (Receipt, EXCLUDED, duplicates) and POST .../leaves."""

from __future__ import annotations

from pathlib import Path

import attrs
import trio.testing

from hypertrain.protocol.envelope import NEVER, verify
from hypertrain.protocol.jcs import body_digest
from hypertrain.protocol.messages import Receipt
from tests.coordinator.lifecycle_support import COORD, open_runs
from tests.coordinator.miner_support import KEYS, N_LEAVES, OUTSIDER, at_assign, sha


async def test_commit_answers_a_coord_receipt_and_the_view_shows_it(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        flow = await at_assign(h)
        commit = flow.commit(KEYS[0])
        assert (await flow.post("commit", commit)).status_code == 409  # not ACCEPTED yet
        await flow.accepted(KEYS[0])
        await flow.to(flow.d.d_commit + 1)
        r = await flow.post("commit", commit)
        assert r.status_code == 200, r.text
        answer = r.json()
        assert answer["status"] == "COMMITTED"
        receipt = verify(
            answer["receipt"],
            expected_run_id=flow.run_id,
            signer_allowed=lambda t, s: t == "Receipt" and s == COORD.ss58,
        )
        assert receipt.message == Receipt(
            w=0, commit_hash=body_digest(commit["body"]), received_round=flow.d.d_commit + 1
        )
        assert answer["receipt"]["exp_drand"] == NEVER
        miner = {m["hotkey"]: m for m in (await flow.view())["miners"]}[KEYS[0].ss58]
        assert miner["status"] == "COMMITTED"
        assert miner["received_round"] == flow.d.d_commit + 1
        assert miner["commit"] == commit
        assert miner["receipt"] == answer["receipt"]


async def test_duplicate_commit_is_409_and_the_same_envelope_gets_its_receipt(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        flow = await at_assign(h)
        await flow.accepted(KEYS[0])
        commit = flow.commit(KEYS[0])
        first = (await flow.post("commit", commit)).json()
        r = await flow.post("commit", commit)
        assert r.status_code == 409
        assert "already committed" in r.json()["detail"]
        assert r.json()["receipt"] == first["receipt"]
        r = await flow.post("commit", flow.commit(KEYS[0], tokens=1))
        assert r.status_code == 409
        assert "already committed" in r.json()["detail"]
        assert "receipt" not in r.json()


async def test_wrong_n_leaves_is_422_and_a_corrected_resend_works(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        flow = await at_assign(h)
        await flow.accepted(KEYS[0])
        r = await flow.post("commit", flow.commit(KEYS[0], n_leaves=N_LEAVES + 1))
        assert r.status_code == 422, r.text
        assert "n_leaves" in r.json()["detail"]
        assert await flow.status(KEYS[0]) == "ACCEPTED"
        await flow.committed(KEYS[0])


async def test_late_commit_is_excluded_with_a_receipt(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        flow = await at_assign(h)
        await flow.accepted(KEYS[1])
        await flow.to(flow.d.d_audit)
        answer = await flow.committed(KEYS[1])
        assert answer["status"] == "EXCLUDED"
        assert answer["receipt"]["body"]["received_round"] == flow.d.d_audit
        assert await flow.status(KEYS[1]) == "EXCLUDED"


async def test_leaves_must_merkle_to_the_committed_root(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        flow = await at_assign(h)
        await flow.accepted(KEYS[0])
        body = flow.leaves_body(KEYS[0])
        assert (await flow.post("leaves", body)).status_code == 409  # not committed
        await flow.committed(KEYS[0])
        good = flow.preimages(KEYS[0])
        bad = [*good[:-1], attrs.evolve(good[-1], loss_f32="00000040")]
        r = await flow.post("leaves", flow.leaves_body(KEYS[0], bad))
        assert r.status_code == 422, r.text
        assert "Merkle" in r.json()["detail"]
        r = await flow.post("leaves", flow.leaves_body(KEYS[0], good[:-1]))
        assert r.status_code == 422, r.text
        assert "n_leaves" in r.json()["detail"]
        shifted = [attrs.evolve(p, t=p.t + 1) for p in good]
        r = await flow.post("leaves", flow.leaves_body(KEYS[0], shifted))
        assert r.status_code == 422, r.text
        assert "preimages[0]" in r.json()["detail"]
        other_run = [attrs.evolve(p, run_id=sha("other")) for p in good]
        assert (await flow.post("leaves", flow.leaves_body(KEYS[0], other_run))).status_code == 422
        r = await flow.post("leaves", dict(body, hotkey=OUTSIDER.ss58))
        assert r.status_code == 403, r.text
        root = flow.commit(KEYS[0])["body"]["leaves_root"]
        for _ in range(2):  # idempotent
            r = await flow.post("leaves", body)
            assert r.status_code == 200, r.text
            assert r.json() == {"w": 0, "hotkey": KEYS[0].ss58, "leaves_root": root}
        await flow.to(flow.d.d_upload)
        assert (await flow.post("leaves", body)).status_code == 409
