"""Flow steering as bytes: an Ethernet frame's header fields
(``parse_frame``) and the rules the ibv_flow_spec_* specs make
(``compile_rule``, ``FlowRule.matches``).  Pure: no I/O, shared by the
library (which sends specs in ``SPEC_FIELDS``' terms) and the daemon
(which checks them, compiles them and matches every received frame).

A spec is ``{"type": IBV_FLOW_SPEC_*, "fields": {name: [value, mask]}}``,
each value and mask an unsigned integer of the field's width (a MAC as a
48-bit integer, an address as 32 or 128 bits, in network order).  A frame
matches a spec when every field masked equals the value masked (the value's
bits outside its mask do not count, as on hardware); an IPv4/IPv6 spec also
needs a frame of that IP version, a TCP/UDP spec that transport header,
as ibv_create_flow(3) describes a rule's layers.  A rule is the AND of its
specs; no specs match every frame.
"""

from __future__ import annotations

import errno

from ..enums import (IBV_FLOW_SPEC_ETH, IBV_FLOW_SPEC_INNER, IBV_FLOW_SPEC_IPV4, IBV_FLOW_SPEC_IPV4_EXT,
                     IBV_FLOW_SPEC_IPV6, IBV_FLOW_SPEC_TCP, IBV_FLOW_SPEC_UDP)
from ..errors import VerbsError

ETH_P_IPV4 = 0x0800
ETH_P_IPV6 = 0x86DD
ETH_P_8021Q = 0x8100
ETH_P_8021AD = 0x88A8
ETH_HLEN = 14
IPPROTO_TCP = 6
IPPROTO_UDP = 17

# per spec type: field -> bits (ibv_flow_eth_filter, ibv_flow_ipv4(_ext)_filter,
# ibv_flow_ipv6_filter, ibv_flow_tcp_udp_filter)
_ETH = {"dst_mac": 48, "src_mac": 48, "ether_type": 16, "vlan_tag": 16}
_IPV4 = {"src_ip": 32, "dst_ip": 32}
_IPV4_EXT = {**_IPV4, "proto": 8, "tos": 8, "ttl": 8, "flags": 8}
_IPV6 = {"src_ip": 128, "dst_ip": 128, "flow_label": 20, "next_hdr": 8, "traffic_class": 8, "hop_limit": 8}
_L4 = {"src_port": 16, "dst_port": 16}
SPEC_FIELDS: dict[int, dict[str, int]] = {
    int(IBV_FLOW_SPEC_ETH): _ETH, int(IBV_FLOW_SPEC_IPV4): _IPV4, int(IBV_FLOW_SPEC_IPV4_EXT): _IPV4_EXT,
    int(IBV_FLOW_SPEC_IPV6): _IPV6, int(IBV_FLOW_SPEC_TCP): _L4, int(IBV_FLOW_SPEC_UDP): _L4,
}
# a spec's field name -> the frame's (FrameFields) attribute it tests
_FRAME_ATTR = {"dst_mac": "dst_mac", "src_mac": "src_mac", "ether_type": "ether_type", "vlan_tag": "vlan_tag",
               "src_ip": "src_ip", "dst_ip": "dst_ip", "proto": "proto", "next_hdr": "proto", "tos": "tos",
               "traffic_class": "tos", "ttl": "ttl", "hop_limit": "ttl", "flags": "ip_flags",
               "flow_label": "flow_label", "src_port": "src_port", "dst_port": "dst_port"}
# what the spec's layer needs of the frame besides its fields
_LAYER = {int(IBV_FLOW_SPEC_IPV4): (("ip_version", 4, 0xF),),
          int(IBV_FLOW_SPEC_IPV4_EXT): (("ip_version", 4, 0xF),),
          int(IBV_FLOW_SPEC_IPV6): (("ip_version", 6, 0xF),),
          int(IBV_FLOW_SPEC_TCP): (("l4_ok", 1, 1), ("proto", IPPROTO_TCP, 0xFF)),
          int(IBV_FLOW_SPEC_UDP): (("l4_ok", 1, 1), ("proto", IPPROTO_UDP, 0xFF))}


class FrameFields:
    """The header fields of one Ethernet frame the steering looks at (0
    for what the frame does not have)."""

    __slots__ = ("dst_mac", "src_mac", "ether_type", "vlan_tag", "ip_version", "src_ip", "dst_ip", "proto",
                 "tos", "ttl", "ip_flags", "flow_label", "l4_ok", "src_port", "dst_port")

    def __init__(self):
        self.dst_mac = self.src_mac = self.ether_type = self.vlan_tag = 0
        self.ip_version = self.src_ip = self.dst_ip = self.proto = self.tos = self.ttl = 0
        self.ip_flags = self.flow_label = self.l4_ok = self.src_port = self.dst_port = 0

    @property
    def multicast(self) -> bool:
        """The destination MAC's group bit (broadcast included)."""
        return bool(self.dst_mac >> 40 & 1)


def parse_frame(frame) -> FrameFields | None:
    """The fields of ``frame`` (bytes-like), None if it is shorter than an
    Ethernet header.  One 802.1Q/802.1ad tag is read (its TCI is
    ``vlan_tag``); IPv4 options are skipped by IHL; IPv6 extension headers
    are not walked (``proto`` is the fixed header's next header)."""
    n = len(frame)
    if n < ETH_HLEN:
        return None
    f = FrameFields()
    f.dst_mac = int.from_bytes(frame[0:6], "big")
    f.src_mac = int.from_bytes(frame[6:12], "big")
    et = frame[12] << 8 | frame[13]
    off = ETH_HLEN
    if et in (ETH_P_8021Q, ETH_P_8021AD) and n >= off + 4:
        f.vlan_tag = frame[14] << 8 | frame[15]
        et = frame[16] << 8 | frame[17]
        off += 4
    f.ether_type = et
    l4 = -1
    if et == ETH_P_IPV4 and n >= off + 20 and frame[off] >> 4 == 4:
        ihl = (frame[off] & 0xF) * 4
        f.ip_version = 4
        f.tos = frame[off + 1]
        frag = frame[off + 6] << 8 | frame[off + 7]
        f.ip_flags = frag >> 13
        f.ttl = frame[off + 8]
        f.proto = frame[off + 9]
        f.src_ip = int.from_bytes(frame[off + 12:off + 16], "big")
        f.dst_ip = int.from_bytes(frame[off + 16:off + 20], "big")
        if ihl >= 20 and not frag & 0x1FFF:          # a later fragment has no transport header
            l4 = off + ihl
    elif et == ETH_P_IPV6 and n >= off + 40 and frame[off] >> 4 == 6:
        w = int.from_bytes(frame[off:off + 4], "big")
        f.ip_version = 6
        f.tos = w >> 20 & 0xFF
        f.flow_label = w & 0xFFFFF
        f.proto = frame[off + 6]
        f.ttl = frame[off + 7]
        f.src_ip = int.from_bytes(frame[off + 8:off + 24], "big")
        f.dst_ip = int.from_bytes(frame[off + 24:off + 40], "big")
        l4 = off + 40
    if l4 >= 0 and f.proto in (IPPROTO_TCP, IPPROTO_UDP) and n >= l4 + 4:
        f.l4_ok = 1
        f.src_port = frame[l4] << 8 | frame[l4 + 1]
        f.dst_port = frame[l4 + 2] << 8 | frame[l4 + 3]
    return f


class FlowRule:
    """A compiled rule: (frame attribute, value, mask) tests, all of which
    must hold."""

    __slots__ = ("tests",)

    def __init__(self, tests: tuple):
        self.tests = tests

    def matches(self, f: FrameFields) -> bool:
        for attr, val, mask in self.tests:
            if getattr(f, attr) & mask != val:
                return False
        return True


def _einval(msg: str) -> VerbsError:
    return VerbsError(errno.EINVAL, msg)


def compile_rule(specs) -> FlowRule:
    """The rule for a list of specs in the wire form above (untrusted:
    EINVAL for a malformed spec, EOPNOTSUPP for a spec type this device
    does not steer on -- inner/tunnel headers, ESP, GRE, MPLS, actions)."""
    if not isinstance(specs, list):
        raise _einval("specs must be a list")
    tests: list = []
    for s in specs:
        if not isinstance(s, dict) or type(s.get("type")) is not int or not isinstance(s.get("fields", {}), dict):
            raise _einval(f"malformed flow spec {s!r}")
        t = s["type"]
        if t & IBV_FLOW_SPEC_INNER or t not in SPEC_FIELDS:
            raise VerbsError(errno.EOPNOTSUPP, f"flow spec type 0x{t:x} not supported")
        widths = SPEC_FIELDS[t]
        tests.extend(_LAYER.get(t, ()))
        for name, vm in s.get("fields", {}).items():
            bits = widths.get(name)
            if bits is None:
                raise _einval(f"flow spec 0x{t:x} has no field {name!r}")
            if not (isinstance(vm, list) and len(vm) == 2 and all(type(x) is int for x in vm)):
                raise _einval(f"flow spec field {name!r}: [value, mask] expected")
            val, mask = vm
            if not (0 <= val < 1 << bits and 0 <= mask < 1 << bits):
                raise _einval(f"flow spec field {name!r}: value or mask wider than {bits} bits")
            if mask:
                tests.append((_FRAME_ATTR[name], val & mask, mask))
    return FlowRule(tuple(tests))


__all__ = ["SPEC_FIELDS", "FrameFields", "FlowRule", "parse_frame", "compile_rule", "ETH_P_IPV4", "ETH_P_IPV6"]
