"""A live feed of what the coordinator does, for ``GET /v1/events`` (server-sent events).

:class:`EventHub` fans each published event out to every subscriber without ever blocking the
producer (STYLE item 8): each subscriber owns a bounded buffer, and when a slow reader lets it
fill up, the *oldest* buffered event is dropped to make room (a live feed is about the present)
and counted. Publishing is a plain function; a closed subscriber is simply forgotten.

::

    hub.publish("beacon", {"round": 12, "latest": 12})

    async with hub.subscribe(kinds={"beacon"}) as events:
        async for event in events:          # ends when the hub is closed
            print(event.seq, event.kind, event.json)

Every event carries a hub-wide sequence number (``seq``, from 1), sent as the SSE ``id:`` so a
reader can tell it missed events; ``Subscription.dropped`` counts the ones dropped for it.
The event's JSON text is made once, at publish time (later mutation of ``data`` cannot leak in).

``hub.observers`` are plain functions called with ``(kind, data)`` for each event as it is
published, in order, before any subscriber sees it (the daemon's metrics count events there,
:meth:`hypertrain.coordinator.metrics.Metrics.on_event`); they must not block or keep ``data``.
One that raises is logged and the event is still published.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import Any, Final

import attrs
import trio

from hypertrain.coordinator.flows.compactjson import COMPACT_JSON

__all__ = [
    "DEFAULT_SUBSCRIBER_CAPACITY",
    "EventHub",
    "EventHubStatistics",
    "EventObserver",
    "HubEvent",
    "Subscription",
]

log = logging.getLogger(__name__)

DEFAULT_SUBSCRIBER_CAPACITY: Final = 256
"""Events buffered per subscriber before the oldest is dropped."""

EventObserver = Callable[[str, Mapping[str, Any]], None]
"""``observer(kind, data)`` for each event published (module doc)."""


@attrs.frozen
class HubEvent:
    """One published event: sequence number, kind and the data as compact JSON text."""

    seq: int
    kind: str
    json: str

    def to_sse(self) -> bytes:
        """The SSE frame ``id: seq / event: kind / data: json`` with its blank line."""
        return f"id: {self.seq}\nevent: {self.kind}\ndata: {self.json}\n\n".encode()


@attrs.frozen
class EventHubStatistics:
    """A snapshot of an :class:`EventHub` for status pages."""

    published: int
    """Events published so far (also the last sequence number)."""
    subscribers: int
    """Subscriptions open now."""
    dropped: int
    """Events dropped for slow subscribers, over the hub's lifetime."""
    closed: bool


class Subscription:
    """One subscriber's view: an async iterator of :class:`HubEvent` (see the module doc)."""

    def __init__(self, hub: EventHub, kinds: frozenset[str] | None, capacity: int) -> None:
        self._hub = hub
        self._kinds = kinds
        self._buffer: collections.deque[HubEvent] = collections.deque(maxlen=capacity)
        self._ready = trio.Event()
        self._closed = False
        self.dropped = 0
        """Events dropped for this subscriber because its buffer was full."""

    def wants(self, kind: str) -> bool:
        """Whether this subscription's kind filter lets ``kind`` through."""
        return self._kinds is None or kind in self._kinds

    def _offer(self, event: HubEvent) -> bool:
        """Buffer ``event``; returns True when the oldest event had to be dropped."""
        dropped = len(self._buffer) == self._buffer.maxlen
        if dropped:
            self.dropped += 1
        self._buffer.append(event)  # a full deque with maxlen drops from the left
        self._ready.set()
        return dropped

    def _close(self) -> None:
        self._closed = True
        self._ready.set()

    @property
    def closed(self) -> bool:
        """Whether the hub was closed (the iterator ends once this is seen)."""
        return self._closed

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> HubEvent:
        event = await self.receive()
        if event is None:
            raise StopAsyncIteration
        return event

    def receive_nowait(self) -> HubEvent:
        """The next buffered event without waiting; ``trio.WouldBlock`` when none is.

        Raises ``trio.EndOfChannel`` once the hub is closed, as :meth:`receive` returns None.
        """
        if self._closed:
            raise trio.EndOfChannel
        if not self._buffer:
            raise trio.WouldBlock
        return self._buffer.popleft()

    async def receive(self) -> HubEvent | None:
        """The next event, waiting for one; ``None`` once the hub is closed.

        Always a checkpoint. Waits without a bound: callers that need one wrap it in
        ``trio.move_on_after`` (the SSE route does, for its keep-alives).
        """
        await trio.lowlevel.checkpoint()
        while not self._buffer:
            if self._closed:
                return None
            self._ready = trio.Event()
            await self._ready.wait()
        if self._closed:
            return None
        return self._buffer.popleft()


class EventHub:
    """Publish/subscribe of coordinator events with drop-oldest per subscriber."""

    def __init__(self, *, capacity: int = DEFAULT_SUBSCRIBER_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity!r}")
        self._capacity = capacity
        self._subscribers: set[Subscription] = set()
        self._published = 0
        self._dropped = 0
        self._closed = False
        self.observers: list[EventObserver] = []
        """Called with each event as it is published (module doc)."""

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def publish(self, kind: str, data: Mapping[str, Any]) -> None:
        """Send ``{kind, data}`` to every subscriber that wants ``kind``; never blocks.

        ``data`` must be JSON-serialisable (finite numbers only): a ``TypeError`` or
        ``ValueError`` here is the caller's bug. Does nothing after :meth:`close`.
        """
        if self._closed:
            return
        text = COMPACT_JSON.encode(data)
        for observer in self.observers:
            try:
                observer(kind, data)
            except Exception:
                log.exception("event observer %r failed on a %s event", observer, kind)
        self._published += 1
        event = HubEvent(seq=self._published, kind=kind, json=text)
        for subscriber in self._subscribers:
            if subscriber.wants(kind) and subscriber._offer(event):
                self._dropped += 1

    @asynccontextmanager
    async def subscribe(
        self, kinds: Iterable[str] | None = None, *, capacity: int | None = None
    ) -> AsyncIterator[Subscription]:
        """Subscribe for the duration of the block; ``kinds`` None means every kind.

        Only events published after entering are seen. ``capacity`` overrides the hub's
        per-subscriber buffer size. A subscription opened after :meth:`close` ends at once.
        """
        wanted = None if kinds is None else frozenset(kinds)
        size = self._capacity if capacity is None else capacity
        if size < 1:
            raise ValueError(f"capacity must be >= 1, got {size!r}")
        subscription = Subscription(self, wanted, size)
        if self._closed:
            subscription._close()
        self._subscribers.add(subscription)
        try:
            yield subscription
        finally:
            self._subscribers.discard(subscription)

    def close(self) -> None:
        """End every subscription (their iterators stop) and ignore later publishes."""
        self._closed = True
        for subscriber in self._subscribers:
            subscriber._close()

    def statistics(self) -> EventHubStatistics:
        """Published, open subscribers, dropped, closed."""
        return EventHubStatistics(
            published=self._published,
            subscribers=len(self._subscribers),
            dropped=self._dropped,
            closed=self._closed,
        )
