"""hypertrain-daemon's settings: environment variables, an optional TOML file and CLI flags.

Precedence, highest first: **CLI flags > environment > TOML file (``--config``) > defaults**.
The environment carries the operator guide's variables (they are how a container is
configured); the TOML file can set every key; flags cover the process-level keys. An empty
environment variable counts as unset.

=========================  ================================  =========================  =========
TOML key                   environment variable              flag                       default
=========================  ================================  =========================  =========
slug                       CHALLENGE_SLUG                                               hypertrain
state_dir                  CHALLENGE_STATE_DIR                                          /data
master_url                 CHALLENGE_MASTER_URL                                         unset
internal_token_file        CHALLENGE_INTERNAL_TOKEN_FILE                                unset
admin_token_file           CHALLENGE_ADMIN_TOKEN_FILE                                   unset
worker_token_file          CHALLENGE_WORKER_TOKEN_FILE                                  unset
coord_key_file             HYPERTRAIN_COORD_KEY_FILE                                    unset
owner_hotkey               HYPERTRAIN_OWNER_HOTKEY                                      unset
epoch_seconds              HYPERTRAIN_EPOCH_SECONDS                                     4320
epochs_per_round           HYPERTRAIN_EPOCHS_PER_ROUND                                  1
vest_rounds                HYPERTRAIN_VEST_ROUNDS                                       10
genesis_unix               HYPERTRAIN_GENESIS_UNIX                                      unset
forgive_per_epoch                                                                       1
body_limit                                                                              1048576
holdout_dir                HYPERTRAIN_HOLDOUT_DIR            --holdout-dir DIR          unset
heldout_samples            HYPERTRAIN_HELDOUT_SAMPLES                                   64
compute_credit             HYPERTRAIN_COMPUTE_CREDIT                                    1
compute_wait_ms            HYPERTRAIN_COMPUTE_WAIT_MS                                   20000
compute_pool               HYPERTRAIN_COMPUTE_POOL                                      cores
compute_audit_permille     HYPERTRAIN_COMPUTE_AUDIT_PERMILLE                            50
compute_pair_min_age_s     HYPERTRAIN_COMPUTE_PAIR_MIN_AGE_S                            3600
compute_mint_per_minute    HYPERTRAIN_COMPUTE_MINT_PER_MINUTE                           10
compute_probation_answers  HYPERTRAIN_COMPUTE_PROBATION_ANSWERS                         10
compute_networks           HYPERTRAIN_COMPUTE_NETWORKS                                  address
trusted_proxies            HYPERTRAIN_TRUSTED_PROXIES                                   none
trace_samples              HYPERTRAIN_TRACE_SAMPLES                                     32
hidden_slices              HYPERTRAIN_HIDDEN_SLICES                                     4
hidden_rotate_rounds       HYPERTRAIN_HIDDEN_ROTATE_ROUNDS                              10
checkpoint_every           HYPERTRAIN_CHECKPOINT_EVERY                                  10
checkpoint_license         HYPERTRAIN_CHECKPOINT_LICENSE                                NOASSERTION
dataset_name               HYPERTRAIN_DATASET_NAME                                      NOASSERTION
dataset_license            HYPERTRAIN_DATASET_LICENSE                                   NOASSERTION
dataset_attribution        HYPERTRAIN_DATASET_ATTRIBUTION                               NOASSERTION
host                                                         --host                     127.0.0.1
port                                                         --port                     8000
beacon                                                       --beacon relays|local      relays
relays (list)                                                --relay URL (repeatable)   drand's
local_period                                                 --local-period S           as stored
grace                                                        --grace S                  5
log_format                                                   --log-format text|json     text
access_log                 HYPERTRAIN_ACCESS_LOG             --access-log               off
metrics_bind               HYPERTRAIN_METRICS_BIND           --metrics-bind HOST:PORT   unset
aggregator                 HYPERTRAIN_AGGREGATOR                                        internal
scorer                     HYPERTRAIN_SCORER                                            warm
=========================  ================================  =========================  =========

``aggregator = "external"`` keeps the daemon from merging rounds itself: an aggregator on another
machine (``hypertrain aggregate``) merges them through the aggregator routes instead.
``compute_networks = "per-key"`` (each node key its own network, so that nodes on one machine
are paired: the demo's test mode) is refused unless ``--beacon local`` is given too.
``scorer = "cold"`` makes the fallback pool start one scorer process per job instead of forking
each from one warm process (:mod:`hypertrain.scoring.warm`).
``access_log`` (``on``/``off``; TOML: a boolean; the flag turns it on) writes one log line per
request (method, path, route, status, duration). ``metrics_bind`` serves ``GET /metrics`` on a
listener of its own at ``HOST:PORT`` (an IP address, IPv6 in brackets: ``127.0.0.1:9100``,
``[::1]:9100``; port 0 picks a free one) instead of on the API's, whose ``/metrics`` then
answers 404; it may not be the API's own address.

Every problem (an unknown TOML key, a value of the wrong type or range, a bad flag) is a
:class:`ConfigError` whose message is one line naming the key and where it came from; the
program prints it and exits 2. :func:`load_settings` is pure (reads only the TOML file).
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import re
import tomllib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Literal, NoReturn

import attrs

from hypertrain.beacon import DEFAULT_RELAYS
from hypertrain.beacon.relays import normalize_relay
from hypertrain.coordinator.settings import CoordinatorSettings
from hypertrain.protocol.errors import HypertrainError

__all__ = [
    "DEFAULT_GRACE",
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "DEFAULT_STATE_DIR",
    "ConfigError",
    "DaemonSettings",
    "build_parser",
    "load_settings",
]

DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 8000
DEFAULT_STATE_DIR: Final = "/data"
DEFAULT_GRACE: Final = 5.0
"""Seconds between SIGTERM and cancelling what is still running."""
MIN_RELAYS: Final = 2
"""Relays needed in ``relays`` mode: rounds are agreement-checked across them."""

BeaconMode = Literal["relays", "local"]
LogFormat = Literal["text", "json"]
AggregatorMode = Literal["internal", "external"]
ScorerMode = Literal["warm", "cold"]


class ConfigError(HypertrainError):
    """A setting is unknown or invalid; ``detail`` is one line naming it (exit status 2)."""


@attrs.frozen(kw_only=True)
class DaemonSettings:
    """Everything the daemon needs: the coordinator's settings plus the process's own."""

    coordinator: CoordinatorSettings
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    beacon: BeaconMode = "relays"
    relays: tuple[str, ...] = DEFAULT_RELAYS
    local_period: float | None = None
    """Seconds between local-chain rounds; None: as stored (new chains: quicknet's 3 s)."""
    grace: float = DEFAULT_GRACE
    log_format: LogFormat = "text"
    aggregator: AggregatorMode = "internal"
    """``internal``: the daemon's aggregator service merges rounds; ``external``: it does not
    (``hypertrain aggregate`` runs elsewhere)."""
    scorer: ScorerMode = "warm"
    """How the fallback pool runs its sandboxed scorers: ``warm``, each job in a child forked
    from one process that imported torch (:mod:`hypertrain.scoring.warm`); ``cold``, a new
    process per job (:func:`hypertrain.scoring.sandbox.run_scorer`)."""
    access_log: bool = False
    """One log line per HTTP request (:mod:`hypertrain.coordinator.web.instrument`)."""
    metrics_bind: tuple[str, int] | None = None
    """``(host, port)`` of a listener serving only ``/metrics``; None: the API serves it."""


# -- value parsers: each takes a raw value (str from env/CLI, native from TOML) and the place it
# -- came from, and returns the checked value or raises ConfigError naming that place.

Parse = Callable[[object, str], Any]
_INT = re.compile(r"-?[0-9]+")


def _fail(where: str, expected: str, value: object) -> NoReturn:
    raise ConfigError(f"{where}: expected {expected}, got {value!r}")


def _int(low: int, high: int | None = None) -> Parse:
    expected = f"an integer >= {low}" if high is None else f"an integer {low}..{high}"

    def parse(value: object, where: str) -> int:
        if isinstance(value, str) and _INT.fullmatch(value.strip()):
            value = int(value.strip())
        if type(value) is not int or value < low or (high is not None and value > high):
            _fail(where, expected, value)
        return value

    return parse


def _float(low: float, *, strict: bool) -> Parse:
    expected = f"a number {'>' if strict else '>='} {low:g}"

    def parse(value: object, where: str) -> float:
        number: object = value
        if isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                _fail(where, expected, value)
        if type(number) not in (int, float):
            _fail(where, expected, value)
        result = float(number)  # type: ignore[arg-type]
        if not math.isfinite(result) or result < low or (strict and result == low):
            _fail(where, expected, value)
        return result

    return parse


def _text(value: object, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        _fail(where, "a non-empty string", value)
    return value.strip()


def _path(value: object, where: str) -> Path:
    return Path(_text(value, where))


def _choice(*choices: str) -> Parse:
    def parse(value: object, where: str) -> str:
        if value not in choices:
            _fail(where, " or ".join(choices), value)
        return str(value)

    return parse


def _relays(value: object, where: str) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Sequence) or not value:
        _fail(where, "a non-empty list of relay URLs", value)
    relays: list[str] = []
    for item in value:
        try:
            relays.append(normalize_relay(_text(item, where)))
        except ValueError as e:
            raise ConfigError(f"{where}: {e}") from e
    return tuple(relays)


_SWITCH: Final = {"on": True, "true": True, "1": True, "off": False, "false": False, "0": False}


def _switch(value: object, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _SWITCH:
        return _SWITCH[value.strip().lower()]
    _fail(where, "on or off", value)


_BIND: Final = re.compile(r"(?:\[(?P<v6>[^\]]+)\]|(?P<v4>[^:\[\]]+)):(?P<port>[0-9]{1,5})")


def _bind(value: object, where: str) -> tuple[str, int]:
    """``HOST:PORT`` with an IP address as HOST (IPv6 in brackets; no names: no DNS)."""
    expected = "HOST:PORT with an IP address as HOST (127.0.0.1:9100, [::1]:9100)"
    found = _BIND.fullmatch(value.strip()) if isinstance(value, str) else None
    if found is None:
        _fail(where, expected, value)
    host = found["v6"] or found["v4"]
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        _fail(where, expected, value)
    if (address.version == 6) != (found["v6"] is not None) or int(found["port"]) > 65535:
        _fail(where, expected, value)
    return str(address), int(found["port"])


@attrs.frozen
class _Key:
    name: str
    parse: Parse
    env: str | None = None
    flag: str | None = None


_KEYS: Final = (
    _Key("slug", _text, env="CHALLENGE_SLUG"),
    _Key("state_dir", _path, env="CHALLENGE_STATE_DIR"),
    _Key("master_url", _text, env="CHALLENGE_MASTER_URL"),
    _Key("internal_token_file", _path, env="CHALLENGE_INTERNAL_TOKEN_FILE"),
    _Key("admin_token_file", _path, env="CHALLENGE_ADMIN_TOKEN_FILE"),
    _Key("worker_token_file", _path, env="CHALLENGE_WORKER_TOKEN_FILE"),
    _Key("coord_key_file", _path, env="HYPERTRAIN_COORD_KEY_FILE"),
    _Key("owner_hotkey", _text, env="HYPERTRAIN_OWNER_HOTKEY"),
    _Key("epoch_seconds", _int(1), env="HYPERTRAIN_EPOCH_SECONDS"),
    _Key("epochs_per_round", _int(1), env="HYPERTRAIN_EPOCHS_PER_ROUND"),
    _Key("vest_rounds", _int(1), env="HYPERTRAIN_VEST_ROUNDS"),
    _Key("genesis_unix", _int(0), env="HYPERTRAIN_GENESIS_UNIX"),
    _Key("forgive_per_epoch", _int(0)),
    _Key("body_limit", _int(1)),
    _Key("holdout_dir", _path, env="HYPERTRAIN_HOLDOUT_DIR", flag="holdout_dir"),
    _Key("heldout_samples", _int(1), env="HYPERTRAIN_HELDOUT_SAMPLES"),
    _Key("compute_credit", _int(0), env="HYPERTRAIN_COMPUTE_CREDIT"),
    _Key("compute_wait_ms", _int(0), env="HYPERTRAIN_COMPUTE_WAIT_MS"),
    _Key("compute_pool", _int(1, 256), env="HYPERTRAIN_COMPUTE_POOL"),
    _Key("compute_audit_permille", _int(0, 1000), env="HYPERTRAIN_COMPUTE_AUDIT_PERMILLE"),
    _Key("compute_pair_min_age_s", _int(0), env="HYPERTRAIN_COMPUTE_PAIR_MIN_AGE_S"),
    _Key("compute_mint_per_minute", _int(1), env="HYPERTRAIN_COMPUTE_MINT_PER_MINUTE"),
    _Key("compute_probation_answers", _int(0), env="HYPERTRAIN_COMPUTE_PROBATION_ANSWERS"),
    _Key("compute_networks", _choice("address", "per-key"), env="HYPERTRAIN_COMPUTE_NETWORKS"),
    _Key("trusted_proxies", _text, env="HYPERTRAIN_TRUSTED_PROXIES"),
    _Key("trace_samples", _int(1, 4096), env="HYPERTRAIN_TRACE_SAMPLES"),
    _Key("hidden_slices", _int(1, 4096), env="HYPERTRAIN_HIDDEN_SLICES"),
    _Key("hidden_rotate_rounds", _int(1), env="HYPERTRAIN_HIDDEN_ROTATE_ROUNDS"),
    _Key("checkpoint_every", _int(1), env="HYPERTRAIN_CHECKPOINT_EVERY"),
    _Key("checkpoint_license", _text, env="HYPERTRAIN_CHECKPOINT_LICENSE"),
    _Key("dataset_name", _text, env="HYPERTRAIN_DATASET_NAME"),
    _Key("dataset_license", _text, env="HYPERTRAIN_DATASET_LICENSE"),
    _Key("dataset_attribution", _text, env="HYPERTRAIN_DATASET_ATTRIBUTION"),
    _Key("host", _text, flag="host"),
    _Key("port", _int(0, 65535), flag="port"),
    _Key("beacon", _choice("relays", "local"), flag="beacon"),
    _Key("relays", _relays, flag="relay"),
    _Key("local_period", _float(0.0, strict=True), flag="local_period"),
    _Key("grace", _float(0.0, strict=False), flag="grace"),
    _Key("log_format", _choice("text", "json"), flag="log_format"),
    _Key("access_log", _switch, env="HYPERTRAIN_ACCESS_LOG", flag="access_log"),
    _Key("metrics_bind", _bind, env="HYPERTRAIN_METRICS_BIND", flag="metrics_bind"),
    _Key("aggregator", _choice("internal", "external"), env="HYPERTRAIN_AGGREGATOR"),
    _Key("scorer", _choice("warm", "cold"), env="HYPERTRAIN_SCORER"),
)
_BY_NAME: Final = {key.name: key for key in _KEYS}
_DAEMON_KEYS: Final = frozenset(
    {
        "host",
        "port",
        "beacon",
        "relays",
        "local_period",
        "grace",
        "log_format",
        "access_log",
        "metrics_bind",
        "aggregator",
        "scorer",
    }
)


class _Parser(argparse.ArgumentParser):
    """Usage errors become a :class:`ConfigError` (one line) instead of exiting here."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(message)


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``hypertrain-daemon`` (values are checked by :func:`load_settings`)."""
    parser = _Parser(
        prog="hypertrain-daemon",
        description="Run the hypertrain coordinator: HTTP API, beacon pusher and services. "
        "Settings: CLI flags > environment (CHALLENGE_*, HYPERTRAIN_*) > --config TOML > "
        "defaults.",
    )
    parser.add_argument(
        "--demo",
        action="store_true",
        help="run the local demo network instead (options: hypertrain-daemon --demo --help)",
    )
    parser.add_argument("--config", metavar="FILE.toml", help="TOML file of settings")
    parser.add_argument("--host", help=f"address to listen on (default {DEFAULT_HOST})")
    parser.add_argument("--port", help=f"port to listen on, 0 for any (default {DEFAULT_PORT})")
    parser.add_argument("--beacon", help="relays (drand quicknet, default) or local (own chain)")
    parser.add_argument(
        "--relay", action="append", metavar="URL", help="a drand relay (repeatable)"
    )
    parser.add_argument(
        "--local-period", metavar="S", help="seconds between rounds of a new local chain"
    )
    parser.add_argument(
        "--grace", metavar="S", help=f"shutdown grace in seconds (default {DEFAULT_GRACE:g})"
    )
    parser.add_argument("--log-format", help="text (default) or json")
    parser.add_argument(
        "--access-log",
        action="store_const",
        const="on",
        help="one log line per HTTP request (route, status, duration)",
    )
    parser.add_argument(
        "--metrics-bind",
        metavar="HOST:PORT",
        help="serve GET /metrics on this address instead of the API's",
    )
    parser.add_argument(
        "--holdout-dir", metavar="DIR", help="the run's private dataset dir (held-out loss)"
    )
    return parser


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as e:
        raise ConfigError(f"--config {path}: cannot read ({e.strerror})") from e
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"--config {path}: not valid TOML ({e})") from e
    values: dict[str, Any] = {}
    for name, raw in data.items():
        key = _BY_NAME.get(name)
        if key is None:
            raise ConfigError(
                f"{path}: unknown key {name!r} (known: {', '.join(sorted(_BY_NAME))})"
            )
        values[name] = key.parse(raw, f"{path}: {name}")
    return values


def _from_env(environ: Mapping[str, str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for key in _KEYS:
        if key.env is not None and environ.get(key.env, "").strip():
            values[key.name] = key.parse(environ[key.env], key.env)
    return values


def _from_cli(args: argparse.Namespace) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for key in _KEYS:
        if key.flag is None:
            continue
        raw = getattr(args, key.flag)
        if raw is not None:
            values[key.name] = key.parse(raw, f"--{key.flag.replace('_', '-')}")
    return values


_ANY_HOST: Final = frozenset({"0.0.0.0", "::"})


def _check_metrics_bind(daemon: Mapping[str, Any]) -> None:
    """The metrics listener may not take the API's own address (it would fail to bind)."""
    bind = daemon.get("metrics_bind")
    if bind is None or bind[1] == 0:
        return
    host, port = daemon.get("host", DEFAULT_HOST), daemon.get("port", DEFAULT_PORT)
    if bind[1] == port and (bind[0] == host or bool({bind[0], host} & _ANY_HOST)):
        raise ConfigError(
            f"metrics_bind: {bind[0]}:{bind[1]} is the API's own address ({host}:{port});"
            " give the metrics listener another port"
        )


def load_settings(argv: Sequence[str], environ: Mapping[str, str]) -> DaemonSettings:
    """Parse ``argv`` (without the program name) over ``environ`` and the TOML file, if any.

    Raises :class:`ConfigError` (one line) for anything unknown or invalid. ``--help`` raises
    ``SystemExit(0)`` after printing, as argparse does.
    """
    args = build_parser().parse_args(list(argv))
    values: dict[str, Any] = {
        "state_dir": Path(DEFAULT_STATE_DIR),
    }
    if args.config is not None:
        values.update(_read_toml(Path(args.config)))
    values.update(_from_env(environ))
    values.update(_from_cli(args))
    daemon = {name: values.pop(name) for name in _DAEMON_KEYS if name in values}
    if daemon.get("beacon", "relays") == "relays":
        relays = daemon.get("relays", DEFAULT_RELAYS)
        if len(set(relays)) < MIN_RELAYS:
            raise ConfigError(
                f"relays: the relays beacon needs at least {MIN_RELAYS} distinct relays "
                f"(rounds are agreement-checked), got {len(set(relays))}"
            )
    _check_metrics_bind(daemon)
    if values.get("compute_networks") == "per-key" and daemon.get("beacon") != "local":
        raise ConfigError(
            "compute_networks: per-key (each node key its own network) is the demo's test"
            " mode; it needs --beacon local"
        )
    try:
        coordinator = CoordinatorSettings(**values)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"settings: {e}") from e
    return DaemonSettings(coordinator=coordinator, **daemon)
