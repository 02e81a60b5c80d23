"""Three ``hypertrain-miner`` processes and a ``hypertrain-daemon`` process on 127.0.0.1.

The same round as tests/miner/test_against_the_daemon.py, but nothing shares a process: the
daemon signs its own local chain (1 s a round), the run is launched over its admin API with
real HTTP, and each miner is the console program started with its own ``miner.toml``.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import trio

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

N_MINERS = 3


@pytest.mark.slow
async def test_three_miner_processes_upload_round_zero_over_sockets(tmp_path: Path) -> None:
    data_dir = build_tiny_dataset(tmp_path / "dataset")
    async with (
        open_daemon(tmp_path / "daemon") as daemon,
        httpx.AsyncClient(base_url=daemon.url, timeout=10.0) as client,
    ):
        miners = [MinerProcess.create(tmp_path, daemon.url, data_dir) for _ in range(N_MINERS)]
        try:
            run_id = await launch_run(
                client, daemon, tiny_run_manifest(data_dir), [m.key for m in miners]
            )
            for miner in miners:
                await miner.start("--rounds", "1", "--start", "0")
            codes = {}
            with trio.fail_after(ROUND_TIMEOUT):
                for miner in miners:
                    codes[miner.key.ss58] = await miner.wait(ROUND_TIMEOUT)
            assert all(code == 0 for code in codes.values()), [m.describe() for m in miners]
            view = (await client.get(f"/v1/runs/{run_id}/rounds/0?full=1")).json()
            latest = (await client.get("/v1/beacon/latest")).json()["round"]
        finally:
            for miner in miners:
                await miner.kill()

    assert latest < view["round_open"]["body"]["d_upload"]  # it all happened inside the window
    rows = {row["hotkey"]: row for row in view["miners"]}
    assert set(rows) == {m.key.ss58 for m in miners}
    for miner in miners:
        assert summary_ok(miner), miner.stdout()
        assert miner.phases() == [
            "accepted", "trained", "committed", "leaves", "uploaded", "manifest_posted"
        ]  # fmt: skip
        assert "training step=6/6" in miner.stderr()
        check_row_matches_workdir(rows[miner.key.ss58], miner)
