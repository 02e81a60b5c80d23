"""Handing new copies to held lease polls inside one transaction (``hand_out``, issue 17 goal 4)."""

from __future__ import annotations

import sqlite3

from hypertrain.compute import LeaseAsk, LeaseGrant, Node, hand_out
from hypertrain.compute.model import Event
from tests.compute.support import T0, Book

ASK = (["delta-loss"], "cpu")


def _ask(node: Node) -> LeaseAsk:
    return LeaseAsk(node, *ASK)


async def _hand_out(
    book: Book, asks: list[LeaseAsk], copies: int, now: int
) -> tuple[list[tuple[int, LeaseGrant]], list[Event], list[str]]:
    """``hand_out`` in one write, with the statements it ran."""
    statements: list[str] = []

    def body(conn: sqlite3.Connection) -> tuple[list[tuple[int, LeaseGrant]], list[Event]]:
        conn.set_trace_callback(statements.append)
        try:
            return hand_out(conn, asks, copies, now_ms=now, settings=book.settings)
        finally:
            conn.set_trace_callback(None)

    grants, events = await book.db.write(body)
    return grants, events, statements


def _tries(statements: list[str]) -> int:
    """How many lease transactions' bodies ran (each marks its node seen first)."""
    return sum(s.startswith("UPDATE compute_nodes SET capabilities") for s in statements)


async def test_copies_go_to_the_longest_waiting_asks_each_what_its_own_lease_would_get(
    book: Book,
) -> None:
    a, _ = await book.node()
    b, _ = await book.node()
    c, _ = await book.node()
    job = await book.enqueue()
    asks = [_ask(a), _ask(a), _ask(b), _ask(c)]
    grants, events, statements = await _hand_out(book, asks, 2, T0 + 5)
    # a's second poll may not take the step's other copy; b, next in line, gets it; c, after
    # the two copies went, is never tried (its node is not even marked seen).
    assert [(i, g.copy_id) for i, g in grants] == [(0, f"{job}.1"), (2, f"{job}.2")]
    assert all(g.deadline_ms == T0 + 5 + 90_000 for _, g in grants)
    assert [kind for kind, _ in events] == ["lease", "lease"]
    assert _tries(statements) == 3
    assert (await book.fresh(c)).last_seen_ms == T0
    assert (await book.fresh(b)).last_seen_ms == T0 + 5


async def test_a_node_that_got_nothing_is_not_asked_again_for_its_other_polls(book: Book) -> None:
    a, _ = await book.node()
    b, _ = await book.node()
    await book.enqueue()
    held = await book.lease(a, T0 + 1)
    assert held is not None
    asks = [_ask(a), _ask(a), _ask(a), _ask(b)]
    grants, _, statements = await _hand_out(book, asks, 1, T0 + 2)
    assert [(i, g.copy_id) for i, g in grants] == [(3, held.copy_id[:-1] + "2")]
    assert _tries(statements) == 2  # a once, then b: not a four times


async def test_a_node_disabled_since_it_asked_is_passed_over(book: Book) -> None:
    a, _ = await book.node()
    b, _ = await book.node()
    job = await book.enqueue()

    def disable(conn: sqlite3.Connection) -> None:
        conn.execute(
            "UPDATE compute_nodes SET disabled_until_ms = ? WHERE node_id = ?",
            (T0 + 10_000, a.node_id),
        )

    await book.db.write(disable)
    grants, _, _ = await _hand_out(book, [_ask(a), _ask(b)], 1, T0 + 2)
    assert [(i, g.copy_id) for i, g in grants] == [(1, f"{job}.1")]


async def test_nothing_leasable_grants_nothing(book: Book) -> None:
    a, _ = await book.node()
    grants, events, _ = await _hand_out(book, [_ask(a)], 1, T0 + 2)
    assert (grants, events) == ([], [])
