"""A whole round with four nodes, each hidden step cut in two slices (issue 19 item 4): no node
ever downloads more than one slice of the hidden window, yet every step settles by agreement.

Three miners upload round 0 to the real daemon (virtual time); four ``NodeRunner``s (the real
client and loop, scoring inline) take the copies. Each node's downloads are recorded by its own
transport, as the node sees them. Node 0 runs alone until every step is queued (the others
join then), so nothing but the one-slice rule keeps it from taking both slices. Checked, from
those records: each node fetched hidden trace bytes of exactly one slice of the window, and
nobody the whole window; each slice was fetched by two nodes; every job (public, and every
slice) settled by agreement with exactly two copies; each miner's hidden score, combined from
its slices, is the whole window's loss scored unsliced.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import httpx
import trio
import trio.testing

from hypertrain.node.client import NodeClient
from hypertrain.node.runner import NodeRunner
from hypertrain.protocol.manifest import RunManifest
from hypertrain.scoring.outcome import ScoreOutcome
from hypertrain.scoring.registry import DELTA_LOSS, Challenge
from hypertrain.scoring.sandbox import score_inline
from nurseries import VirtualClock
from tests.daemon.support import EPOCH
from tests.miner.conftest import coord, data_dir, run_manifest  # noqa: F401 (fixtures)
from tests.miner.rounds_support import launch_with_dataset, mine_rounds
from tests.miner.test_against_the_daemon import API
from tests.miner.test_aggregated_rounds import _daemon_with_holdout
from tests.node.test_against_the_daemon import _probe, _scorer

TIMEOUT = 3000.0  # virtual seconds
NODES = 4
SLICES = 2
SLOW_S = 2.0
"""Virtual seconds each job takes on nodes 1-3. Node 0 answers at once and is alone until
every step is queued, so it is back for more while every other copy waits: only the one-slice
rule keeps it off the other slice."""


def _paced(seconds: float) -> Callable[[Challenge, Mapping[str, Path]], Awaitable[ScoreOutcome]]:
    inner = _scorer(1000.0)

    async def score(challenge: Challenge, inputs: Mapping[str, Path]) -> ScoreOutcome:
        await trio.sleep(seconds)
        return await inner(challenge, inputs)

    return score


class _Downloads(httpx.AsyncBaseTransport):
    """One node's requests, passed on; the sha256 of each input body it was sent."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.fetched: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        if "/inputs/" not in request.url.path:
            return response
        body = await response.aread()
        if response.status_code == 200:
            self.fetched.append(hashlib.sha256(body).hexdigest())
        stream = httpx.ByteStream(body)
        return httpx.Response(response.status_code, headers=response.headers, stream=stream)


def _book(conn: Any) -> tuple[list[tuple[str, str | None]], dict[str, int], str]:
    jobs = [(str(s), h) for s, h in conn.execute("SELECT state, settled_how FROM compute_jobs")]
    row = conn.execute("SELECT window, slices FROM hidden_windows").fetchone()
    (window, slices) = ("", "[]") if row is None else row
    by_sha = {f["sha256"]: k for k, f in enumerate(json.loads(slices))}
    return jobs, by_sha, str(window)


def _copy_states(conn: Any) -> dict[str, int]:
    return {
        str(state): int(n)
        for state, n in conn.execute("SELECT state, count(*) FROM compute_copies GROUP BY state")
    }


def _step_inputs(conn: Any) -> dict[str, dict[str, str]]:
    """Each miner's hidden step inputs (those of its slice 0: its trace is that slice's)."""
    found: dict[str, dict[str, str]] = {}
    for subject, inputs in conn.execute(
        "SELECT s.step_subject, j.inputs FROM hidden_slice_jobs s JOIN compute_jobs j"
        " USING (job_id) WHERE s.slice = 0"
    ):
        files = {f["name"]: f["sha256"] for f in json.loads(inputs)}
        found[json.loads(subject)["hotkey"]] = files
    return found


async def test_no_node_downloads_two_slices_of_the_hidden_window_in_a_whole_round(
    tmp_path: Path,
    data_dir: Path,  # noqa: F811
    run_manifest: RunManifest,  # noqa: F811
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with (
        _daemon_with_holdout(tmp_path, data_dir, hidden_slices=SLICES) as (handle, transport),
        httpx.AsyncClient(transport=transport, base_url=API) as client,
        trio.open_nursery() as nodes,
    ):
        objects_dir = tmp_path / "state" / "objects"
        run_id = await launch_with_dataset(client, run_manifest, data_dir, objects_dir, 1)
        watches, runners = [], []
        for i in range(NODES):
            watch = _Downloads(transport)
            runner = NodeRunner(
                client=NodeClient(API, transport=watch),
                directory=tmp_path / f"node-{i}",
                key_flag=None,
                handle=f"node-{i}",
                probe=_probe,
                score=_paced(SLOW_S if i else 0.0),
                wall=VirtualClock(EPOCH),
                say=lambda line: None,
            )
            watches.append(watch)
            runners.append(runner)

        async def the_others() -> None:
            """Nodes 1-3 join once every step is queued: node 0 had its pick of them all."""
            while True:
                if len((await handle.ctx.db.read(_book))[0]) == 3 * (1 + SLICES):
                    break
                await trio.sleep(0.5)
            for runner in runners[1:]:
                nodes.start_soon(runner.run)

        nodes.start_soon(runners[0].run)
        nodes.start_soon(the_others)
        with trio.fail_after(TIMEOUT):
            await mine_rounds(tmp_path, data_dir, transport, 1)
            while True:
                jobs, by_sha, window = await handle.ctx.db.read(_book)
                if len(jobs) == 3 * (1 + SLICES) and all(s == "settled" for s, _ in jobs):
                    break
                await trio.sleep(1.0)
        steps = await handle.ctx.db.read(_step_inputs)
        copies = await handle.ctx.db.read(_copy_states)
        view = (await client.get(f"/v1/runs/{run_id}/rounds/0")).json()
        paths = {
            hotkey: {
                name: handle.ctx.objects.path_of(window if name == "trace.u16" else sha)
                for name, sha in files.items()
            }
            for hotkey, files in steps.items()
        }
        unsliced = {h: score_inline(DELTA_LOSS, p) for h, p in paths.items()}
        nodes.cancel_scope.cancel()

    assert jobs == [("settled", "agreement")] * (3 * (1 + SLICES))
    assert copies == {"answered": 2 * len(jobs)}  # two copies a job, none lost or refused
    held = [{by_sha[sha] for sha in watch.fetched if sha in by_sha} for watch in watches]
    assert all(len(slices) == 1 for slices in held), held  # one slice each, never two
    assert sorted(k for slices in held for k in slices) == [0, 0, 1, 1]
    assert not any(window in watch.fetched for watch in watches)  # nobody got the window
    for miner in view["miners"]:  # the combined slices are the whole window, unsliced
        hidden = miner["scores"]["hidden"]
        outcome = unsliced[miner["hotkey"]]
        assert outcome.result is not None
        assert outcome.result["sequences"] == 32
        assert (hidden["how"], hidden["loss"]) == ("agreement", outcome.result["loss"])
