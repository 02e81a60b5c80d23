"""A seeded random walk over the book: invariants hold whatever the order of calls."""

from __future__ import annotations

import contextlib
import random

import pytest

from hypertrain.compute import LeaseGrant, Node
from hypertrain.protocol.errors import Conflict
from tests.compute.support import T0, Book, busy, failed, good


@pytest.mark.parametrize("seed", range(4))
async def test_random_walk_keeps_the_invariants(book: Book, seed: int) -> None:
    rng = random.Random(seed)
    nodes = [(await book.node())[0] for _ in range(6)]
    jobs = [
        await book.enqueue(subject={"run_id": "r", "w": w, "hotkey": "h"}, wait_ms=900_000)
        for w in range(5)
    ]
    held: list[tuple[Node, LeaseGrant]] = []
    now = T0
    for _ in range(120):
        now += rng.choice([1, 500, 5_000, 60_000])
        action = rng.random()
        if action < 0.45:
            node = rng.choice(nodes)
            grant = await book.lease(node, now)
            if grant is not None:
                assert book.lease_holder(grant) == node.node_id
                held.append((node, grant))
        elif action < 0.85 and held:
            node, grant = held.pop(rng.randrange(len(held)))
            body = rng.choice(
                [
                    good(grant),
                    good(grant, loss="00000001"),
                    failed(grant, "crash"),
                    failed(grant, "oom"),
                    busy(grant),
                ]
            )
            with contextlib.suppress(Conflict):
                await book.post(node, grant.copy_id, body, now)
        elif action < 0.95:
            await book.expire(now)
        else:
            await book.fallback(now)
    for job in jobs:
        holders = [c.node_id for c in await book.copies(job) if c.node_id is not None]
        assert len(holders) == len(set(holders))
    paid = sum([(await book.fresh(n)).credits for n in nodes])
    assert paid == book.kinds().count("accepted")
    for n in nodes:
        row = await book.fresh(n)
        assert row.credits == row.compute_credits == row.jobs_done
