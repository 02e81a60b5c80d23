"""The answer cache's front: kept answers served before Quart, one render per view at a time.

:func:`serve_answers` wraps the app's ASGI callable (Quart's ``app.asgi_app``). A ``GET``
without a body, with its head within :data:`~hypertrain.coordinator.web.http.HEADERS_LIMIT`,
whose key (:func:`~hypertrain.coordinator.web.answers.key_of`) holds an answer kept with the
database's stamp now, is answered from those bytes (200, ``content-type`` and
``content-length``, the headers the route sends) without entering Quart; to a client whose
``accept-encoding`` accepts ``gzip`` (a ``q`` of 0 refuses it) a large answer goes compressed
(:meth:`~hypertrain.coordinator.web.answers.AnswerCache.lookup_encoded`), with
``content-encoding: gzip`` and ``vary: accept-encoding``. Any other request goes
to the app unchanged, which answers it as it always would (errors, 431, a body to read, the
first request of a key).

Single flight: every commit changes the stamp, and a view takes a while to render (the round
view at 256 miners about 20 ms), so without more every request that arrives during a render
would render the same view again. A plain ``GET`` that misses on a key the cache knows (one
that holds an answer, only stale: its route renders into the cache) therefore *leads* a render
or waits for one:

- the first such request at a stamp registers a flight under ``(key, stamp)`` and goes to the
  app; the flight ends as soon as an answer is kept under ``key`` with that ``stamp``, and in
  any case when the leader's request ends (answered, failed or cancelled: a ``finally``);
- a request that finds a flight at its ``(key, stamp)`` waits for it to end, then starts over:
  takes the stamp again and answers from the cache if the answer kept is fresh at it, else
  waits for the flight at the new stamp, or leads one;
- the waits of one request add up to at most :data:`RENDER_WAIT` seconds (Trio clock); past
  them it goes to the app itself, as without this front.

No stale answers: a request is answered from the cache only by
:meth:`~hypertrain.coordinator.web.answers.AnswerCache.lookup` with a stamp it took after its
last wait, so a commit known before that stamp was taken is never answered with an older
render. A leader cancelled mid-render (its client gone) ends its flight in its ``finally``:
its waiters wake and one of them leads the next render. A key the cache does not know (a
route that does not cache, an error, a first request) never waits.
"""

from __future__ import annotations

from typing import Any, Final

import trio

from hypertrain.coordinator.web.answers import AnswerCache, Key, key_of
from hypertrain.store import Stamp
from nurseries import ASGIApp

__all__ = ["RENDER_WAIT", "serve_answers"]

RENDER_WAIT: Final = 2.0
"""Seconds (Trio clock) a request waits in all for renders led by other requests."""

_JSON: Final = b"application/json"

_Flight = tuple[Key, Stamp]


def _plain_get(scope: Any, headers_limit: int) -> bool:
    """A ``GET`` without a body whose head is within ``headers_limit`` bytes."""
    if scope["type"] != "http" or scope["method"] != "GET":
        return False
    size = 0
    for name, value in scope["headers"]:
        size += len(name) + len(value)
        if name == b"transfer-encoding" or (name == b"content-length" and value != b"0"):
            return False
    return size <= headers_limit


def _accepts_gzip(scope: Any) -> bool:
    """Whether the request's ``accept-encoding`` names ``gzip`` with a ``q`` above 0."""
    for name, value in scope["headers"]:
        if name != b"accept-encoding":
            continue
        for coding in bytes(value).lower().split(b","):
            token, _, params = coding.partition(b";")
            if token.strip() != b"gzip":
                continue
            q = params.strip()
            if not q.startswith(b"q="):
                return True
            try:
                return float(q[2:]) > 0
            except ValueError:
                return False
    return False


async def _send_answer(send: Any, body: bytes, gzipped: bool) -> None:
    headers = [(b"content-type", _JSON), (b"content-length", str(len(body)).encode())]
    if gzipped:
        headers += [(b"content-encoding", b"gzip"), (b"vary", b"accept-encoding")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class _Flights:
    """The renders in progress, by key and the stamp their leader missed at."""

    def __init__(self) -> None:
        self._flights: dict[_Flight, trio.Event] = {}

    def waiting(self, flight: _Flight) -> trio.Event | None:
        """The end of the flight in progress at ``flight``, if any."""
        return self._flights.get(flight)

    def lead(self, flight: _Flight) -> trio.Event:
        """Register the caller's render at ``flight``."""
        done = self._flights[flight] = trio.Event()
        return done

    def end(self, flight: _Flight, done: trio.Event | None = None) -> None:
        """End the flight at ``flight`` (only if it is ``done``'s, when given) and wake its
        waiters."""
        current = self._flights.get(flight)
        if current is not None and (done is None or current is done):
            del self._flights[flight]
            current.set()
        if done is not None:
            done.set()


def serve_answers(
    app: ASGIApp, cache: AnswerCache, *, headers_limit: int, render_wait: float = RENDER_WAIT
) -> ASGIApp:
    """``app`` behind the cache's front (module doc)."""
    flights = _Flights()
    cache.observe(lambda key, stamp: flights.end((key, stamp)))

    async def lead(flight: _Flight, scope: Any, receive: Any, send: Any) -> None:
        done = flights.lead(flight)
        try:
            await app(scope, receive, send)
        finally:
            flights.end(flight, done)

    async def front(scope: Any, receive: Any, send: Any) -> None:
        if not _plain_get(scope, headers_limit):
            await app(scope, receive, send)
            return
        key = key_of(scope)
        accepts_gzip = _accepts_gzip(scope)
        deadline = trio.current_time() + render_wait
        while True:
            stamp = await cache.stamp()
            found = cache.lookup_encoded(key, stamp, accepts_gzip=accepts_gzip)
            if found is not None:
                await _send_answer(send, *found)
                return
            if not cache.known(key):
                break
            done = flights.waiting((key, stamp))
            if done is None:
                await lead((key, stamp), scope, receive, send)
                return
            with trio.move_on_at(deadline) as waited:
                await done.wait()
            if waited.cancelled_caught:
                break
        await app(scope, receive, send)

    return front
