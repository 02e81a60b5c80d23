"""The node's one-request cycle against a fake coordinator, in virtual time: each result post
carries the next lease request and the job its answer carries is the next one run (issue 17
goal 3); an answer without one, an older coordinator, a malformed carried job and a due probe
fall back to the plain lease poll."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest
import trio
import trio.testing

from hypertrain.scoring.outcome import ScoreOutcome
from hypertrain.scoring.registry import Challenge
from tests.node.test_runner import Harness

PROFILE = {"capabilities": ["delta-loss", "step-throughput"], "hardware": "cpu-generic"}


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    return Harness(tmp_path)


def _carried(harness: Harness) -> list[tuple[str, object]]:
    """Each posted result's copy and the ``next`` it carried (None: none)."""
    return [(copy, body.get("next")) for copy, body in harness.fake.results]


async def test_each_result_carries_the_next_lease_request_and_its_job_runs_next(
    harness: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    for i in (1, 2, 3):
        harness.fake.offer(f"j{i}.1")
    start = trio.current_time()
    runner = await harness.loop_for(30.0, lease_wait_ms=5000)
    asked = {**PROFILE, "wait_ms": 5000}
    assert _carried(harness) == [("j1.1", asked), ("j2.1", asked), ("j3.1", asked)]
    # one plain poll for the first job; j3.1's carried lease held 25 s for nothing, then a
    # plain poll again
    assert [t - start for t in harness.fake.lease_times] == [0.0, 25.0]
    assert [t - start for t in harness.fake.next_times] == [0.0, 0.0, 0.0]
    stats = runner.statistics()
    assert (stats.jobs, stats.posted, stats.accepted) == (3, 3, 3)


async def test_an_answer_without_next_is_followed_by_a_plain_lease(
    harness: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    harness.fake.next_mode = "ignore"
    harness.fake.offer("j1.1")
    harness.fake.offer("j2.1")
    start = trio.current_time()
    runner = await harness.loop_for(10.0)
    assert _carried(harness) == [("j1.1", PROFILE), ("j2.1", PROFILE)]
    # a carried request counts as a lease start: the plain polls keep min_poll_interval
    assert [t - start for t in harness.fake.lease_times] == [0.0, 1.0, 2.0]
    assert runner.statistics().accepted == 2


async def test_a_coordinator_that_refuses_next_gets_the_post_again_without_it(
    harness: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    harness.fake.next_mode = "refuse"
    harness.fake.offer("j1.1")
    harness.fake.offer("j2.1")
    runner = await harness.loop_for(10.0)
    assert _carried(harness) == [("j1.1", PROFILE), ("j1.1", None), ("j2.1", None)]
    stats = runner.statistics()
    assert (stats.posted, stats.accepted) == (2, 2)


async def test_a_malformed_carried_job_is_abandoned_and_the_result_stands(
    harness: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    harness.fake.offer("j1.1")
    hostile = harness.fake.offer("j2.1")
    hostile["id"] = "../../j2"
    runner = await harness.loop_for(10.0)
    stats = runner.statistics()
    assert (stats.posted, stats.accepted, stats.abandoned) == (1, 1, 1)
    assert {copy for copy, _ in harness.fake.fetches} == {"j1.1"}
    assert sum("abandoned: malformed offer" in line for line in harness.lines) == 1
    assert len(harness.fake.lease_times) == 2  # the first job's, then after the bad one


async def test_a_result_posted_when_the_probe_is_due_carries_no_lease_request(
    harness: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    """The capabilities are probed again every 600 s: a post after that asks for nothing, and
    the next turn probes, then leases the plain way."""

    async def slow(challenge: Challenge, paths: Mapping[str, Path]) -> ScoreOutcome:
        await trio.sleep(400.0)
        return ScoreOutcome.success({challenge.objective: "0344b240", "fingerprint": "ab"}, 1)

    for i in (1, 2, 3):
        harness.fake.offer(f"j{i}.1")["deadline_ms"] += 3_600_000  # scored in 400 s each
    runner, client = harness.runner()
    runner.jobs.score = slow
    start = trio.current_time()
    async with client:
        with trio.move_on_after(1250.0):
            await runner.run()
    assert _carried(harness) == [("j1.1", PROFILE), ("j2.1", None), ("j3.1", PROFILE)]
    assert [t - start for t in harness.probes] == [0.0, 800.0]
    assert [t - start for t in harness.fake.lease_times] == [0.0, 800.0, 1225.0]
