"""`urls.is_internal`, the one rule of the URL checks, the checked HTTP client and the egress proxy: each range."""

from __future__ import annotations

import ipaddress

import pytest

from service.upstream.urls import embedded_ipv4, is_internal

INTERNAL = {
    "0.0.0.0": "this network",
    "0.1.2.3": "this network",
    "10.0.0.1": "private",
    "10.255.255.255": "private",
    "100.64.0.1": "carrier-grade NAT",
    "100.100.100.200": "carrier-grade NAT (Alibaba Cloud metadata)",
    "100.127.255.254": "carrier-grade NAT",
    "127.0.0.1": "loopback",
    "127.255.0.9": "loopback",
    "169.254.169.254": "link-local (cloud metadata)",
    "169.254.0.1": "link-local",
    "172.16.0.1": "private",
    "172.31.255.254": "private",
    "192.0.0.8": "IETF protocol assignments",
    "192.0.2.1": "documentation",
    "192.88.99.1": "6to4 relay anycast",
    "192.168.1.1": "private",
    "198.18.0.1": "benchmarking",
    "198.19.255.254": "benchmarking",
    "198.51.100.7": "documentation",
    "203.0.113.9": "documentation",
    "224.0.0.1": "multicast",
    "239.255.255.250": "multicast",
    "240.0.0.1": "reserved",
    "255.255.255.255": "broadcast",
    "::": "unspecified",
    "::1": "loopback",
    "::127.0.0.1": "IPv4-compatible",
    "::ffff:127.0.0.1": "IPv4-mapped loopback",
    "::ffff:169.254.169.254": "IPv4-mapped metadata",
    "::ffff:10.0.0.1": "IPv4-mapped private",
    "64:ff9b::7f00:1": "NAT64 of 127.0.0.1",
    "64:ff9b::a9fe:a9fe": "NAT64 of 169.254.169.254",
    "64:ff9b:1::8.8.8.8": "local-use NAT64",
    "2002:7f00:1::1": "6to4 of 127.0.0.1",
    "2002:a9fe:a9fe::1": "6to4 of 169.254.169.254",
    "2002:c0a8:101::1": "6to4 of 192.168.1.1",
    "100::1": "discard",
    "2001::1": "Teredo",
    "2001:db8::1": "documentation",
    "fc00::1": "unique local",
    "fd00:ec2::254": "unique local (AWS metadata)",
    "fe80::1": "link-local",
    "fec0::1": "site-local",
    "ff02::1": "multicast",
}
PUBLIC = [
    "8.8.8.8",
    "1.1.1.1",
    "93.184.215.14",
    "100.63.255.255",  # just below carrier-grade NAT
    "100.128.0.1",  # just above
    "172.32.0.1",  # just above 172.16/12
    "2606:4700:4700::1111",
    "2001:4860:4860::8888",
    "::ffff:8.8.8.8",
    "64:ff9b::808:808",
    "2002:808:808::1",
]


@pytest.mark.parametrize(("address", "why"), INTERNAL.items())
def test_internal_ranges(address: str, why: str) -> None:
    assert is_internal(ipaddress.ip_address(address)), why


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses(address: str) -> None:
    assert not is_internal(ipaddress.ip_address(address))


def test_the_ipv4_an_ipv6_form_reaches() -> None:
    loopback = ipaddress.IPv4Address("127.0.0.1")
    for form in ("::ffff:127.0.0.1", "64:ff9b::7f00:1", "2002:7f00:1::"):
        assert embedded_ipv4(ipaddress.ip_address(form)) == loopback
    assert embedded_ipv4(ipaddress.ip_address("fe80::1")) == ipaddress.ip_address("fe80::1")
