"""In-process miners and auditors for the whole-network tests (virtual time, one transport)."""

from __future__ import annotations

import io
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx

from hypertrain.auditor.progress import Progress as AuditorProgress
from hypertrain.auditor.session import Options, run_auditor
from hypertrain.miner.honeypot import HoneypotMode
from hypertrain.miner.progress import Progress
from hypertrain.miner.session import Summary, run_miner
from hypertrain.protocol.keys import Keypair
from nurseries import run_inline
from tests.coordinator.harness import WORKER_TOKEN
from tests.miner.test_against_the_daemon import API, _config


async def mine(
    tmp_path: Path,
    key: Keypair,
    data_dir: Path,
    transport: httpx.AsyncBaseTransport,
    *,
    rounds: int,
    mode: HoneypotMode = HoneypotMode.HONEST,
) -> Summary:
    """``key`` mines ``rounds`` rounds from round 0 (its home under ``tmp_path``)."""
    return await run_miner(
        _config(tmp_path, key, data_dir),
        key,
        rounds=rounds,
        start=0,
        mode=mode,
        transport=transport,
        progress=Progress(io.StringIO()),
        configure=lambda env: None,
    )


async def audit(
    data_dir: Path,
    run_id: str,
    key: Keypair,
    transport: httpx.AsyncBaseTransport,
    stop: Callable[[], Awaitable[object]],
) -> None:
    """``key`` audits the run until ``stop()`` returns (its cache in ``data_dir``)."""
    options = Options(api=API, run_id=run_id, token=WORKER_TOKEN, keypair=key, data_dir=data_dir)
    await run_auditor(
        options,
        stop=stop,
        transport=transport,
        configure=lambda env: None,
        progress=AuditorProgress(err=io.StringIO()),
        run_sync=run_inline,
    )
