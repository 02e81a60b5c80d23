"""The node's loop against a fake coordinator, in virtual time (no thread, no worker process)."""

from __future__ import annotations

import hashlib
import itertools
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio
import trio.testing

from hypertrain.compute.keys import mint_key
from hypertrain.compute.model import iso_ms
from hypertrain.node.client import NodeClient
from hypertrain.node.errors import IdentityError
from hypertrain.node.nodefile import NodeRecord, load_record, save_record
from hypertrain.node.runner import NodeRunner
from hypertrain.node.runner_types import Probed, RunnerSettings
from hypertrain.scoring.outcome import ScoreOutcome
from hypertrain.scoring.registry import Challenge
from tests.node.fake import DELTA_LOSS_FILES, EPOCH, URL, FakeCoordinator

LOSS = "0344b240"


@attrs.define
class Harness:
    """A runner wired to a fake coordinator, a fake probe and a fast inline scorer."""

    root: Path
    fake: FakeCoordinator = attrs.field(factory=FakeCoordinator)
    lines: list[str] = attrs.field(factory=list)
    probes: list[float] = attrs.field(factory=list)
    scored: list[dict[str, bytes]] = attrs.field(factory=list)
    block_scoring: bool = False
    scoring_started: trio.Event = attrs.field(factory=trio.Event)

    @property
    def directory(self) -> Path:
        return self.root / "node"

    async def probe(self) -> Probed:
        self.probes.append(trio.current_time())
        return Probed("cpu-generic", ("delta-loss", "step-throughput"), "torch: torch 2.13.0")

    async def score(self, challenge: Challenge, paths: Mapping[str, Path]) -> ScoreOutcome:
        self.scored.append({name: path.read_bytes() for name, path in paths.items()})
        self.scoring_started.set()
        if self.block_scoring:
            await trio.sleep_forever()
        digest = hashlib.sha256(b"".join(p.read_bytes() for p in paths.values())).hexdigest()
        return ScoreOutcome.success({challenge.objective: LOSS, "fingerprint": digest}, 2300)

    def runner(
        self, *, key: str | None = None, url: str = URL, **settings: Any
    ) -> tuple[NodeRunner, NodeClient]:
        client = NodeClient(url, transport=httpx.MockTransport(self.fake.handler), jitter=lambda: 1)
        runner = NodeRunner(
            client=client,
            directory=self.directory,
            key_flag=key,
            handle=None,
            probe=self.probe,
            score=self.score,
            wall=self.fake.wall,
            say=self.lines.append,
            settings=RunnerSettings(**settings),
            draw=lambda: 1.0,
        )
        return runner, client

    async def once(self, **kwargs: Any) -> int:
        runner, client = self.runner(**kwargs)
        async with client:
            return await runner.run(once=True)

    async def loop_for(self, seconds: float, **kwargs: Any) -> NodeRunner:
        runner, client = self.runner(**kwargs)
        async with client:
            with trio.move_on_after(seconds) as scope:
                await runner.run()
        assert scope.cancelled_caught, "the loop must only end by cancellation"
        return runner

    def check_no_key_shown(self) -> None:
        text = "\n".join(self.lines)
        for key in self.fake.keys:
            assert key not in text


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    """Tests take ``autojump_clock`` themselves: pytest-trio only uses a clock that is an
    argument of the test function."""
    return Harness(tmp_path)


async def test_the_first_start_mints_and_saves_a_key_then_a_restart_reuses_it(
    harness: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    assert await harness.once() == 0
    record = load_record(harness.directory)
    assert record is not None
    assert record.key in harness.fake.keys
    assert record.coordinator == URL
    assert EPOCH <= record.saved_at <= harness.fake.wall.now()
    assert oct((harness.directory / "node.json").stat().st_mode & 0o777) == "0o600"
    assert harness.fake.registers[0]["key"] is None
    assert harness.fake.registers[0]["capabilities"] == ["delta-loss", "step-throughput"]
    assert any(
        line.startswith("registered as ") and "new key saved in" in line for line in harness.lines
    )
    assert (
        "can run: delta-loss, step-throughput on cpu-generic (torch: torch 2.13.0)" in harness.lines
    )
    assert await harness.once() == 0
    assert harness.fake.registers[1]["key"] == record.key
    assert len(harness.fake.keys) == 1
    lease_auth = [
        r.headers["authorization"] for r in harness.fake.requests if "lease" in r.url.path
    ]
    assert lease_auth == [f"Bearer {record.key}"] * 2
    assert all(
        "authorization" not in r.headers for r in harness.fake.requests if "register" in r.url.path
    )
    harness.check_no_key_shown()


async def test_a_node_file_of_another_coordinator_is_not_used_unless_key_is_given(
    harness: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    key = mint_key()
    harness.fake.keys[key] = "n7"
    save_record(harness.directory, NodeRecord(key, "n7", "old", "https://other.example", 1))
    with pytest.raises(IdentityError, match=r"pass --key .* or --dir"):
        await harness.once()
    assert harness.fake.requests == []
    assert await harness.once(key=key) == 0
    assert harness.fake.registers[0]["key"] == key
    record = load_record(harness.directory)
    assert record is not None
    assert (record.coordinator, record.node_id) == (URL, "n7")
    harness.check_no_key_shown()


async def test_key_attaches_an_existing_node_and_a_bad_key_is_refused_before_any_request(
    harness: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    key = mint_key()
    harness.fake.keys[key] = "n3"
    assert await harness.once(key=key) == 0
    assert [r["key"] for r in harness.fake.registers] == [key]
    assert len(harness.fake.keys) == 1
    with pytest.raises(IdentityError, match="--key: not a node key"):
        await harness.once(key="ht_short")
    assert len(harness.fake.registers) == 1
    harness.check_no_key_shown()


async def test_empty_long_polls_do_not_hot_loop_and_capabilities_are_reprobed(
    harness: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    harness.fake.hold = 0.0  # a coordinator that answers {"job": null} at once
    await harness.loop_for(60.0)
    assert 55 <= len(harness.fake.lease_times) <= 61
    gaps = [b - a for a, b in itertools.pairwise(harness.fake.lease_times)]
    assert min(gaps) >= 1.0
    harness.fake.hold = 25.0
    harness.fake.lease_times.clear()
    harness.probes.clear()
    await harness.loop_for(1250.0)
    assert len(harness.fake.lease_times) == 50  # one poll per 25 s hold, back to back
    assert len(harness.probes) == 3  # at start, then after 600 s and 1200 s


async def test_a_job_runs_and_posts_the_lease_token_objective_fingerprint_and_wall_time(
    harness: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    offer = harness.fake.offer("j1.1")
    assert await harness.once() == 0
    assert harness.scored == [DELTA_LOSS_FILES]
    ((copy_id, body),) = harness.fake.results
    digest = hashlib.sha256(b"".join(DELTA_LOSS_FILES.values())).hexdigest()
    assert copy_id == "j1.1"
    assert body == {
        "lease": offer["lease"],
        "ok": True,
        "result": {"loss": LOSS, "fingerprint": digest, "wallMs": 2300},
    }
    assert not (harness.directory / "jobs" / "j1.1").exists()
    assert any(
        line.startswith(f"job j1.1 delta-loss/public: loss={LOSS} in 2.3 s -> counted")
        for line in harness.lines
    ), harness.lines
    fetch = next(r for r in harness.fake.requests if "/inputs/" in r.url.path)
    assert fetch.headers["x-ht-lease"] == offer["lease"]
    assert str(fetch.url).startswith(URL + "/v1/compute/jobs/j1.1/inputs/")
    harness.check_no_key_shown()


async def test_a_failed_score_posts_its_class_and_error(
    harness: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    offer = harness.fake.offer("j1.1")

    async def crash(challenge: Challenge, paths: Mapping[str, Path]) -> ScoreOutcome:
        return ScoreOutcome.failed("timeout", "scorer killed after 60000 ms", 60_000)

    runner, client = harness.runner()
    runner.jobs.score = crash
    async with client:
        assert await runner.run(once=True) == 0
    assert harness.fake.results == [
        ("j1.1", {"lease": offer["lease"], "ok": False, "class": "timeout",
                  "error": "scorer killed after 60000 ms"}),
    ]  # fmt: skip


async def test_a_hash_mismatched_input_is_never_scored_and_nothing_is_posted(
    harness: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    harness.fake.offer("j1.1")
    harness.fake.served[("j1.1", "state.bin")] = b"STATE" * 100  # same size, other bytes
    assert await harness.once() == 1
    assert harness.scored == []
    assert harness.fake.results == []
    assert any(
        "j1.1" in line and "abandoned" in line and "sha256" in line for line in harness.lines
    )
    assert os.listdir(harness.directory / "cache" / "tmp") == []
    assert not (harness.directory / "jobs").exists()


async def test_a_damaged_cached_input_is_fetched_again(
    harness: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    harness.fake.offer("j1.1")
    assert await harness.once() == 0
    assert len(harness.fake.fetches) == 4
    state = hashlib.sha256(DELTA_LOSS_FILES["state.bin"]).hexdigest()
    cached = harness.directory / "cache" / state[:2] / state
    cached.write_bytes(b"x" * len(DELTA_LOSS_FILES["state.bin"]))
    harness.fake.offer("j2.1")
    assert await harness.once() == 0
    assert harness.fake.fetches[4:] == [("j2.1", "state.bin")]
    assert harness.scored[1] == DELTA_LOSS_FILES
    assert [c for c, _ in harness.fake.results] == ["j1.1", "j2.1"]


async def test_a_job_for_an_unknown_challenge_or_version_is_skipped_unposted(
    harness: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    harness.fake.offer("j1.1", base="nope")
    harness.fake.offer("j2.1", version=2)
    harness.fake.offer("j3.1", objective="accuracy")
    for _ in range(3):
        assert await harness.once() == 1
    assert (harness.fake.fetches, harness.fake.results, harness.scored) == ([], [], [])
    skipped = [line for line in harness.lines if "skipped" in line]
    assert len(skipped) == 3
    assert all("upgrade hypertrain" in line for line in skipped)
    assert "this node has v1" in skipped[1]


async def test_a_disabled_node_waits_until_it_is_reenabled_then_leases_again(
    harness: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    start = trio.current_time()
    until_ms = round(harness.fake.wall.now() * 1000) + 3 * 3600 * 1000
    harness.fake.disabled_until_ms = until_ms
    runner = await harness.loop_for(3 * 3600 + 100.0)
    times = [t - start for t in harness.fake.lease_times]
    before = [t for t in times if t < 3 * 3600]
    after = [t for t in times if t >= 3 * 3600]
    assert len(before) == 18  # rechecked every 600 s, each wait bounded
    assert after
    assert after[0] == pytest.approx(3 * 3600, abs=1.0)
    disabled = [line for line in harness.lines if line.startswith("disabled until")]
    assert disabled == [f"disabled until {iso_ms(until_ms)} (3 strikes today); waiting"]
    assert runner.statistics().node_id == "n1"


async def test_server_and_network_errors_back_off_with_bounded_growing_waits(
    harness: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    harness.fake.lease_failures = [503, httpx.ConnectError, 500, 429] + [503] * 6
    await harness.loop_for(400.0)
    times = harness.fake.lease_times
    gaps = [round(b - a) for a, b in itertools.pairwise(times)]
    assert gaps[:11] == [1, 2, 4, 8, 16, 32, 60, 60, 60, 60, 25]
    assert any("retrying in 60 s" in line for line in harness.lines)


async def test_a_retry_after_is_the_least_wait_before_the_next_lease(
    harness: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    def asked(status: int, seconds: str) -> httpx.Response:
        return httpx.Response(status, json={"detail": "later"}, headers={"Retry-After": seconds})

    # a shutting-down coordinator's 503 and a 429 ask for more than the backoff would wait;
    # an HTTP-date Retry-After is not understood: the backoff alone applies; a day is more
    # than the backoff's maximum (60 s), which bounds it
    harness.fake.lease_failures = [
        asked(503, "20"),
        asked(429, "9"),
        asked(503, "Wed, 21 Oct 2015 07:28:00 GMT"),
        asked(503, "86400"),
    ]
    await harness.loop_for(150.0)
    gaps = [round(b - a) for a, b in itertools.pairwise(harness.fake.lease_times)]
    assert gaps[:5] == [20, 9, 4, 60, 25]
    assert any("HTTP 503: later; retrying in 20 s" in line for line in harness.lines)


async def test_a_mint_refused_429_waits_its_retry_after_then_registers(
    harness: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    """A network that minted its keys for this minute is answered 429: the node waits the
    answer's Retry-After (not fatal, unlike other refusals) and mints then."""
    limited = {"detail": "at most 10 node keys are minted per minute from one network"}
    harness.fake.register_failures = [
        httpx.Response(429, json=limited, headers={"Retry-After": "30"})
    ]
    start = trio.current_time()
    await harness.loop_for(60.0)
    assert len(harness.fake.registers) == 2
    assert harness.fake.lease_times[0] - start >= 30
    assert any("HTTP 429: at most 10 node keys" in line for line in harness.lines)
    assert any(line.startswith("registered as ") for line in harness.lines)


async def test_a_key_on_probation_is_told_so(
    harness: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    harness.fake.probation = 10
    assert await harness.once() == 0
    registered = [line for line in harness.lines if line.startswith("registered as ")]
    assert registered[0].endswith("; on probation: the next 10 agreed answers earn nothing")


async def test_a_late_post_is_reported_and_not_fatal(
    harness: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    harness.fake.post_status = 410
    harness.fake.offer("j1.1")
    harness.fake.offer("j2.1")
    runner = await harness.loop_for(30.0)
    assert [c for c, _ in harness.fake.results] == ["j1.1", "j2.1"]
    assert any("late, not counted" in line for line in harness.lines)
    stats = runner.statistics()
    assert (stats.jobs, stats.posted, stats.accepted) == (2, 2, 0)
    assert stats.last_job is not None
    assert stats.last_job.id == "j2.1"


async def test_cancelling_mid_job_posts_nothing(
    harness: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    harness.fake.offer("j1.1")
    harness.block_scoring = True
    runner, client = harness.runner()
    async with client, trio.open_nursery() as nursery:
        nursery.start_soon(runner.run)
        await harness.scoring_started.wait()
        assert (harness.directory / "jobs" / "j1.1").is_dir()
        nursery.cancel_scope.cancel()
    assert harness.fake.results == []
    assert not (harness.directory / "jobs" / "j1.1").exists()
    assert runner.statistics().jobs == 0


async def test_hostile_input_names_abandon_the_job_and_write_nothing_outside(
    harness: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    harness.fake.offer("j1.1", names={"state.bin": "../x"})
    harness.fake.offer("j2.1", names={"trace.u16": "/etc/passwd"})
    bad_id = harness.fake.offer("j3.1")
    bad_id["id"] = "../../j3"
    for _ in range(3):
        assert await harness.once() == 1
    assert (harness.fake.fetches, harness.fake.results, harness.scored) == ([], [], [])
    assert sum("abandoned: malformed offer" in line for line in harness.lines) == 3
    assert sorted(os.listdir(harness.root)) == ["node"]
    assert sorted(os.listdir(harness.directory)) == ["cache", "node.json"]
    assert [p for p in (harness.directory / "cache").rglob("*") if p.is_file()] == []


@pytest.mark.parametrize(
    ("input_timeout", "elapsed", "why"),
    [
        (20.0, 20.0, "inputs not in the cache within 20 s; nothing posted"),
        # The offer's lease ends 90 s after it is made and the scorer may run 60 s before it is
        # killed: the inputs get 30 s, however long input_timeout is.
        (600.0, 30.0, "within 30 s (the lease's deadline less the scorer's kill time)"),
    ],
    ids=["input-timeout", "lease-deadline"],
)
async def test_a_stalled_download_is_abandoned_at_the_first_bound(
    input_timeout: float,
    elapsed: float,
    why: str,
    harness: Harness,
    autojump_clock: trio.testing.MockClock,
) -> None:
    harness.fake.offer("j1.1")
    harness.fake.stall = {"state.bin"}
    start = trio.current_time()
    assert await harness.once(input_timeout=input_timeout) == 1
    assert trio.current_time() - start == elapsed
    assert (harness.scored, harness.fake.results) == ([], [])
    assert any(why in line for line in harness.lines)
    assert os.listdir(harness.directory / "cache" / "tmp") == []


async def test_a_lease_shorter_than_the_kill_time_fetches_nothing(
    harness: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    offer = harness.fake.offer("j1.1")
    offer["deadline_ms"] -= 30_001  # 59.999 s left: less than the scorer's 60 s kill time
    assert await harness.once() == 1
    assert (harness.fake.fetches, harness.scored, harness.fake.results) == ([], [], [])
    assert any("no time for the inputs" in line for line in harness.lines)
