"""HTTP plumbing shared by the route modules: request bodies, JSON answers, error mapping.

- :func:`read_json`: the request body, refused with 413 *before* parsing when over the
  settings' ``body_limit`` (the ``Content-Length`` header is checked first, then the bytes
  actually streamed are counted, so chunked uploads are bounded too), then parsed with the
  strict parser (:func:`hypertrain.protocol.jcs.parse_json`: duplicate keys, NaN/Infinity and
  bad UTF-8 are 400).
- :func:`json_response`: compact JSON, no sorting (fast; the wire codec decides field order).
- :func:`cached_json_response`: the same for a public read view, through the answer cache
  (:mod:`hypertrain.coordinator.web.answers`), which then answers the same request in front
  of Quart until the data changes.
- :func:`object_response`: a stored object streamed with its length.
- :func:`install_converters`: the ``u53`` path converter, the only integer converter routes
  use (``<u53:w>``): any path segment where it stands is read by
  :func:`~hypertrain.protocol.validators.int_param` (1 to 16 ASCII digits, in [0, 2^53-1]),
  so anything else there (``abc``, ``-1``, 40 digits, ``2**63``) is a 400 naming the
  parameter before the handler runs, and no out-of-range integer reaches SQLite. (Werkzeug
  lets only HTTP exceptions out of URL matching: :class:`PathParamError` carries the
  Malformed.)
- :func:`install_error_handlers` also bounds the request head: headers over
  :data:`HEADERS_LIMIT` bytes in all are a 431 before any handler runs (hypercorn's own 16 KiB
  bound only fires while a head arrives in pieces).
- :func:`install_error_handlers`: every :class:`ProtocolError` answers its status with
  ``{"detail": ...}`` and its :meth:`~ProtocolError.headers` (a 429's ``Retry-After``);
  Quart's own 404/405/413/... answer JSON ``{"detail": ...}`` too; any other exception is
  logged with its traceback and answers 500 ``{"detail": "internal error"}``
  (so does one Quart catches after the handler returned, in ``after_request`` or while making
  the response: Quart logs it and hands a 500 here). ``trio.Cancelled`` and other
  ``BaseException``s are never caught. This is the only place errors become answers; once a
  streamed body has started (an object download), a failure can only end the connection.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any, Final

import trio
from quart import Response, request
from quart.routing import QuartRule
from quart_trio import QuartTrio
from werkzeug.exceptions import BadRequest, HTTPException, RequestEntityTooLarge
from werkzeug.routing import BaseConverter

from hypertrain.coordinator.context import Coordinator
from hypertrain.coordinator.web.answers import AnswerCache, encode_json, key_of
from hypertrain.protocol.errors import HeadersTooLarge, Malformed, PayloadTooLarge, ProtocolError
from hypertrain.protocol.jcs import parse_json
from hypertrain.protocol.validators import int_param, u_int
from hypertrain.store import ObjectStore

__all__ = [
    "BODY_TIMEOUT",
    "HEADERS_LIMIT",
    "INTERNAL_DETAIL",
    "JSON_CONTENT_TYPE",
    "RETRY_AFTER_STOPPING",
    "STOPPING_DETAIL",
    "PathParamError",
    "U53Converter",
    "cached_json_response",
    "check_header_size",
    "install_converters",
    "install_error_handlers",
    "json_response",
    "object_response",
    "read_body",
    "read_json",
    "stopping_response",
    "too_large",
    "too_slow",
]

log = logging.getLogger(__name__)

BODY_TIMEOUT: Final = 60.0
"""Seconds (Trio clock) a client may take to send a request body."""
RETRY_AFTER_STOPPING: Final = 5
"""``Retry-After`` seconds sent with 503 while the coordinator shuts down."""
JSON_CONTENT_TYPE: Final = "application/json"
HEADERS_LIMIT: Final = 16 * 1024
"""Bytes of request header names and values, in all, that a request may carry."""
INTERNAL_DETAIL: Final = "internal error"
"""The ``detail`` of every 500: what went wrong is in the log, never in the answer."""


def json_response(obj: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """``obj`` as compact JSON with ``status``."""
    body = encode_json(obj)
    return Response(body, status=status, content_type=JSON_CONTENT_TYPE, headers=headers)


async def cached_json_response(
    answers: AnswerCache, produce: Callable[[], Awaitable[Any]]
) -> Response:
    """``await produce()`` as a 200 JSON answer, kept by ``answers`` under this request's path
    and query (only for a view that is a function of them and the database; see
    :mod:`~hypertrain.coordinator.web.answers`)."""
    body = await answers.answer(key_of(request.scope), produce)
    return Response(body, content_type=JSON_CONTENT_TYPE)


def object_response(objects: ObjectStore, sha256: str) -> Response:
    """A stored object's bytes, streamed (the store verifies the hash before the first chunk
    and again at the end), with its ``Content-Length`` and no response timeout."""
    size = objects.size_of(sha256)

    async def chunks() -> AsyncIterator[bytes]:
        async with objects.open_read(sha256) as reader:
            async for chunk in reader:
                yield chunk

    response = Response(chunks(), content_type="application/octet-stream")
    response.headers["Content-Length"] = str(size)
    response.timeout = None
    return response


STOPPING_DETAIL: Final = {"detail": "shutting down"}
"""The 503 body of a request refused because the coordinator shuts down."""


def stopping_response() -> Response:
    """503 ``{"detail": "shutting down"}`` with ``Retry-After``, for long polls and streams."""
    return json_response(STOPPING_DETAIL, 503, headers={"Retry-After": str(RETRY_AFTER_STOPPING)})


def too_large(limit: int, size: int | None) -> PayloadTooLarge:
    """The 413 of a body over ``limit`` (``size`` declared, or None: more arrived)."""
    got = "more" if size is None else f"{size} bytes"
    return PayloadTooLarge(f"request body over the limit of {limit} bytes (got {got})")


def too_slow() -> Malformed:
    """The 400 of a body that did not arrive within :data:`BODY_TIMEOUT`."""
    return Malformed(f"request body not received within {BODY_TIMEOUT:g} s")


def check_header_size(pairs: Iterable[tuple[str | bytes, str | bytes]]) -> None:
    """:class:`HeadersTooLarge` (431) when the names and values add up past
    :data:`HEADERS_LIMIT`."""
    if sum(len(name) + len(value) for name, value in pairs) > HEADERS_LIMIT:
        raise HeadersTooLarge(f"request headers over the limit of {HEADERS_LIMIT} bytes")


async def read_body(limit: int) -> bytes:
    """The current request's body; :class:`PayloadTooLarge` past ``limit`` bytes.

    Checks ``Content-Length`` before reading anything and counts the streamed bytes (a chunked
    body has no length), stopping at the first byte over. :class:`Malformed` when the body does
    not arrive within :data:`BODY_TIMEOUT`.
    """
    declared = request.content_length
    if declared is not None and declared > limit:
        raise too_large(limit, declared)
    parts: list[bytes] = []
    size = 0
    try:
        with trio.fail_after(BODY_TIMEOUT):
            async for chunk in request.body:
                size += len(chunk)
                if size > limit:
                    raise too_large(limit, None)
                parts.append(chunk)
    except RequestEntityTooLarge:  # Quart's own bound (MAX_CONTENT_LENGTH) fired first
        raise too_large(limit, None) from None
    except trio.TooSlowError:
        raise too_slow() from None
    return b"".join(parts)


async def read_json(ctx: Coordinator) -> Any:
    """The current request's body parsed as strict JSON, bounded by ``body_limit`` (413/400)."""
    return parse_json(await read_body(ctx.settings.body_limit))


class PathParamError(BadRequest):
    """A path segment its converter refused; answered as :attr:`error` (a 400 naming it)."""

    def __init__(self, error: Malformed) -> None:
        super().__init__(error.detail)
        self.error = error


class U53Converter(BaseConverter):
    """``<u53:name>``: an int in [0, 2^53-1] (module doc). The regex takes any segment so that
    a wrong one is a 400 naming the parameter, not a 404."""

    name = "path parameter"
    """The parameter's name, set by :class:`_NamingRule` (werkzeug does not pass it)."""

    def to_python(self, value: str) -> int:
        try:
            return int_param(self.name, value, u_int)
        except Malformed as e:
            raise PathParamError(e) from e

    def to_url(self, value: Any) -> str:
        return str(int(value))


class _NamingRule(QuartRule):
    """Tells each :class:`U53Converter` the name of the parameter it reads."""

    def get_converter(
        self,
        variable_name: str,
        converter_name: str,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
    ) -> BaseConverter:
        converter = super().get_converter(variable_name, converter_name, args, kwargs)
        if isinstance(converter, U53Converter):
            converter.name = variable_name
        return converter


def install_converters(app: QuartTrio) -> None:
    """Add the ``u53`` converter (module doc); call before adding routes."""
    app.url_map.converters["u53"] = U53Converter
    app.url_rule_class = _NamingRule


async def _protocol_error(error: ProtocolError) -> Response:
    return json_response(error.to_json(), error.status, headers=error.headers() or None)


async def _http_exception(error: HTTPException) -> Response:
    if isinstance(error, PathParamError):
        return await _protocol_error(error.error)
    status = error.code or 500
    headers = {
        name: value
        for name, value in error.get_headers()
        if name.lower() in ("allow", "retry-after")
    }
    detail = f"{status} {error.name}"
    if status >= 500 and status != 503:  # Quart's 500 for an error past the handler (module doc)
        detail = INTERNAL_DETAIL
    elif status == 404:
        detail = f"not found: {request.method} {request.path}"
    elif status == 405:
        detail = f"method {request.method} not allowed on {request.path}"
    return json_response({"detail": detail}, status, headers=headers)


async def _unexpected(error: Exception) -> Response:
    log.error("unhandled error in %s %s", request.method, request.path, exc_info=error)
    return json_response({"detail": INTERNAL_DETAIL}, 500)


async def _bounded_headers() -> None:
    check_header_size(request.headers.items())


def install_error_handlers(app: QuartTrio) -> None:
    """Map errors to JSON answers and bound the head, as described in the module docstring."""
    app.before_request(_bounded_headers)
    app.register_error_handler(ProtocolError, _protocol_error)
    app.register_error_handler(HTTPException, _http_exception)
    app.register_error_handler(Exception, _unexpected)
