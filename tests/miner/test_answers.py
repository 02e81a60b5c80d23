"""The coordinator's answers as the miner reads them: typed, strict about the fields it reads,
blind to the ones it does not; a broken answer is a protocol error naming the field."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from hypertrain.miner.answers import AlreadyCommitted, RoundView, ViewMiner, read_answer
from hypertrain.miner.client import CoordinatorClient
from hypertrain.miner.config import MinerConfig
from hypertrain.miner.errors import ApiError, MinerFatal, MinerProtocolError
from hypertrain.miner.main import _classify
from hypertrain.miner.progress import Progress
from hypertrain.miner.session import run_miner
from hypertrain.protocol.envelope import NEVER, seal
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.manifest import RunManifest
from hypertrain.protocol.messages import Receipt
from hypertrain.rounds.assignment import Assignment
from tests.miner.fake import API, FakeCoordinator

HOTKEY = Keypair.from_seed(b"\x03" * 32).ss58
SHA = "ab" * 32
ENVELOPE = {"v": "ht/1", "type": "RoundOpen", "body": {"w": 0}, "sig": "00", "extra": 1}


def _view(**patch: Any) -> dict[str, Any]:
    view: dict[str, Any] = {
        "run_id": SHA,
        "w": 0,
        "state": "TRAINING",
        "now_round": 5,
        "round_open": ENVELOPE,
        "base": 0,
        "state_sha256": SHA,
        "tape_key": None,
        "heldout_loss": None,
        "assignment": [
            {"hotkey": HOTKEY, "slot": 0, "samples": [4, 2], "assignment_hash": SHA, "new": 1}
        ],
        "assignment_beacon_round": 3,
        "assignment_beacon_signature": "cd" * 48,
        "miners": [{"hotkey": HOTKEY, "slot": 0, "status": "ASSIGNED", "scores": {}}],
        "jobs": [],
    }
    view.update(patch)
    return view


def test_unknown_fields_are_ignored_at_every_level_and_envelopes_kept_whole() -> None:
    view = read_answer(RoundView, _view(), "GET /v1/runs/x/rounds/0")
    assert view == RoundView(
        now_round=5,
        round_open=ENVELOPE,
        base=0,
        assignment=(Assignment(HOTKEY, 0, (4, 2), SHA),),
        assignment_beacon_signature="cd" * 48,
        state_sha256=SHA,
        miners=(ViewMiner(HOTKEY, "ASSIGNED"),),
    )
    assert view.round_open["extra"] == 1  # envelopes are verify()'s to judge, whole
    assert read_answer(RoundView, _view(assignment=None), "GET /x").assignment is None


@pytest.mark.parametrize(
    ("view", "reason"),
    [
        (_view(now_round="5"), r"\$\.now_round: expected an int, got a string"),
        ({k: v for k, v in _view().items() if k != "base"}, r"\$\.base: required field missing"),
        (_view(state_sha256="xyz"), r"\$\.state_sha256: must be 64 lowercase hex chars"),
        (_view(miners=[{"hotkey": HOTKEY}]), r"\$\.miners\[0\]\.status: required field missing"),
        (
            _view(assignment=[{"hotkey": HOTKEY, "slot": 0, "samples": [1, "2"]}]),
            r"\$\.assignment\[0\]\.samples\[1\]: expected an int",
        ),
        (_view(round_open=[1]), r"\$\.round_open: "),
        ([_view()], r"\$: expected an object, got an array"),
    ],
)
def test_a_missing_or_mistyped_field_is_a_protocol_error_naming_it(
    view: object, reason: str
) -> None:
    with pytest.raises(
        MinerProtocolError, match=rf"^GET /v1/runs/x/rounds/0: RoundView body: .*{reason}"
    ):
        read_answer(RoundView, view, "GET /v1/runs/x/rounds/0")


async def test_a_commit_409_with_a_receipt_is_a_duplicate_and_without_one_a_refusal() -> None:
    coord = Keypair.from_seed(b"\x01" * 32)
    receipt = seal(coord, "Receipt", SHA, Receipt(0, SHA, 7), NEVER).to_json()
    answers = [
        httpx.Response(409, json={"detail": "already committed", "receipt": receipt}),
        httpx.Response(409, json={"detail": "not ACCEPTED"}),
        httpx.Response(409, json={"detail": "already committed", "receipt": "gone"}),
        httpx.Response(200, json={"status": "LATE", "receipt": receipt}),
    ]
    client = CoordinatorClient(API, transport=httpx.MockTransport(lambda _: answers.pop(0)))
    commit = seal(coord, "Receipt", SHA, Receipt(0, SHA, 7), NEVER)  # any envelope will do
    assert await client.commit(SHA, commit) == AlreadyCommitted(receipt)
    with pytest.raises(ApiError, match="HTTP 409: not ACCEPTED"):
        await client.commit(SHA, commit)
    with pytest.raises(MinerProtocolError, match=r"\(409\): AlreadyCommitted body: \$\.receipt"):
        await client.commit(SHA, commit)
    with pytest.raises(MinerProtocolError, match=r"\$\.status: must be one of 'COMMITTED'"):
        await client.commit(SHA, commit)
    await client.aclose()


async def test_a_broken_round_view_ends_the_miner_with_exit_2_naming_the_field(
    run_manifest: RunManifest,
    coord: Keypair,
    owner: Keypair,
    miner_key: Keypair,
    tmp_path: Path,
    data_dir: Path,
    configured: None,
    autojump_clock: trio.testing.MockClock,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fake = FakeCoordinator(run_manifest, coord, owner, [miner_key.ss58])
    fake.view_patch = {"now_round": str(fake.now()), "brand_new_field": {"x": 1}}
    config = MinerConfig(api=API, keyfile=tmp_path / "k", workdir=tmp_path / "w", data_dir=data_dir)
    with pytest.raises(MinerProtocolError) as info:
        await run_miner(
            config, miner_key, start=0, transport=fake.transport(),
            progress=Progress(io.StringIO()), configure=lambda env: None,
        )  # fmt: skip
    assert str(info.value) == (
        f"GET /v1/runs/{fake.run_id}/rounds/0: RoundView body: "
        "$.now_round: expected an int, got a string"
    )
    assert isinstance(info.value, MinerFatal)
    assert _classify(ExceptionGroup("g", [info.value])) == 2
    assert capsys.readouterr().err == f"hypertrain-miner: {info.value}\n"
    fake.view_patch = {"brand_new_field": {"x": 1}}  # a field it does not know changes nothing
    summary = await run_miner(
        config, miner_key, start=0, transport=fake.transport(),
        progress=Progress(io.StringIO()), configure=lambda env: None,
    )  # fmt: skip
    assert json.loads(json.dumps(summary.to_json())) == {
        "run_id": fake.run_id,
        "hotkey": miner_key.ss58,
        "rounds": [{"w": 0, "status": "UPLOADED", "detail": ""}],
        "served": [],
        "disputes": [],
        "ok": True,
    }
