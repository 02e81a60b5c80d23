"""Source networks of compute requests: which requests count as coming from one place.

Two copies of one job never go to two leases from one network, and keyless minting is counted
per network (issue 19 items 1 and 2). Promises:

- :func:`network_of`: an IPv4 address's ``/24`` (``"203.0.113.0/24"``) or an IPv6 address's
  ``/48`` (``"2001:db8:1::/48"``); an IPv4-mapped IPv6 address (``::ffff:203.0.113.9``) is its
  IPv4 address. Anything that is not an address is ``ValueError``.
- :func:`client_address`: the address a request comes from. It is the peer's (the socket's
  other end), unless the peer is in ``proxies`` (``HYPERTRAIN_TRUSTED_PROXIES``): then the
  ``X-Forwarded-For`` entries are read from the right, each trusted proxy's entry skipped, and
  the first one that is not a trusted proxy is the client. An entry that is not an address
  ends the walk: the last trusted hop is taken (a broken proxy lumps its clients together, it
  never lets one choose its address). The header of an untrusted peer is ignored. A peer with
  no address (a Unix socket) is :data:`UNKNOWN_PEER`.
- :func:`request_network`: the network of a request, :data:`UNKNOWN` when the peer is not
  known (one network: such requests are never paired with each other).
- :func:`key_network`: the per-key network of the demo's test mode
  (``HYPERTRAIN_COMPUTE_NETWORKS=per-key``): ``"key:"`` + 16 hex characters of the key's
  hash, so that loopback nodes count as distinct networks. Never the default.
- :func:`parse_proxies`: a list of addresses or CIDR blocks, separated by commas or spaces.

Pure: no clock, no I/O.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from typing import Final

from hypertrain.compute.keys import secret_hash

__all__ = [
    "UNKNOWN",
    "UNKNOWN_PEER",
    "Proxies",
    "client_address",
    "key_network",
    "network_of",
    "parse_proxies",
    "request_network",
]

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Proxies = tuple[IPNetwork, ...]
UNKNOWN: Final = "unknown"
"""The network of requests whose peer address is not known."""
UNKNOWN_PEER: Final = ""
V4_PREFIX: Final = 24
V6_PREFIX: Final = 48


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    address = ipaddress.ip_address(text.strip())
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def network_of(address: str) -> str:
    """The /24 (IPv4) or /48 (IPv6) of ``address`` (module doc)."""
    parsed = _address(address)
    prefix = V4_PREFIX if parsed.version == 4 else V6_PREFIX
    return str(ipaddress.ip_network(f"{parsed}/{prefix}", strict=False))


def parse_proxies(text: str) -> Proxies:
    """Trusted proxies from ``a, b/24 c`` (module doc); ``ValueError`` naming a bad entry."""
    proxies: list[IPNetwork] = []
    for item in text.replace(",", " ").split():
        try:
            proxies.append(ipaddress.ip_network(item, strict=False))
        except ValueError as e:
            raise ValueError(f"not an address or CIDR block: {item!r:.60}") from e
    return tuple(proxies)


def _trusted(address: str, proxies: Proxies) -> bool:
    try:
        parsed = _address(address)
    except ValueError:
        return False
    return any(parsed in proxy for proxy in proxies)


def client_address(peer: str | None, forwarded: Sequence[str], proxies: Proxies) -> str:
    """The client's address (module doc); ``forwarded``: every ``X-Forwarded-For`` value."""
    if not peer:
        return UNKNOWN_PEER
    address = peer
    if not _trusted(peer, proxies):
        return address
    entries = [e.strip() for value in forwarded for e in value.split(",") if e.strip()]
    for entry in reversed(entries):
        try:
            _address(entry)
        except ValueError:
            return address
        address = entry
        if not _trusted(entry, proxies):
            return address
    return address


def request_network(peer: str | None, forwarded: Sequence[str], proxies: Proxies) -> str:
    """The network a request comes from (module doc)."""
    address = client_address(peer, forwarded, proxies)
    try:
        return network_of(address)
    except ValueError:
        return UNKNOWN


def key_network(key: str) -> str:
    """The per-key network of the demo's test mode (module doc)."""
    return "key:" + secret_hash(key)[:16]
