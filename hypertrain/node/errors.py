"""The errors of hypertrain-node: one root, :class:`NodeError`, for everything it raises on purpose.

Each error's ``str()`` is one line for the volunteer and never holds the node key; the cause
(a network error, a refused JSON body, an ``OSError``) is kept as ``__cause__``. The command
line (:mod:`hypertrain.node.main`) maps the tree to exit statuses::

    NodeError                   root of everything the node raises on purpose
    +-- IdentityError           the coordinator URL or the key cannot be used (exit 2)
    +-- NodeFileError           node.json or the node directory is unusable (exit 2)
    +-- NodeFatal               the node cannot go on: register refused, key unknown (exit 1)
    +-- BadOffer                the lease answer's job is malformed or hostile: abandoned
    +-- InputMismatch           an input's bytes are not what the job declared: abandoned
    +-- NodeClientError         a compute route gave no usable answer
        +-- Unreachable         network failure, or 5xx after the retries
        +-- Unauthorized        401: the coordinator does not know this key
        +-- Disabled            the lease's 403: disabled (strikes) until a given time
        +-- Refused             any other non-2xx answer, or an unreadable one

``trio.Cancelled``, ``KeyboardInterrupt`` and bugs are not in the tree and are never caught as
if they were.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "BadOffer",
    "Disabled",
    "IdentityError",
    "InputMismatch",
    "NodeClientError",
    "NodeError",
    "NodeFatal",
    "NodeFileError",
    "Refused",
    "Unauthorized",
    "Unreachable",
    "register_refused",
]


class NodeError(Exception):
    """Root of the errors hypertrain-node raises on purpose (module doc)."""


class IdentityError(NodeError):
    """The URL or key cannot be used; ``str(e)`` is one line for the volunteer (exit 2)."""


class NodeFileError(NodeError):
    """node.json or the node directory is unusable; the message says why (exit 2)."""


class NodeFatal(NodeError):
    """The node cannot go on (register refused, key unknown); exit status 1."""


class BadOffer(NodeError):
    """The lease answer's job is malformed or hostile; ``str(e)`` says why, in one line."""


class InputMismatch(NodeError):
    """An input's bytes are not what the job declared (size or sha256); never used."""


class NodeClientError(NodeError):
    """A compute route did not give a usable answer; ``retry_after`` is the seconds of the
    answer's ``Retry-After`` header (None: no such answer or header), the least wait before
    the node asks again."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class Unreachable(NodeClientError):
    """The coordinator could not be reached, or answered 5xx, after the retries."""


class Unauthorized(NodeClientError):
    """401: the coordinator does not know this key."""


class Disabled(NodeClientError):
    """The lease's 403: the node is disabled (strikes) until ``reenable_at_ms`` (unix ms)."""

    def __init__(self, detail: str, reenable_at_ms: int, reenable_at: str) -> None:
        super().__init__(detail)
        self.detail = detail
        self.reenable_at_ms = reenable_at_ms
        self.reenable_at = reenable_at


class Refused(NodeClientError):
    """Any other non-2xx answer (or an unreadable one): ``status`` and the ``detail``."""

    def __init__(self, status: int, detail: str, *, retry_after: float | None = None) -> None:
        super().__init__(f"HTTP {status}: {detail}", retry_after=retry_after)
        self.status = status
        self.detail = detail


TOO_MANY_MINTS: Final = 429
"""The register answer of a network that minted its limit of keys this minute."""


def register_refused(error: Unauthorized | Refused, url: str) -> Unreachable | NodeFatal:
    """What a refused register at ``url`` means: a mint answered 429 (its network minted its
    keys for this minute) is retried like an unreachable coordinator, after its
    ``Retry-After``; any other refusal is fatal."""
    if isinstance(error, Refused) and error.status == TOO_MANY_MINTS:
        return Unreachable(str(error), retry_after=error.retry_after)
    return NodeFatal(f"register refused by {url}: {error}")
