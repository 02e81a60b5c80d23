"""Source networks of compute requests: /24 and /48 grouping, trusted proxies, per-key mode."""

from __future__ import annotations

import pytest

from hypertrain.compute.networks import (
    UNKNOWN,
    client_address,
    key_network,
    network_of,
    parse_proxies,
    request_network,
)

PROXIES = parse_proxies("10.0.0.1, 10.1.0.0/16 2001:db8:ffff::/48")


@pytest.mark.parametrize(
    ("address", "network"),
    [
        ("198.51.100.7", "198.51.100.0/24"),
        ("198.51.100.255", "198.51.100.0/24"),
        ("198.51.101.0", "198.51.101.0/24"),
        ("2001:db8:1:2::5", "2001:db8:1::/48"),
        ("2001:db8:1:ffff:ffff::1", "2001:db8:1::/48"),
        ("2001:db8:2::1", "2001:db8:2::/48"),
        ("::ffff:198.51.100.9", "198.51.100.0/24"),
        (" 127.0.0.1 ", "127.0.0.0/24"),
    ],
)
def test_ipv4_groups_by_24_and_ipv6_by_48(address: str, network: str) -> None:
    assert network_of(address) == network


def test_not_an_address_is_refused() -> None:
    with pytest.raises(ValueError, match="does not appear to be an IPv4 or IPv6 address"):
        network_of("example.org")
    with pytest.raises(ValueError, match="not an address or CIDR block: 'nope'"):
        parse_proxies("10.0.0.1 nope")


@pytest.mark.parametrize(
    ("peer", "forwarded", "client"),
    [
        ("203.0.113.5", [], "203.0.113.5"),
        ("203.0.113.5", ["198.51.100.1"], "203.0.113.5"),  # untrusted peer: header ignored
        ("10.0.0.1", [], "10.0.0.1"),  # a trusted proxy without the header
        ("10.0.0.1", ["198.51.100.1"], "198.51.100.1"),
        ("10.0.0.1", ["192.0.2.9, 198.51.100.1"], "198.51.100.1"),  # rightmost untrusted
        ("10.0.0.1", ["192.0.2.9", "198.51.100.1, 10.1.2.3"], "198.51.100.1"),  # proxy chain
        ("10.0.0.1", ["10.1.2.3, 10.1.9.9"], "10.1.2.3"),  # every hop trusted: the first
        ("10.0.0.1", ["198.51.100.1, junk"], "10.0.0.1"),  # junk ends the walk at the last hop
        ("10.0.0.1", ["198.51.100.1, junk, 10.1.2.3"], "10.1.2.3"),
        ("2001:db8:ffff::1", ["2001:db8:1::5"], "2001:db8:1::5"),
        (None, ["198.51.100.1"], ""),
    ],
)
def test_the_client_address_trusts_only_the_named_proxies(
    peer: str | None, forwarded: list[str], client: str
) -> None:
    assert client_address(peer, forwarded, PROXIES) == client


def test_an_unknown_peer_is_one_network_and_per_key_networks_are_distinct() -> None:
    assert request_network(None, [], PROXIES) == UNKNOWN
    assert request_network("10.0.0.1", ["198.51.100.77"], PROXIES) == "198.51.100.0/24"
    a, b = key_network("ht_" + "a" * 32), key_network("ht_" + "b" * 32)
    assert a.startswith("key:")
    assert len(a) == 4 + 16
    assert a != b
    assert "a" * 32 not in a
