"""Errors of the beacon's out-of-band parts: the relay client, the pusher and its sinks.

What a peer pushes into the store is refused with the protocol tree (``InvalidRound`` 400,
``Conflict`` 409, from :mod:`hypertrain.beacon.chain` and :mod:`hypertrain.protocol.errors`).
The errors below are about *us* reaching relays and the coordinator::

    HypertrainError
    ├── KeyfileError
    │   └── TokenFileError          the admin token file is not exactly one token (CLI exit 2)
    └── BeaconError
        ├── BeaconUnavailable       fewer than min_relays relays answered (retry later)
        │   └── BeaconDisagreement  answering relays disagree, or one served a round that is
        │       │                   not genuine, or one lags too far behind (a FAIL, not a blip)
        │       └── ChainMismatch   a relay's /info is not the pinned chain
        ├── PusherGaveUp            max_failures ticks failed in a row (CLI exit 1)
        ├── SinkUnavailable         the sink did not answer usefully: network, 408, 429, 5xx
        └── SinkRefused             the sink refused a push for good (409 conflict, 400, ...)
            └── SinkAuthError       401/403: the admin token is wrong (CLI exit 2)

The pusher retries ``BeaconUnavailable`` (its subclasses included) and ``SinkUnavailable`` on
its next tick, counting failures in a row; ``SinkRefused`` and ``TokenFileError`` end it.
"""

from __future__ import annotations

from collections.abc import Mapping

from hypertrain.protocol.errors import HypertrainError, KeyfileError

__all__ = [
    "BeaconDisagreement",
    "BeaconError",
    "BeaconUnavailable",
    "ChainMismatch",
    "PusherGaveUp",
    "SinkAuthError",
    "SinkRefused",
    "SinkUnavailable",
    "TokenFileError",
]


class BeaconError(HypertrainError):
    """Root of the relay-client and pusher errors."""


class BeaconUnavailable(BeaconError):
    """Too few relays gave a usable answer; ``failures`` maps each failed relay to why."""

    def __init__(self, detail: str, failures: Mapping[str, str] | None = None) -> None:
        super().__init__(detail)
        self.failures: dict[str, str] = dict(failures or {})


class BeaconDisagreement(BeaconUnavailable):
    """Relays that answered do not agree (or one answered with something not genuine)."""


class ChainMismatch(BeaconDisagreement):
    """A relay serves a chain whose info differs from the pinned one."""


class PusherGaveUp(BeaconError):
    """The pusher failed ``max_failures`` ticks in a row; the detail is the last failure."""


class TokenFileError(KeyfileError):
    """The admin token file is missing, unreadable or not exactly one token."""


class SinkUnavailable(BeaconError):
    """The sink could not be reached or answered 408, 429 or 5xx; worth retrying."""


class SinkRefused(BeaconError):
    """The sink refused a push with ``status`` (409: a conflicting round, never overwritten)."""

    def __init__(self, detail: str, status: int) -> None:
        super().__init__(detail)
        self.status = status


class SinkAuthError(SinkRefused):
    """The sink answered 401 or 403: the admin token is missing, wrong or not allowed."""
