"""IP over InfiniBand on the wire (RFC 4391): the encapsulation header,
the 20-byte IPoIB hardware address, IPoIB ARP, the IPv6 link-layer
address option, and the multicast GIDs of the broadcast group and of IP
multicast groups.

* The encapsulation header: 4 bytes before every IP (or ARP) datagram in
  a UD SEND: the EtherType (0x0800 IPv4, 0x86DD IPv6, 0x0806 ARP) and 16
  reserved bits, zero (RFC 4391 section 6; the kernel's ``ipoib_header``).
* The hardware address: 1 byte of flags (bit 7: connected mode is
  supported, RFC 4755), the 24-bit QPN of the interface's UD QP, then the
  port GID -- 20 bytes; written as the kernel prints it, 20 colon-separated
  octets.
* ARP (RFC 4391 section 8): hardware type 32 (ARPHRD_INFINIBAND), hardware
  length 20; the rest is RFC 826.
* IPv6 neighbour discovery (section 9.1): the source/target link-layer
  address options carry the 20 bytes after two reserved bytes (option
  length 3, 24 bytes).
* Multicast GIDs (section 4): ``ff1S:401b:PPPP::ffff:ffff`` is the IPv4
  broadcast group of partition PPPP (the full-member bit set), ``ff1S:401b:
  PPPP::<low 28 bits of the group>`` an IPv4 group, ``ff1S:601b:PPPP:<low
  80 bits of the group>`` an IPv6 group (the kernel's ip_ib_mc_map and
  ipv6_ib_mc_map).
"""

from __future__ import annotations

import ipaddress
import struct

from .errors import WireError

IPOIB_HDR = struct.Struct(">HH")             # EtherType, reserved
IPOIB_HDR_LEN = 4
IPOIB_HW_ADDR_LEN = 20
ETH_P_IP, ETH_P_ARP, ETH_P_IPV6 = 0x0800, 0x0806, 0x86DD
ARPHRD_INFINIBAND = 32
ARPOP_REQUEST, ARPOP_REPLY = 1, 2
IPOIB_FLAG_CM = 0x80                         # RFC 4755: the sender takes connected mode
IPOIB_QKEY_DEFAULT = 0x0B1B                  # the broadcast group's Q_Key as opensm makes it
# the UD datagram mode's MTU: the IB MTU less the encapsulation header (2044 for 2048)
IPOIB_CM_MTU = 65520                         # connected mode's largest (IPOIB_CM_MTU)
SCOPE_LINK = 2

_ARP = struct.Struct(">HHBBH")               # htype, ptype, hlen, plen, op
ARP_V4_LEN = _ARP.size + 2 * (IPOIB_HW_ADDR_LEN + 4)       # 56


def ud_mtu(ib_mtu_bytes: int) -> int:
    """The interface MTU in datagram mode for an IB path MTU of that many bytes."""
    return ib_mtu_bytes - IPOIB_HDR_LEN


def encap(ethertype: int, payload) -> bytes:
    return IPOIB_HDR.pack(ethertype, 0) + bytes(payload)


def decap(buf) -> tuple[int, memoryview]:
    """(EtherType, the datagram) of a received IPoIB payload."""
    if len(buf) < IPOIB_HDR_LEN:
        raise WireError("bad_length", "shorter than the IPoIB header")
    etype, _ = IPOIB_HDR.unpack_from(buf, 0)
    return etype, memoryview(buf)[IPOIB_HDR_LEN:]


# -- hardware addresses -----------------------------------------------------------------------
def hw_addr(qpn: int, gid: bytes, flags: int = 0) -> bytes:
    if len(gid) != 16:
        raise WireError("bad_length", "a GID has 16 bytes")
    return bytes([flags & 0xFF]) + (qpn & 0xFFFFFF).to_bytes(3, "big") + bytes(gid)


def parse_hw_addr(addr: bytes) -> tuple[int, int, bytes]:
    """(flags, QPN, GID)."""
    if len(addr) != IPOIB_HW_ADDR_LEN:
        raise WireError("bad_length", f"an IPoIB address has {IPOIB_HW_ADDR_LEN} bytes")
    return addr[0], int.from_bytes(addr[1:4], "big"), bytes(addr[4:])


def format_hw_addr(addr: bytes) -> str:
    return ":".join(f"{b:02x}" for b in addr)


def parse_hw_text(text: str) -> bytes:
    parts = text.split(":")
    if len(parts) != IPOIB_HW_ADDR_LEN:
        raise ValueError(f"{text!r} is not a 20-octet IPoIB address")
    return bytes(int(p, 16) for p in parts)


# -- ARP ------------------------------------------------------------------------------------------
class Arp:
    __slots__ = ("op", "sha", "spa", "tha", "tpa")

    def __init__(self, op: int, sha: bytes, spa: bytes, tha: bytes, tpa: bytes):
        self.op, self.sha, self.spa, self.tha, self.tpa = op, sha, spa, tha, tpa


def build_arp(op: int, sha: bytes, spa: bytes, tha: bytes, tpa: bytes) -> bytes:
    """An IPoIB ARP packet (IPv4 over hardware type 32)."""
    return (_ARP.pack(ARPHRD_INFINIBAND, ETH_P_IP, IPOIB_HW_ADDR_LEN, 4, op) + bytes(sha) + bytes(spa)
            + bytes(tha) + bytes(tpa))


def parse_arp(buf) -> Arp:
    if len(buf) < ARP_V4_LEN:
        raise WireError("bad_length", "ARP shorter than an IPoIB ARP for IPv4")
    htype, ptype, hlen, plen, op = _ARP.unpack_from(buf, 0)
    if htype != ARPHRD_INFINIBAND or ptype != ETH_P_IP or hlen != IPOIB_HW_ADDR_LEN or plen != 4:
        raise WireError("bad_header", f"ARP hardware {htype}/{hlen}, protocol {ptype:#x}/{plen}: not IPoIB's")
    b = bytes(buf[_ARP.size:ARP_V4_LEN])
    return Arp(op, b[0:20], b[20:24], b[24:44], b[44:48])


# -- IPv6 neighbour discovery's link-layer address option --------------------------------------
ND_OPT_SOURCE_LL, ND_OPT_TARGET_LL = 1, 2
ND_OPT_LEN = 24


def nd_ll_option(kind: int, addr: bytes) -> bytes:
    return bytes([kind, ND_OPT_LEN // 8, 0, 0]) + bytes(addr)


def nd_find_ll(options, kind: int) -> bytes | None:
    """The IPoIB address in the first option of ``kind`` (None if absent or malformed)."""
    o = 0
    n = len(options)
    while o + 2 <= n:
        t, ln = options[o], options[o + 1] * 8
        if ln == 0 or o + ln > n:
            return None
        if t == kind and ln == ND_OPT_LEN:
            return bytes(options[o + 4:o + 24])
        o += ln
    return None


# -- multicast GIDs ---------------------------------------------------------------------------------
def broadcast_mgid(pkey: int, scope: int = SCOPE_LINK) -> bytes:
    """``ff1S:401b:PPPP::ffff:ffff``: the partition's IPv4 broadcast group."""
    return (bytes([0xFF, 0x10 | scope, 0x40, 0x1B]) + ((pkey | 0x8000) & 0xFFFF).to_bytes(2, "big")
            + bytes(6) + b"\xff\xff\xff\xff")


def ipv4_mgid(group: str | bytes, pkey: int, scope: int = SCOPE_LINK) -> bytes:
    """An IPv4 multicast group's MGID (ip_ib_mc_map); 255.255.255.255 is the broadcast group."""
    a = ipaddress.IPv4Address(group).packed
    if a == b"\xff\xff\xff\xff":
        return broadcast_mgid(pkey, scope)
    return (bytes([0xFF, 0x10 | scope, 0x40, 0x1B]) + ((pkey | 0x8000) & 0xFFFF).to_bytes(2, "big") + bytes(6)
            + bytes([a[0] & 0x0F]) + a[1:])


def ipv6_mgid(group: str | bytes, pkey: int, scope: int = SCOPE_LINK) -> bytes:
    """An IPv6 multicast group's MGID (ipv6_ib_mc_map)."""
    a = ipaddress.IPv6Address(group).packed
    return bytes([0xFF, 0x10 | scope, 0x60, 0x1B]) + ((pkey | 0x8000) & 0xFFFF).to_bytes(2, "big") + a[6:]


def solicited_node(addr: str | bytes) -> bytes:
    """ff02::1:ffXX:XXXX of an IPv6 address (16 bytes)."""
    a = ipaddress.IPv6Address(addr).packed
    return bytes.fromhex("ff02" + "00" * 9 + "01ff") + a[13:]


__all__ = ["IPOIB_HDR_LEN", "IPOIB_HW_ADDR_LEN", "ETH_P_IP", "ETH_P_ARP", "ETH_P_IPV6", "ARPHRD_INFINIBAND",
           "ARPOP_REQUEST", "ARPOP_REPLY", "IPOIB_QKEY_DEFAULT", "IPOIB_CM_MTU", "Arp", "build_arp", "parse_arp",
           "encap", "decap", "hw_addr", "parse_hw_addr", "format_hw_addr", "parse_hw_text", "broadcast_mgid",
           "ipv4_mgid", "ipv6_mgid", "solicited_node", "nd_ll_option", "nd_find_ll", "ud_mtu"]


# -- IPv6 neighbour discovery messages (RFC 4861 with RFC 4391's option) --------------------------
ICMPV6 = 58
ND_NS, ND_NA = 135, 136
NA_SOLICITED, NA_OVERRIDE = 0x40, 0x20
_IP6 = struct.Struct(">IHBB16s16s")


def inet_checksum(data: bytes) -> int:
    """The Internet checksum (RFC 1071) of ``data``."""
    if len(data) & 1:
        data += b"\0"
    s = sum(struct.unpack(f">{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def _icmp6_sum(src: bytes, dst: bytes, icmp: bytes) -> int:
    return inet_checksum(src + dst + len(icmp).to_bytes(4, "big") + b"\0\0\0" + bytes([ICMPV6]) + icmp)


def build_too_big(datagram, mtu: int) -> bytes | None:
    """The ICMP error a hop sends for ``datagram`` that does not fit
    ``mtu``: "fragmentation needed" (RFC 1191: type 3 code 4, the IP header
    and 8 bytes) or ICMPv6 "packet too big" (RFC 8201: type 2, as much as
    fits 1280 bytes), from the datagram's destination back to its source;
    None when it is not an IP datagram or is itself an ICMP error."""
    d = bytes(datagram)
    if len(d) >= 20 and d[0] >> 4 == 4:
        ihl = (d[0] & 15) * 4
        if d[9] == 1 and len(d) > ihl and d[ihl] in (3, 4, 5, 11, 12):
            return None
        icmp = bytearray(struct.pack(">BBHHH", 3, 4, 0, 0, mtu & 0xFFFF) + d[:ihl + 8])
        icmp[2:4] = inet_checksum(bytes(icmp)).to_bytes(2, "big")
        hdr = bytearray(struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(icmp), 0, 0, 64, 1, 0, d[16:20], d[12:16]))
        hdr[10:12] = inet_checksum(bytes(hdr)).to_bytes(2, "big")
        return bytes(hdr) + bytes(icmp)
    if len(d) >= 40 and d[0] >> 4 == 6:
        if d[6] == ICMPV6 and len(d) > 40 and d[40] < 128:
            return None
        return _ip6(d[24:40], d[8:24], bytearray(struct.pack(">BBHI", 2, 0, 0, mtu)) + d[:1280 - 48], hop_limit=64)
    return None


def _ip6(src: bytes, dst: bytes, icmp: bytearray, hop_limit: int = 255) -> bytes:
    """An ICMPv6 message in its IPv6 header, its checksum set (hop limit 255: neighbour discovery's)."""
    icmp[2:4] = _icmp6_sum(src, dst, bytes(icmp)).to_bytes(2, "big")
    return _IP6.pack(6 << 28, len(icmp), ICMPV6, hop_limit, src, dst) + bytes(icmp)


def build_ns(src: bytes, target: bytes, sll: bytes) -> bytes:
    """A neighbour solicitation for ``target`` to its solicited-node group."""
    icmp = bytearray([ND_NS, 0, 0, 0, 0, 0, 0, 0]) + target + nd_ll_option(ND_OPT_SOURCE_LL, sll)
    return _ip6(src, solicited_node(target), icmp)


def build_na(src: bytes, dst: bytes, target: bytes, tll: bytes, flags: int = NA_SOLICITED | NA_OVERRIDE) -> bytes:
    icmp = bytearray([ND_NA, 0, 0, 0, flags, 0, 0, 0]) + target + nd_ll_option(ND_OPT_TARGET_LL, tll)
    return _ip6(src, dst, icmp)


def parse_nd(datagram) -> tuple[int, bytes, bytes, bytes, bytes | None] | None:
    """An IPv6 datagram that is a neighbour solicitation or advertisement:
    (type, source address, destination, target, the IPoIB address of its
    link-layer option or None); None for anything else or a malformed one
    (hop limit not 255, bad checksum)."""
    d = bytes(datagram)
    if len(d) < 40 + 24 or d[0] >> 4 != 6 or d[6] != ICMPV6 or d[7] != 255:
        return None
    plen = int.from_bytes(d[4:6], "big")
    icmp = d[40:40 + plen]
    if len(icmp) != plen or icmp[0] not in (ND_NS, ND_NA) or icmp[1] != 0:
        return None
    src, dst = d[8:24], d[24:40]
    if _icmp6_sum(src, dst, icmp) != 0:
        return None
    kind = icmp[0]
    ll = nd_find_ll(icmp[24:], ND_OPT_SOURCE_LL if kind == ND_NS else ND_OPT_TARGET_LL)
    return kind, src, dst, icmp[8:24], ll
