"""The error hierarchy of hypertrain and its HTTP mapping (spec/protocol.md sections 2.3 and 9).

Every error a peer can cause derives from :class:`ProtocolError` and carries the HTTP status its
route answers with and a ``detail`` that names the problem::

    HypertrainError                     root of everything we raise on purpose
    ├── KeyfileError                    a seed/key file is missing, unsafe or malformed (CLI exit 2)
    └── ProtocolError            400    a peer sent something we refuse
        ├── Malformed            400    not the right shape: bad JSON, wrong keys, wrong types
        │   ├── CanonicalJSONError 400  not representable in RFC 8785 canonical JSON
        │   └── SchemaError      400    a message body fails its type's validation (names the field)
        ├── RunMismatch          400    signed for another run
        ├── Expired              400    now_round > exp_drand
        ├── SignatureError       401    the signature does not verify
        ├── AuthError            401    a missing or wrong bearer token
        ├── UnauthorizedSigner   403    a valid signature by a signer this type does not allow
        ├── Forbidden            403    known caller, not allowed (not your copy, node disabled)
        ├── NotFound             404    unknown run, round, job or object
        ├── Conflict             409    wrong state, window closed, lease not current
        │   └── ReplayError      409    this (run, w, type, signer, subject) was already accepted
        ├── PayloadTooLarge      413    body over the size limit
        ├── TooManyRequests      429    over a rate limit (``Retry-After`` says when to retry)
        ├── HeadersTooLarge      431    request headers over the size limit
        ├── ContractMismatch     422    well-formed but contradicts the run's contract
        └── NotConfigured        503    the server lacks what this route needs (token, key, ...)

``Cancelled`` and other exceptions outside this tree are never caught by route error mapping.
"""

from __future__ import annotations

from typing import ClassVar

import attrs

__all__ = [
    "AuthError",
    "CanonicalJSONError",
    "Conflict",
    "ContractMismatch",
    "ErrorBody",
    "Expired",
    "Forbidden",
    "HeadersTooLarge",
    "HypertrainError",
    "KeyfileError",
    "Malformed",
    "NotConfigured",
    "NotFound",
    "PayloadTooLarge",
    "ProtocolError",
    "ReplayError",
    "RunMismatch",
    "SchemaError",
    "SignatureError",
    "TooManyRequests",
    "UnauthorizedSigner",
]


class HypertrainError(Exception):
    """Root of the errors hypertrain raises on purpose."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class KeyfileError(HypertrainError):
    """A key or seed file is missing, unsafe (owner, mode, type) or malformed."""


@attrs.frozen
class ErrorBody:
    """Every refusal's answer (spec 9): ``{"detail": ...}`` naming the problem."""

    detail: str


class ProtocolError(HypertrainError):
    """Something a peer sent that we refuse; ``status`` is the HTTP code routes answer with."""

    status: ClassVar[int] = 400

    def to_json(self) -> dict[str, str]:
        """The HTTP error body, ``{"detail": ...}``."""
        return {"detail": self.detail}

    def headers(self) -> dict[str, str]:
        """HTTP headers the answer carries besides the body (none but for a few kinds)."""
        return {}


class Malformed(ProtocolError):
    status = 400


class CanonicalJSONError(Malformed):
    status = 400


class SchemaError(Malformed):
    status = 400


class RunMismatch(ProtocolError):
    status = 400


class Expired(ProtocolError):
    status = 400


class SignatureError(ProtocolError):
    status = 401


class AuthError(ProtocolError):
    status = 401


class UnauthorizedSigner(ProtocolError):
    status = 403


class Forbidden(ProtocolError):
    status = 403


class NotFound(ProtocolError):
    status = 404


class Conflict(ProtocolError):
    status = 409


class ReplayError(Conflict):
    status = 409


class PayloadTooLarge(ProtocolError):
    status = 413


class TooManyRequests(ProtocolError):
    """Over a rate limit; ``retry_after_s`` (whole seconds, >= 1) is sent as ``Retry-After``."""

    status = 429

    def __init__(self, detail: str, retry_after_s: int) -> None:
        super().__init__(detail)
        self.retry_after_s = max(1, retry_after_s)

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after_s)}


class HeadersTooLarge(ProtocolError):
    status = 431


class ContractMismatch(ProtocolError):
    status = 422


class NotConfigured(ProtocolError):
    status = 503
