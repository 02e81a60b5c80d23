"""``kill -9`` a miner process in each phase of round 0, start it again, and it finishes.

One daemon process, one run, one miner process per kill point, all in the same round. Each
miner is started with ``HYPERTRAIN_TEST_MINER_PAUSE_AT=POINT`` (hypertrain/miner/main.py), so it
freezes right at that point and says so on stderr; the test then SIGKILLs it, checks what the
journal and the coordinator hold at that moment, and starts the same ``miner.toml`` again
without ``--start`` (it resumes the round its journal left unfinished). The restarted miner
must exit 0 with the round UPLOADED, the coordinator holding exactly one Commit for it (the one
in its ``commit.json``, with the Receipt in its ``receipt.json``), and its journal must hold
each phase once: nothing accepted or trained twice.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio

from hypertrain.miner.main import TEST_PAUSE_ENV, TEST_PAUSE_SECONDS, pause_hook_from_env
from tests.e2e.harness import (
    ROUND_TIMEOUT,
    MinerProcess,
    build_tiny_dataset,
    check_row_matches_workdir,
    launch_run,
    open_daemon,
    summary_ok,
    tiny_run_manifest,
)

FULL_ROUND = ["accepted", "trained", "committed", "leaves", "uploaded", "manifest_posted"]


@attrs.frozen
class KillPoint:
    name: str
    point: str
    """The hook point the miner pauses at (hypertrain.miner.round's phases)."""
    journal_at_kill: list[str]
    server_status_at_kill: str
    trains_after_restart: bool


KILL_POINTS = [
    KillPoint("after accept", "accepted", ["accepted"], "ACCEPTED", True),
    KillPoint("mid-training", "step", ["accepted"], "ACCEPTED", True),
    # The server holds the Commit, the miner has not journaled the Receipt: the re-post's 409
    # hands back the stored Receipt.
    KillPoint(
        "after commit, before the receipt", "commit_posted", FULL_ROUND[:2], "COMMITTED", False
    ),
    KillPoint("after commit", "committed", FULL_ROUND[:3], "COMMITTED", False),
    # The delta is PUT, the DeltaManifest is not posted: the upload is redone.
    KillPoint("mid-upload", "put_done", FULL_ROUND[:4], "COMMITTED", False),
]


async def _row(client: httpx.AsyncClient, run_id: str, hotkey: str) -> dict[str, Any]:
    view = (await client.get(f"/v1/runs/{run_id}/rounds/0?full=1")).json()
    rows = [row for row in view["miners"] if row["hotkey"] == hotkey]
    assert len(rows) == 1, view["miners"]
    row: dict[str, Any] = rows[0]
    return row


async def _kill_and_restart(
    client: httpx.AsyncClient, run_id: str, miner: MinerProcess, kill: KillPoint
) -> None:
    await miner.start("--rounds", "1", "--start", "0", **{TEST_PAUSE_ENV: kill.point})
    pause = f"hypertrain-miner: round 0: test-pause at {kill.point}\n"
    with trio.fail_after(ROUND_TIMEOUT):
        while pause not in miner.stderr():
            assert miner.process is not None
            assert miner.process.poll() is None, f"{kill.name}: exited\n{miner.describe()}"
            await trio.sleep(0.05)
    await miner.sigkill()
    assert miner.phases() == kill.journal_at_kill, kill.name
    if kill.point == "step":
        assert "training step=1/6" in miner.stderr()
        assert "training step=2/6" not in miner.stderr()
    assert (await _row(client, run_id, miner.key.ss58))["status"] == kill.server_status_at_kill

    await miner.start("--rounds", "1")  # the same config; resumes round 0 from the journal
    code = await miner.wait(ROUND_TIMEOUT)
    assert code == 0, f"{kill.name}\n{miner.describe()}"
    restarted = miner.stderr()
    assert ("round 0: training " in restarted) == kill.trains_after_restart, kill.name
    assert "round 0: accepted" not in restarted, kill.name  # accepted once, before the kill


@pytest.mark.slow
async def test_a_miner_killed_in_each_phase_finishes_the_round_after_a_restart(
    tmp_path: Path,
) -> None:
    data_dir = build_tiny_dataset(tmp_path / "dataset")
    async with (
        open_daemon(tmp_path / "daemon") as daemon,
        httpx.AsyncClient(base_url=daemon.url, timeout=10.0) as client,
    ):
        miners = [MinerProcess.create(tmp_path, daemon.url, data_dir) for _ in KILL_POINTS]
        try:
            run_id = await launch_run(
                client, daemon, tiny_run_manifest(data_dir), [m.key for m in miners]
            )
            with trio.fail_after(ROUND_TIMEOUT):
                async with trio.open_nursery() as nursery:
                    for miner, kill in zip(miners, KILL_POINTS, strict=True):
                        nursery.start_soon(_kill_and_restart, client, run_id, miner, kill)
            view = (await client.get(f"/v1/runs/{run_id}/rounds/0?full=1")).json()
        finally:
            for miner in miners:
                await miner.kill()

    rows = {row["hotkey"]: row for row in view["miners"]}
    for miner, kill in zip(miners, KILL_POINTS, strict=True):
        assert summary_ok(miner), (kill.name, miner.stdout())
        # Every phase once: never accepted, trained or committed twice.
        assert miner.phases() == FULL_ROUND, kill.name
        check_row_matches_workdir(rows[miner.key.ss58], miner)


def test_the_pause_hook_is_off_by_default_and_freezes_only_at_its_point(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert pause_hook_from_env({}) is None
    slept: list[float] = []
    monkeypatch.setattr("hypertrain.miner.main.time.sleep", slept.append)
    hook = pause_hook_from_env({TEST_PAUSE_ENV: "committed"})
    assert hook is not None
    hook("accepted", 0)
    assert (slept, capsys.readouterr().err) == ([], "")
    hook("committed", 3)
    assert slept == [TEST_PAUSE_SECONDS]
    assert capsys.readouterr().err == "hypertrain-miner: round 3: test-pause at committed\n"
