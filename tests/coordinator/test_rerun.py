"""A miner's rerun after a MISMATCH (spec 6.4, issue 14 item 1): TRANSIENT, CONTEST or FAULT."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio.testing

from hypertrain.coordinator.flows.rerun import classify
from hypertrain.protocol.hashes import rerun_claim_bytes
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.merkle import merkle_root_hex
from tests.coordinator.audit_support import BODY, AuditFlow, digests, sha, uploaded_round
from tests.coordinator.harness import roster_of
from tests.coordinator.lifecycle_support import open_runs
from tests.coordinator.miner_support import KEYS
from tests.coordinator.test_audit_routes import lease, worker

AUDITOR_ROOT = sha(b"what the auditor recomputed")


async def _mismatch(a: AuditFlow, key: Keypair) -> dict[str, Any]:
    """``key`` serves, its job is leased and a MISMATCH verdict recorded; the job JSON."""
    await a.serve_all(key)
    job = (await lease(a)).json()
    assert job["target"] == key.ss58
    verdict = a.verdict(job, "MISMATCH", recomputed=AUDITOR_ROOT)
    r = await worker(a, job["id"], "complete", {"lease": job["lease"], "verdict": verdict})
    assert r.status_code == 200, r.text
    return job  # type: ignore[no-any-return]


def _rerun(a: AuditFlow, key: Keypair, root: str, *, signer: Keypair | None = None) -> Any:
    sig = (signer or key).sign(rerun_claim_bytes(a.run_id, 0, key.ss58, root)).hex()
    return {"w": 0, "hotkey": key.ss58, "leaves_root": root, "sig": sig}


async def _post(a: AuditFlow, body: Any) -> httpx.Response:
    return await a.flow.post("rerun", body)


async def _state(a: AuditFlow, key: Keypair) -> tuple[str, bool, int]:
    view = await a.view()
    status = next(m["status"] for m in view["miners"] if m["hotkey"] == key.ss58)
    blacklisted = (await roster_of(a.h.client, a.run_id))[key.ss58]["blacklisted"]
    forfeits = [f for f in view["forfeits"] if f["body"]["hotkey"] == key.ss58]
    return status, blacklisted, len(forfeits)


async def test_a_rerun_equal_to_the_auditors_root_is_transient_and_clears_the_fault(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        a = await uploaded_round(h)
        await _mismatch(a, KEYS[0])
        assert await _state(a, KEYS[0]) == ("MISMATCH", True, 1)
        bad_sig = _rerun(a, KEYS[0], AUDITOR_ROOT, signer=KEYS[1])
        assert (await _post(a, bad_sig)).status_code == 401
        r = await _post(a, _rerun(a, KEYS[0], AUDITOR_ROOT))
        assert r.status_code == 200, r.text
        assert r.json() == {"w": 0, "hotkey": KEYS[0].ss58, "classification": "TRANSIENT"}
        assert await _state(a, KEYS[0]) == ("TRANSIENT", False, 0)
        again = await _post(a, _rerun(a, KEYS[0], AUDITOR_ROOT))
        assert again.status_code == 409  # once per round (and no longer MISMATCH)


async def test_a_rerun_equal_to_the_commitment_is_a_contest_and_anything_else_a_fault(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        a = await uploaded_round(h)
        job = await _mismatch(a, KEYS[0])
        # Segments mode: the rerun root covers the windows' replayed leaves, in window order.
        windows = job["challenge"]["segments"]
        mine = digests(a.run_id, KEYS[0])
        committed = merkle_root_hex([mine[k] for a_, b in windows for k in range(a_ + 1, b + 1)])
        r = await _post(a, _rerun(a, KEYS[0], committed))
        assert r.json()["classification"] == "CONTEST"
        assert await _state(a, KEYS[0]) == ("MISMATCH", True, 1)  # the dispute decides
        await _mismatch(a, KEYS[1])
        r = await _post(a, _rerun(a, KEYS[1], sha(b"neither")))
        assert r.json()["classification"] == "FAULT"
        assert await _state(a, KEYS[1]) == ("MISMATCH", True, 1)


async def test_only_a_mismatched_rostered_miner_reruns(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        a = await uploaded_round(h)
        r = await _post(a, _rerun(a, KEYS[0], AUDITOR_ROOT))
        assert r.status_code == 409  # UPLOADED: no verdict yet
        r = await _post(a, _rerun(a, KEYS[3], AUDITOR_ROOT))
        assert r.status_code == 404  # not in round 0's roster
        r = await _post(a, {"w": 0, "hotkey": KEYS[0].ss58, "leaves_root": "x", "sig": "y"})
        assert r.status_code == 400
        assert "leaves_root" in r.json()["detail"]


@pytest.mark.parametrize(
    ("rerun", "transients", "expected"),
    [
        ("A", 0, "TRANSIENT"),
        ("A", 1, "FAULT"),  # forgiveness of the epoch used up
        ("C", 0, "CONTEST"),
        ("C", 5, "CONTEST"),
        ("X", 0, "FAULT"),
    ],
)
def test_classification(rerun: str, transients: int, expected: str) -> None:
    got = classify(rerun, "A", "C", transients_this_epoch=transients, forgive_per_epoch=1)
    assert got == expected


async def test_in_full_mode_the_rerun_root_covers_every_leaf(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    full = attrs.evolve(BODY, inner=attrs.evolve(BODY.inner, state_policy="reset"))
    async with open_runs(tmp_path) as h:
        a = await uploaded_round(h, body=full)
        for _ in KEYS[:2]:
            job = (await lease(a)).json()  # full mode: nothing to serve, leasable at once
            assert job["challenge"]["mode"] == "full"
            verdict = a.verdict(job, "MISMATCH", recomputed=AUDITOR_ROOT)
            r = await worker(a, job["id"], "complete", {"lease": job["lease"], "verdict": verdict})
            assert r.status_code == 200, r.text
        first, second = sorted(KEYS[:2], key=lambda k: k.ss58)
        committed = merkle_root_hex(digests(a.run_id, first))  # all leaves: the commit's root
        r = await _post(a, _rerun(a, first, committed))
        assert r.json()["classification"] == "CONTEST"
        r = await _post(a, _rerun(a, second, AUDITOR_ROOT))
        assert r.json()["classification"] == "TRANSIENT"
        assert await _state(a, second) == ("TRANSIENT", False, 0)
