"""ComputeHub.publish: every book event goes out on the event hub and wakes exactly the waiters
it concerns (virtual time: a waiter not woken times out at its deadline instead)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
import trio.testing

from hypertrain.compute import DEFAULT_SETTINGS, EVENT_KINDS, Event
from hypertrain.coordinator.computehub import FALLBACK, TIMERS, WORK, ComputeHub
from hypertrain.coordinator.events import EventHub
from nurseries import Notified

JOB = {"job": "j1", "challenge": "delta-loss"}
WAKES: list[tuple[Event, set[str]]] = [
    (("register", {"node": "n1", "handle": "a", "capabilities": [], "attached": False}), set()),
    (("queued", {**JOB, "trace": "public", "copies": 2}), {WORK, TIMERS}),
    (("lease", {**JOB, "trace": "public"}), {TIMERS}),
    (("result", {**JOB, "answers": 1}), set()),
    (("accepted", {"job": "j1", "copy": "j1.1", "node": "n1", "credit": 1}), set()),
    (("strike", {"job": "j1", "copy": "j1.2", "node": "n2", "strikes_today": 1}), set()),
    (("split", JOB), {WORK, TIMERS}),
    (("settled", {**JOB, "state": "settled", "how": "agreement"}), set()),
    (("expired", {**JOB, "expiries": 1, "replaced": True}), {WORK, TIMERS}),
    (("expired", {**JOB, "expiries": 3, "replaced": False}), set()),
    (("fallback", {**JOB, "reason": "wait"}), {FALLBACK}),
    (("trace", {"node": "n1", "challenge": "delta-loss", "trace": "hidden"}), set()),
    (("returned", {**JOB, "trace": "public", "requeued": True}), {WORK, TIMERS}),
    (("returned", {**JOB, "trace": "public", "requeued": False}), set()),
    (("audit", {**JOB, "change": "drawn", "round": 7}), {FALLBACK}),
    (("audit", {**JOB, "change": "agreed"}), set()),
]


def test_every_event_kind_has_its_wake_up_case() -> None:
    assert {kind for (kind, _), _ in WAKES} == set(EVENT_KINDS)


async def _woken_by(events: list[Event]) -> set[str]:
    hub = ComputeHub(DEFAULT_SETTINGS, EventHub())
    woken: set[str] = set()
    deadline = trio.current_time() + 1.0

    async def wait(key: str) -> None:
        if isinstance(await hub.waiter.wait(key, deadline=deadline), Notified):
            woken.add(key)

    async with trio.open_nursery() as nursery:
        for key in (WORK, TIMERS, FALLBACK):
            nursery.start_soon(wait, key)
        await trio.testing.wait_all_tasks_blocked()
        hub.publish(events)
    return woken


@pytest.mark.parametrize(("event", "wakes"), WAKES, ids=[k for (k, _), _ in WAKES])
async def test_each_event_wakes_exactly_the_waiters_it_concerns(
    event: Event, wakes: set[str], autojump_clock: trio.testing.MockClock
) -> None:
    assert await _woken_by([event]) == wakes


async def test_a_batch_wakes_the_union_and_is_published_in_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    batch = [WAKES[2][0], WAKES[3][0], WAKES[10][0]]  # lease, result, fallback
    assert await _woken_by(batch) == {TIMERS, FALLBACK}
    events = EventHub()
    hub = ComputeHub(DEFAULT_SETTINGS, events)
    async with events.subscribe(frozenset({"compute"})) as sub:
        hub.publish(batch)
        seen: list[dict[str, Any]] = [json.loads((await anext(sub)).json) for _ in batch]
    assert seen == [{"kind": kind, **payload} for kind, payload in batch]
