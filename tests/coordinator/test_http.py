"""Request bodies (413 before parsing, strict JSON) and the JSON error mapping."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from quart import Response
from quart_trio import QuartTrio

from hypertrain.coordinator.context import Coordinator
from hypertrain.coordinator.web.http import json_response, read_json
from tests.coordinator.harness import open_harness

LIMIT = 100


def _echo_routes(app: QuartTrio, ctx: Coordinator) -> None:
    async def echo() -> Response:
        return json_response({"got": await read_json(ctx)})

    async def boom() -> Response:
        raise RuntimeError("kaboom")

    async def not_a_response() -> Response:
        return object()  # type: ignore[return-value]  # Quart fails making the response

    app.add_url_rule("/t/echo", "t.echo", echo, methods=["POST"])
    app.add_url_rule("/t/boom", "t.boom", boom, methods=["GET"])
    app.add_url_rule("/t/late", "t.late", not_a_response, methods=["GET"])


async def _chunks(total: int, size: int = 16) -> AsyncIterator[bytes]:
    sent = 0
    while sent < total:
        piece = min(size, total - sent)
        yield b" " * piece
        sent += piece


async def test_body_within_the_limit_is_parsed(tmp_path: Path) -> None:
    async with open_harness(tmp_path, extra_routes=_echo_routes, body_limit=LIMIT) as h:
        response = await h.client.post("/t/echo", content=b'{"a": [1, "x"]}')
        assert (response.status_code, response.json()) == (200, {"got": {"a": [1, "x"]}})
        exactly = b'"' + b"x" * (LIMIT - 2) + b'"'
        assert (await h.client.post("/t/echo", content=exactly)).status_code == 200


async def test_declared_length_over_the_limit_is_413_before_parsing(tmp_path: Path) -> None:
    async with open_harness(tmp_path, extra_routes=_echo_routes, body_limit=LIMIT) as h:
        # Not JSON at all: a parser would say 400, the limit says 413 first.
        response = await h.client.post("/t/echo", content=b"{" * (LIMIT + 1))
        assert response.status_code == 413
        assert response.json() == {
            "detail": f"request body over the limit of {LIMIT} bytes (got {LIMIT + 1} bytes)"
        }


async def test_chunked_body_over_the_limit_is_413(tmp_path: Path) -> None:
    async with open_harness(tmp_path, extra_routes=_echo_routes, body_limit=LIMIT) as h:
        response = await h.client.post("/t/echo", content=_chunks(LIMIT * 3))
        assert response.status_code == 413
        assert "over the limit of 100 bytes" in response.json()["detail"]
        ok = await h.client.post("/t/echo", content=_chunks(LIMIT - 2))
        assert ok.status_code == 400  # within the limit: parsed, and blank JSON is malformed


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        (b'{"a": 1, "a": 2}', "JSON: duplicate key 'a'"),
        (b'{"a": NaN}', "JSON: NaN is not allowed"),
        (b'{"a": Infinity}', "JSON: Infinity is not allowed"),
        (b'{"a": "\xff"}', "JSON: not valid UTF-8 at byte 7"),
        (b'{"a": ', "JSON: Expecting value at line 1 column 7"),
    ],
)
async def test_malformed_json_is_400(tmp_path: Path, body: bytes, detail: str) -> None:
    async with open_harness(tmp_path, extra_routes=_echo_routes) as h:
        response = await h.client.post("/t/echo", content=body)
        assert (response.status_code, response.json()) == (400, {"detail": detail})


async def test_unknown_route_and_wrong_method_answer_json(tmp_path: Path) -> None:
    async with open_harness(tmp_path) as h:
        missing = await h.client.get("/v1/nope")
        assert missing.status_code == 404
        assert missing.headers["content-type"] == "application/json"
        assert missing.json() == {"detail": "not found: GET /v1/nope"}
        wrong = await h.client.delete("/version")
        assert wrong.status_code == 405
        assert wrong.json() == {"detail": "method DELETE not allowed on /version"}
        assert "GET" in wrong.headers["allow"]


async def test_unexpected_errors_are_500_json_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with open_harness(tmp_path, extra_routes=_echo_routes) as h:
        with caplog.at_level(logging.ERROR, logger="hypertrain.coordinator.web.http"):
            response = await h.client.get("/t/boom")
        assert (response.status_code, response.json()) == (500, {"detail": "internal error"})
        record = next(r for r in caplog.records if r.name == "hypertrain.coordinator.web.http")
        assert "GET /t/boom" in record.getMessage()
        assert record.exc_info is not None
        assert "kaboom" in str(record.exc_info[1])
        # The service lives on.
        assert (await h.client.get("/version")).status_code == 200


async def test_an_error_after_the_handler_returned_is_the_same_500(tmp_path: Path) -> None:
    """Quart catches this one itself (making the response): it still answers our JSON 500
    instead of its own page, and the connection serves the next request."""
    async with open_harness(tmp_path, extra_routes=_echo_routes) as h:
        response = await h.client.get("/t/late")
        assert (response.status_code, response.json()) == (500, {"detail": "internal error"})
        assert (await h.client.get("/version")).status_code == 200
