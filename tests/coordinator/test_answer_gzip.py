"""Kept answers go gzip-compressed to clients that accept it (issue 17 goal 6): a large view
(the round view at 256 miners is about 554 KB) is compressed once per answer kept, sent with
``content-encoding: gzip`` and ``vary: accept-encoding``, and decompresses to exactly the bytes
an identity request gets; a client that does not accept gzip, or refuses it with ``q=0``, and a
small answer get the bytes as they are; after a commit the compressed form is of the new
render, never the old one. Over a fake app whose route renders through the cache."""

from __future__ import annotations

import gzip
from typing import Any

import pytest

from hypertrain.coordinator.web.answers import GZIP_MIN_BYTES, AnswerCache, key_of
from hypertrain.coordinator.web.front import serve_answers
from hypertrain.store import Stamp

PATH = "/v1/runs/r/rounds/0"


class _Views:
    """A front over one route that renders ``{"version", "items"}`` (``size`` items)."""

    def __init__(self, size: int) -> None:
        self.version = 0
        self.size = size
        self.cache = AnswerCache(self)
        self.front = serve_answers(self._app, self.cache, headers_limit=16 * 1024)

    async def stamp(self) -> Stamp:
        return self.version, 0

    async def _app(self, scope: Any, receive: Any, send: Any) -> None:
        async def produce() -> dict[str, Any]:
            return {"version": self.version, "items": list(range(self.size))}

        body = await self.cache.answer(key_of(scope), produce)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})

    async def get(self, accept: bytes | None = None) -> tuple[dict[bytes, bytes], bytes]:
        """One ``GET``: the answer's headers and body."""
        headers = [] if accept is None else [(b"accept-encoding", accept)]
        scope = {"type": "http", "method": "GET", "path": PATH, "query_string": b""}
        scope["headers"] = headers
        start: dict[str, Any] = {}
        body: list[bytes] = []

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
            else:
                body.append(message["body"])

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        await self.front(scope, receive, send)
        return dict(start["headers"]), b"".join(body)


async def test_a_client_that_accepts_gzip_gets_a_large_answer_compressed_once() -> None:
    views = _Views(size=20_000)
    _, rendered = await views.get()  # the first request renders it (the route, uncompressed)
    assert len(rendered) >= GZIP_MIN_BYTES
    identity_headers, identity = await views.get(b"identity")
    kept = views.cache.statistics().bytes
    headers, compressed = await views.get(b"br, gzip;q=0.8")
    again = await views.get(b"gzip")

    assert identity == rendered
    assert b"content-encoding" not in identity_headers
    assert headers[b"content-encoding"] == b"gzip"
    assert headers[b"vary"] == b"accept-encoding"
    assert headers[b"content-length"] == str(len(compressed)).encode()
    assert gzip.decompress(compressed) == rendered
    assert len(compressed) < len(rendered) // 2
    assert again[1] == compressed  # kept: compressed once, the same bytes
    assert views.cache.statistics().bytes == kept + len(compressed)
    assert views.cache.statistics().renders == 1


@pytest.mark.parametrize("accept", [None, b"gzip;q=0", b"br, deflate", b"gzip;q=nonsense"])
async def test_no_gzip_unless_accepted(accept: bytes | None) -> None:
    views = _Views(size=20_000)
    _, rendered = await views.get()
    headers, body = await views.get(accept)
    assert body == rendered
    assert b"content-encoding" not in headers


async def test_a_small_answer_goes_as_it_is() -> None:
    views = _Views(size=10)
    _, rendered = await views.get()
    headers, body = await views.get(b"gzip")
    assert len(rendered) < GZIP_MIN_BYTES
    assert (body, b"content-encoding" in headers) == (rendered, False)


async def test_after_a_commit_the_compressed_answer_is_the_new_render() -> None:
    views = _Views(size=20_000)
    await views.get()
    await views.get(b"gzip")
    views.version += 1  # a commit: the next request renders again
    _, rendered = await views.get(b"gzip")  # the route's render, uncompressed
    headers, compressed = await views.get(b"gzip")
    assert headers[b"content-encoding"] == b"gzip"
    assert gzip.decompress(compressed) == rendered
    assert rendered.startswith(b'{"version":1,')
