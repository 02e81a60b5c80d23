"""A keyed waiter for long polls.

``await waiter.wait(key, deadline=d)`` parks the calling task until one of three things happens
and returns which, as a value rather than an exception:

- `Notified`: ``waiter.notify(key, value)`` was called while it waited (carries ``value``);
- `TimedOut`: the Trio clock reached ``deadline`` first;
- `Stopping`: ``waiter.close()`` was called (now or earlier).

``notify`` is a plain function: it never blocks, wakes the tasks waiting on that key at the
moment of the call (a task that starts waiting afterwards waits for the next notify) and
returns how many it woke: all of them, or with ``limit=n`` the ``n`` that have waited longest
(first come, first served: a new piece of work wakes one waiter, not a herd). `waiting` says
how many wait on a key. If a deadline and a notify land in the same instant the notification
wins.

A waiter may say what it waits for: ``wait(key, deadline=d, tag=t)``. `parked` lists a key's
waiters (longest waiting first) with their tags, and `notify_parked` wakes one of them with its
own value: a notifier that decides which waiter gets which piece of work hands each its piece
(the compute hub grants queued copies to held lease polls this way).

A waiter that is cancelled from outside raises ``trio.Cancelled`` as usual, unless it was
notified before it ran again (whichever came first, the cancel or the notify): then it
returns `Notified` and its caller's next checkpoint raises the cancel, so a caller that may be
cancelled while it acts on a notification can pass it on itself; no notification is lost
inside the waiter.

Memory is bounded by the tasks currently waiting: a key's entry is dropped as soon as it has
no waiters, whether they were notified, timed out or cancelled.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable
from typing import Generic, TypeVar, cast, overload

import attrs
import trio

__all__ = [
    "KeyedWaiter",
    "KeyedWaiterStatistics",
    "Notified",
    "Parked",
    "Stopping",
    "TimedOut",
    "WaitResult",
]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@attrs.frozen
class Notified(Generic[V]):
    """The key was notified; ``value`` is what the notifier passed."""

    value: V


@attrs.frozen
class TimedOut:
    """The deadline passed without a notification."""


@attrs.frozen
class Stopping:
    """The waiter was closed: the service is shutting down."""


WaitResult = Notified[V] | TimedOut | Stopping


@attrs.frozen
class KeyedWaiterStatistics:
    """A snapshot: keys with a waiter, tasks parked and not yet woken, and the closed flag."""

    keys: int
    waiters: int
    closed: bool


class Parked(Generic[V]):
    """One parked task: its ``tag`` (what it said it waits for), its wake-up event and, once
    woken, why. Only ``tag`` is for readers outside this module."""

    __slots__ = ("event", "result", "tag")

    def __init__(self, tag: object) -> None:
        self.tag = tag
        self.event = trio.Event()
        self.result: Notified[V] | Stopping | None = None

    def wake(self, result: Notified[V] | Stopping) -> None:
        self.result = result
        self.event.set()


class KeyedWaiter(Generic[K, V]):
    """Tasks wait on keys; `notify` wakes one key's waiters, `close` wakes all for good."""

    def __init__(self) -> None:
        self._slots: dict[K, dict[Parked[V], None]] = {}
        """Each key's waiting tasks, longest waiting first (a dict keeps insertion order)."""
        self._waiting = 0
        self._closed = False

    async def wait(self, key: K, *, deadline: float, tag: object = None) -> WaitResult[V]:
        """Wait on ``key`` until notified, until Trio time ``deadline``, or until closed.

        Always a checkpoint; parked (and seen by `parked`, with ``tag``) before it yields.
        Returns `Stopping` at once (after the checkpoint) if already closed.
        """
        if self._closed:
            await trio.lowlevel.checkpoint()
            return Stopping()
        slot: Parked[V] = Parked(tag)
        self._slots.setdefault(key, {})[slot] = None
        self._waiting += 1
        try:
            with trio.move_on_at(deadline):
                await slot.event.wait()
        except trio.Cancelled:
            # Cancelled while parked, but notified before it ran (notify counted it as woken):
            # hand the notification back; the cancel is raised again at the caller's next
            # checkpoint (Trio's cancellation is level-triggered), after it could pass it on.
            if slot.result is None:
                raise
        finally:
            if slot.result is None:
                self._waiting -= 1
            slots = self._slots.get(key)
            if slots is not None:
                slots.pop(slot, None)
                if not slots:
                    del self._slots[key]
        return TimedOut() if slot.result is None else slot.result

    @overload
    def notify(self: KeyedWaiter[K, None], key: K, *, limit: int | None = None) -> int: ...

    @overload
    def notify(self, key: K, value: V, *, limit: int | None = None) -> int: ...

    def notify(self, key: K, value: V | None = None, *, limit: int | None = None) -> int:
        """Wake the tasks waiting on ``key`` now with `Notified(value)`: all of them, or the
        ``limit`` that have waited longest; return how many."""
        slots = self._slots.get(key)
        if not slots:
            return 0
        if limit is None or limit >= len(slots):
            woken = list(slots)
            del self._slots[key]
        else:
            woken = list(itertools.islice(slots, max(limit, 0)))
            for slot in woken:
                del slots[slot]
        result = Notified(cast("V", value))
        for slot in woken:
            slot.wake(result)
        self._waiting -= len(woken)
        return len(woken)

    def parked(self, key: K) -> list[Parked[V]]:
        """The tasks waiting on ``key`` now, longest waiting first (read their ``tag``)."""
        return list(self._slots.get(key, ()))

    def notify_parked(self, key: K, parked: Parked[V], value: V) -> bool:
        """Wake the one task ``parked`` (from `parked`) with `Notified(value)`; False when it
        no longer waits on ``key`` (woken, timed out or cancelled since)."""
        slots = self._slots.get(key)
        if slots is None or parked not in slots:
            return False
        del slots[parked]
        if not slots:
            del self._slots[key]
        parked.wake(Notified(value))
        self._waiting -= 1
        return True

    def waiting(self, key: K) -> int:
        """How many tasks wait on ``key`` now (and were not woken yet)."""
        return len(self._slots.get(key, ()))

    def close(self) -> int:
        """Wake every waiter with `Stopping`; later waits return it at once. Returns how many.

        Idempotent: closing again wakes nobody and returns 0.
        """
        self._closed = True
        slots, self._slots = self._slots, {}
        woken = 0
        for key_slots in slots.values():
            for slot in key_slots:
                slot.wake(Stopping())
                woken += 1
        self._waiting -= woken
        return woken

    @property
    def closed(self) -> bool:
        """Whether `close` was called."""
        return self._closed

    def statistics(self) -> KeyedWaiterStatistics:
        """Return a frozen snapshot of keys, waiters and the closed flag."""
        return KeyedWaiterStatistics(
            keys=len(self._slots), waiters=self._waiting, closed=self._closed
        )
