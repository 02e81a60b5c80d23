"""A grant whose answer never reached its client goes back (``return_unsent``, issue 19 item 6,
spec/compute-network.md section 6 scenario 20)."""

from __future__ import annotations

import attrs
import pytest

from hypertrain.compute import LeaseGrant, return_unsent
from hypertrain.protocol.errors import Forbidden
from tests.compute.support import T0, Book, good


async def _return(book: Book, grant: LeaseGrant) -> list[str]:
    events = await book.db.write(return_unsent, grant)
    book.events += events
    return [kind for kind, _ in events]


async def test_the_copy_goes_back_to_its_place_in_the_queue_and_the_node_may_lease_it_again(
    book: Book,
) -> None:
    a, _ = await book.node()
    job = await book.enqueue()
    grant = await book.lease(a, T0 + 1)
    assert grant is not None
    before = await book.fresh(a)
    assert await _return(book, grant) == ["returned"]
    assert book.events[-1][1] == {
        "job": job,
        "challenge": "delta-loss",
        "trace": "public",
        "requeued": True,
    }
    copies = await book.copies(job)
    assert [(c.state, c.node_id, c.token_hash, c.deadline_ms) for c in copies] == [
        ("queued", None, None, None)
    ] * 2
    assert await book.fresh(a) == before  # no strike, no credit, not disabled
    assert await book.strikes(a) == []
    assert (await book.job(job)).expiries == 0
    again = await book.lease(a, T0 + 2)
    assert again is not None
    assert again.copy_id == grant.copy_id
    assert again.token != grant.token
    with pytest.raises(Forbidden):  # the undelivered grant's token is dead
        await book.post(a, again.copy_id, good(grant), T0 + 3)


async def test_a_copy_that_moved_on_is_left_alone(book: Book) -> None:
    a, _ = await book.node()
    b, _ = await book.node()
    job = await book.enqueue()
    grant = await book.lease(a, T0 + 1)
    assert grant is not None
    forged = attrs.evolve(grant, token="x" * len(grant.token))
    assert await _return(book, forged) == []  # not the lease's token
    await book.post(a, grant.copy_id, good(grant), T0 + 2)
    assert await _return(book, grant) == []  # answered: the client had it
    other = await book.lease(b, T0 + 3)
    assert other is not None
    await book.expire(T0 + 3 + 90_001)
    assert await _return(book, other) == []  # expired meanwhile
    assert [c.state for c in await book.copies(job)] == ["answered", "expired", "queued"]


async def test_a_copy_of_a_step_gone_to_the_fallback_is_cancelled_not_queued(book: Book) -> None:
    a, _ = await book.node()
    job = await book.enqueue()
    grant = await book.lease(a, T0 + 1)
    assert grant is not None
    await book.fallback(T0 + 20_000)  # the other copy never leased: the step falls back
    assert (await book.job(job)).state == "fallback"
    assert await _return(book, grant) == ["returned"]
    assert book.events[-1][1]["requeued"] is False
    assert [c.state for c in await book.copies(job)] == ["cancelled", "cancelled"]
