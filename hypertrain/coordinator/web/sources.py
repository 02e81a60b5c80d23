"""The source network of a compute request, read from its ASGI scope (:mod:`hypertrain.compute.
networks` holds the rules; this is their adapter to HTTP).

:class:`SourceNetworks` is built once from the coordinator's settings. :meth:`~SourceNetworks.
of_scope` gives the network a request counts as coming from:

- ``compute_networks = "address"`` (the default): the /24 or /48 of the peer address
  (``scope["client"]``), or of the client named by ``X-Forwarded-For`` when the peer is one of
  ``HYPERTRAIN_TRUSTED_PROXIES`` (:func:`~hypertrain.compute.networks.request_network`; a peer
  without an address is the network ``unknown``);
- ``compute_networks = "per-key"`` (the demo's loopback test mode, refused by the daemon
  without ``--beacon local``): the network of the request's node key
  (:func:`~hypertrain.compute.networks.key_network`), and None for a request without one (a
  keyless mint: each new key is a network of its own, so nothing limits it).
"""

from __future__ import annotations

from typing import Any

import attrs

from hypertrain.compute.networks import Proxies, key_network, parse_proxies, request_network
from hypertrain.coordinator.settings import ComputeNetworks, CoordinatorSettings

__all__ = ["SourceNetworks"]


@attrs.frozen
class SourceNetworks:
    """See the module doc."""

    mode: ComputeNetworks
    proxies: Proxies

    @classmethod
    def of(cls, settings: CoordinatorSettings) -> SourceNetworks:
        return cls(settings.compute_networks, parse_proxies(settings.trusted_proxies))

    def of_scope(self, scope: Any, key: str | None) -> str | None:
        """The network of the request of ``scope`` carrying node key ``key`` (module doc)."""
        if self.mode == "per-key":
            return None if key is None else key_network(key)
        client = scope.get("client")
        peer = None if not client else str(client[0])
        forwarded = [
            bytes(value).decode("latin-1")
            for name, value in scope.get("headers", ())
            if bytes(name).lower() == b"x-forwarded-for"
        ]
        return request_network(peer, forwarded, self.proxies)
