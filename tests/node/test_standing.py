"""The node's own leaderboard line, now and then (issue 19 item 7): ``standing_every``
seconds after registering and every ``standing_every`` after, before the next turn; nothing
when the coordinator does not answer it; never in ``--once``."""

from __future__ import annotations

from pathlib import Path

import trio
import trio.testing

from hypertrain.compute.wire import Standing
from hypertrain.node.runner_types import standing_line
from tests.node.test_runner import Harness

ROW = {
    "rank": 3,
    "handle": "my-node",
    "compute_credits": 5,
    "jobs_done": 3,
    "strikes": 1,
    "agreement_ppm": 750_000,
    "last_seen": 1_700_000_000_000,
}
LINE = "leaderboard: rank 3, 5 compute credits, 3 jobs done, agreement 75.0 %, 1 strike"


def _board(harness: Harness) -> list[str]:
    return [line for line in harness.lines if line.startswith("leaderboard:")]


async def test_the_node_prints_its_leaderboard_line_every_standing_every_seconds(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    harness = Harness(tmp_path)
    harness.fake.standing = ROW
    start = trio.current_time()
    await harness.loop_for(1300.0, standing_every=600.0)
    node_id = harness.fake.keys[next(iter(harness.fake.keys))]
    assert _board(harness) == [LINE, LINE]
    assert [t - start for t in harness.fake.standing_times] == [600.0, 1200.0]
    asked = [r.url.path for r in harness.fake.requests if "leaderboard" in r.url.path]
    assert asked == [f"/v1/compute/leaderboard/{node_id}"] * 2
    assert all(
        "authorization" not in r.headers
        for r in harness.fake.requests
        if "leaderboard" in r.url.path
    )


async def test_no_line_when_the_coordinator_does_not_answer_it_and_none_in_once(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    harness = Harness(tmp_path)
    await harness.loop_for(700.0, standing_every=600.0)  # an older coordinator: 404
    assert len(harness.fake.standing_times) == 1
    assert _board(harness) == []
    harness.fake.standing = ROW
    assert await harness.once(standing_every=0.0) == 0
    assert len(harness.fake.standing_times) == 1


def test_the_line_reads_a_row_before_any_verdict_and_many_strikes() -> None:
    fresh = Standing(**{**ROW, "id": "n1", "jobs_done": 0, "strikes": 0, "agreement_ppm": None})
    assert standing_line(fresh).endswith("0 jobs done, agreement -, 0 strikes")
    struck = Standing(**{**ROW, "id": "n1", "strikes": 4, "agreement_ppm": 428_571})
    assert standing_line(struck).endswith("agreement 42.9 %, 4 strikes")
