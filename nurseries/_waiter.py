"""A keyed waiter for long polls.

``await waiter.wait(key, deadline=d)`` parks the calling task until one of three things happens
and returns which, as a value rather than an exception:

- `Notified`: ``waiter.notify(key, value)`` was called while it waited (carries ``value``);
- `TimedOut`: the Trio clock reached ``deadline`` first;
- `Stopping`: ``waiter.close()`` was called (now or earlier).

``notify`` is a plain function: it never blocks, wakes exactly the tasks waiting on that key at
the moment of the call (a task that starts waiting afterwards waits for the next notify) and
returns how many it woke. If a deadline and a notify land in the same instant the notification
wins. A waiter that is cancelled from outside raises ``trio.Cancelled`` as usual; a value
notified to it just before is lost with it (``notify`` counted it as woken).

Memory is bounded by the tasks currently waiting: a key's entry is dropped as soon as it has
no waiters, whether they were notified, timed out or cancelled.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar, cast, overload

import attrs
import trio

__all__ = [
    "KeyedWaiter",
    "KeyedWaiterStatistics",
    "Notified",
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


class _Slot(Generic[V]):
    """One parked task: its wake-up event and, once woken, why."""

    __slots__ = ("event", "result")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.result: Notified[V] | Stopping | None = None

    def wake(self, result: Notified[V] | Stopping) -> None:
        self.result = result
        self.event.set()


class KeyedWaiter(Generic[K, V]):
    """Tasks wait on keys; `notify` wakes one key's waiters, `close` wakes all for good."""

    def __init__(self) -> None:
        self._slots: dict[K, set[_Slot[V]]] = {}
        self._waiting = 0
        self._closed = False

    async def wait(self, key: K, *, deadline: float) -> WaitResult[V]:
        """Wait on ``key`` until notified, until Trio time ``deadline``, or until closed.

        Always a checkpoint. Returns `Stopping` at once (after the checkpoint) if already
        closed.
        """
        if self._closed:
            await trio.lowlevel.checkpoint()
            return Stopping()
        slot: _Slot[V] = _Slot()
        self._slots.setdefault(key, set()).add(slot)
        self._waiting += 1
        try:
            with trio.move_on_at(deadline):
                await slot.event.wait()
        finally:
            if slot.result is None:
                self._waiting -= 1
            slots = self._slots.get(key)
            if slots is not None:
                slots.discard(slot)
                if not slots:
                    del self._slots[key]
        return TimedOut() if slot.result is None else slot.result

    @overload
    def notify(self: KeyedWaiter[K, None], key: K) -> int: ...

    @overload
    def notify(self, key: K, value: V) -> int: ...

    def notify(self, key: K, value: V | None = None) -> int:
        """Wake every task waiting on ``key`` now with `Notified(value)`; return how many."""
        slots = self._slots.pop(key, None)
        if not slots:
            return 0
        result = Notified(cast("V", value))
        for slot in slots:
            slot.wake(result)
        self._waiting -= len(slots)
        return len(slots)

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
