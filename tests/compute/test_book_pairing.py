"""The pairing rules and sybil brakes of the compute book, in explicit times (issue 19 items 1
and 2; spec compute-network section 6 scenarios 1, 2 and 8)."""

from __future__ import annotations

import attrs
import pytest

from hypertrain.compute import DEFAULT_SETTINGS, Answer, LeaseAsk, Node, hand_out, status
from hypertrain.protocol.errors import AuthError, Malformed, TooManyRequests
from hypertrain.store import Database
from tests.compute.support import DAY, FP, LOSS, T0, Book, good

HOUR = 3_600_000
OLD = T0 - 2 * HOUR
"""A key minted then is established at T0 (older than the default hour, not on probation)."""
NET_A, NET_B, NET_C, NET_D = "198.51.100.0/24", "203.0.113.0/24", "2001:db8:1::/48", "192.0.2.0/24"
TRUSTED = Answer.success(LOSS, FP, wall_ms=1)


@pytest.fixture
def paired(db: Database) -> Book:
    """A book with the daemon's pairing defaults (keys pair from one hour) and a probation of
    two agreed answers."""
    return Book(db, settings=attrs.evolve(DEFAULT_SETTINGS, probation_answers=2))


def _subject(n: int) -> dict[str, object]:
    return {"run_id": "r1", "w": n, "hotkey": "h"}


async def _agree(book: Book, first: tuple[Node, str], second: tuple[Node, str], at: int) -> str:
    """A new job leased by ``first`` then ``second`` (each ``(node, network)``), both posting
    the same answer; the job id."""
    job = await book.enqueue(at, subject=_subject(at))
    for i, (node, net) in enumerate((first, second)):
        grant = await book.lease(node, at + 1 + i, network=net)
        assert grant is not None, node.handle
        assert grant.job_id == job
        await book.post(node, grant.copy_id, good(grant), at + 10 + i)
    assert (await book.job(job)).settled_how == "agreement"
    return job


async def test_two_keys_of_one_network_are_never_paired_and_the_step_falls_back(
    paired: Book,
) -> None:
    """Scenario 1: one operator, two minted keys on one /24; the step waits, then falls back."""
    a, _ = await paired.node(OLD, network=NET_A)
    b, _ = await paired.node(OLD, network=NET_A)
    job = await paired.enqueue(T0)
    ga = await paired.lease(a, T0 + 1, network=NET_A)
    assert ga is not None
    assert await paired.lease(b, T0 + 2, network=NET_A) is None
    await paired.post(a, ga.copy_id, good(ga), T0 + 3)
    assert (await paired.job(job)).state == "queued"
    assert [j.job_id for j in await paired.fallback(T0 + 20_000)] == [job]
    await paired.trusted(job, TRUSTED, T0 + 21_000)
    settled = await paired.job(job)
    assert (settled.state, settled.settled_how) == ("settled", "fallback")
    assert [(await paired.fresh(n)).credits for n in (a, b)] == [1, 0]


async def test_two_networks_are_paired_and_settle_by_agreement(paired: Book) -> None:
    """Scenario 1 with two networks: the second copy goes to the node of the other network."""
    a, _ = await paired.node(OLD, network=NET_A)
    b, _ = await paired.node(OLD, network=NET_A)
    c, _ = await paired.node(OLD, network=NET_C)
    job = await paired.enqueue(T0)
    ga = await paired.lease(a, T0 + 1, network=NET_A)
    assert await paired.lease(b, T0 + 2, network=NET_A) is None
    gc = await paired.lease(c, T0 + 3, network=NET_C)
    assert ga is not None
    assert gc is not None
    assert {ga.copy_id, gc.copy_id} == {f"{job}.1", f"{job}.2"}
    await paired.post(a, ga.copy_id, good(ga), T0 + 4)
    _status, reply = await paired.post(c, gc.copy_id, good(gc), T0 + 5)
    assert (reply["verdict"], reply["job_state"]) == ("paid", "settled")
    copies = await paired.copies(job)
    assert [c.node_id for c in copies] == [a.node_id, c.node_id]


async def test_an_expired_copy_bars_its_network_no_longer(paired: Book) -> None:
    """Only live or answered copies count: after the first holder's lease expired, a node of
    its network may take the replacement beside another network's copy."""
    a, _ = await paired.node(OLD, network=NET_A)
    b, _ = await paired.node(OLD, network=NET_A)
    c, _ = await paired.node(OLD, network=NET_B)
    job = await paired.enqueue(T0, wait_ms=10**9)
    assert await paired.lease(a, T0 + 1, network=NET_A) is not None
    assert await paired.lease(c, T0 + 2, network=NET_B) is not None
    await paired.expire(T0 + 1 + 90_001)  # a's lease only
    grant = await paired.lease(b, T0 + 90_003, network=NET_A)
    assert grant is not None
    assert grant.copy_id == f"{job}.3"


async def test_two_nodes_of_one_account_are_never_paired(paired: Book) -> None:
    """Scenario 2: a key minted with ``account`` (another key of the account) joins it."""
    a, key = await paired.node(OLD, network=NET_A)
    a2, _ = await paired.node(OLD, network=NET_B, account=key)
    d, _ = await paired.node(OLD, network=NET_C)
    assert (a.account, a2.account, d.account) == (a.node_id, a.node_id, d.node_id)
    job = await paired.enqueue(T0)
    assert await paired.lease(a, T0 + 1, network=NET_A) is not None
    assert await paired.lease(a2, T0 + 2, network=NET_B) is None
    grant = await paired.lease(d, T0 + 3, network=NET_C)
    assert grant is not None
    assert grant.job_id == job
    with pytest.raises(Malformed, match="account: only when minting"):
        await paired.node(T0, key=key, account=key)
    with pytest.raises(AuthError, match="account: unknown node key"):
        await paired.node(T0, account="ht_" + "x" * 32)


async def test_young_keys_go_only_beside_an_established_node(paired: Book) -> None:
    """Two keys younger than the pairing age are never paired; either goes beside an
    established node; from the instant both are an hour old they pair."""
    y1, _ = await paired.node(T0, network=NET_A)
    y2, _ = await paired.node(T0, network=NET_B)
    e, _ = await paired.node(OLD, network=NET_C)
    await paired.enqueue(T0 + 10, subject=_subject(1))
    assert await paired.lease(y1, T0 + 11, network=NET_A) is not None
    assert await paired.lease(y2, T0 + 12, network=NET_B) is None
    assert await paired.lease(e, T0 + 13, network=NET_C) is not None
    await paired.enqueue(T0 + 20, subject=_subject(2))
    assert await paired.lease(e, T0 + 21, network=NET_C) is not None
    assert await paired.lease(y2, T0 + 22, network=NET_B) is not None
    await paired.enqueue(T0 + HOUR - 10, subject=_subject(3), wait_ms=10**9)
    assert await paired.lease(y1, T0 + HOUR - 2, network=NET_A) is not None
    assert await paired.lease(y2, T0 + HOUR - 1, network=NET_B) is None
    assert await paired.lease(y2, T0 + HOUR, network=NET_B) is not None


async def _strike_out(book: Book, liar: Node, honest: tuple[Node, Node], at: int) -> None:
    """Three jobs on which ``liar`` (from NET_A) is outvoted by the two honest nodes (from
    NET_B and NET_C): three strikes, disabled until the next UTC midnight."""
    for n in range(3):
        t = at + n * 1000
        job = await book.enqueue(t, subject={"liar": n})
        gl = await book.lease(liar, t + 1, network=NET_A)
        g1 = await book.lease(honest[0], t + 2, network=NET_B)
        assert gl is not None
        assert g1 is not None
        await book.post(liar, gl.copy_id, good(gl, loss="deadbeef"), t + 3)
        await book.post(honest[0], g1.copy_id, good(g1), t + 4)
        g2 = await book.lease(honest[1], t + 5, network=NET_C)
        assert g2 is not None
        await book.post(honest[1], g2.copy_id, good(g2), t + 6)
        assert (await book.job(job)).settled_how == "third-copy"


async def test_a_key_minted_where_a_node_was_disabled_starts_on_probation(paired: Book) -> None:
    """Scenario 8: the struck-out operator mints a fresh key from the same /24. It starts on
    probation, is never paired with another unestablished key, earns nothing for its first
    two agreed answers beside established nodes, then earns; status shows its standing."""
    liar, _ = await paired.node(OLD, network=NET_A)
    e1, _ = await paired.node(OLD, network=NET_B)
    e2, _ = await paired.node(OLD, network=NET_C)
    await _strike_out(paired, liar, (e1, e2), T0)
    assert (await paired.fresh(liar)).disabled_until_ms == T0 + DAY
    sybil, _ = await paired.node(T0 + 10_000, network=NET_A)
    assert sybil.probation == 2
    assert (await paired.node(T0 + 10_000, network=NET_D))[0].probation == 0
    young, _ = await paired.node(T0 + 10_000, network=NET_D)

    job = await paired.enqueue(T0 + 20_000, subject=_subject(1))
    assert await paired.lease(sybil, T0 + 20_001, network=NET_A) is not None
    assert await paired.lease(young, T0 + 20_002, network=NET_D) is None
    assert [j.job_id for j in await paired.fallback(T0 + 40_000)] == [job]
    credits = []
    for at in (T0 + 50_000, T0 + 60_000, T0 + 70_000):
        await _agree(paired, (e1, NET_B), (sybil, NET_A), at)
        row = await paired.fresh(sybil)
        credits.append((row.probation, row.compute_credits, row.jobs_done))
    assert credits == [(1, 0, 1), (0, 0, 2), (0, 1, 3)]
    accepted = [p for k, p in paired.events if k == "accepted" and p["node"] == sybil.node_id]
    assert [(p["credit"], p.get("probation")) for p in accepted] == [(0, 1), (0, 0), (1, None)]

    view = await paired.db.read(status, T0 + 80_000)
    entries = {n["id"]: n for n in view["nodes"]}
    assert entries[liar.node_id]["strikes_today"] == 3
    assert entries[e1.node_id]["strikes_today"] == 0
    standing = {k: entries[sybil.node_id][k] for k in ("probation", "established")}
    assert standing == {"probation": 0, "established": False}  # younger than an hour
    assert entries[sybil.node_id]["network_strikes_today"] == 3
    assert entries[sybil.node_id]["strikes_today"] == 0
    assert NET_A not in str(view)  # the network itself is never shown


async def test_probation_follows_the_last_day_of_a_disabled_node(paired: Book) -> None:
    """A node disabled until midnight M puts new keys of its network on probation until
    M + 24 h (exclusive), not after."""
    liar, _ = await paired.node(OLD, network=NET_A)
    e1, _ = await paired.node(OLD, network=NET_B)
    e2, _ = await paired.node(OLD, network=NET_C)
    await _strike_out(paired, liar, (e1, e2), T0)
    until = (await paired.fresh(liar)).disabled_until_ms
    assert (await paired.node(until + DAY - 1, network=NET_A))[0].probation == 2
    assert (await paired.node(until + DAY, network=NET_A))[0].probation == 0


async def test_keyless_minting_is_limited_per_network(paired: Book) -> None:
    """The 11th mint from one network within a minute is 429 with the seconds until the
    oldest leaves the window; another network is not limited; a minute later it mints."""
    for i in range(10):
        await paired.node(T0 + i * 1000, network=NET_A)
    with pytest.raises(TooManyRequests) as caught:
        await paired.node(T0 + 30_000, network=NET_A)
    assert caught.value.retry_after_s == 30
    assert caught.value.headers() == {"Retry-After": "30"}
    assert "at most 10 node keys are minted per minute" in caught.value.detail
    await paired.node(T0 + 30_000, network=NET_B)
    with pytest.raises(TooManyRequests) as again:
        await paired.node(T0 + 59_999, network=NET_A)
    assert again.value.retry_after_s == 1
    _node, key = await paired.node(T0 + 60_000, network=NET_A)
    with pytest.raises(TooManyRequests):
        await paired.node(T0 + 60_001, network=NET_A)
    await paired.node(T0 + 60_001, network=NET_A, key=key)  # attaching mints nothing


async def test_held_polls_are_handed_copies_by_the_same_rules(paired: Book) -> None:
    """A new step's two copies, handed to the held polls in the transaction that queued it,
    skip a poll from the first holder's network for the next one's."""
    a, _ = await paired.node(OLD, network=NET_A)
    b, _ = await paired.node(OLD, network=NET_A)
    c, _ = await paired.node(OLD, network=NET_B)
    job = await paired.enqueue(T0)
    asks = [
        LeaseAsk(n, ["delta-loss"], "cpu", net) for n, net in ((a, NET_A), (b, NET_A), (c, NET_B))
    ]
    grants, _events = await paired.db.write(
        lambda conn: hand_out(conn, asks, 2, now_ms=T0 + 1, settings=paired.settings)
    )
    assert [(i, g.job_id) for i, g in grants] == [(0, job), (2, job)]
