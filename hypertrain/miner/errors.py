"""The errors of the miner program, one tree, and the exit status each one ends it with.

::

    MinerError                  root of everything the miner raises on purpose
    ├── ConfigError             miner.toml or a HYPERTRAIN_MINER_* override is wrong    exit 2
    ├── MinerFatal              this run cannot be mined: key, dataset, determinism     exit 2
    │   ├── MinerProtocolError  the coordinator broke the protocol: a signature, the
    │   │                       assignment, the receipt, or an answer missing a field
    │   │                       or with one of the wrong type (the message names it)
    │   └── StartStateError     a start state that cannot be fetched, or does not hash
    │                           to the RoundOpen's theta_hash
    ├── ApiError                a non-2xx answer: ``status``, ``detail``, ``body``;     exit 1
    │                           a 4xx no route's contract expects becomes MinerFatal;
    │                           a 5xx is transient: retried until the phase's deadline
    ├── UploadRefused           an upload URL the miner will not use    -> MinerProtocolError
    ├── DataFetchError          the run's dataset cannot be fetched, or is not the one
    │                           the manifest names                      -> MinerProtocolError
    ├── ServeError              a kept leaf state that cannot be served (missing, damaged,
    │                           or not what was committed): that serve is logged and given
    │                           up, the miner goes on
    ├── round._Abort            (private) ends round ``w`` early with its RoundStatus; the
    │                           round runner turns it into the round's outcome
    ├── auditserve._Retry       (private) a serve failed on the network or with a 5xx; the
    │                           audit server tries it again at its next poll
    ├── disputesteps.Later      a dispute step failed on the network or with a 5xx; the
    │                           dispute follower tries it again at its next poll
    └── disputesteps.GiveUp     a round's dispute cannot be followed further (a refusal, a
                                broken answer, a failed recomputation, a bound passed):
                                logged, the miner goes on

``->`` marks errors the miner re-raises as another (``raise ... from e``, so the cause stays
attached). Outside the tree the process boundary (:mod:`hypertrain.miner.main`) also maps the
protocol's :class:`~hypertrain.protocol.errors.KeyfileError` (exit 2), ``httpx.HTTPError``
(network failures at the start, exit 1) and SIGINT/SIGTERM/SIGHUP (exit 1).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ApiError",
    "ConfigError",
    "DataFetchError",
    "MinerError",
    "MinerFatal",
    "MinerProtocolError",
    "ServeError",
    "StartStateError",
    "UploadRefused",
]


class MinerError(Exception):
    """Root of the errors the miner raises on purpose (module docstring)."""


class ConfigError(MinerError):
    """A bad configuration file or override (the CLI exits 2 with this one line)."""


class MinerFatal(MinerError):
    """A configuration, key, dataset, determinism or protocol problem: exit 2."""


class MinerProtocolError(MinerFatal):
    """The coordinator broke the protocol (bad signature, assignment, receipt, answer): exit 2."""


class StartStateError(MinerFatal):
    """A start state that cannot be fetched or does not hash to the RoundOpen's theta_hash."""


class ApiError(MinerError):
    """A non-2xx answer: ``status``, the ``detail`` string and the parsed JSON ``body``;
    ``retry_after`` the seconds of its ``Retry-After`` header (None: none)."""

    def __init__(
        self, method: str, path: str, status: int, body: Any, *, retry_after: float | None = None
    ) -> None:
        detail = body.get("detail") if isinstance(body, dict) else None
        self.status, self.body, self.retry_after = status, body, retry_after
        self.detail = str(detail) if detail is not None else str(body)[:200]
        super().__init__(f"{method} {path}: HTTP {status}: {self.detail}")


class UploadRefused(MinerError):
    """An upload URL the miner will not use (not https, loopback http or allowed file://)."""


class DataFetchError(MinerError):
    """The dataset cannot be fetched, or what was served is not what the run committed to."""


class ServeError(MinerError):
    """A kept leaf state the miner cannot serve to a segment audit (module docstring)."""
