"""Answers of the public read views, kept while the data they were read from is unchanged,
and served in front of Quart.

A route whose answer is a function of the request's path and query string and of the
database alone (no authentication, no other header, no clock, nothing held in memory that the
database does not hold) may answer through :meth:`AnswerCache.answer`: it takes the
database's :meth:`~hypertrain.store.Database.stamp` *before* it reads, renders the answer once
(compact JSON bytes, :func:`~hypertrain.coordinator.flows.compactjson.encode_json`) and keeps
it under the request's key (:func:`key_of`: the raw path and query string) with that stamp.
The run view and the round view answer this way.

:func:`serve_answers` wraps the app's ASGI callable (Quart's ``app.asgi_app``): a ``GET``
without a body, with its head within :data:`~hypertrain.coordinator.web.http.HEADERS_LIMIT`,
whose key holds an answer whose stamp is the database's stamp now, is answered from those
bytes (200, ``content-type`` and ``content-length``, the headers the route sends) without
entering Quart; any other request goes to the app unchanged, which answers it as it always
would (errors, 431, a body to read, the first request of a key). The cache cannot serve stale
data: a stamp equals an earlier one only when no write committed since (here or on any other
connection), and the answer kept with a stamp was read after it was taken, so it holds every
write the stamp counts. It changes no answer: a hit sends the bytes the route sent for the
same path and query at the same data.

Bounded: at most ``max_entries`` answers and ``max_bytes`` bytes of them, least recently used
dropped first (an answer larger than ``max_bytes`` is never kept). Pure of Quart and Trio:
the stamp comes from the database runner.
"""

from __future__ import annotations

import collections
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Protocol

from attrs import frozen

from hypertrain.coordinator.flows.compactjson import encode_json
from hypertrain.store import Stamp
from nurseries import ASGIApp

__all__ = [
    "ANSWER_CACHE_BYTES",
    "ANSWER_CACHE_ENTRIES",
    "Answer",
    "AnswerCache",
    "AnswerCacheStatistics",
    "Key",
    "Stamped",
    "encode_json",
    "key_of",
    "serve_answers",
]

ANSWER_CACHE_ENTRIES: Final = 64
"""Answers kept at most (distinct paths and query strings)."""
ANSWER_CACHE_BYTES: Final = 32 * 1024 * 1024
"""Bytes of kept answers at most."""

Key = tuple[str, bytes]
"""A request's ``(path, query_string)`` as the ASGI scope gives them."""

_JSON_HEADERS: Final = b"application/json"


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


@frozen
class AnswerCacheStatistics:
    """Counts since start, and what is kept now."""

    hits: int
    """Requests :func:`serve_answers` answered from the cache."""
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

    async def answer(self, key: Key, produce: Callable[[], Awaitable[Any]]) -> bytes:
        """The JSON bytes of ``await produce()`` (one read of the database), kept under
        ``key`` with the stamp taken before it ran."""
        stamp = await self._db.stamp()
        body = encode_json(await produce())
        self._renders += 1
        self._keep(key, Answer(stamp, body))
        return body

    async def fresh(self, key: Key) -> bytes | None:
        """The bytes kept under ``key`` if the data is unchanged since they were read."""
        kept = self._answers.get(key)
        if kept is None or kept.stamp != await self._db.stamp():
            return None
        self._answers.move_to_end(key)
        self._hits += 1
        return kept.body

    def statistics(self) -> AnswerCacheStatistics:
        """A snapshot of the counts and what is kept."""
        return AnswerCacheStatistics(
            hits=self._hits, renders=self._renders, entries=len(self._answers), bytes=self._bytes
        )

    def _keep(self, key: Key, answer: Answer) -> None:
        old = self._answers.pop(key, None)
        if old is not None:
            self._bytes -= len(old.body)
        if len(answer.body) > self._max_bytes:
            return
        self._answers[key] = answer
        self._bytes += len(answer.body)
        while len(self._answers) > self._max_entries or self._bytes > self._max_bytes:
            _, dropped = self._answers.popitem(last=False)
            self._bytes -= len(dropped.body)


def _plain_get(scope: Mapping[str, Any], headers_limit: int) -> bool:
    """A ``GET`` without a body whose head is within ``headers_limit`` bytes."""
    if scope["type"] != "http" or scope["method"] != "GET":
        return False
    size = 0
    for name, value in scope["headers"]:
        size += len(name) + len(value)
        if name == b"transfer-encoding" or (name == b"content-length" and value != b"0"):
            return False
    return size <= headers_limit


def serve_answers(app: ASGIApp, cache: AnswerCache, *, headers_limit: int) -> ASGIApp:
    """``app`` behind the cache's front (module doc)."""

    async def front(scope: Any, receive: Any, send: Any) -> None:
        if _plain_get(scope, headers_limit):
            body = await cache.fresh(key_of(scope))
            if body is not None:
                headers = [
                    (b"content-type", _JSON_HEADERS),
                    (b"content-length", str(len(body)).encode()),
                ]
                await send({"type": "http.response.start", "status": 200, "headers": headers})
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return front
