"""``GET .../rounds/{w}/inputs`` and ``POST .../rounds/{w}/aggregate`` status codes (spec 9)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio
import trio.testing

from hypertrain.protocol.converter import structure
from hypertrain.protocol.envelope import NEVER, seal
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.messages import RoundOpen
from tests.coordinator.harness import Harness
from tests.coordinator.lifecycle_support import (
    COORD,
    STRANGER,
    admin,
    open_runs,
    push,
    ready_run,
    unpause,
)

HASHES = {
    name: bytes([i + 1]).hex() * 32
    for i, name in enumerate(("prev_final_hash", "theta_hash", "outer_state_hash", "center_hash"))
}


def _prefix(run_id: str) -> str:
    return f"/v1/aggregator/runs/{run_id}/rounds/0"


async def _running(h: Harness) -> tuple[str, dict[str, Any]]:
    await push(h, 1, 2, 3)
    run_id = await ready_run(h)
    assert (await unpause(h, run_id)).status_code == 200
    r = await admin(h, "GET", f"{_prefix(run_id)}/inputs")
    assert r.status_code == 200, r.text
    inputs: dict[str, Any] = r.json()
    return run_id, inputs


def _round_open(
    run_id: str, template: dict[str, Any], signer: Keypair = COORD, **changes: Any
) -> dict[str, Any]:
    body = structure(RoundOpen, {**template, **HASHES, **changes})
    return seal(signer, "RoundOpen", run_id, body, NEVER).to_json()


async def test_inputs_show_the_round_and_the_next_rounds_template(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        run_id, inputs = await _running(h)
        d_upload = inputs["round_open"]["body"]["d_upload"]
        assert inputs["run_id"] == run_id
        assert inputs["w"] == 0
        assert inputs["state"] == "OPEN"
        assert inputs["now_round"] == 3
        assert [m["status"] for m in inputs["miners"]] == ["ASSIGNED", "ASSIGNED"]
        assert all(m["delta_manifest"] is None for m in inputs["miners"])
        template = inputs["next_round_template"]
        assert template["w"] == 1
        assert template["d_open"] == d_upload  # max(D, d_upload(0))
        assert template["roster"] == inputs["round_open"]["body"]["roster"]
        assert not set(HASHES) & set(template)
        chosen = await admin(h, "GET", f"{_prefix(run_id)}/inputs?d_open={d_upload + 7}")
        assert chosen.json()["next_round_template"]["d_open"] == d_upload + 7
        assert (await admin(h, "GET", f"{_prefix(run_id)}/inputs?d_open=x")).status_code == 400
        assert (await h.client.get(f"{_prefix(run_id)}/inputs")).status_code == 401
        unknown = f"/v1/aggregator/runs/{run_id}/rounds/1/inputs"
        assert (await admin(h, "GET", unknown)).status_code == 404


async def test_aggregate_checks_time_template_signer_and_applies_once(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        run_id, inputs = await _running(h)
        template = inputs["next_round_template"]
        url = f"{_prefix(run_id)}/aggregate"
        early = await admin(h, "POST", url, _round_open(run_id, template))
        assert early.status_code == 409, early.text  # D < d_upload(0)
        d_upload = inputs["round_open"]["body"]["d_upload"]
        await push(h, *range(4, d_upload + 2))
        fresh = (await admin(h, "GET", f"{_prefix(run_id)}/inputs")).json()
        template = fresh["next_round_template"]
        assert template["d_open"] == d_upload + 1  # D is past d_upload now
        r = await admin(h, "POST", url, _round_open(run_id, _shifted(template, -1)))
        assert r.status_code == 409, r.text  # d_open < D
        wrong = await admin(h, "POST", url, _round_open(run_id, template, roster_hash="ab" * 32))
        assert wrong.status_code == 422
        assert "roster_hash" in wrong.json()["detail"]
        bad_w = await admin(h, "POST", url, _round_open(run_id, template, w=2))
        assert bad_w.status_code == 422
        assert "RoundOpen.w" in bad_w.json()["detail"]
        stranger = await admin(h, "POST", url, _round_open(run_id, template, STRANGER))
        assert stranger.status_code == 403
        unauth = await h.client.post(url, json=_round_open(run_id, template))
        assert unauth.status_code == 401
        ok = await admin(h, "POST", url, _round_open(run_id, template))
        assert ok.status_code == 200, ok.text
        assert ok.json() == {"w": 0, "state": "APPLIED", "opened": 1}
        again = await admin(h, "POST", url, _round_open(run_id, template))
        assert again.status_code == 409
        round1 = (await h.client.get(f"/v1/runs/{run_id}/rounds/1")).json()
        assert round1["round_open"]["body"]["theta_hash"] == HASHES["theta_hash"]
        after = (await admin(h, "GET", f"{_prefix(run_id)}/inputs")).json()
        assert after["next_round_template"] is None


def _shifted(template: dict[str, Any], by: int) -> dict[str, Any]:
    """``template``'s deadlines all moved by ``by`` rounds."""
    return {k: v + by if k.startswith("d_") else v for k, v in template.items()}
