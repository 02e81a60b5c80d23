"""Which coordinator a node talks to and which key it sends there (pure).

- :func:`coordinator_url`: ``--url`` > ``HYPERTRAIN_COORDINATOR_URL`` > ``http://127.0.0.1:8000``,
  trailing ``/`` stripped. It must be ``https``, or ``http`` to a loopback host (the key is a
  bearer secret: never in clear text over a network); no user info, query or fragment.
- :func:`origin_of`: ``scheme://host[:port]`` (lower case, default port dropped); node.json
  records it, and a saved key is only ever sent to that origin.
- :func:`choose_key`: ``--key`` > node.json's key (only if minted for the same origin) > None
  (mint one). A node.json minted for another origin refuses to start unless ``--key`` is
  given: the message says to pass ``--key`` or use another ``--dir``. A ``--key`` that is not
  ``ht_`` + 32 base62 characters is refused before any request.

Every refusal is :class:`~hypertrain.node.errors.IdentityError` (exit status 2), and no
message contains a key.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

from hypertrain.compute.keys import is_node_key
from hypertrain.node.errors import IdentityError
from hypertrain.node.nodefile import NODE_FILE, NodeRecord

__all__ = [
    "DEFAULT_URL",
    "URL_ENV",
    "choose_key",
    "coordinator_url",
    "origin_of",
]

URL_ENV: Final = "HYPERTRAIN_COORDINATOR_URL"
DEFAULT_URL: Final = "http://127.0.0.1:8000"
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}


def _loopback(host: str | None) -> bool:
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def coordinator_url(flag: str | None, environ: Mapping[str, str]) -> str:
    """The coordinator's base URL (module doc)."""
    raw = (flag or environ.get(URL_ENV, "").strip() or DEFAULT_URL).rstrip("/")
    try:
        parts = urlsplit(raw)
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError as e:
        raise IdentityError(f"coordinator URL {raw!r}: {e}") from e
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise IdentityError(f"coordinator URL {raw!r}: not an http(s) URL with a host")
    if parts.username is not None or parts.password is not None or parts.query or parts.fragment:
        raise IdentityError(f"coordinator URL {raw!r}: no user info, query or fragment allowed")
    if parts.scheme == "http" and not _loopback(parts.hostname):
        raise IdentityError(
            f"coordinator URL {raw!r}: use https (plain http only to this machine,"
            " since the node key travels with every request)"
        )
    return raw


def origin_of(url: str) -> str:
    """``scheme://host[:port]`` of ``url`` (module doc)."""
    parts = urlsplit(url)
    scheme, host = parts.scheme.lower(), (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    port = parts.port
    if port is None or port == _DEFAULT_PORTS.get(scheme):
        return f"{scheme}://{host}"
    return f"{scheme}://{host}:{port}"


def choose_key(
    flag: str | None, record: NodeRecord | None, origin: str, directory: Path
) -> str | None:
    """The key to register with, or None to mint one (module doc)."""
    if flag is not None:
        if not is_node_key(flag):
            raise IdentityError("--key: not a node key (ht_ followed by 32 letters and digits)")
        return flag
    if record is None:
        return None
    if origin_of(record.coordinator) != origin:
        raise IdentityError(
            f"{directory / NODE_FILE} holds a key minted for {record.coordinator}, not {origin};"
            " pass --key to use a key with this coordinator, or --dir for a separate node"
            " directory"
        )
    return record.key
