"""GIDs and IP addresses: how RoCE v2 names a port by an IP address.

A GID is 16 bytes; an IPv6 address is its own GID, an IPv4 address the
IPv4-mapped ``::ffff:a.b.c.d`` (rdma_ip2gid / rdma_gid2ip of the kernel's
include/rdma/ib_addr.h, which librdmacm and the GID table alike follow).
Shared by the daemon (``device.gid``, ``device.rdma_cm``, ``device.gsi``)
and the library (``verbs.cm``).
"""

from __future__ import annotations

import ipaddress

GID_LEN = 16

_V4MAPPED_PREFIX = bytes(10) + b"\xff\xff"


def ipv4_gid(addr) -> bytes:
    """The IPv4-mapped GID ::ffff:a.b.c.d (rdma_ip2gid for AF_INET)."""
    return _V4MAPPED_PREFIX + ipaddress.IPv4Address(addr).packed


def ipv6_gid(addr) -> bytes:
    """An IPv6 address is its own GID (rdma_ip2gid for AF_INET6)."""
    return ipaddress.IPv6Address(addr).packed


def ip_gid(addr) -> bytes:
    """ipv4_gid or ipv6_gid by the address's family."""
    a = ipaddress.ip_address(addr)
    return ipv4_gid(a) if a.version == 4 else ipv6_gid(a)


def gid_ip(gid: bytes) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """rdma_gid2ip: an IPv4-mapped GID is that IPv4 address, any other its IPv6."""
    gid = bytes(gid)
    if len(gid) != GID_LEN:
        raise ValueError(f"a GID is 16 bytes, got {len(gid)}")
    if gid[:12] == _V4MAPPED_PREFIX:
        return ipaddress.IPv4Address(gid[12:])
    return ipaddress.IPv6Address(gid)
