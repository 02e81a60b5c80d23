"""The local chain: a one-key drand look-alike for development, the demo and tests.

Same scheme as quicknet (``bls-unchained-g1-rfc9380``), so its rounds pass the very
:func:`~hypertrain.beacon.bls.check_round` that guards quicknet rounds; only the key and the
schedule differ. Round ``r`` is due at ``genesis + (r - 1) * period`` on the injected
`WallClock`; asking for an earlier-than-due round is :class:`NotFound`, as a relay answers.

On disk, under ``<state_dir>/beacon/`` (a 0700 directory):

* ``local-beacon.key``: the 32-byte BLS seed as 64 hex chars, mode 0600 (written with
  :func:`write_seed_file`, read with :func:`load_seed`, so an unsafe file is refused);
* ``local-chain.json``: ``{"v": 1, "period_ms", "genesis_ms", "public_key", "hash"}``, fixed at
  creation, so that reopening gives the same chain (info, hash and rounds). Reopening with a
  different explicit period or genesis, or a key that no longer matches, is
  :class:`LocalChainError`.

The ASGI app (:func:`local_chain_app`) serves drand's HTTP shape: ``GET /{hash}/info``,
``/{hash}/public/latest``, ``/{hash}/public/{round}``, the relay-style default-chain forms
``/info``, ``/public/latest``, ``/public/{round}``, and ``/chains``. Errors are
``{"detail": ...}`` with 404 (unknown chain, round not yet due, bad round number, unknown
path) or 405 (a method other than GET on a known path). It is raw ASGI: no threads, so it runs
exactly under the autojump clock.
"""

from __future__ import annotations

import json
import math
import os
import secrets
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import trio

from hypertrain.beacon.bls import LocalSigner, local_chain_hash
from hypertrain.beacon.chain import SCHEME_UNCHAINED_G1, BeaconRound, ChainInfo
from hypertrain.beacon.errors import BeaconUnavailable
from hypertrain.protocol.converter import unstructure
from hypertrain.protocol.errors import HypertrainError, NotFound
from hypertrain.protocol.keys import load_seed, write_seed_file
from nurseries import ASGIApp, WallClock

__all__ = [
    "DEFAULT_LOCAL_PERIOD",
    "LOCAL_BEACON_ID",
    "LocalChain",
    "LocalChainError",
    "LocalChainSource",
    "local_chain_app",
]

LOCAL_BEACON_ID: Final = "hypertrain-local"
DEFAULT_LOCAL_PERIOD: Final = 3.0
"""Seconds between rounds of a new local chain when no period is given (quicknet's)."""
KEY_FILE: Final = "local-beacon.key"
PARAMS_FILE: Final = "local-chain.json"
_PARAMS_VERSION: Final = 1
_DEFAULT_CACHE: Final = 4096


class LocalChainError(HypertrainError):
    """The local chain's state on disk is unusable or contradicts what was asked for."""


def _to_ms(seconds: float, what: str) -> int:
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise LocalChainError(f"{what} must be a number of seconds, got {seconds!r}")
    if not math.isfinite(seconds):
        raise LocalChainError(f"{what} must be finite, got {seconds!r}")
    return round(seconds * 1000)


class LocalChain:
    """A signing beacon chain: :attr:`info`, :meth:`round`, :meth:`latest`.

    Signed rounds are kept in a bounded LRU (``cache_size`` rounds); signing one costs about
    half a millisecond.
    """

    def __init__(
        self,
        signer: LocalSigner,
        info: ChainInfo,
        clock: WallClock,
        *,
        cache_size: int = _DEFAULT_CACHE,
    ) -> None:
        if info.public_key != signer.public_key_hex:
            raise ValueError("chain info does not carry the signer's public key")
        if cache_size < 1:
            raise ValueError("cache_size must be >= 1")
        self._signer = signer
        self._clock = clock
        self._cache: OrderedDict[int, BeaconRound] = OrderedDict()
        self._cache_size = cache_size
        self.info: Final = info

    @classmethod
    def from_seed(
        cls, seed: bytes, *, clock: WallClock, period_ms: int, genesis_ms: int
    ) -> LocalChain:
        """An in-memory chain for ``seed`` (32 bytes); nothing is read or written."""
        signer = LocalSigner.from_seed(seed)
        return cls(signer, _local_info(signer, period_ms, genesis_ms), clock)

    @classmethod
    def open(
        cls,
        state_dir: Path,
        *,
        clock: WallClock,
        period: float | None = None,
        genesis: float | None = None,
    ) -> LocalChain:
        """The local chain stored under ``state_dir/beacon``, created on first use.

        At creation ``period`` defaults to :data:`DEFAULT_LOCAL_PERIOD` and ``genesis`` to the
        clock's now, floored to the whole second: a run manifest names its chain's genesis in
        whole seconds (``beacon.genesis_time``), as drand does. When the chain exists, ``None``
        means "as stored" and any other value must equal the stored one.
        """
        beacon_dir = Path(state_dir) / "beacon"
        beacon_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        key_path = beacon_dir / KEY_FILE
        params_path = beacon_dir / PARAMS_FILE
        want_period = None if period is None else _to_ms(period, "period")
        want_genesis = None if genesis is None else _to_ms(genesis, "genesis")
        if not params_path.exists():
            if not key_path.exists():
                write_seed_file(key_path, secrets.token_bytes(32))
            signer = LocalSigner.from_seed(load_seed(key_path))
            period_ms = want_period if want_period is not None else _to_ms(DEFAULT_LOCAL_PERIOD, "")
            genesis_ms = (
                want_genesis if want_genesis is not None else math.floor(clock.now()) * 1000
            )
            info = _local_info(signer, period_ms, genesis_ms)
            _write_params(params_path, info)
            return cls(signer, info, clock)
        signer = LocalSigner.from_seed(load_seed(key_path))
        stored = _read_params(params_path)
        info = _local_info(signer, stored["period_ms"], stored["genesis_ms"])
        if (stored["public_key"], stored["hash"]) != (info.public_key, info.hash):
            raise LocalChainError(
                f"{key_path} does not hold the key of the chain in {params_path} "
                f"(chain {stored['hash']}); restore the key or remove both files"
            )
        if want_period is not None and want_period != info.period_ms:
            raise LocalChainError(
                f"local chain in {beacon_dir} has period {info.period} s, not {want_period / 1000}"
                " s; omit the period, or remove that directory to start a new chain"
            )
        if want_genesis is not None and want_genesis != info.genesis_ms:
            raise LocalChainError(
                f"local chain in {beacon_dir} has genesis {info.genesis_time}, not "
                f"{want_genesis / 1000}; omit the genesis, or remove that directory"
            )
        return cls(signer, info, clock)

    def latest_round_number(self) -> int:
        """The latest round due now (0 before genesis)."""
        return self.info.round_at(self._clock.now())

    def round(self, round_: int) -> BeaconRound:
        """Round ``round_``, signed; :class:`NotFound` if below 1 or not yet due."""
        if type(round_) is not int or round_ < 1:
            raise NotFound(f"no round {round_!r}: rounds start at 1")
        if round_ > self.latest_round_number():
            raise NotFound(
                f"round {round_} is not due until {self.info.time_of(round_):.3f} (unix time)"
            )
        cached = self._cache.get(round_)
        if cached is not None:
            self._cache.move_to_end(round_)
            return cached
        rnd = self._signer.sign_round(round_)
        self._cache[round_] = rnd
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return rnd

    def latest(self) -> BeaconRound | None:
        """The latest due round, or None before genesis."""
        latest = self.latest_round_number()
        return self.round(latest) if latest else None

    def __repr__(self) -> str:
        return f"LocalChain({self.info.hash[:16]}..., period={self.info.period}s)"


class LocalChainSource:
    """A :class:`LocalChain` as a pusher's beacon source, for a daemon running its own chain.

    Rounds are signed in-process, so there is nothing to agree on; before genesis there is no
    round yet and :class:`~hypertrain.beacon.errors.BeaconUnavailable` says so (the pusher
    retries on its next tick).
    """

    def __init__(self, chain: LocalChain) -> None:
        self._chain = chain

    async def latest(self) -> BeaconRound:
        await trio.lowlevel.checkpoint()
        latest = self._chain.latest()
        if latest is None:
            raise BeaconUnavailable("the local chain has no round before its genesis")
        return latest

    async def round(self, number: int) -> BeaconRound:
        await trio.lowlevel.checkpoint()
        try:
            return self._chain.round(number)
        except NotFound as e:
            raise BeaconUnavailable(f"local chain: {e.detail}") from e


def _local_info(signer: LocalSigner, period_ms: int, genesis_ms: int) -> ChainInfo:
    if period_ms < 1:
        raise LocalChainError(f"period must be at least 1 ms, got {period_ms} ms")
    if genesis_ms < 0:
        raise LocalChainError(f"genesis must not be before 1970, got {genesis_ms} ms")
    return ChainInfo(
        public_key=signer.public_key_hex,
        period_ms=period_ms,
        genesis_ms=genesis_ms,
        hash=local_chain_hash(
            period_ms=period_ms,
            genesis_ms=genesis_ms,
            public_key=signer.public_key,
            scheme_id=SCHEME_UNCHAINED_G1,
            beacon_id=LOCAL_BEACON_ID,
        ),
        scheme_id=SCHEME_UNCHAINED_G1,
        beacon_id=LOCAL_BEACON_ID,
    )


def _write_params(path: Path, info: ChainInfo) -> None:
    """Write ``local-chain.json`` atomically (temp file, fsync, rename)."""
    data = {
        "v": _PARAMS_VERSION,
        "period_ms": info.period_ms,
        "genesis_ms": info.genesis_ms,
        "public_key": info.public_key,
        "hash": info.hash,
    }
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _read_params(path: Path) -> dict[str, Any]:
    try:
        data: object = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise LocalChainError(f"{path}: cannot read local chain parameters ({e})") from e
    if (
        isinstance(data, dict)
        and data.get("v") == _PARAMS_VERSION
        and all(type(data.get(k)) is int for k in ("period_ms", "genesis_ms"))
        and all(isinstance(data.get(k), str) for k in ("public_key", "hash"))
    ):
        return {str(k): v for k, v in data.items()}
    raise LocalChainError(f"{path}: expected {{v: 1, period_ms, genesis_ms, public_key, hash}}")


# --- HTTP (raw ASGI) -------------------------------------------------------------------------

_JSON_HEADERS: Final = [(b"content-type", b"application/json")]


def local_chain_app(chain: LocalChain) -> ASGIApp:
    """An ASGI app serving ``chain`` in drand's relay HTTP shape (see the module docstring)."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await _lifespan(receive, send)
        elif kind == "http":
            status, body = _route(chain, scope["method"], scope["path"])
            payload = json.dumps(body, separators=(",", ":")).encode("utf-8")
            headers = [*_JSON_HEADERS, (b"content-length", str(len(payload)).encode("ascii"))]
            if status == 405:
                headers.append((b"allow", b"GET"))
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": payload})
        elif kind == "websocket":
            await receive()
            await send({"type": "websocket.close", "code": 1000})

    return app


async def _lifespan(receive: Any, send: Any) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def _route(chain: LocalChain, method: str, path: str) -> tuple[int, Any]:
    """``(status, JSON body)`` of one request."""
    parts = path.strip("/").split("/")
    if parts == ["chains"]:
        return _get(method, lambda: [chain.info.hash])
    if len(parts[0]) == 64:
        if parts[0] != chain.info.hash:
            return 404, {"detail": f"unknown chain hash {parts[0]}"}
        parts = parts[1:]
    if parts == ["info"]:
        return _get(method, chain.info.to_json)
    if len(parts) == 2 and parts[0] == "public":
        return _get(method, lambda: _public(chain, parts[1]))
    return 404, {"detail": f"not found: {path}"}


def _get(method: str, answer: Callable[[], Any]) -> tuple[int, Any]:
    if method != "GET":
        return 405, {"detail": f"method {method} not allowed"}
    try:
        return 200, answer()
    except NotFound as e:
        return 404, e.to_json()


def _public(chain: LocalChain, which: str) -> dict[str, Any]:
    if which == "latest":
        latest = chain.latest()
        if latest is None:
            raise NotFound(f"no round yet: genesis is at {chain.info.genesis_time:.3f}")
        return unstructure(latest)
    if not which.isascii() or not which.isdigit() or len(which) > 20:
        raise NotFound(f"bad round number {which!r}")
    return unstructure(chain.round(int(which)))
