"""The coordinator's answers as the node's client reads them (:mod:`hypertrain.node.client`).

- **Capped reads**: a JSON answer is read up to :data:`MAX_ANSWER_BYTES`; a longer one is
  :class:`Refused`; a body that is not JSON reads as None.
- **Decoded or refused**: a body that does not decode as the expected class is :class:`Refused`
  naming the field; a lease answer carried by a result's answer that does not decode is
  :class:`BadOffer`, as a value (its job is abandoned, the result's answer stands); a 403 that
  is a :class:`~hypertrain.compute.wire.DisabledAnswer` is :class:`Disabled`.
- **Errors say why, never the key**: a 5xx is ``ServerError`` (retryable where the call
  allows it, after its ``Retry-After``); the last network error or 5xx becomes
  :class:`Unreachable` with a one-line reason that never holds the request.
- **Result answers**: :class:`PostAnswer`, the coordinator's 200, 410 or 409 to a result.
"""

from __future__ import annotations

import json
from typing import Any, Final, TypeVar

import attrs
import httpx

from hypertrain.compute.wire import (
    DisabledAnswer,
    ErrorAnswer,
    LeaseAnswer,
    ResultAnswer,
    ResultCounted,
    ResultJudged,
)
from hypertrain.node.errors import BadOffer, Disabled, Refused, Unreachable
from hypertrain.protocol.converter import structure
from hypertrain.protocol.errors import SchemaError
from nurseries import parse_retry_after

__all__ = [
    "MAX_ANSWER_BYTES",
    "PostAnswer",
    "RawAnswer",
    "ServerError",
    "carried_lease",
    "decoded_as",
    "detail_of",
    "failure_text",
    "raise_if_disabled",
    "read_json_capped",
    "retry_after_of",
    "unreachable_error",
]

MAX_ANSWER_BYTES: Final = 1 << 20
"""Bytes of a JSON answer the client reads; a longer one is :class:`Refused`."""

T = TypeVar("T")


@attrs.frozen
class PostAnswer:
    """The coordinator's answer to a result: 200 (``answer``, whose ``status`` is such as
    ``counted``), 410 (late, counts nothing) or 409 (a different answer was posted first), with
    the coordinator's ``detail``."""

    http_status: int
    answer: ResultAnswer | None
    detail: str = ""
    next: LeaseAnswer | BadOffer | None = None
    """The lease asked with the result (``ResultPost.next``): its answer, :class:`BadOffer`
    when its job did not decode, None when the answer carried no lease (the node leases the
    plain way)."""

    @property
    def accepted(self) -> bool:
        return self.http_status == 200

    @property
    def status(self) -> str | None:
        return None if self.answer is None else self.answer.status

    @property
    def credits(self) -> int | None:
        """The node's compute credits after this answer, when the coordinator said."""
        if isinstance(self.answer, ResultJudged | ResultCounted):
            return self.answer.compute_credits
        return None

    def describe(self) -> str:
        if self.http_status == 200:
            earned = "" if self.credits is None else f", {self.credits} credits earned"
            return (self.status or "accepted") + earned
        if self.http_status == 410:
            return f"late, not counted ({self.detail})"
        return f"refused: {self.detail}"


def detail_of(body: Any, fallback: str) -> str:
    """The one-line ``detail`` of an :class:`ErrorAnswer`, else ``fallback``."""
    try:
        detail = structure(ErrorAnswer, body).detail
    except SchemaError:
        return fallback
    return " ".join(detail.split())[:300]


def decoded_as(cls: type[T], status: int, body: Any) -> T:
    """``body`` as a ``cls``; :class:`Refused` naming the field when it is not one."""
    try:
        return structure(cls, body)
    except SchemaError as e:
        raise Refused(status, f"unreadable answer: {e.detail}") from e


def carried_lease(carried: object) -> LeaseAnswer | BadOffer:
    """The lease answer a result's answer carried; :class:`BadOffer` when it does not decode
    (its job is abandoned, the result's answer stands)."""
    try:
        return structure(LeaseAnswer, carried)
    except SchemaError as e:
        return BadOffer(e.detail)


def raise_if_disabled(body: Any) -> None:
    """:class:`Disabled` when a 403 body is a :class:`DisabledAnswer` (else the caller's
    ordinary 403 handling)."""
    try:
        disabled = structure(DisabledAnswer, body)
    except SchemaError:
        return
    detail = " ".join(disabled.detail.split())[:300]
    raise Disabled(detail, disabled.reenable_at_ms, disabled.reenable_at)


async def read_json_capped(response: httpx.Response) -> Any:
    """The answer's JSON, read up to :data:`MAX_ANSWER_BYTES` (None when not JSON)."""
    raw = bytearray()
    async for chunk in response.aiter_bytes():
        raw += chunk
        if len(raw) > MAX_ANSWER_BYTES:
            raise Refused(response.status_code, "answer too large")
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None


@attrs.frozen
class RawAnswer:
    """One answer: its status, decoded JSON body (None when not JSON) and ``Retry-After``."""

    status: int
    body: Any
    retry_after: float | None

    @classmethod
    def of(cls, response: httpx.Response, body: Any) -> RawAnswer:
        return cls(
            response.status_code, body, parse_retry_after(response.headers.get("retry-after"))
        )


class ServerError(Exception):
    """A 5xx answer (retryable where the call allows it, after its ``Retry-After``)."""

    def __init__(self, status: int, detail: str, retry_after: float | None) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.detail = detail
        self.retry_after = retry_after


def retry_after_of(error: Exception) -> float:
    """The least wait before another try after ``error``: a 5xx's ``Retry-After``, else 0."""
    return (error.retry_after or 0.0) if isinstance(error, ServerError) else 0.0


def unreachable_error(error: Exception) -> Unreachable:
    """The :class:`Unreachable` of a last network error or 5xx (its ``Retry-After`` kept)."""
    retry_after = error.retry_after if isinstance(error, ServerError) else None
    return Unreachable(failure_text(error), retry_after=retry_after)


def failure_text(exc: BaseException) -> str:
    """A one-line reason without the request (never a header, so never the key)."""
    if isinstance(exc, ServerError):
        return str(exc)
    text = " ".join(str(exc).split())[:200]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
