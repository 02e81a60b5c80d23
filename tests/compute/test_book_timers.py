"""Lease expiry, the fallback window, timing jobs and restart (scenarios 13-14, 16-19, 22, 25)."""

from __future__ import annotations

from pathlib import Path

from hypertrain.compute import Answer, next_deadline_ms, pending_fallbacks
from hypertrain.compute.rows import get_copy
from hypertrain.store import open_database
from nurseries import FixedClock
from tests.compute.support import FP, LEASE_SPAN, LOSS, T0, Book, failed, good, timed


async def test_a_post_on_the_deadline_counts_and_one_ms_later_does_not(book: Book) -> None:
    """Scenario 16 (and 13: no credit, no strike, the replacement proceeds)."""
    a, _ = await book.node()
    b, _ = await book.node()
    c, _ = await book.node()
    job = await book.enqueue()
    ga, gb = await book.lease(a, T0), await book.lease(b, T0)
    assert ga is not None
    assert gb is not None
    deadline = T0 + LEASE_SPAN
    assert await book.db.read(next_deadline_ms) == deadline + 1
    assert await book.expire(deadline) == []
    assert (await book.post(a, ga.copy_id, good(ga), deadline))[0] == 200
    status, reply = await book.post(b, gb.copy_id, good(gb), deadline + 1)
    assert status == 410
    assert "counts for nothing" in reply["detail"]
    assert book.kinds()[-1] == "expired"
    assert await book.post(b, gb.copy_id, good(gb), deadline + 2) == (status, reply)
    assert await book.strikes(b) == []
    gc = await book.lease(c, deadline + 3)
    assert gc is not None
    assert gc.copy_id == f"{job}.3"
    await book.post(c, gc.copy_id, good(gc), deadline + 4)
    assert (await book.job(job)).settled_how == "agreement"
    assert [(await book.fresh(n)).credits for n in (a, b, c)] == [1, 0, 1]


async def test_repeated_expiry_sends_the_step_to_the_trusted_evaluator(book: Book) -> None:
    """Scenario 17: the third expiry of a job -> fallback; answers judged against it."""
    nodes = [(await book.node())[0] for _ in range(5)]
    job = await book.enqueue()
    answered = await book.lease(nodes[0], T0)
    assert answered is not None
    await book.post(nodes[0], answered.copy_id, good(answered), T0 + 1)
    now = T0
    for n in nodes[1:4]:
        assert await book.lease(n, now) is not None
        now += LEASE_SPAN + 1
        await book.expire(now)
    assert book.kinds()[-2:] == ["expired", "fallback"]
    assert (await book.job(job)).reason == "expiries"
    assert await book.lease(nodes[4], now) is None
    assert [j.job_id for j in await book.db.read(pending_fallbacks)] == [job]
    await book.trusted(job, Answer.success(LOSS, FP), now + 1)
    assert book.kinds()[-2:] == ["settled", "accepted"]
    assert (await book.fresh(nodes[0])).credits == 1


async def test_no_capable_node_falls_back_at_the_window_end(book: Book) -> None:
    """Scenario 18: the boundary is the deadline itself; the window is a parameter."""
    gpu_only, _ = await book.node(caps=["something-else"])
    late, _ = await book.node()
    job = await book.enqueue(wait_ms=5_000)
    assert await book.lease(gpu_only, T0 + 1) is None
    assert await book.db.read(next_deadline_ms) == T0 + 5_000
    assert await book.fallback(T0 + 4_999) == []
    assert (await book.job(job)).state == "queued"
    assert await book.lease(late, T0 + 5_000) is None
    assert [j.job_id for j in await book.fallback(T0 + 5_000)] == [job]
    assert await book.lease(late, T0 + 5_001) is None
    assert [c.state for c in await book.copies(job)] == ["cancelled", "cancelled"]
    assert await book.db.read(next_deadline_ms) is None


async def test_half_leased_step_is_scored_by_the_fallback_and_the_copy_judged(
    book: Book,
) -> None:
    """Scenario 19 (and 14): a copy still leased when the fallback took the step is judged."""
    a, _ = await book.node()
    b, _ = await book.node()
    job = await book.enqueue()
    ga = await book.lease(a, T0 + 19_999)
    assert ga is not None
    await book.fallback(T0 + 20_000)
    assert (await book.job(job)).state == "fallback"
    assert await book.lease(b, T0 + 20_001) is None
    status, reply = await book.post(a, ga.copy_id, good(ga), T0 + 25_000)
    assert (status, reply["status"]) == (200, "held")
    events = await book.trusted(job, Answer.success(LOSS, FP), T0 + 30_000)
    assert [k for k, _ in events] == ["settled", "accepted"]
    assert [c.verdict for c in await book.copies(job)] == ["paid", None]

    other = await book.enqueue(subject={"run_id": "r1", "w": 1, "hotkey": "h1"}, now=T0 + 40_000)
    gb = await book.lease(b, T0 + 40_001)
    assert gb is not None
    await book.fallback(T0 + 60_000)
    await book.trusted(other, Answer.success(LOSS, FP), T0 + 61_000)
    status, reply = await book.post(b, gb.copy_id, good(gb, loss="00000000"), T0 + 62_000)
    assert (reply["status"], reply["verdict"]) == ("judged", "struck")
    status, reply = await book.post(a, ga.copy_id, good(ga), T0 + 62_001)
    assert reply["status"] == "held"


async def test_a_post_after_expiry_past_the_fallback_is_gone(book: Book) -> None:
    """Scenario 14: the fallback settled the step and this copy's lease is over."""
    a, _ = await book.node()
    job = await book.enqueue()
    ga = await book.lease(a, T0)
    assert ga is not None
    await book.fallback(T0 + 20_000)
    await book.trusted(job, Answer.success(LOSS, FP), T0 + 21_000)
    await book.expire(T0 + LEASE_SPAN + 1)
    status, _ = await book.post(a, ga.copy_id, good(ga), T0 + LEASE_SPAN + 2)
    assert status == 410
    assert (await book.fresh(a)).credits == 0
    assert await book.strikes(a) == []


async def test_an_inconclusive_failure_strikes_nobody(book: Book) -> None:
    """Scenario 25: the slow honest node's timeout goes to the fallback, no strike."""
    slow, _ = await book.node()
    fast, _ = await book.node()
    job = await book.enqueue()
    gs, gf = await book.lease(slow, T0), await book.lease(fast, T0)
    assert gs is not None
    assert gf is not None
    await book.post(slow, gs.copy_id, failed(gs, "timeout", "policy exceeded time budget"), T0)
    assert book.kinds()[-1] == "fallback"
    await book.post(fast, gf.copy_id, good(gf), T0 + 1)
    await book.trusted(job, Answer.success(LOSS, FP), T0 + 2)
    assert [c.verdict for c in await book.copies(job)] == ["none", "paid"]
    assert await book.strikes(slow) == []


async def test_timing_jobs_route_on_hardware_and_never_fall_back(book: Book) -> None:
    cpu, _ = await book.node(caps=["step-throughput"])
    gpu, _ = await book.node(caps=["step-throughput"], hardware="NVIDIA GeForce RTX 4090")
    assert gpu.hardware == "nvidia-geforce-rtx-4090"
    job = await book.enqueue(challenge="step-throughput")
    assert await book.lease(gpu, T0 + 1) is None
    assert await book.fallback(T0 + 20_000) == []
    grant = await book.lease(cpu, T0 + 30_000)
    assert grant is not None
    assert grant.objective == "tokens_per_s"
    assert await book.post(cpu, grant.copy_id, timed(grant, 100.0), T0 + 30_001)
    assert await book.fallback(T0 + 199_999) == []
    await book.fallback(T0 + 200_000)
    final = await book.job(job)
    assert (final.state, final.reason) == ("unscored", "wait")
    assert book.kinds()[-1] == "settled"
    assert [c.verdict for c in await book.copies(job)] == ["none", None]


async def test_timing_answers_inside_the_band_agree(book: Book) -> None:
    a, _ = await book.node(caps=["step-throughput"])
    b, _ = await book.node(caps=["step-throughput"])
    job = await book.enqueue(challenge="step-throughput")
    ga, gb = await book.lease(a, T0), await book.lease(b, T0)
    assert ga is not None
    assert gb is not None
    await book.post(a, ga.copy_id, timed(ga, 100.0), T0 + 1)
    await book.post(b, gb.copy_id, timed(gb, 125.0), T0 + 2)
    assert (await book.job(job)).settled_how == "agreement"


async def test_open_leases_survive_a_restart(tmp_path: Path) -> None:
    """Scenario 22: deadlines come back from the store, not reset."""
    path = tmp_path / "state.db"
    async with open_database(path, wall_clock=FixedClock(0.0)) as db:
        book = Book(db)
        a, key = await book.node()
        b, _ = await book.node()
        job = await book.enqueue()
        ga, gb = await book.lease(a, T0 + 5), await book.lease(b, T0 + 6)
        assert ga is not None
        assert gb is not None
    async with open_database(path, wall_clock=FixedClock(0.0)) as db:
        book = Book(db)
        assert await db.read(next_deadline_ms) == T0 + 5 + LEASE_SPAN + 1
        (a, _) = await book.node(key=key, now=T0 + 60_000)
        assert (await book.post(a, ga.copy_id, good(ga), T0 + 60_001))[0] == 200
        assert (await db.read(get_copy, ga.copy_id)).state == "answered"
        assert await db.read(next_deadline_ms) == T0 + 6 + LEASE_SPAN + 1
        assert await book.expire(T0 + 6 + LEASE_SPAN) == []
        await book.expire(T0 + 6 + LEASE_SPAN + 1)
        assert [c.state for c in await book.copies(job)] == ["answered", "expired", "queued"]
        assert await db.read(next_deadline_ms) == T0 + 6 + LEASE_SPAN + 1 + 20_000
