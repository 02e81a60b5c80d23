"""The miner's ``miner.toml`` (spec/protocol.md section 5.6) and its environment overrides.

Keys (unknown keys are errors that name the key)::

    api                required   base URL of the challenge API (https, or http on loopback)
    keyfile            required   the miner's seed file (hypertrain keys new)
    workdir            required   journal and per-round artifacts
    data_dir           optional   a dataset built with `hypertrain datasets build`; default:
                                  fetch the shards each round needs from the coordinator
                                  (the run's registered dataset) into workdir/dataset
    run_id             optional   default: the only run listed at GET /v1/runs
    owner_hotkey       optional   when set, the run manifest must be signed by it
    device             "cpu"      the only device of this client
    poll_seconds       2.0        round-view poll interval
    retry_max_seconds  10.0       the longest wait between two tries of a call that failed
                                  transiently (the daemon restarting, a 5xx), in [0.5, 3600]
    chunk_bytes        64 MiB     DeltaManifest chunk size
    image_digest       optional   Accept.image_digest; default: the manifest's reference image
    state_source       optional   dir or http(s) base holding start states as {theta_hash};
                                  default: GET /v1/objects/{state_sha256} on the API
    allow_file_upload  false      accept file:// upload grants

``HYPERTRAIN_MINER_<KEY>`` (upper case) overrides a key. Relative paths in the file resolve
against the file's directory, relative paths in the environment against the working directory.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import attrs

from hypertrain.miner.errors import ConfigError
from hypertrain.protocol.validators import is_hex64, is_image_digest, is_ss58_address

__all__ = ["DEFAULT_CHUNK_BYTES", "ENV_PREFIX", "MinerConfig", "load_config"]

ENV_PREFIX: Final = "HYPERTRAIN_MINER_"
DEFAULT_CHUNK_BYTES: Final = 64 << 20
DEFAULT_POLL_SECONDS: Final = 2.0
DEFAULT_RETRY_MAX_SECONDS: Final = 10.0
_REQUIRED: Final = ("api", "keyfile", "workdir")
_PATHS: Final = frozenset({"keyfile", "workdir", "data_dir"})
_TYPES: Final[dict[str, type]] = {
    "api": str,
    "keyfile": str,
    "workdir": str,
    "data_dir": str,
    "run_id": str,
    "owner_hotkey": str,
    "device": str,
    "poll_seconds": float,
    "retry_max_seconds": float,
    "chunk_bytes": int,
    "image_digest": str,
    "state_source": str,
    "allow_file_upload": bool,
}


@attrs.frozen
class MinerConfig:
    """A validated miner configuration (module docstring)."""

    api: str
    keyfile: Path
    workdir: Path
    data_dir: Path | None = None
    run_id: str | None = None
    owner_hotkey: str | None = None
    device: str = "cpu"
    poll_seconds: float = DEFAULT_POLL_SECONDS
    retry_max_seconds: float = DEFAULT_RETRY_MAX_SECONDS
    chunk_bytes: int = DEFAULT_CHUNK_BYTES
    image_digest: str | None = None
    state_source: str | None = None
    allow_file_upload: bool = False


def _parse_env(key: str, text: str) -> object:
    kind = _TYPES[key]
    name = ENV_PREFIX + key.upper()
    try:
        if kind is bool:
            lowered = text.strip().lower()
            if lowered not in ("true", "false", "1", "0"):
                raise ValueError(text)
            return lowered in ("true", "1")
        if kind is int:
            return int(text)
        if kind is float:
            return float(text)
    except ValueError as e:
        raise ConfigError(f"{name}={text!r} is not a valid {kind.__name__}") from e
    return text


def _check_type(key: str, value: object, where: str) -> None:
    kind = _TYPES[key]
    ok = isinstance(value, kind) and not (kind is not bool and isinstance(value, bool))
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        ok = True
    if not ok:
        raise ConfigError(f"{where}: {key} must be a {kind.__name__}, got {value!r}")


def _is_url(text: str) -> bool:
    return text.startswith(("http://", "https://", "file://"))


def _validate(values: Mapping[str, Any], where: str) -> MinerConfig:
    for key in _REQUIRED:
        if key not in values:
            raise ConfigError(f"{where}: missing required key {key!r}")
    if not str(values["api"]).startswith(("http://", "https://")):
        raise ConfigError(f"{where}: api must be an http(s) URL, got {values['api']!r}")
    checks = {
        "run_id": (is_hex64, "64 lowercase hex chars"),
        "owner_hotkey": (is_ss58_address, "an SS58 address"),
        "image_digest": (is_image_digest, "sha256: and 64 lowercase hex chars"),
    }
    for key, (check, what) in checks.items():
        if values.get(key) is not None and not check(values[key]):
            raise ConfigError(f"{where}: {key} must be {what}, got {values[key]!r}")
    if values.get("device", "cpu") != "cpu":
        raise ConfigError(f"{where}: device {values['device']!r} is not supported (only 'cpu')")
    if not 0 < float(values.get("poll_seconds", DEFAULT_POLL_SECONDS)) <= 3600:
        raise ConfigError(f"{where}: poll_seconds must be in (0, 3600]")
    if not 0.5 <= float(values.get("retry_max_seconds", DEFAULT_RETRY_MAX_SECONDS)) <= 3600:
        raise ConfigError(f"{where}: retry_max_seconds must be in [0.5, 3600]")
    if not 1 <= int(values.get("chunk_bytes", DEFAULT_CHUNK_BYTES)) <= 1 << 40:
        raise ConfigError(f"{where}: chunk_bytes must be in [1, 2^40]")
    fields = dict(values)
    for key in _PATHS:
        if key in fields:
            fields[key] = Path(fields[key])
    fields["poll_seconds"] = float(fields.get("poll_seconds", DEFAULT_POLL_SECONDS))
    fields["retry_max_seconds"] = float(fields.get("retry_max_seconds", DEFAULT_RETRY_MAX_SECONDS))
    fields["api"] = str(fields["api"]).rstrip("/")
    return MinerConfig(**fields)


def load_config(path: str | Path, environ: Mapping[str, str] | None = None) -> MinerConfig:
    """Read ``path``, apply ``HYPERTRAIN_MINER_*`` overrides (``environ``, default os.environ),
    resolve relative paths and validate; ConfigError names the first problem."""
    path = Path(path)
    environ = os.environ if environ is None else environ
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise ConfigError(f"{path}: no such config file") from e
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read ({e})") from e
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: invalid TOML ({e})") from e
    base = path.resolve().parent
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in _TYPES:
            raise ConfigError(f"{path}: unknown key {key!r}")
        _check_type(key, value, str(path))
        values[key] = _resolve(key, value, base)
    for name, text in environ.items():
        if not name.startswith(ENV_PREFIX):
            continue
        key = name[len(ENV_PREFIX) :].lower()
        if key not in _TYPES:
            raise ConfigError(f"{name}: unknown miner setting {key!r}")
        values[key] = _resolve(key, _parse_env(key, text), Path.cwd())
    return _validate(values, str(path))


def _resolve(key: str, value: object, base: Path) -> object:
    if key in _PATHS and isinstance(value, str):
        return str(base / value)
    if key == "state_source" and isinstance(value, str) and not _is_url(value):
        return str(base / value)
    return value
