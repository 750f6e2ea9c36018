"""The ICRC (softrdma.wire.icrc) against independent implementations:

* scapy.contrib.roce (BTH.icrc computed by scapy over IP/UDP/BTH/payload),
* values captured from a real rdma_rxe peer (NOTES.md of the rxe-vm harness, excerpt copied),
* the harness' own roce_min.icrc (validated against rxe; a copy in tests/data/rxe_vm),

and verify(): FULL / ID_RECOVERED / BAD, including the IPv4 ID+DF recovery.
"""

from __future__ import annotations

import ipaddress
import os
import random
import struct
import sys
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scapy.compat import raw
from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.packet import Raw

from softrdma import wire
from softrdma.wire import Ipv4Flow, Opcode, Verdict, build, build_cnp, icrc, verify
from softrdma.wire import headers as H
from softrdma.wire.icrc import ICRC, ipv4_header, ipv6_header, udp_header, udp_sport

_HERE = os.path.dirname(os.path.abspath(__file__))
_LIVE_HOST = os.path.join(_HERE, "..", "..", "shared", "interop", "rxe-vm", "host")
_VENDORED = os.path.join(_HERE, "data", "rxe_vm")       # copies, for clones without ../shared
RXE_VM_HOST = _LIVE_HOST if os.path.isfile(os.path.join(_LIVE_HOST, "roce_min.py")) else _VENDORED
_LIVE_NOTES = os.path.join(_LIVE_HOST, "..", "NOTES.md")
NOTES_MD = _LIVE_NOTES if os.path.isfile(_LIVE_NOTES) else os.path.join(_VENDORED, "NOTES_excerpt.txt")

SRC4, DST4 = "10.77.0.1", "10.77.0.2"
SRC6, DST6 = "fe80::5054:ff:fe77:2", "2001:db8:77::1"
SPORT = 52694

PROPS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def a4(s: str) -> bytes:
    return ipaddress.IPv4Address(s).packed


def a6(s: str) -> bytes:
    return ipaddress.IPv6Address(s).packed


def scapy_frame(ib, ip_layer, sport=SPORT, *, fecn=None, becn=None, resv6=0, resv7=0,
                udp_chksum=None) -> bytes:
    """IP/UDP/BTH/Raw built by scapy from the fields of ``ib``; scapy fills
    in lengths, checksums and BTH.icrc (appended after the payload)."""
    b = H.unpack_bth(ib)
    bth = BTH(opcode=b.opcode, solicited=int(b.se), migreq=int(b.mig), padcount=b.pad,
              version=b.tver, pkey=b.pkey,
              fecn=int(b.fecn if fecn is None else fecn), becn=int(b.becn if becn is None else becn),
              resv6=resv6, dqpn=b.dqpn, ackreq=int(b.ackreq), resv7=resv7, psn=b.psn)
    udp = UDP(sport=sport, dport=4791) if udp_chksum is None else UDP(sport=sport, dport=4791,
                                                                       chksum=udp_chksum)
    pkt = ip_layer / udp / bth
    if len(ib) > 12:
        pkt = pkt / Raw(bytes(ib[12:]))
    return raw(pkt)


def split(frame: bytes):
    """(ip_hdr, udp_hdr, ib packet without ICRC, wire ICRC bytes)."""
    hl = 20 if frame[0] >> 4 == 4 else 40
    return frame[:hl], frame[hl:hl + 8], frame[hl + 8:-4], frame[-4:]


def ip4(**kw):
    kw.setdefault("src", SRC4)
    kw.setdefault("dst", DST4)
    kw.setdefault("id", 0)
    kw.setdefault("flags", "DF")
    return IP(**kw)


def ip6(**kw):
    kw.setdefault("src", SRC6)
    kw.setdefault("dst", DST6)
    return IPv6(**kw)


# A spread of opcodes (and payload lengths that need pad) with realistic fields.
CASES = {
    "send_only_0": lambda: build(Opcode.RC_SEND_ONLY, 0x11, 0x9AB5CE, b"", ackreq=True),
    "send_only_1": lambda: build(Opcode.RC_SEND_ONLY, 0x11, 0x9AB5CF, b"x", ackreq=True),
    "send_only_2": lambda: build(Opcode.RC_SEND_ONLY, 0x11, 0xFFFFFF, b"xy", se=True),
    "send_only_3": lambda: build(Opcode.RC_SEND_ONLY, 0x11, 0x000000, b"xyz"),
    "send_only_64": lambda: build(Opcode.RC_SEND_ONLY, 0xA1, 0x2FFF49, b"\x7b" * 64, ackreq=True),
    "send_first_1024": lambda: build(Opcode.RC_SEND_FIRST, 0xA1, 7484688, b"\x7b" * 1024),
    "send_last_imm_5": lambda: build(Opcode.RC_SEND_LAST_WITH_IMMEDIATE, 0xA1, 7, b"hello",
                                     imm=0xDEADBEEF, ackreq=True),
    "write_first_reth": lambda: build(Opcode.RC_RDMA_WRITE_FIRST, 0x14, 0xC66531, bytes(range(256)) * 4,
                                      reth=(0x00007F5DAB593000, 0x0000048A, 65536)),
    "write_only_imm_13": lambda: build(Opcode.RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, 0x14, 1, b"z" * 13,
                                       reth=(0x7F5DAB593000, 0x48A, 13), imm=0x01020304, ackreq=True),
    "ack_aeth": lambda: build(Opcode.RC_ACKNOWLEDGE, 0x16, 7484691, aeth=(wire.AETH_ACK_UNLIMITED, 1)),
    "nak_psn_seq": lambda: build(Opcode.RC_ACKNOWLEDGE, 0xA1, 0x123456,
                                 aeth=(wire.AETH_NAK_PSN_SEQ_ERROR, 0)),
    "read_request": lambda: build(Opcode.RC_RDMA_READ_REQUEST, 0x13, 0x31E5DA,
                                  reth=(0x00007FB14CE34000, 0x0000055D, 1 << 20), ackreq=True),
    "read_response_only_7": lambda: build(Opcode.RC_RDMA_READ_RESPONSE_ONLY, 0x14, 0x31E5DA, b"1234567",
                                          aeth=(0x1F, 9)),
    "read_response_middle": lambda: build(Opcode.RC_RDMA_READ_RESPONSE_MIDDLE, 0x14, 0x31E5DB, b"m" * 1024),
    "compare_swap": lambda: build(Opcode.RC_COMPARE_SWAP, 0x14, 5,
                                  atmeth=(0x7FB14CE34008, 0x55D, 0xFFFFFFFFFFFFFFFF, 0x0123456789ABCDEF),
                                  ackreq=True),
    "atomic_ack": lambda: build(Opcode.RC_ATOMIC_ACKNOWLEDGE, 0x13, 5, aeth=(0x1F, 2), atmack=0x0123456789ABCDEF),
    "send_only_inv": lambda: build(Opcode.RC_SEND_ONLY_WITH_INVALIDATE, 0x13, 6, b"inv", ieth=0x1234),
    "uc_send_first": lambda: build(Opcode.UC_SEND_FIRST, 0x22, 77, b"u" * 256),
    "ud_send_deth": lambda: build(Opcode.UD_SEND_ONLY, 0x000012, 0x9AB5CE, b"\x00" * 510,
                                  deth=(0x11111111, 0x000011), se=True),
    "ud_send_imm_3": lambda: build(Opcode.UD_SEND_ONLY_WITH_IMMEDIATE, 0x000012, 1, b"abc",
                                   deth=(0x11111111, 0x000011), imm=0xFEEDFACE),
    "cnp": lambda: build_cnp(0x0000A1),
}


# --- scapy: the ICRC itself --------------------------------------------------------------

@pytest.mark.parametrize("family", ["ipv4", "ipv6"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_icrc_matches_scapy(case, family):
    ib = CASES[case]()
    if family == "ipv4":
        layer = ip4(id=0x99DF, flags="DF", ttl=64, tos=0)
    else:
        layer = ip6(tc=0, fl=0, hlim=64)
    frame = scapy_frame(ib, layer)
    ip_hdr, udp_hdr, ib_s, wire_icrc = split(frame)
    assert ib_s == bytes(ib)                         # scapy put the same BTH..pad on the wire
    assert ICRC.pack(icrc(ip_hdr, udp_hdr, ib)) == wire_icrc
    assert len(frame) == len(ip_hdr) + 8 + len(ib) + 4


@pytest.mark.parametrize("case", sorted(CASES))
def test_ipv4_flow_matches_scapy_id0_df(case):
    """Ipv4Flow's defaults (ID 0, DF) are what an unconnected UDP socket with
    IP_PMTUDISC_DO emits; scapy with the same header agrees."""
    ib = CASES[case]()
    frame = scapy_frame(ib, ip4(id=0, flags="DF"), udp_chksum=0)
    ip_hdr, udp_hdr, _, wire_icrc = split(frame)
    flow = Ipv4Flow(a4(SRC4), a4(DST4), SPORT)
    assert ICRC.pack(flow.icrc(ib)) == wire_icrc
    assert flow.encap(ib) == frame[28:]
    # the headers softrdma predicts are byte-identical to scapy's (checksum included)
    n = len(ib) + 4
    assert ipv4_header(a4(SRC4), a4(DST4), n) == ip_hdr
    assert udp_header(SPORT, 4791, n) == udp_hdr
    assert ICRC.pack(icrc(ipv4_header(a4(SRC4), a4(DST4), n), udp_header(SPORT, 4791, n), ib)) == wire_icrc


@pytest.mark.parametrize("case", ["send_only_3", "ack_aeth", "ud_send_deth", "cnp"])
def test_ipv6_header_matches_scapy(case):
    ib = CASES[case]()
    n = len(ib) + 4
    frame = scapy_frame(ib, ip6(tc=0x28, fl=0xABCDE, hlim=17), udp_chksum=0)
    assert ipv6_header(a6(SRC6), a6(DST6), n, tclass=0x28, flow_label=0xABCDE, hop_limit=17) == frame[:40]
    assert udp_header(SPORT, 4791, n) == frame[40:48]


@pytest.mark.parametrize("case", ["send_only_1", "write_first_reth", "ack_aeth", "read_request",
                                  "ud_send_deth", "cnp"])
def test_variant_fields_are_masked_ipv4(case):
    ib = CASES[case]()
    expect = ICRC.pack(Ipv4Flow(a4(SRC4), a4(DST4), SPORT, ident=0x1234, df=True).icrc(ib))
    seen = set()
    for tos in (0, 0x02, 0x03, 0xB8, 0xFF):
        for ttl in (1, 64, 255):
            for udp_chksum in (None, 0, 0xFFFF, 0x1234):        # None: scapy computes it
                frame = scapy_frame(ib, ip4(id=0x1234, tos=tos, ttl=ttl), udp_chksum=udp_chksum)
                ip_hdr, udp_hdr, _, wire_icrc = split(frame)
                seen.add(wire_icrc)
                assert ICRC.pack(icrc(ip_hdr, udp_hdr, ib)) == wire_icrc
    assert seen == {expect}


@pytest.mark.parametrize("case", ["send_only_1", "write_first_reth", "ack_aeth", "read_request",
                                  "ud_send_deth", "cnp"])
def test_variant_fields_are_masked_ipv6(case):
    ib = CASES[case]()
    base = ICRC.pack(icrc(ipv6_header(a6(SRC6), a6(DST6), len(ib) + 4), udp_header(SPORT, 4791, len(ib) + 4), ib))
    seen = set()
    for tc in (0, 0x03, 0xB8, 0xFF):
        for fl in (0, 1, 0x12345, 0xFFFFF):
            for hlim in (1, 64, 255):
                frame = scapy_frame(ib, ip6(tc=tc, fl=fl, hlim=hlim))
                ip_hdr, udp_hdr, _, wire_icrc = split(frame)
                seen.add(wire_icrc)
                assert ICRC.pack(icrc(ip_hdr, udp_hdr, ib)) == wire_icrc
    assert seen == {base}


@pytest.mark.parametrize("family", ["ipv4", "ipv6"])
@pytest.mark.parametrize("case", ["send_only_2", "write_only_imm_13", "nak_psn_seq", "ud_send_imm_3", "cnp"])
def test_fecn_becn_resv6_are_masked(case, family):
    ib = CASES[case]()
    layer = ip4(id=7) if family == "ipv4" else ip6()
    ref = None
    for fecn in (0, 1):
        for becn in (0, 1):
            for resv6 in (0, 0x15, 0x3F):
                frame = scapy_frame(ib, layer.copy(), fecn=fecn, becn=becn, resv6=resv6)
                ip_hdr, udp_hdr, ib_s, wire_icrc = split(frame)
                assert ib_s[4] == (fecn << 7) | (becn << 6) | resv6
                # ours, over scapy's bytes and over the packet with byte 4 clear
                assert ICRC.pack(icrc(ip_hdr, udp_hdr, ib_s)) == wire_icrc
                assert ICRC.pack(icrc(ip_hdr, udp_hdr, ib)) == wire_icrc
                ref = ref or wire_icrc
                assert wire_icrc == ref
    # softrdma's own FECN/BECN flags: same ICRC too
    marked = build(Opcode.RC_SEND_ONLY, 1, 2, b"abc", fecn=True, becn=True)
    plain = build(Opcode.RC_SEND_ONLY, 1, 2, b"abc")
    flow = Ipv4Flow(a4(SRC4), a4(DST4), SPORT)
    assert marked != plain and flow.icrc(marked) == flow.icrc(plain)


@pytest.mark.parametrize("case", ["send_only_64", "ack_aeth", "read_request", "ud_send_deth", "cnp"])
def test_covered_ipv4_fields_change_icrc(case):
    """IP ID and DF are covered (unlike TOS/TTL), so each value gives its own
    ICRC -- and scapy and softrdma agree on every one."""
    ib = CASES[case]()
    icrcs = {}
    for ident in (0, 1, 2, 0x100, 0x710E, 0x8000, 0xFFFF):
        for df in (True, False):
            frame = scapy_frame(ib, ip4(id=ident, flags="DF" if df else 0))
            ip_hdr, udp_hdr, _, wire_icrc = split(frame)
            assert ICRC.pack(icrc(ip_hdr, udp_hdr, ib)) == wire_icrc
            assert ICRC.pack(Ipv4Flow(a4(SRC4), a4(DST4), SPORT, ident=ident, df=df).icrc(ib)) == wire_icrc
            icrcs[(ident, df)] = wire_icrc
    assert len(set(icrcs.values())) == len(icrcs)
    # addresses and ports are covered too
    base = icrcs[(0, True)]
    for layer, sport in ((ip4(src="10.77.0.3"), SPORT), (ip4(dst="10.77.0.4"), SPORT), (ip4(), SPORT + 1)):
        frame = scapy_frame(ib, layer, sport)
        ip_hdr, udp_hdr, _, wire_icrc = split(frame)
        assert wire_icrc != base
        assert ICRC.pack(icrc(ip_hdr, udp_hdr, ib)) == wire_icrc


def test_covered_ipv6_fields_change_icrc():
    ib = CASES["send_only_64"]()
    seen = set()
    for src, dst, sport in ((SRC6, DST6, SPORT), ("fe80::1", DST6, SPORT), (SRC6, "2001:db8:77::2", SPORT),
                            (SRC6, DST6, SPORT + 1)):
        frame = scapy_frame(ib, ip6(src=src, dst=dst), sport)
        ip_hdr, udp_hdr, _, wire_icrc = split(frame)
        assert ICRC.pack(icrc(ip_hdr, udp_hdr, ib)) == wire_icrc
        seen.add(wire_icrc)
    assert len(seen) == 4


@st.composite
def random_ib(draw):
    info = draw(st.sampled_from([i for i in wire.OPCODE_TABLE if i is not None]))
    if info.opcode == Opcode.CNP:
        return build_cnp(draw(st.integers(0, 0xFFFFFF)))
    kw = {}
    u32, u64 = st.integers(0, 2**32 - 1), st.integers(0, 2**64 - 1)
    if info.reth >= 0:
        kw["reth"] = (draw(u64), draw(u32), draw(u32))
    if info.aeth >= 0:
        kw["aeth"] = (draw(st.integers(0, 255)), draw(st.integers(0, 0xFFFFFF)))
    if info.atmeth >= 0:
        kw["atmeth"] = (draw(u64), draw(u32), draw(u64), draw(u64))
    if info.atmack >= 0:
        kw["atmack"] = draw(u64)
    if info.deth >= 0:
        kw["deth"] = (draw(u32), draw(st.integers(0, 0xFFFFFF)))
    if info.immdt >= 0:
        kw["imm"] = draw(u32)
    if info.ieth >= 0:
        kw["ieth"] = draw(u32)
    if info.xrceth >= 0:
        kw["xrceth"] = draw(st.integers(0, 0xFFFFFF))
    if info.feth >= 0:
        kw["feth"] = draw(u32)
    payload = draw(st.binary(max_size=300)) if info.has_payload else b""
    return build(info.opcode, draw(st.integers(0, 0xFFFFFF)), draw(st.integers(0, 0xFFFFFF)), payload,
                 ackreq=draw(st.booleans()), se=draw(st.booleans()), mig=draw(st.booleans()),
                 pkey=draw(st.integers(0, 0xFFFF)), fecn=draw(st.booleans()), becn=draw(st.booleans()),
                 **kw)


ipv4_addr = st.integers(1, 2**32 - 2).map(lambda v: str(ipaddress.IPv4Address(v)))
ipv6_addr = st.integers(1, 2**128 - 1).map(lambda v: str(ipaddress.IPv6Address(v)))


@PROPS
@given(ib=random_ib(), v6=st.booleans(), src4=ipv4_addr, dst4=ipv4_addr, src6=ipv6_addr, dst6=ipv6_addr,
       ident=st.integers(0, 0xFFFF), df=st.booleans(), tos=st.integers(0, 255), ttl=st.integers(1, 255),
       tc=st.integers(0, 255), fl=st.integers(0, 0xFFFFF), sport=st.integers(0, 0xFFFF))
def test_property_icrc_matches_scapy(ib, v6, src4, dst4, src6, dst6, ident, df, tos, ttl, tc, fl, sport):
    if v6:
        layer = IPv6(src=src6, dst=dst6, tc=tc, fl=fl, hlim=ttl)
    else:
        layer = IP(src=src4, dst=dst4, id=ident, flags="DF" if df else 0, tos=tos, ttl=ttl)
    frame = scapy_frame(ib, layer, sport)
    ip_hdr, udp_hdr, ib_s, wire_icrc = split(frame)
    assert ib_s == bytes(ib)
    assert ICRC.pack(icrc(ip_hdr, udp_hdr, ib)) == wire_icrc
    if not v6:
        flow = Ipv4Flow(a4(src4), a4(dst4), sport, ident=ident, df=df)
        assert ICRC.pack(flow.icrc(ib)) == wire_icrc
    # and verify() agrees: FULL with the header, and without it
    up = frame[len(ip_hdr) + 8:]
    assert verify(up, ip_hdr=ip_hdr, sport=sport) == (Verdict.FULL, None)
    if v6:
        assert verify(up, src=a6(src6), dst=a6(dst6), sport=sport) == (Verdict.FULL, None)
    else:
        assert verify(up, src=a4(src4), dst=a4(dst4), sport=sport) == (Verdict.ID_RECOVERED,
                                                                       ident | (df << 16))


# --- values captured from a real rdma_rxe peer (rxe-vm NOTES.md) -----------------------------
#
# From NOTES.md, "Example (tshark fields from roce_interop.pcap)"; tshark shows
# the ICRC's four wire bytes as one big-endian number:
#   frame 12  10.77.0.2 -> 10.77.0.1  ip.id 0x710e ttl 64 DF  52694 -> 4791  opcode 0 (RC SEND_FIRST)
#             destqp 0x0000a1 psn 7484688 A 0  icrc 0x6af921a3   (sent by the guest's kernel rxe;
#             ibv_rc_pingpong fills its buffer with 0x7b, 1024-byte MTU)
#   frame 16  10.77.0.1 -> 10.77.0.2  ip.id 0x0000 ttl 64 DF  4791 -> 4791  udp.csum 0x14ca
#             opcode 17 (RC ACK) destqp 0x000016 psn 7484691 A 0 syndrome 31 msn 1  icrc 0xa37f03cd
#             (sent by pp_peer.py through an unconnected UDP socket, checked and accepted by rxe)
# (frame 17's icrc is listed as 0x0f0a671f; its payload per pp_peer.py gives 0xf00a671f, which
#  differs only by a swapped first-byte nibble pair -- most likely a typo in the notes -- so it
#  is not used here.)

def _notes_frames():
    f12 = dict(src="10.77.0.2", dst="10.77.0.1", ident=0x710E, df=True, sport=52694,
               ib=build(Opcode.RC_SEND_FIRST, 0x0000A1, 7484688, b"\x7b" * 1024), icrc=0x6AF921A3)
    f16 = dict(src="10.77.0.1", dst="10.77.0.2", ident=0, df=True, sport=4791,
               ib=build(Opcode.RC_ACKNOWLEDGE, 0x000016, 7484691, aeth=(31, 1)), icrc=0xA37F03CD)
    return [f12, f16]


def test_notes_values_present():
    text = open(NOTES_MD, encoding="utf-8").read()
    for needle in ("0x710e", "0x6af921a3", "0xa37f03cd", "0x14ca", "7484688", "7484691"):
        assert needle in text


@pytest.mark.parametrize("frame", _notes_frames(), ids=["frame12_from_rxe", "frame16_to_rxe"])
def test_icrc_of_captured_rxe_packets(frame):
    src, dst, ib = a4(frame["src"]), a4(frame["dst"]), frame["ib"]
    wire_bytes = frame["icrc"].to_bytes(4, "big")
    flow = Ipv4Flow(src, dst, frame["sport"], ident=frame["ident"], df=frame["df"])
    assert ICRC.pack(flow.icrc(ib)) == wire_bytes
    n = len(ib) + 4
    ip_hdr = ipv4_header(src, dst, n, ident=frame["ident"], df=frame["df"], ttl=64)
    assert ICRC.pack(icrc(ip_hdr, udp_header(frame["sport"], 4791, n), ib)) == wire_bytes
    # scapy agrees as well
    sf = scapy_frame(ib, IP(src=frame["src"], dst=frame["dst"], id=frame["ident"], flags="DF", ttl=64),
                     frame["sport"])
    assert split(sf)[3] == wire_bytes
    up = bytes(ib) + wire_bytes
    assert verify(up, ip_hdr=ip_hdr, sport=frame["sport"]) == (Verdict.FULL, None)
    # without the IP header the real (non-zero, unpredictable) rxe IP ID is recovered
    assert verify(up, src=src, dst=dst, sport=frame["sport"]) == (
        Verdict.ID_RECOVERED, frame["ident"] | (frame["df"] << 16))


def test_captured_ack_udp_length():
    """Frame 16's udp.csum 0x14ca is the offload-partial checksum (the folded
    pseudo-header sum, as captured before the NIC fills it in); it pins the
    UDP length to 28 = 8 + BTH 12 + AETH 4 + ICRC 4, i.e. the packet above."""
    udp_len = 8 + len(_notes_frames()[1]["ib"]) + 4
    words = struct.unpack(">4H", a4("10.77.0.1") + a4("10.77.0.2"))
    s = sum(words) + 17 + udp_len
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    assert udp_len == 28 and s == 0x14CA


# --- the harness' roce_min.icrc (validated against rxe) ------------------------------------

@pytest.fixture(scope="module")
def roce_min():
    sys.path.insert(0, RXE_VM_HOST)
    try:
        import roce_min as mod
    finally:
        sys.path.remove(RXE_VM_HOST)
    return mod


def test_against_roce_min(roce_min):
    rng = random.Random(4791)
    for case in sorted(CASES):
        ib = CASES[case]()
        for _ in range(4):
            ident, df = rng.randrange(0x10000), rng.random() < 0.5
            sport = rng.randrange(0x10000)
            n = len(ib) + 4
            ip_rm = roce_min.predicted_ipv4_header(SRC4, DST4, 20 + 8 + n, ident=ident, df=df,
                                                   ttl=rng.randrange(1, 256), tos=rng.randrange(256))
            ip_us = ipv4_header(a4(SRC4), a4(DST4), n, ident=ident, df=df, ttl=ip_rm[8], tos=ip_rm[1])
            assert ip_us == ip_rm
            udp = struct.pack(">HHHH", sport, 4791, 8 + n, rng.randrange(0x10000))
            assert roce_min.icrc(ip_rm, udp, bytes(ib)) == ICRC.pack(icrc(ip_us, udp, ib))
            assert roce_min.icrc(ip_rm, udp, bytes(ib)) == ICRC.pack(
                Ipv4Flow(a4(SRC4), a4(DST4), sport, ident=ident, df=df).icrc(ib))
        # the harness' sender (ID 0, DF, sport -> 4791) builds what Ipv4Flow.encap builds
        assert roce_min.build_udp_payload(SRC4, DST4, SPORT, bytes(ib)) == \
            Ipv4Flow(a4(SRC4), a4(DST4), SPORT).encap(ib)
    # BTH bytes identical to the harness' builder
    assert roce_min.build_bth(0x04, 0xA1, 0x123456, se=True, pad=2, ack_req=True, becn=True) == \
        bytes(build(Opcode.RC_SEND_ONLY, 0xA1, 0x123456, b"ab", se=True, ackreq=True, becn=True)[:12])


# --- verify() -----------------------------------------------------------------------------

def _v4(ib, ident=0, df=True, sport=SPORT, **kw):
    frame = scapy_frame(ib, ip4(id=ident, flags="DF" if df else 0, **kw), sport)
    return frame[:20], frame[28:]


def _v6(ib, sport=SPORT, **kw):
    frame = scapy_frame(ib, ip6(**kw), sport)
    return frame[:40], frame[48:]


def _fast(ib, family, ident=0):
    """(ip_hdr, udp payload) built by softrdma alone (agreement with scapy is
    established above); keeps the property tests quick."""
    n = len(ib) + 4
    if family == "ipv4":
        hdr = ipv4_header(a4(SRC4), a4(DST4), n, ident=ident, df=True)
    else:
        hdr = ipv6_header(a6(SRC6), a6(DST6), n, flow_label=0x12345)
    return hdr, bytes(ib) + ICRC.pack(icrc(hdr, udp_header(SPORT, 4791, n), ib))


@pytest.mark.parametrize("case", sorted(CASES))
def test_verify_full_and_recovered(case):
    ib = CASES[case]()
    ip_hdr, up = _v4(ib, ident=0x2468, df=True, ttl=3, tos=0xB8)
    assert verify(up, ip_hdr=ip_hdr, sport=SPORT) == (Verdict.FULL, None)
    assert verify(bytearray(up), ip_hdr=ip_hdr, sport=SPORT) == (Verdict.FULL, None)
    assert verify(memoryview(up), ip_hdr=ip_hdr, sport=SPORT) == (Verdict.FULL, None)
    assert verify(up, src=a4(SRC4), dst=a4(DST4), sport=SPORT) == (Verdict.ID_RECOVERED, 0x2468 | 1 << 16)
    ip_hdr, up = _v4(ib, ident=0xFFFF, df=False)
    assert verify(up, src=a4(SRC4), dst=a4(DST4), sport=SPORT) == (Verdict.ID_RECOVERED, 0xFFFF)
    # a header with other TTL/TOS than the sender's still verifies: they are masked
    other = ipv4_header(a4(SRC4), a4(DST4), len(up), ident=0xFFFF, df=False, ttl=1, tos=0xFF)
    assert verify(up, ip_hdr=other, sport=SPORT) == (Verdict.FULL, None)
    # the wrong header, ports or addresses do not
    wrong_id = ipv4_header(a4(SRC4), a4(DST4), len(up), ident=0xFFFE, df=False)
    assert verify(up, ip_hdr=wrong_id, sport=SPORT) == (Verdict.BAD, None)
    assert verify(up, ip_hdr=ip_hdr, sport=SPORT + 1) == (Verdict.BAD, None)
    assert verify(up, ip_hdr=ip_hdr, sport=SPORT, dport=4792) == (Verdict.BAD, None)
    assert verify(up, src=a4(SRC4), dst=a4("10.77.0.9"), sport=SPORT)[0] is Verdict.BAD
    # IPv6: nothing unseen, so always FULL -- with or without the header
    ip6_hdr, up6 = _v6(ib, tc=0xB8, fl=0x54321, hlim=9)
    assert verify(up6, ip_hdr=ip6_hdr, sport=SPORT) == (Verdict.FULL, None)
    assert verify(up6, src=a6(SRC6), dst=a6(DST6), sport=SPORT) == (Verdict.FULL, None)
    assert verify(up6, src=a6(SRC6), dst=a6("::1"), sport=SPORT) == (Verdict.BAD, None)


@PROPS
@given(ib=random_ib(), ident=st.integers(0, 0xFFFF), df=st.booleans(), src=ipv4_addr, dst=ipv4_addr,
       sport=st.integers(0, 0xFFFF))
def test_property_id_recovery(ib, ident, df, src, dst, sport):
    """Only addresses and ports known: the sender's exact ID and DF come back."""
    flow = Ipv4Flow(a4(src), a4(dst), sport, ident=ident, df=df)
    up = flow.encap(ib)
    assert verify(up, src=a4(src), dst=a4(dst), sport=sport) == (Verdict.ID_RECOVERED, ident | (df << 16))
    hdr = ipv4_header(a4(src), a4(dst), len(up), ident=ident, df=df)
    assert verify(up, ip_hdr=hdr, sport=sport) == (Verdict.FULL, None)


def test_id_recovery_every_df_and_many_ids():
    ib = CASES["send_only_64"]()
    rng = random.Random(17)
    idents = [0, 1, 0x7FFF, 0x8000, 0xFFFF] + [rng.randrange(0x10000) for _ in range(200)]
    for ident in idents:
        for df in (False, True):
            up = Ipv4Flow(a4(SRC4), a4(DST4), SPORT, ident=ident, df=df).encap(ib)
            assert verify(up, src=a4(SRC4), dst=a4(DST4), sport=SPORT) == (
                Verdict.ID_RECOVERED, ident | (df << 16))


def test_verify_short_and_missing_arguments():
    assert verify(b"", src=a4(SRC4), dst=a4(DST4)) == (Verdict.BAD, None)
    assert verify(bytes(15), src=a4(SRC4), dst=a4(DST4)) == (Verdict.BAD, None)
    with pytest.raises(ValueError):
        verify(bytes(20))
    # shorter than BTH + ICRC is BAD even when the CRC itself is right
    for body in (b"", b"abcd", b"abcdefgh"):
        up = Ipv4Flow(a4(SRC4), a4(DST4), SPORT).encap(body)
        hdr = ipv4_header(a4(SRC4), a4(DST4), len(up))
        assert verify(up, ip_hdr=hdr, sport=SPORT) == (Verdict.BAD, None)
        assert verify(up, src=a4(SRC4), dst=a4(DST4), sport=SPORT) == (Verdict.BAD, None)
    # exactly 16 bytes (a bare BTH) is long enough
    up = Ipv4Flow(a4(SRC4), a4(DST4), SPORT).encap(bytes(12))
    assert verify(up, src=a4(SRC4), dst=a4(DST4), sport=SPORT) == (Verdict.ID_RECOVERED, 1 << 16)


# Single-bit errors.  With the real header (or IPv6) the ICRC is a plain
# CRC-32 over < 11 kB, so every 1-, 2- and 3-bit error is detected (Hamming
# distance >= 4).  The only bits that may change are BTH byte 4 (FECN, BECN,
# resv6), which the ICRC masks.

def _flip(buf: bytes, bits) -> bytearray:
    out = bytearray(buf)
    for bit in bits:
        out[bit // 8] ^= 0x80 >> (bit % 8)
    return out


MASKED_BITS = set(range(32, 40))                     # BTH byte 4


@pytest.mark.parametrize("case", ["send_only_0", "send_only_3", "write_only_imm_13", "ack_aeth",
                                  "read_request", "compare_swap", "ud_send_imm_3", "cnp"])
def test_every_single_bit_flip_is_bad(case):
    ib = CASES[case]()
    ip4_hdr, up4 = _v4(ib, ident=0x5A5A)
    ip6_hdr, up6 = _v6(ib, fl=0x12345)
    for bit in range(8 * len(up4)):
        bad4, bad6 = _flip(up4, [bit]), _flip(up6, [bit])
        if bit in MASKED_BITS:
            assert verify(bad4, ip_hdr=ip4_hdr, sport=SPORT)[0] is Verdict.FULL
            assert verify(bad6, ip_hdr=ip6_hdr, sport=SPORT)[0] is Verdict.FULL
            assert verify(bad4, src=a4(SRC4), dst=a4(DST4), sport=SPORT) == (
                Verdict.ID_RECOVERED, 0x5A5A | 1 << 16)
            continue
        assert verify(bad4, ip_hdr=ip4_hdr, sport=SPORT) == (Verdict.BAD, None), bit
        assert verify(bad6, ip_hdr=ip6_hdr, sport=SPORT) == (Verdict.BAD, None), bit
        assert verify(bad6, src=a6(SRC6), dst=a6(DST6), sport=SPORT) == (Verdict.BAD, None), bit
        # IPv4 without the header: the packets here are short (see below), so
        # every single-bit error is still detected
        assert verify(bad4, src=a4(SRC4), dst=a4(DST4), sport=SPORT) == (Verdict.BAD, None), bit


@pytest.mark.parametrize("family", ["ipv4", "ipv6"])
@PROPS
@given(ib=random_ib(), data=st.data())
def test_property_few_bit_flips_with_full_check(family, ib, data):
    hdr, up = _fast(ib, family, ident=data.draw(st.integers(0, 0xFFFF), label="ident"))
    candidates = [b for b in range(8 * len(up)) if b not in MASKED_BITS]
    bits = data.draw(st.lists(st.sampled_from(candidates), min_size=1, max_size=3, unique=True), label="bits")
    assert verify(_flip(up, bits), ip_hdr=hdr, sport=SPORT) == (Verdict.BAD, None)
    if family == "ipv6":
        assert verify(_flip(up, bits), src=a6(SRC6), dst=a6(DST6), sport=SPORT) == (Verdict.BAD, None)


@PROPS
@given(ib=random_ib(), data=st.data())
def test_property_burst_errors_with_full_check(ib, data):
    """Any error confined to 4 consecutive bytes (a burst of <= 32 bits in
    either bit order) is caught by a CRC-32."""
    hdr, up = _fast(ib, "ipv4", ident=0x1357)
    start = data.draw(st.integers(0, len(up) - 1), label="start")
    pattern = data.draw(st.integers(1, 2**32 - 1), label="pattern").to_bytes(4, "big")
    bad = bytearray(up)
    for k, x in enumerate(pattern):
        if start + k < len(up) and start + k != 4:        # BTH byte 4 is masked
            bad[start + k] ^= x
    if bad != up:
        assert verify(bad, ip_hdr=hdr, sport=SPORT) == (Verdict.BAD, None)


# IPv4 without the header: 17 of the 32 ICRC bits go to recovering the ID
# and DF, so single-bit errors are caught only where x^k (k = distance from
# the IP ID to the flipped bit) is not in the span of the 17 ID/DF syndromes.
# For the first 173 bytes after the BTH start there is no such k: every
# single-bit error in a UDP payload of up to 173 bytes (BTH..ICRC; in
# practice 172, lengths being 4-byte multiples) is BAD.

def test_id_recovery_detects_every_single_bit_error_up_to_173_bytes():
    src, dst = a4(SRC4), a4(DST4)
    rng = random.Random(173)
    for ib in (build(Opcode.RC_SEND_ONLY, 0xA1, 0x10, bytes(rng.randrange(256) for _ in range(155))),  # 172 B
               build(Opcode.UD_SEND_ONLY, 0x12, 0x20, b"q" * 100, deth=(0x11111111, 0x11)),
               build(Opcode.RC_RDMA_WRITE_ONLY, 0x14, 0x30, b"w" * 41, reth=(1, 2, 41))):
        for ident, df in ((0, True), (0xBEEF, False)):
            up = Ipv4Flow(src, dst, SPORT, ident=ident, df=df).encap(ib)
            assert len(up) <= 172
            assert verify(up, src=src, dst=dst, sport=SPORT) == (Verdict.ID_RECOVERED, ident | df << 16)
            for bit in range(8 * len(up)):
                if bit in MASKED_BITS:
                    continue
                assert verify(_flip(up, [bit]), src=src, dst=dst, sport=SPORT) == (Verdict.BAD, None), bit
    # every ICRC bit, every packet length from the minimum to 173 bytes
    for n in range(16, 174):
        ib = build(Opcode.RC_SEND_ONLY, 1, 2, b"p" * (n - 16)) if n % 4 == 0 else None
        if ib is None:
            continue
        up = Ipv4Flow(src, dst, SPORT, ident=n, df=True).encap(ib)
        for bit in range(8 * (n - 4), 8 * n):
            assert verify(_flip(up, [bit]), src=src, dst=dst, sport=SPORT)[0] is Verdict.BAD


def test_id_recovery_blind_spots():
    """Beyond 173 bytes some single-bit errors are accepted (and report a
    wrong ID): the documented 2^-15 price of not seeing the IPv4 header.
    Pin exactly where they are for packets up to 2 kB, so a change in the
    recovery (or in what it covers) shows up here."""
    src, dst = a4(SRC4), a4(DST4)
    ib = build(Opcode.RC_SEND_ONLY, 0xA1, 0x10, bytes(random.Random(2).randrange(256) for _ in range(2032)))
    up = Ipv4Flow(src, dst, SPORT, ident=0x4242, df=True).encap(ib)
    accepted = {}
    for byte in range(len(up)):
        for k in range(8):
            if byte == 4:
                continue
            bad = bytearray(up)
            bad[byte] ^= 1 << k
            verdict, got = verify(bad, src=src, dst=dst, sport=SPORT)
            if verdict is not Verdict.BAD:
                accepted[(byte, 1 << k)] = got
    assert set(accepted) == {(173, 0x08), (1834, 0x40)}
    assert all(v != 0x4242 | 1 << 16 for v in accepted.values())
    # with the real header both are caught
    hdr = ipv4_header(src, dst, len(up), ident=0x4242)
    for byte, mask in accepted:
        bad = bytearray(up)
        bad[byte] ^= mask
        assert verify(bad, ip_hdr=hdr, sport=SPORT) == (Verdict.BAD, None)


# --- UDP source port ---------------------------------------------------------------------------

def test_udp_sport_matches_rxe_captures():
    # NOTES.md: "0x15 x 0xa1 -> 52533, 0x16 x 0xa1 -> 52694, 0x21 x 0xa1 -> 54465"
    assert udp_sport(0x15, 0xA1) == 52533
    assert udp_sport(0x16, 0xA1) == 52694
    assert udp_sport(0x21, 0xA1) == 54465
    assert udp_sport(0xA1, 0x16) == 52694            # symmetric in the QPNs


def _kernel_sport(fl, lqpn, rqpn):
    """rdma_get_udp_sport() transcribed from include/rdma/ib_verbs.h."""
    if not fl:
        v = (lqpn * rqpn) & 0xFFFFFFFFFFFFFFFF
        v ^= v >> 20
        v ^= v >> 40
        fl = v & 0xFFFFF
    fl_low, fl_high = fl & 0x03FFF, fl & 0xFC000
    fl_low ^= fl_high >> 14
    return (fl_low | 0xC000) & 0xFFFF


@PROPS
@given(lqpn=st.integers(0, 0xFFFFFF), rqpn=st.integers(0, 0xFFFFFF), fl=st.integers(0, 0xFFFFF))
def test_udp_sport_property(lqpn, rqpn, fl):
    assert udp_sport(lqpn, rqpn) == _kernel_sport(0, lqpn, rqpn)
    assert udp_sport(lqpn, rqpn, fl) == _kernel_sport(fl, lqpn, rqpn)
    assert 0xC000 <= udp_sport(lqpn, rqpn, fl) <= 0xFFFF


def test_lrh_seed_is_eight_ff_bytes():
    # the masked LRH the ICRC starts with (rxe: 0xffffffff... 8 bytes)
    ib = CASES["ack_aeth"]()
    ip_hdr = ipv4_header(a4(SRC4), a4(DST4), len(ib) + 4)
    udp = udp_header(SPORT, 4791, len(ib) + 4)
    m_ip = bytearray(ip_hdr)
    m_ip[1], m_ip[8], m_ip[10:12] = 0xFF, 0xFF, b"\xff\xff"
    m_udp = bytearray(udp)
    m_udp[6:8] = b"\xff\xff"
    m_ib = bytearray(ib)
    m_ib[4] = 0xFF
    assert icrc(ip_hdr, udp, ib) == zlib.crc32(b"\xff" * 8 + m_ip + m_udp + m_ib)
