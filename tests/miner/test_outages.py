"""A miner rides out daemon outages: the real daemon in virtual time, its transport refusing
every connection for a few seconds at the start of each phase of each round.

The outages are ``ConnectError``s, as when the daemon's process is restarting: each phase's
calls retry (:meth:`~hypertrain.miner.round.RoundRunner.retry`) until the phase's own deadline,
and since no outage is long enough to swallow one, every round is committed and uploaded.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Container
from pathlib import Path

import httpx
import pytest
import trio
import trio.testing

from hypertrain.miner.progress import Progress
from hypertrain.miner.round import DEFAULT_SETTINGS, RoundStatus
from hypertrain.miner.session import run_miner
from hypertrain.protocol.manifest import RunManifest
from tests.miner.test_against_the_daemon import (
    API,
    MINERS,
    ROUND_TIMEOUT,
    _config,
    _daemon,
    _launch,
)

OUTAGE = 3.0  # seconds, as the restart the issue measured
ROUNDS = 2
PHASES = ("before_commit", "committed", "leaves", "put_done", "manifest_posted")
"""Hook points: each starts an outage that the next phase's calls run into (Commit, the
leaves, the upload, the DeltaManifest, the next round's view polls and start state)."""


class Outages(httpx.AsyncBaseTransport):
    """``inner``, refusing every connection while an outage lasts; counts what it refused.

    The Accept of each round in ``accept_rounds`` (every round by default) starts an outage of
    ``accept_seconds`` (no hook point precedes it); the Accept answers' statuses are kept in
    ``accept_answers``."""

    def __init__(
        self,
        inner: httpx.AsyncBaseTransport,
        *,
        accept_seconds: float = OUTAGE,
        accept_rounds: Container[int] = range(2**53),
    ) -> None:
        self.inner = inner
        self.accept_seconds = accept_seconds
        self.accept_rounds = accept_rounds
        self.until = -math.inf
        self.started: set[str] = set()
        self.refused: dict[str, int] = {}
        self.accept_answers: list[int] = []
        self.cause = ""

    def start(self, cause: str, seconds: float = OUTAGE) -> None:
        self.until = trio.current_time() + seconds
        self.cause = cause
        self.started.add(cause)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        accept = request.url.path.endswith("/accept")
        if accept:
            w = json.loads(request.content)["body"]["w"]
            if w in self.accept_rounds and f"accept:{w}" not in self.started:
                self.start(f"accept:{w}", self.accept_seconds)
        if trio.current_time() < self.until:
            self.refused[self.cause] = self.refused.get(self.cause, 0) + 1
            raise httpx.ConnectError("all attempts to connect failed", request=request)
        response = await self.inner.handle_async_request(request)
        if accept:
            self.accept_answers.append(response.status_code)
        return response


async def test_a_miner_commits_and_uploads_every_round_through_an_outage_in_each_phase(
    tmp_path: Path,
    data_dir: Path,
    run_manifest: RunManifest,
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    key = MINERS[0]
    async with (
        _daemon(tmp_path) as (_handle, transport),
        httpx.AsyncClient(transport=transport, base_url=API) as client,
    ):
        run_id = await _launch(client, run_manifest)
        outages = Outages(transport)
        seen: set[tuple[str, int]] = set()

        def hook(point: str, w: int) -> None:
            if point in PHASES and (point, w) not in seen:
                seen.add((point, w))
                outages.start(f"{point}:{w}")

        with trio.fail_after(ROUND_TIMEOUT * ROUNDS):
            summary = await run_miner(
                _config(tmp_path, key, data_dir),
                key,
                rounds=ROUNDS,
                start=0,
                transport=outages,
                progress=Progress(io.StringIO()),
                hook=hook,
                configure=lambda env: None,
            )
        views = [(await client.get(f"/v1/runs/{run_id}/rounds/{w}")).json() for w in range(ROUNDS)]
    assert [(r.status, r.detail) for r in summary.rounds] == [(RoundStatus.UPLOADED, "")] * ROUNDS
    assert summary.exit_code == 0
    for view in views:
        (row,) = [m for m in view["miners"] if m["hotkey"] == key.ss58]
        assert row["status"] == "UPLOADED"
    # Every outage was met: the phase after each hook point was refused at least once.
    # (The last round's manifest_posted ends the run: nothing follows it.)
    expected = {f"{p}:{w}" for p in ("accept", *PHASES) for w in range(ROUNDS)}
    expected.discard(f"manifest_posted:{ROUNDS - 1}")
    assert set(outages.refused) == expected, outages.refused


async def test_a_miner_started_during_an_outage_waits_for_the_daemon(
    tmp_path: Path,
    data_dir: Path,
    run_manifest: RunManifest,
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Its first calls (the run's view) retry for ``start_wait_seconds``, then it mines."""
    key = MINERS[0]
    async with (
        _daemon(tmp_path) as (_handle, transport),
        httpx.AsyncClient(transport=transport, base_url=API) as client,
    ):
        await _launch(client, run_manifest)
        outages = Outages(transport)
        outages.start("start")
        with trio.fail_after(ROUND_TIMEOUT):
            summary = await run_miner(
                _config(tmp_path, key, data_dir),
                key,
                rounds=1,
                start=0,
                transport=outages,
                progress=Progress(io.StringIO()),
                configure=lambda env: None,
            )
    assert [r.status for r in summary.rounds] == [RoundStatus.UPLOADED]
    assert outages.refused["start"] >= 1


async def test_a_miner_whose_daemon_stays_away_gives_up_with_the_last_failure(
    tmp_path: Path, data_dir: Path, autojump_clock: trio.testing.MockClock
) -> None:
    class Down(httpx.AsyncBaseTransport):
        tries = 0

        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            Down.tries += 1
            refused = ConnectionRefusedError(111, "Connection refused")
            raise httpx.ConnectError("all attempts to connect failed", request=request) from refused

    key = MINERS[0]
    start = trio.current_time()
    with (
        trio.fail_after(DEFAULT_SETTINGS.start_wait_seconds + 60),
        pytest.raises(httpx.ConnectError) as caught,
    ):
        await run_miner(
            _config(tmp_path, key, data_dir),
            key,
            transport=Down(),
            progress=Progress(io.StringIO()),
            configure=lambda env: None,
        )
    assert isinstance(caught.value.__cause__, ConnectionRefusedError)  # the cause is kept
    assert trio.current_time() - start == DEFAULT_SETTINGS.start_wait_seconds
    assert Down.tries > 2


async def test_a_miner_whose_accept_expired_in_an_outage_fails_that_round_and_goes_on(
    tmp_path: Path,
    data_dir: Path,
    run_manifest: RunManifest,
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """An outage from the first Accept until past ``d_commit`` (20 rounds later), within the
    miner's grace for a late beacon: its next try is answered 400, the envelope expired. The
    miner itself judged the window closed by then: round 0 FAILED, round 1 UPLOADED."""
    key = MINERS[0]
    async with (
        _daemon(tmp_path) as (_handle, transport),
        httpx.AsyncClient(transport=transport, base_url=API) as client,
    ):
        await _launch(client, run_manifest)
        outages = Outages(transport, accept_seconds=25.0, accept_rounds={0})
        with trio.fail_after(ROUND_TIMEOUT * 2):
            summary = await run_miner(
                _config(tmp_path, key, data_dir),
                key,
                rounds=2,
                start=0,
                transport=outages,
                progress=Progress(io.StringIO()),
                configure=lambda env: None,
            )
    assert [r.status for r in summary.rounds] == [RoundStatus.FAILED, RoundStatus.UPLOADED]
    assert "expired" in summary.rounds[0].detail, summary.rounds[0]
    assert outages.accept_answers == [400, 200], outages.accept_answers
