"""Watching a held ASGI request for its client's disconnect.

A long poll holds a request whose body was read: from then on the only message ASGI's
``receive`` can give is ``http.disconnect``. ``async with open_disconnect_watch(receive) as
watch`` runs one task that waits for it while the block runs:

- ``with watch.cancelled_on_disconnect():`` runs a part of the block in a cancel scope that is
  cancelled when the client goes (at once when it is gone already), like
  ``trio.move_on_after``: execution continues after the ``with``;
- ``watch.gone`` says whether the disconnect came. After the block it is final for every
  ``http.disconnect`` the server handed to ``receive`` before the block ended, when ``receive``
  hands a message over atomically with its wake-up (a trio memory channel's ``receive``, which
  hypercorn's is, does: a watcher cancelled after the message was handed to it still takes it);
  one the server has not delivered yet is not seen (a client whose close is still in flight is
  not known to be gone).

Messages other than ``http.disconnect`` (there are none once the body was read) are dropped.
What the block raises comes out as it is (not in an exception group: the watch's task raises
nothing of its own but a ``receive`` failure).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import trio

__all__ = ["DisconnectWatch", "open_disconnect_watch"]

Receive = Callable[[], Awaitable[Any]]


class DisconnectWatch:
    """What :func:`open_disconnect_watch` yields (module doc)."""

    def __init__(self) -> None:
        self._gone = False
        self._scopes: set[trio.CancelScope] = set()

    @property
    def gone(self) -> bool:
        """Whether the client's ``http.disconnect`` came (module doc)."""
        return self._gone

    @contextmanager
    def cancelled_on_disconnect(self) -> Iterator[trio.CancelScope]:
        """A cancel scope cancelled when the client goes (module doc)."""
        with trio.CancelScope() as scope:
            if self._gone:
                scope.cancel()
            self._scopes.add(scope)
            try:
                yield scope
            finally:
                self._scopes.discard(scope)

    async def _watch(self, receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        self._gone = True
        for scope in self._scopes:
            scope.cancel()


@asynccontextmanager
async def open_disconnect_watch(receive: Receive) -> AsyncIterator[DisconnectWatch]:
    """Watch ``receive`` for ``http.disconnect`` while the block runs (module doc)."""
    watch = DisconnectWatch()
    raised: BaseException | None = None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch._watch, receive)
        try:
            yield watch
        except BaseException as e:  # re-raised as it is, below: never inside a group
            raised = e
        finally:
            nursery.cancel_scope.cancel()
    if raised is not None:
        raise raised
