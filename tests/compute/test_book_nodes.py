"""Nodes: registration, authentication, strikes and the status view (scenarios 24, 32, 40)."""

from __future__ import annotations

import json

import pytest

from hypertrain.compute import Node, authenticate, status
from hypertrain.compute.status import PAGE_MAX
from hypertrain.protocol.errors import AuthError, Conflict, Forbidden, Malformed
from tests.compute.support import DAY, T0, Book, good


async def test_register_mints_attaches_and_normalises(book: Book) -> None:
    node, key = await book.node(
        caps=["step-throughput", "delta-loss", "delta-loss", "future-thing"],
        hardware="  NVIDIA  GeForce RTX-4090!! ",
    )
    assert key.startswith("ht_")
    assert node.capabilities == ("delta-loss", "future-thing", "step-throughput")
    assert node.hardware == "nvidia-geforce-rtx-4090"
    assert node.handle.startswith("node-")
    again, _ = await book.node(key=key, caps=[], hardware="", handle="Renamed")
    assert again.node_id == node.node_id
    assert (again.capabilities, again.hardware, again.handle) == ((), "cpu-generic", "Renamed")
    assert book.events[-1][1]["attached"] is True
    with pytest.raises(Conflict, match="taken"):
        await book.node(handle="renamed")
    with pytest.raises(AuthError, match="unknown"):
        await book.node(key="ht_" + "A" * 32)
    with pytest.raises(Malformed, match="capabilities"):
        await book.node(caps=["UPPER"])
    with pytest.raises(Malformed, match="capabilities"):
        await book.node(caps=[f"c{i}" for i in range(65)])
    long, _ = await book.node(hardware="x" * 200)
    assert long.hardware == "x" * 64


async def test_authentication(book: Book) -> None:
    """Scenario 32: 401 for missing, malformed, unknown keys; a disabled key 403 at lease."""
    node, key = await book.node()
    for bad, words in [
        (None, "required"),
        ("", "required"),
        ("dmi_x", "malformed"),
        ("ht_" + "0" * 32, "unknown"),
    ]:
        with pytest.raises(AuthError, match=words):
            await book.db.write(authenticate, bad, T0)
    seen: Node = await book.db.write(lambda c: authenticate(c, key, T0 + 7))
    assert (seen.node_id, seen.last_seen_ms) == (node.node_id, T0 + 7)
    await book.db.write(
        lambda c: c.execute(
            "UPDATE compute_nodes SET disabled_until_ms = ? WHERE node_id = ?",
            (T0 + DAY, node.node_id),
        )
    )
    with pytest.raises(Forbidden, match=r"2024-01-02T00:00:00\.000Z"):
        await book.lease(node, T0 + 8)


async def _strike(book: Book, liar: Node, honest: Node, third: Node, at: int, n: int) -> None:
    job = await book.enqueue(now=at - 1_000, subject={"run_id": "r", "w": n, "hotkey": "h"})
    gl, gh = await book.lease(liar, at - 900), await book.lease(honest, at - 900)
    assert gl is not None
    assert gh is not None
    await book.post(liar, gl.copy_id, good(gl, loss="deadbeef"), at - 800)
    await book.post(honest, gh.copy_id, good(gh), at - 700)
    g3 = await book.lease(third, at - 600)
    assert g3 is not None
    assert g3.job_id == job
    await book.post(third, g3.copy_id, good(g3), at)


async def test_three_strikes_in_one_utc_day_disable_until_midnight(book: Book) -> None:
    """Scenario 24: 23:59:59.999 and 00:00:00.000 are different days."""
    liar, _ = await book.node()
    honest, _ = await book.node()
    third, _ = await book.node()
    times = [T0 + 36_000_000, T0 + DAY - 1, T0 + DAY, T0 + DAY + 3_600_000, T0 + DAY + 7_200_000]
    for n, at in enumerate(times[:3]):
        await _strike(book, liar, honest, third, at, n)
    assert await book.strikes(liar) == ["2024-01-01", "2024-01-01", "2024-01-02"]
    assert (await book.fresh(liar)).disabled_until_ms == 0
    for n, at in enumerate(times[3:], start=3):
        await _strike(book, liar, honest, third, at, n)
    strike = [p for k, p in book.events if k == "strike"][-1]
    assert (strike["strikes_today"], strike["disabled_until"]) == (3, "2024-01-03T00:00:00.000Z")
    assert (await book.fresh(liar)).disabled_until_ms == T0 + 2 * DAY
    with pytest.raises(Forbidden, match=str(T0 + 2 * DAY)):
        await book.lease(liar, T0 + 2 * DAY - 1)
    job = await book.enqueue(now=T0 + 2 * DAY - 5, subject={"run_id": "r", "w": 99, "hotkey": "h"})
    grant = await book.lease(liar, T0 + 2 * DAY)
    assert grant is not None
    assert grant.job_id == job


async def test_status_shows_counts_and_never_keys_or_holders(book: Book) -> None:
    a, key_a = await book.node(handle="alice")
    b, key_b = await book.node(caps=["delta-loss", "step-throughput"])
    old, _ = await book.node(now=T0 - 120_001)
    job = await book.enqueue()
    await book.enqueue(subject={"run_id": "r1", "w": 5, "hotkey": "h"})
    ga, gb = await book.lease(a, T0 + 1), await book.lease(b, T0 + 1)
    assert ga is not None
    assert gb is not None
    view = await book.db.read(lambda c: status(c, T0 + 2))
    assert [n["id"] for n in view["nodes"]] == sorted([a.node_id, b.node_id])
    assert old.node_id not in json.dumps(view)
    assert view["challenges"] == {
        "delta-loss": {"capable_nodes": 2},
        "step-throughput": {"capable_nodes": 1},
    }
    assert (view["queued"], view["leased"], view["done_24h"]) == (2, 2, 0)
    assert (view["credit_per_job"], view["fallback_ms"]) == (1, 20_000)
    text = json.dumps(view)
    for secret in (key_a, key_b, ga.token, gb.token, ga.copy_id, gb.copy_id, job):
        assert secret not in text
    await book.post(a, ga.copy_id, good(ga), T0 + 3)
    await book.post(b, gb.copy_id, good(gb), T0 + 4)
    later = await book.db.read(lambda c: status(c, T0 + 5))
    assert (later["queued"], later["leased"], later["done_24h"]) == (2, 0, 1)
    assert (await book.db.read(lambda c: status(c, T0 + 4 + DAY)))["done_24h"] == 0


async def test_status_lists_the_online_nodes_a_bounded_page_at_a_time(book: Book) -> None:
    nodes = [(await book.node(now=T0))[0] for _ in range(7)]
    for _ in range(3):
        await book.node(now=T0 - 120_001)  # registered long ago, never seen since
    ids = sorted(n.node_id for n in nodes)
    pages: list[list[str]] = []
    after: str | None = None
    while True:
        view = await book.db.read(lambda c, after=after: status(c, T0 + 1, after=after, limit=3))
        pages.append([n["id"] for n in view["nodes"]])
        assert view["online_nodes"] == 7
        after = view["next"]
        if after is None:
            break
        assert after == pages[-1][-1]
    assert pages == [ids[0:3], ids[3:6], ids[6:7]]
    whole = await book.db.read(lambda c: status(c, T0 + 1))  # the default page holds them all
    assert ([n["id"] for n in whole["nodes"]], whole["next"]) == (ids, None)
    assert whole["challenges"]["delta-loss"]["capable_nodes"] == 7  # counted over every page
    for limit in (0, PAGE_MAX + 1):
        with pytest.raises(ValueError, match="limit"):
            await book.db.read(lambda c, limit=limit: status(c, T0 + 1, limit=limit))
