"""wire.ipoib against the kernel's mappings and scapy's codecs: the MGIDs
of the broadcast group and of IP multicast groups (ip_ib_mc_map,
ipv6_ib_mc_map), the 20-byte hardware address, IPoIB ARP (hardware type
32), neighbour solicitations/advertisements with RFC 4391's option."""

from __future__ import annotations

import ipaddress

import pytest

from softrdma.wire import ipoib as w
from softrdma.wire.errors import WireError

GID = bytes.fromhex("fe800000000000000002c90300000001")


def test_the_multicast_gids_are_the_kernels():
    assert str(ipaddress.IPv6Address(w.broadcast_mgid(0xFFFF))) == "ff12:401b:ffff::ffff:ffff"
    assert w.broadcast_mgid(0x0001) == w.broadcast_mgid(0x8001)            # the full-member bit always set
    assert str(ipaddress.IPv6Address(w.broadcast_mgid(0x8001))) == "ff12:401b:8001::ffff:ffff"
    assert str(ipaddress.IPv6Address(w.ipv4_mgid("224.0.0.1", 0xFFFF))) == "ff12:401b:ffff::1"
    assert str(ipaddress.IPv6Address(w.ipv4_mgid("239.1.2.3", 0x8001))) == "ff12:401b:8001::f01:203"   # low 28 bits
    assert w.ipv4_mgid("255.255.255.255", 0xFFFF) == w.broadcast_mgid(0xFFFF)
    assert str(ipaddress.IPv6Address(w.ipv6_mgid("ff02::1", 0xFFFF))) == "ff12:601b:ffff::1"
    assert str(ipaddress.IPv6Address(w.ipv6_mgid("ff02::1:ff00:2", 0xFFFF))) == "ff12:601b:ffff::1:ff00:2"
    assert str(ipaddress.IPv6Address(w.solicited_node("fd77::1234:5678"))) == "ff02::1:ff34:5678"


def test_the_hardware_address():
    hw = w.hw_addr(0x48, GID)
    assert len(hw) == 20 and w.parse_hw_addr(hw) == (0, 0x48, GID)
    assert w.format_hw_addr(hw) == "00:00:00:48:fe:80:00:00:00:00:00:00:00:02:c9:03:00:00:00:01"
    assert w.parse_hw_text(w.format_hw_addr(hw)) == hw
    with pytest.raises(WireError):
        w.parse_hw_addr(hw[:19])
    with pytest.raises(ValueError):
        w.parse_hw_text("00:11")


def test_arp_as_scapy_reads_it():
    from scapy.layers.l2 import ARP
    sha, tha = w.hw_addr(0x48, GID), bytes(20)
    pkt = w.build_arp(w.ARPOP_REQUEST, sha, bytes([10, 0, 0, 1]), tha, bytes([10, 0, 0, 2]))
    s = ARP(pkt)
    assert (s.hwtype, s.ptype, s.hwlen, s.plen, s.op, s.psrc, s.pdst) == (32, 0x0800, 20, 4, 1, "10.0.0.1",
                                                                          "10.0.0.2")
    a = w.parse_arp(pkt)
    assert (a.op, a.sha, a.spa, a.tha, a.tpa) == (1, sha, bytes([10, 0, 0, 1]), tha, bytes([10, 0, 0, 2]))
    for bad in (pkt[:40], pkt[:1] + b"\x01" + pkt[2:]):                   # short; Ethernet's hardware type
        with pytest.raises(WireError):
            w.parse_arp(bad)


def test_neighbour_discovery_as_scapy_reads_it():
    from scapy.layers.inet6 import IPv6
    src, dst = ipaddress.IPv6Address("fd77::1").packed, ipaddress.IPv6Address("fd77::2").packed
    hw = w.hw_addr(0x11, GID)
    ns = w.build_ns(src, dst, hw)
    p = IPv6(ns)
    assert p.dst == "ff02::1:ff00:2" and p.hlim == 255
    chk = p.payload.cksum
    p.payload.cksum = None
    assert IPv6(bytes(p)).payload.cksum == chk                             # scapy computes the same checksum
    assert w.parse_nd(ns) == (w.ND_NS, src, w.solicited_node(dst), dst, hw)
    na = w.build_na(dst, src, dst, hw)
    assert w.parse_nd(na) == (w.ND_NA, dst, src, dst, hw)
    broken = bytearray(na)
    broken[-1] ^= 1
    assert w.parse_nd(bytes(broken)) is None                               # bad checksum
    assert w.parse_nd(ns[:50]) is None


def test_encapsulation_header():
    assert w.encap(w.ETH_P_IPV6, b"abc") == b"\x86\xdd\x00\x00abc"
    et, d = w.decap(b"\x08\x00\x00\x00xyz")
    assert et == w.ETH_P_IP and bytes(d) == b"xyz"
    with pytest.raises(WireError):
        w.decap(b"\x08")
    assert w.ud_mtu(2048) == 2044 and w.ud_mtu(4096) == 4092


def test_too_big_errors_as_scapy_reads_them():
    """What connected mode answers a datagram too big for its path: ICMP
    "fragmentation needed" with the MTU (IPv4) and ICMPv6 "packet too big"
    (IPv6), from the datagram's destination to its source, checksums right;
    no error about an ICMP error."""
    import scapy.all as scapy
    d4 = bytes(scapy.IP(src="10.77.0.1", dst="10.77.0.2", flags="DF") / scapy.UDP(sport=1, dport=2) / (b"x" * 3000))
    e4 = scapy.IP(w.build_too_big(d4, 2044))
    assert (e4.src, e4.dst, e4[scapy.ICMP].type, e4[scapy.ICMP].code) == ("10.77.0.2", "10.77.0.1", 3, 4)
    assert e4[scapy.ICMP].nexthopmtu == 2044 and bytes(e4[scapy.ICMP].payload)[:28] == d4[:28]
    fresh = scapy.IP(bytes(e4))
    del fresh.chksum, fresh[scapy.ICMP].chksum
    assert bytes(scapy.IP(bytes(fresh))) == bytes(e4)
    assert w.build_too_big(bytes(e4), 2044) is None
    d6 = bytes(scapy.IPv6(src="fd77::1", dst="fd77::2") / scapy.UDP(sport=1, dport=2) / (b"y" * 3000))
    e6 = scapy.IPv6(w.build_too_big(d6, 2044))
    assert (e6.src, e6.dst, e6[scapy.ICMPv6PacketTooBig].mtu) == ("fd77::2", "fd77::1", 2044)
    assert len(bytes(e6)) == 1280
    fresh = scapy.IPv6(bytes(e6))
    del fresh[scapy.ICMPv6PacketTooBig].cksum
    assert bytes(scapy.IPv6(bytes(fresh))) == bytes(e6)
    assert w.build_too_big(bytes(e6), 2044) is None
