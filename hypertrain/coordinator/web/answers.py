"""Answers of the public read views, kept while the data they were read from is unchanged.

A route whose answer is a function of the request's path and query string and of the
database alone (no authentication, no other header, no clock, nothing held in memory that the
database does not hold) may answer through :meth:`AnswerCache.answer`: it takes the
database's :meth:`~hypertrain.store.Database.stamp` *before* it reads, renders the answer once
(compact JSON bytes, :func:`~hypertrain.coordinator.flows.compactjson.encode_json`) and keeps
it under the request's key (:func:`key_of`: the raw path and query string) with that stamp.
The run view and the round view answer this way.

:meth:`AnswerCache.lookup` gives the bytes kept under a key only with the stamp they were
kept with: the caller takes the database's stamp now (:meth:`AnswerCache.stamp`) and asks with
it. The cache cannot serve stale data: a stamp equals an earlier one only when no write
committed since (here or on any other connection), and the answer kept with a stamp was read
after it was taken, so it holds every write the stamp counts. It changes no answer: a hit
gives the bytes the route sent for the same path and query at the same data.
:func:`~hypertrain.coordinator.web.front.serve_answers` answers from it in front of Quart.

Compressed for who accepts it: :meth:`AnswerCache.lookup_encoded` gives an answer of at least
:data:`GZIP_MIN_BYTES` gzip-compressed to a client that accepts ``gzip``, compressed once per
answer kept (the round view at 256 miners is about 554 KB, most of it the assignment's sample
numbers; miners' httpx clients accept gzip), the same bytes every time (``mtime`` 0).

Bounded: at most ``max_entries`` answers and ``max_bytes`` bytes of them (compressed forms
included), least recently used dropped first (an answer larger than ``max_bytes`` is never
kept). Pure of Quart and Trio:
the stamp comes from the database runner; whoever waits for a render in progress subscribes
with :meth:`AnswerCache.observe` and is called with the key and stamp of each answer kept.
"""

from __future__ import annotations

import collections
import gzip
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Protocol

from attrs import evolve, frozen

from hypertrain.coordinator.flows.compactjson import encode_json
from hypertrain.store import Stamp

__all__ = [
    "ANSWER_CACHE_BYTES",
    "ANSWER_CACHE_ENTRIES",
    "GZIP_MIN_BYTES",
    "Answer",
    "AnswerCache",
    "AnswerCacheStatistics",
    "Key",
    "Stamped",
    "encode_json",
    "key_of",
]

ANSWER_CACHE_ENTRIES: Final = 64
"""Answers kept at most (distinct paths and query strings)."""
ANSWER_CACHE_BYTES: Final = 32 * 1024 * 1024
"""Bytes of kept answers at most."""

GZIP_MIN_BYTES: Final = 16 * 1024
"""Answers at least this large go gzip-compressed to clients that accept it (module doc)."""
GZIP_LEVEL: Final = 6

Key = tuple[str, bytes]
"""A request's ``(path, query_string)`` as the ASGI scope gives them."""


class Stamped(Protocol):
    """What the cache reads of the database: its stamp (:meth:`hypertrain.store.Database.stamp`)."""

    async def stamp(self) -> Stamp: ...


def key_of(scope: Mapping[str, Any]) -> Key:
    """The key of a request: its raw path and query string."""
    return str(scope["path"]), bytes(scope.get("query_string", b""))


@frozen
class Answer:
    """The bytes of one answer and the stamp taken before the data was read."""

    stamp: Stamp
    body: bytes
    gzipped: bytes | None = None
    """``body`` gzip-compressed, once a client that accepts it asked (module doc)."""

    @property
    def size(self) -> int:
        """Bytes kept for it."""
        return len(self.body) + len(self.gzipped or b"")


@frozen
class AnswerCacheStatistics:
    """Counts since start, and what is kept now."""

    hits: int
    """Lookups answered from the cache (requests answered in front of Quart)."""
    renders: int
    """Answers rendered by a route (a first request, or the data changed)."""
    entries: int
    bytes: int


class AnswerCache:
    """See the module docstring."""

    def __init__(
        self,
        db: Stamped,
        *,
        max_entries: int = ANSWER_CACHE_ENTRIES,
        max_bytes: int = ANSWER_CACHE_BYTES,
    ) -> None:
        self._db = db
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._answers: collections.OrderedDict[Key, Answer] = collections.OrderedDict()
        self._bytes = 0
        self._hits = 0
        self._renders = 0
        self._observers: list[Callable[[Key, Stamp], None]] = []

    def observe(self, observer: Callable[[Key, Stamp], None]) -> None:
        """Call ``observer(key, stamp)`` after each answer is kept (it must not raise)."""
        self._observers.append(observer)

    async def stamp(self) -> Stamp:
        """The database's stamp now."""
        return await self._db.stamp()

    async def answer(self, key: Key, produce: Callable[[], Awaitable[Any]]) -> bytes:
        """The JSON bytes of ``await produce()`` (one read of the database), kept under
        ``key`` with the stamp taken before it ran."""
        stamp = await self._db.stamp()
        body = encode_json(await produce())
        self._renders += 1
        self._keep(key, Answer(stamp, body))
        for observer in self._observers:
            observer(key, stamp)
        return body

    def lookup(self, key: Key, stamp: Stamp) -> bytes | None:
        """The bytes kept under ``key`` if they were kept with ``stamp`` (take it with
        :meth:`stamp` just before: then the data is unchanged since they were read)."""
        kept = self._answers.get(key)
        if kept is None or kept.stamp != stamp:
            return None
        self._answers.move_to_end(key)
        self._hits += 1
        return kept.body

    def lookup_encoded(
        self, key: Key, stamp: Stamp, *, accepts_gzip: bool
    ) -> tuple[bytes, bool] | None:
        """:meth:`lookup`, as ``(bytes, gzipped)``: compressed when the client accepts gzip
        and the answer has at least :data:`GZIP_MIN_BYTES` (module doc)."""
        body = self.lookup(key, stamp)
        if body is None or not accepts_gzip or len(body) < GZIP_MIN_BYTES:
            return None if body is None else (body, False)
        kept = self._answers[key]
        if kept.gzipped is None:
            kept = evolve(kept, gzipped=gzip.compress(body, compresslevel=GZIP_LEVEL, mtime=0))
            self._keep(key, kept)
        assert kept.gzipped is not None
        return kept.gzipped, True

    async def fresh(self, key: Key) -> bytes | None:
        """The bytes kept under ``key`` if the data is unchanged since they were read."""
        return self.lookup(key, await self._db.stamp())

    def known(self, key: Key) -> bool:
        """Whether an answer is kept under ``key``, fresh or not (its route renders answers
        into this cache)."""
        return key in self._answers

    def statistics(self) -> AnswerCacheStatistics:
        """A snapshot of the counts and what is kept."""
        return AnswerCacheStatistics(
            hits=self._hits, renders=self._renders, entries=len(self._answers), bytes=self._bytes
        )

    def _keep(self, key: Key, answer: Answer) -> None:
        old = self._answers.pop(key, None)
        if old is not None:
            self._bytes -= old.size
        if answer.size > self._max_bytes:
            return
        self._answers[key] = answer
        self._bytes += answer.size
        while len(self._answers) > self._max_entries or self._bytes > self._max_bytes:
            _, dropped = self._answers.popitem(last=False)
            self._bytes -= dropped.size
