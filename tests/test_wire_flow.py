"""Flow steering's sans-IO half (wire.flow): frame parsing, spec rules,
their checks; and the Toeplitz hash of RSS (wire.toeplitz) against the
verification vectors of Microsoft's RSS specification."""

from __future__ import annotations

import errno
import ipaddress
import socket
import struct

import pytest

from softrdma.enums import (IBV_FLOW_SPEC_ETH, IBV_FLOW_SPEC_INNER, IBV_FLOW_SPEC_IPV4, IBV_FLOW_SPEC_IPV4_EXT,
                            IBV_FLOW_SPEC_IPV6, IBV_FLOW_SPEC_TCP, IBV_FLOW_SPEC_UDP, IBV_FLOW_SPEC_VXLAN_TUNNEL,
                            IBV_RX_HASH_DST_IPV4, IBV_RX_HASH_DST_IPV6, IBV_RX_HASH_DST_PORT_TCP,
                            IBV_RX_HASH_DST_PORT_UDP, IBV_RX_HASH_SRC_IPV4, IBV_RX_HASH_SRC_IPV6,
                            IBV_RX_HASH_SRC_PORT_TCP, IBV_RX_HASH_SRC_PORT_UDP)
from softrdma.errors import VerbsError
from softrdma.wire.flow import compile_rule, parse_frame
from softrdma.wire.toeplitz import rss_hash, rss_input, toeplitz

DST_MAC, SRC_MAC = bytes.fromhex("0150561920a7"), bytes.fromhex("248a07a528c8")


def frame(l3=4, l4="udp", src="1.1.1.1", dst="2.2.2.2", sport=1234, dport=5678, vlan=None, payload=b"x" * 20,
          frag=0x4000):
    eth = DST_MAC + SRC_MAC
    if vlan is not None:
        eth += struct.pack("!HH", 0x8100, vlan)
    proto = socket.IPPROTO_UDP if l4 == "udp" else socket.IPPROTO_TCP
    l4h = struct.pack("!4H", sport, dport, 8 + len(payload), 0) if l4 == "udp" else \
        struct.pack("!2H2I4H", sport, dport, 0, 0, 5 << 12, 65535, 0, 0)
    if l3 == 4:
        ip = struct.pack("!2B3H2BH4s4s", 0x45, 0x28, 20 + len(l4h) + len(payload), 7, frag, 64, proto, 0,
                         socket.inet_aton(src), socket.inet_aton(dst))
        return eth + b"\x08\x00" + ip + l4h + payload
    ip = struct.pack("!IH2B16s16s", 6 << 28 | 0x12 << 20 | 0xABCDE, len(l4h) + len(payload), proto, 33,
                     socket.inet_pton(socket.AF_INET6, src), socket.inet_pton(socket.AF_INET6, dst))
    return eth + b"\x86\xdd" + ip + l4h + payload


def spec(t, **fields):
    return {"type": int(t), "fields": {k: list(v) for k, v in fields.items()}}


def ip4(a):
    return int(ipaddress.ip_address(a))


ALL32 = 0xFFFFFFFF


def test_parse_ipv4_udp_and_vlan():
    f = parse_frame(frame(vlan=0xA0C))
    assert (f.dst_mac, f.src_mac) == (int(DST_MAC.hex(), 16), int(SRC_MAC.hex(), 16)) and f.multicast
    assert (f.vlan_tag, f.ether_type, f.ip_version, f.tos, f.ttl, f.ip_flags) == (0xA0C, 0x800, 4, 0x28, 64, 2)
    assert (f.src_ip, f.dst_ip, f.proto, f.l4_ok, f.src_port, f.dst_port) == \
        (ip4("1.1.1.1"), ip4("2.2.2.2"), 17, 1, 1234, 5678)


def test_parse_ipv6_tcp():
    f = parse_frame(frame(6, "tcp", "a0a1::a2a3", "b0b1::1", 7, 9))
    assert (f.ip_version, f.tos, f.flow_label, f.ttl, f.proto, f.src_port, f.dst_port) == \
        (6, 0x12, 0xABCDE, 33, 6, 7, 9)
    assert f.src_ip == int(ipaddress.ip_address("a0a1::a2a3"))


def test_parse_short_and_odd_frames():
    assert parse_frame(b"\x00" * 13) is None
    f = parse_frame(frame()[:14 + 10])                 # an IPv4 header cut short: Ethernet fields only
    assert f.ether_type == 0x800 and f.ip_version == 0 and not f.l4_ok
    f = parse_frame(frame(frag=0x0010))                 # a later fragment: no transport header
    assert f.ip_version == 4 and not f.l4_ok and f.src_port == 0


@pytest.mark.parametrize("specs, hit, miss", [
    ([], frame(), None),
    ([spec(IBV_FLOW_SPEC_ETH, ether_type=(0x800, 0xFFFF), dst_mac=(int(DST_MAC.hex(), 16), (1 << 48) - 1))],
     frame(), frame(6, src="::1", dst="::2")),
    # a mask picks bits: the source MAC's value and mask the same, as rdma-core's test does
    ([spec(IBV_FLOW_SPEC_ETH, src_mac=(int(SRC_MAC.hex(), 16), int(SRC_MAC.hex(), 16)))],
     frame(), (b"\x01" * 6 + b"\x00" * 6 + b"\x08\x00") + frame()[14:]),
    ([spec(IBV_FLOW_SPEC_IPV4_EXT, src_ip=(ip4("1.1.1.1"), ALL32), dst_ip=(ip4("2.2.2.2"), ALL32),
           proto=(17, 0xFF))], frame(), frame(dst="2.2.2.3")),
    ([spec(IBV_FLOW_SPEC_IPV4, dst_ip=(ip4("2.2.0.0"), 0xFFFF0000))], frame(dst="2.2.9.9"), frame(dst="2.3.0.0")),
    ([spec(IBV_FLOW_SPEC_IPV4_EXT, proto=(17, 0xFF))], frame(), frame(l4="tcp")),
    ([spec(IBV_FLOW_SPEC_IPV6, next_hdr=(6, 0xFF), flow_label=(0xABCDE, 0xFFFFF))],
     frame(6, "tcp", "::1", "::2"), frame(l4="tcp")),
    ([spec(IBV_FLOW_SPEC_UDP, dst_port=(5678, 0xFFFF))], frame(), frame(l4="tcp")),
    ([spec(IBV_FLOW_SPEC_TCP, src_port=(1234, 0xFFFF), dst_port=(5678, 0xFFFF))],
     frame(l4="tcp"), frame(l4="tcp", dport=5679)),
    # an IPv4 spec with nothing to match still needs an IPv4 frame
    ([spec(IBV_FLOW_SPEC_IPV4_EXT)], frame(), frame(6, src="::1", dst="::2")),
    ([spec(IBV_FLOW_SPEC_ETH, vlan_tag=(0x00C, 0x0FFF))], frame(vlan=0xA00C), frame(vlan=0xA00D)),
])
def test_rules_match_and_miss(specs, hit, miss):
    rule = compile_rule(specs)
    assert rule.matches(parse_frame(hit))
    if miss is not None:
        assert not rule.matches(parse_frame(miss))


def test_value_bits_outside_the_mask_do_not_count():
    rule = compile_rule([spec(IBV_FLOW_SPEC_UDP, dst_port=(0x1600 | 0x2E, 0xFF00))])
    assert rule.matches(parse_frame(frame(dport=0x16FF)))


@pytest.mark.parametrize("specs, err", [
    ("x", errno.EINVAL),
    ([{"type": "eth"}], errno.EINVAL),
    ([spec(IBV_FLOW_SPEC_ETH, dst_ip=(1, 1))], errno.EINVAL),             # not a field of the spec
    ([spec(IBV_FLOW_SPEC_UDP, dst_port=(1 << 16, 0xFFFF))], errno.EINVAL),  # wider than the field
    ([spec(IBV_FLOW_SPEC_UDP, dst_port=(-1, 0xFFFF))], errno.EINVAL),
    ([{"type": int(IBV_FLOW_SPEC_UDP), "fields": {"dst_port": 5}}], errno.EINVAL),
    ([spec(IBV_FLOW_SPEC_ETH | IBV_FLOW_SPEC_INNER)], errno.EOPNOTSUPP),
    ([spec(IBV_FLOW_SPEC_VXLAN_TUNNEL)], errno.EOPNOTSUPP),
])
def test_bad_specs_refused(specs, err):
    with pytest.raises(VerbsError) as ei:
        compile_rule(specs)
    assert ei.value.errno == err


# Microsoft, "Verifying the RSS Hash Calculation": the key and, per row, source
# address:port, destination address:port, the IPv4/IPv6-only hash and the hash with the ports
MS_KEY = bytes.fromhex("6d5a56da255b0ec24167253d43a38fb0d0ca2bcbae7b30b477cb2da38030f20c6a42b73bbeac01fa")
MS_IPV4 = [
    ("66.9.149.187", 2794, "161.142.100.80", 1766, 0x323E8FC2, 0x51CCC178),
    ("199.92.111.2", 14230, "65.69.140.83", 4739, 0xD718262A, 0xC626B0EA),
    ("24.19.198.95", 12898, "12.22.207.184", 38024, 0xD2D0A5DE, 0x5C2B394A),
    ("38.27.205.30", 48228, "209.142.163.6", 2217, 0x82989176, 0xAFC7327F),
    ("153.39.163.191", 44251, "202.188.127.2", 1303, 0x5D1809C5, 0x10E828A2),
]
MS_IPV6 = [
    ("3ffe:2501:200:1fff::7", 2794, "3ffe:2501:200:3::1", 1766, 0x2CC18CD5, 0x40207D3D),
    ("3ffe:501:8::260:97ff:fe40:efab", 14230, "ff02::1", 4739, 0x0F0C461C, 0xDDE51BBF),
    ("3ffe:1900:4545:3:200:f8ff:fe21:67cf", 44251, "fe80::200:f8ff:fe21:67cf", 38024, 0x4B61E985, 0x02D1FEEF),
]


@pytest.mark.parametrize("src, sport, dst, dport, h_ip, h_tcp", MS_IPV4 + MS_IPV6)
def test_toeplitz_verification_vectors(src, sport, dst, dport, h_ip, h_tcp):
    s, d = ipaddress.ip_address(src).packed, ipaddress.ip_address(dst).packed
    ports = struct.pack("!HH", sport, dport)
    assert toeplitz(MS_KEY, s + d) == h_ip
    assert toeplitz(MS_KEY, s + d + ports) == h_tcp
    # the same through a frame and rx_hash_fields_mask, as the device hashes it
    v6 = ":" in src
    f = parse_frame(frame(6 if v6 else 4, "tcp", src, dst, sport, dport))
    ip_mask = IBV_RX_HASH_SRC_IPV6 | IBV_RX_HASH_DST_IPV6 if v6 else IBV_RX_HASH_SRC_IPV4 | IBV_RX_HASH_DST_IPV4
    assert rss_hash(MS_KEY, f, ip_mask) == h_ip
    assert rss_hash(MS_KEY, f, ip_mask | IBV_RX_HASH_SRC_PORT_TCP | IBV_RX_HASH_DST_PORT_TCP) == h_tcp
    # UDP port bits do not select a TCP frame's ports
    assert rss_hash(MS_KEY, f, ip_mask | IBV_RX_HASH_SRC_PORT_UDP | IBV_RX_HASH_DST_PORT_UDP) == h_ip


def test_rss_input_selects_fields_of_the_frames_kind():
    f = parse_frame(frame())                            # IPv4 UDP
    assert rss_input(f, IBV_RX_HASH_SRC_IPV6 | IBV_RX_HASH_DST_IPV6) == b""
    assert rss_input(f, IBV_RX_HASH_DST_IPV4 | IBV_RX_HASH_DST_PORT_UDP) == bytes([2, 2, 2, 2]) + b"\x16\x2e"
    assert rss_hash(MS_KEY, f, IBV_RX_HASH_SRC_IPV6) == 0
    with pytest.raises(ValueError):
        toeplitz(b"\x00" * 8, b"\x00" * 8)
