"""The round state machine against a fake coordinator, in virtual time, with the tiny model."""

from __future__ import annotations

import io
import json
from pathlib import Path

import httpx
import pytest
import trio

from hypertrain.miner.config import MinerConfig
from hypertrain.miner.errors import MinerFatal
from hypertrain.miner.honeypot import HoneypotMode
from hypertrain.miner.journal import Journal
from hypertrain.miner.progress import Progress
from hypertrain.miner.round import RoundStatus
from hypertrain.miner.session import Summary, run_miner
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.manifest import RunManifest
from tests.miner.fake import API, FakeCoordinator

CRASH_POINTS = [
    "accepted",
    "trained",
    "before_commit",
    "commit_posted",
    "committed",
    "leaves",
    "put_done",
    "uploaded",
]


class Crash(Exception):
    """A simulated kill -9 at a hook point."""


def _config(tmp_path: Path, data_dir: Path) -> MinerConfig:
    return MinerConfig(
        api=API,
        keyfile=tmp_path / "unused.key",
        workdir=tmp_path / "work",
        data_dir=data_dir,
        poll_seconds=1.0,
        chunk_bytes=4096,
    )


async def _mine(
    fake: FakeCoordinator,
    config: MinerConfig,
    key: Keypair,
    *,
    rounds: int = 1,
    crash_at: str | None = None,
    mode: HoneypotMode = HoneypotMode.HONEST,
) -> tuple[Summary, Progress]:
    progress = Progress(io.StringIO())

    def hook(point: str, w: int) -> None:
        if point == crash_at:
            raise Crash(point)

    summary = await run_miner(
        config,
        key,
        rounds=rounds,
        start=0,
        mode=mode,
        transport=fake.transport(),
        progress=progress,
        hook=hook,
        configure=lambda env: None,
    )
    return summary, progress


@pytest.fixture
def fake(
    run_manifest: RunManifest, coord: Keypair, owner: Keypair, miner_key: Keypair
) -> FakeCoordinator:
    other = Keypair.from_seed(b"\x09" * 32).ss58
    return FakeCoordinator(run_manifest, coord, owner, roster=[miner_key.ss58, other])


async def test_one_round_reaches_uploaded(
    fake: FakeCoordinator,
    miner_key: Keypair,
    tmp_path: Path,
    data_dir: Path,
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    config = _config(tmp_path, data_dir)
    summary, progress = await _mine(fake, config, miner_key)
    assert summary.exit_code == 0
    assert [r.status for r in summary.rounds] == [RoundStatus.UPLOADED]
    assert fake.status[(0, miner_key.ss58)] == "UPLOADED"
    assert fake.commit_posts == 1
    assert any("training step=6/6" in line for line in progress.lines)
    phases = [e["phase"] for e in Journal.load(config.workdir).events]
    assert phases == ["accepted", "trained", "committed", "leaves", "uploaded", "manifest_posted"]
    for name in ("delta.bin", "preimages.json", "final_state.bin", "ef_out.bin", "commit.json",
                 "receipt.json"):  # fmt: skip
        assert (config.workdir / "rounds" / "0" / name).is_file()
    # a second run over the same workdir does nothing more
    again, _ = await _mine(fake, config, miner_key)
    assert again.exit_code == 0
    assert fake.commit_posts == 1


@pytest.mark.parametrize("point", CRASH_POINTS)
async def test_restart_after_crash_at_each_phase(
    point: str,
    fake: FakeCoordinator,
    miner_key: Keypair,
    tmp_path: Path,
    data_dir: Path,
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    config = _config(tmp_path, data_dir)
    with pytest.raises(Crash):
        await _mine(fake, config, miner_key, crash_at=point)
    summary, progress = await _mine(fake, config, miner_key)
    assert summary.exit_code == 0, summary.to_json()
    assert len(fake.stored_commits) == 1
    retrained = any(": training H=" in line for line in progress.lines)
    assert retrained is (point == "accepted")
    # only a crash between the server's answer and the journal line re-posts (and gets a 409)
    assert fake.commit_posts == (2 if point == "commit_posted" else 1)
    assert fake.status[(0, miner_key.ss58)] == "UPLOADED"


async def test_a_coordinator_down_through_the_retries_fails_the_round_and_mining_goes_on(
    fake: FakeCoordinator,
    miner_key: Keypair,
    tmp_path: Path,
    data_dir: Path,
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The coordinator is killed and restarted: every Commit of round 0 finds nobody listening.
    fake.rounds = 2
    refused: list[str] = []

    async def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/commit") and json.loads(request.content)["body"]["w"] == 0:
            refused.append(request.url.path)
            raise httpx.ConnectError("all attempts to connect failed", request=request)
        return await fake.handle(request)

    progress = Progress(io.StringIO())
    summary = await run_miner(
        _config(tmp_path, data_dir),
        miner_key,
        rounds=2,
        start=0,
        transport=httpx.MockTransport(handle),
        progress=progress,
        configure=lambda env: None,
    )
    assert [r.status for r in summary.rounds] == [RoundStatus.FAILED, RoundStatus.UPLOADED]
    failed = summary.rounds[0].detail
    assert failed.startswith("GaveUp: gave up after"), failed
    assert failed.endswith("last: ConnectError: all attempts to connect failed"), failed
    assert summary.exit_code == 1
    assert len(refused) > 3  # retried until d_commit, not a fixed count
    assert fake.status[(0, miner_key.ss58)] == "ACCEPTED"
    assert fake.status[(1, miner_key.ss58)] == "UPLOADED"
    assert any("round 0: failed" in line for line in progress.lines)
    # Nothing is journaled for the failed round past what it did: a restart could resume it.
    phases = [(e["w"], e["phase"]) for e in Journal.load(tmp_path / "work").events]
    assert phases[:2] == [(0, "accepted"), (0, "trained")]
    assert (0, "aborted") not in phases


async def test_two_rounds_carry_and_fetch_start_state(
    fake: FakeCoordinator,
    miner_key: Keypair,
    tmp_path: Path,
    data_dir: Path,
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake.rounds = 2
    config = _config(tmp_path, data_dir)
    summary, _ = await _mine(fake, config, miner_key, rounds=2)
    assert [r.status for r in summary.rounds] == [RoundStatus.UPLOADED] * 2
    assert fake.status[(1, miner_key.ss58)] == "UPLOADED"
    c0, c1 = fake.stored_commits[(0, miner_key.ss58)], fake.stored_commits[(1, miner_key.ss58)]
    assert c1["ef_in_hash"] == c0["ef_out_hash"]


async def test_not_rostered_is_skipped_exit_1(
    fake: FakeCoordinator,
    tmp_path: Path,
    data_dir: Path,
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    stranger = Keypair.from_seed(b"\x07" * 32)
    summary, _ = await _mine(fake, _config(tmp_path, data_dir), stranger)
    assert [r.status for r in summary.rounds] == [RoundStatus.SKIPPED]
    assert summary.exit_code == 1
    events = Journal.load(tmp_path / "work").events
    assert [e["phase"] for e in events] == ["skipped"]


async def test_tampered_assignment_is_a_protocol_error(
    fake: FakeCoordinator,
    miner_key: Keypair,
    tmp_path: Path,
    data_dir: Path,
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake.tamper_assignment = True
    fake.roster = [miner_key.ss58]
    with pytest.raises(MinerFatal, match="assignment_hash"):
        await _mine(fake, _config(tmp_path, data_dir), miner_key)
    assert fake.accept_posts == 0


async def test_late_miner_gives_up_at_d_commit(
    fake: FakeCoordinator,
    miner_key: Keypair,
    tmp_path: Path,
    data_dir: Path,
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    await trio.sleep(40 * fake.manifest.beacon.period)  # D is past round 0's d_commit
    summary, _ = await _mine(fake, _config(tmp_path, data_dir), miner_key)
    assert [r.status for r in summary.rounds] == [RoundStatus.ABORTED]
    assert fake.accept_posts == 0
