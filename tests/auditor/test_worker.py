"""The worker loop against a fake coordinator, in virtual time (autojump clock).

Replays run inline (they take no virtual time); where a test needs the heartbeat to beat, the
``run_sync`` it injects first sleeps ``REPLAY_SECONDS`` of virtual time, standing for a replay
that a worker thread would run while the Trio loop keeps beating.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from hypertrain.auditor.client import AuditorClient, ClientSettings
from hypertrain.auditor.datacache import DatasetCache
from hypertrain.auditor.progress import Progress
from hypertrain.auditor.worker import AuditorWorker, WorkerSettings
from hypertrain.protocol.envelope import verify
from hypertrain.protocol.messages import ReplayVerdict
from hypertrain.trainer.loop import RoundResult
from nurseries import Backoff
from tests.auditor.fake import API, TOKEN, FakeCoordinator, coordinator, serves_answer
from tests.auditor.world import (
    AUDITOR,
    SERVE_DEADLINE,
    World,
    make_job,
)

REPLAY_SECONDS = 130.0
SETTINGS = WorkerSettings(poll_interval=10.0, heartbeat_interval=60.0, cleanup_timeout=5.0)
RETRY = ClientSettings(backoff=Backoff(initial=1.0, factor=2.0, maximum=30.0), retry_budget=15.0)


async def slow_inline(fn: Callable[..., Any], *args: Any) -> Any:
    await trio.sleep(REPLAY_SECONDS)
    return fn(*args)


def worker_for(
    fake: FakeCoordinator, world: World, tmp_path: Path, run_sync: Any = None
) -> AuditorWorker:
    client = AuditorClient(
        API, TOKEN, transport=fake.transport(), settings=RETRY,
        jitter=lambda: 1.0,
    )  # fmt: skip
    kwargs = {} if run_sync is None else {"run_sync": run_sync}
    return AuditorWorker(
        client=client, keypair=AUDITOR, run_id=world.run_id,
        data=DatasetCache(tmp_path, client.get_object), progress=Progress(),
        settings=SETTINGS, **kwargs,
    )  # fmt: skip


async def test_lease_heartbeat_complete(
    carry: World, honest_carry: RoundResult, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    built = make_job(carry, honest_carry)
    fake = coordinator(carry, built)
    worker = worker_for(fake, carry, tmp_path, run_sync=slow_inline)
    with trio.fail_after(1000):
        report = await worker.audit_next()
    assert report is not None
    assert (report.state, report.result, report.first_bad_leaf) == ("done", "MATCH", None)
    assert [c.body for c in fake.paths("POST", "/v1/worker/lease")] == [{"run_id": carry.run_id}]
    beats = fake.paths("POST", f"/v1/worker/jobs/{built.job['id']}/heartbeat")
    assert [c.at for c in beats] == [60.0, 120.0]
    assert all(c.body == {"lease": built.job["lease"]} for c in beats)
    (complete,) = fake.paths("POST", f"/v1/worker/jobs/{built.job['id']}/complete")
    assert complete.at == REPLAY_SECONDS
    assert complete.body["lease"] == built.job["lease"]
    checked = verify(complete.body["verdict"], expected_run_id=carry.run_id)
    assert checked.envelope.signer == AUDITOR.ss58
    assert checked.envelope.exp_drand == SERVE_DEADLINE + 1200
    assert isinstance(checked.message, ReplayVerdict)
    assert checked.message.result == "MATCH"
    assert fake.paths("POST", "/v1/worker/jobs/") == [*beats, complete]


async def test_idle_waits_the_poll_interval(
    carry: World, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    fake = coordinator(carry)
    worker = worker_for(fake, carry, tmp_path)
    assert await worker.audit_next() is None
    with trio.move_on_after(25):
        await worker.run()
    leases = fake.paths("POST", "/v1/worker/lease")
    assert [c.at for c in leases] == [0.0, 0.0, 10.0, 20.0]
    assert len(fake.calls) == 4


async def test_another_runs_job_is_handed_back(
    carry: World, honest_carry: RoundResult, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    built = make_job(carry, honest_carry)
    built.job["run_id"] = "cd" * 32
    fake = coordinator(carry, built)
    with trio.fail_after(100):
        report = await worker_for(fake, carry, tmp_path).audit_next()
    assert report is not None
    assert (report.state, report.retry) == ("handed-back", True)
    (fail,) = fake.paths("POST", "/v1/worker/jobs/")
    assert fail.path.endswith("/fail")
    assert fail.body["lease"] == built.job["lease"]
    assert fail.body["retry"] is True
    assert fake.paths("GET", "/v1/objects/") == []


async def test_a_missing_serve_before_the_deadline_is_retried(
    carry: World, honest_carry: RoundResult, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    built = make_job(carry, honest_carry, serve_starts=[0, 2])
    fake = coordinator(carry, built)
    fake.serves_answer = serves_answer(SERVE_DEADLINE - 5, built.job["state_serves"])
    with trio.fail_after(100):
        report = await worker_for(fake, carry, tmp_path).audit_next()
    assert report is not None
    assert (report.state, report.retry) == ("failed", True)
    (serves,) = fake.paths("GET", f"/v1/worker/jobs/{built.job['id']}/serves")
    assert serves.query == f"lease={built.job['lease']}"
    (fail,) = fake.paths("POST", f"/v1/worker/jobs/{built.job['id']}/fail")
    assert fail.body["retry"] is True
    assert "t=[2]" in fail.body["reason"]
    assert fake.paths("POST", f"/v1/worker/jobs/{built.job['id']}/complete") == []


async def test_a_missing_serve_after_the_deadline_is_withheld_without_the_dataset(
    carry: World, honest_carry: RoundResult, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    built = make_job(carry, honest_carry, serve_starts=[0, 2])
    fake = coordinator(carry, built)
    fake.serves_answer = serves_answer(SERVE_DEADLINE + 1, built.job["state_serves"])
    worker = worker_for(fake, carry, tmp_path)
    with trio.fail_after(100):
        report = await worker.audit_next()
    assert report is not None
    assert (report.state, report.result) == ("done", "WITHHELD")
    assert worker.data.fetched == 0
    (complete,) = fake.paths("POST", f"/v1/worker/jobs/{built.job['id']}/complete")
    assert complete.body["verdict"]["body"]["result"] == "WITHHELD"


async def test_a_bad_job_fails_without_retry(
    carry: World, honest_carry: RoundResult, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    built = make_job(carry, honest_carry, segments=[(1, 2), (2, 3)])
    fake = coordinator(carry, built)
    with trio.fail_after(100):
        report = await worker_for(fake, carry, tmp_path).audit_next()
    assert report is not None
    assert (report.state, report.retry) == ("failed", False)
    (fail,) = fake.paths("POST", f"/v1/worker/jobs/{built.job['id']}/fail")
    assert fail.body["retry"] is False
    assert "differ from the derived" in fail.body["reason"]


async def test_5xx_is_retried_with_backoff_then_the_job_goes_back(
    carry: World, honest_carry: RoundResult, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    built = make_job(carry, honest_carry)
    fake = coordinator(carry, built)
    fake.statuses["GET /v1/objects/"] = [503] * 5
    with trio.fail_after(100):
        report = await worker_for(fake, carry, tmp_path).audit_next()
    assert report is not None
    assert (report.state, report.retry) == ("failed", True)
    gets = fake.paths("GET", "/v1/objects/")
    assert [c.at for c in gets] == [0.0, 1.0, 3.0, 7.0, 15.0]
    (fail,) = fake.paths("POST", f"/v1/worker/jobs/{built.job['id']}/fail")
    assert fail.body["retry"] is True
    assert fail.at == 15.0


async def test_a_5xx_that_recovers_is_invisible(
    carry: World, honest_carry: RoundResult, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    built = make_job(carry, honest_carry)
    fake = coordinator(carry, built)
    fake.statuses["POST /v1/worker/lease"] = [502, 503]
    with trio.fail_after(100):
        report = await worker_for(fake, carry, tmp_path).audit_next()
    assert report is not None
    assert (report.state, report.result) == ("done", "MATCH")
    assert [c.at for c in fake.paths("POST", "/v1/worker/lease")] == [0.0, 1.0, 3.0]


async def test_a_lost_lease_drops_the_job(
    carry: World, honest_carry: RoundResult, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    built = make_job(carry, honest_carry)
    fake = coordinator(carry, built)
    fake.statuses["POST /v1/worker/jobs/"] = [409]
    with trio.fail_after(1000):
        report = await worker_for(fake, carry, tmp_path, run_sync=slow_inline).audit_next()
    assert report is not None
    assert report.state == "lease-lost"
    assert [c.path.rsplit("/", 1)[-1] for c in fake.paths("POST", "/v1/worker/jobs/")] == [
        "heartbeat"
    ]


async def test_stopping_with_a_job_hands_it_back(
    carry: World, honest_carry: RoundResult, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    built = make_job(carry, honest_carry)
    fake = coordinator(carry, built)
    worker = worker_for(fake, carry, tmp_path, run_sync=slow_inline)
    with trio.move_on_after(REPLAY_SECONDS / 2):
        await worker.audit_next()
    (fail,) = fake.paths("POST", f"/v1/worker/jobs/{built.job['id']}/fail")
    assert (fail.body["retry"], fail.at) == (True, REPLAY_SECONDS / 2)
    assert "stopped" in fail.body["reason"]


@pytest.mark.parametrize("status", [401, 403])
async def test_a_refused_token_is_fatal(
    carry: World, tmp_path: Path, status: int, autojump_clock: trio.testing.MockClock
) -> None:
    from hypertrain.auditor.errors import AuditorFatal

    fake = coordinator(carry)
    fake.statuses["POST /v1/worker/lease"] = [status]
    with trio.fail_after(100), pytest.raises(AuditorFatal):
        await worker_for(fake, carry, tmp_path).audit_next()
