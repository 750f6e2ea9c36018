"""The ICRC's CRC-32 (ISA-L's, ``wire.icrc.crc32``) and the one-call paths of
``Ipv4Flow.icrc`` and ``verify`` give exactly what the standard library's
zlib gave through the previous, call-per-field implementation -- kept here,
frozen, as the reference -- over random packets, headers, IDs and damage.
(Agreement with scapy and with captures from a real rxe peer is
tests/test_wire_icrc_scapy.py's.)
"""

from __future__ import annotations

import importlib
import ipaddress
import platform
import struct
import tomllib
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from softrdma.wire.icrc import ICRC, Ipv4Flow, Verdict, icrc, ipv4_header, ipv6_header, udp_header, verify
from test_wire_icrc_scapy import random_ib

I = importlib.import_module("softrdma.wire.icrc")   # the module (softrdma.wire.icrc is also a function's name)
PROPS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --- the reference: the implementation before the change, on zlib -------------------------

_SEED = zlib.crc32(b"\xff" * 8)
_V4M = struct.Struct(">BBHHHBBH4s4sHHHH")


def ref_icrc(ip_hdr, udp_hdr, ib_pkt) -> int:
    """The definition, in one piece: CRC-32 over the masked LRH, IP, UDP and
    BTH (rxe_icrc.c)."""
    ip = bytearray(ip_hdr)
    if ip[0] >> 4 == 4:
        ip[1] = ip[8] = 0xFF
        ip[10:12] = b"\xff\xff"
    else:
        ip[0] |= 0x0F
        ip[1:4] = b"\xff\xff\xff"
        ip[7] = 0xFF
    udp = bytearray(udp_hdr)
    udp[6:8] = b"\xff\xff"
    ib = bytearray(ib_pkt)
    if len(ib) > 4:
        ib[4] = 0xFF
    return zlib.crc32(b"\xff" * 8 + ip + udp + ib)


def ref_flow_icrc(src, dst, sport, dport, ident, df, ib_pkt) -> int:
    udp_len = 8 + len(ib_pkt) + 4
    crc = zlib.crc32(_V4M.pack(0x45, 0xFF, 20 + udp_len, ident, 0x4000 if df else 0, 0xFF,
                               17, 0xFFFF, src, dst, sport, dport, udp_len, 0xFFFF), _SEED)
    crc = zlib.crc32(ib_pkt[0:4], crc)
    crc = zlib.crc32(b"\xff", crc)
    return zlib.crc32(ib_pkt[5:], crc)


def ref_verify_v4(udp_payload, src, dst, sport, dport):
    """verify() for IPv4 without the header, by exhaustion: the ICRC under
    every one of the 2^17 (ident, DF) values, compared with the wire's.
    (CRC-32 is affine in the message, so the ICRC for (ident, DF) is the one
    for (0, 0) XOR the deltas of its ID high byte, low byte and DF, each
    computed here with zlib over whole headers.)"""
    n = len(udp_payload)
    if n < 16:
        return Verdict.BAD, None
    body = bytes(udp_payload[:n - 4])
    (wire,) = ICRC.unpack_from(udp_payload, n - 4)
    f = lambda ident, df: ref_flow_icrc(src, dst, sport, dport, ident, df, body)  # noqa: E731
    base = f(0, False)
    hi = [f(v << 8, False) ^ base for v in range(256)]
    lo = [f(v, False) ^ base for v in range(256)]
    dfd = f(0, True) ^ base
    want = wire ^ base
    hits = [(h << 8 | v) | d << 16 for d in (0, 1) for h in range(256)
            for v in range(256) if hi[h] ^ lo[v] ^ (dfd if d else 0) == want]
    assert len(hits) <= 1                 # the 17 unseen bits never alias
    if not hits:
        return Verdict.BAD, None
    assert f(hits[0] & 0xFFFF, hits[0] >> 16) == wire
    return Verdict.ID_RECOVERED, hits[0]


# --- the CRC function itself -------------------------------------------------------------

@PROPS
@given(data=st.binary(max_size=9000), seed=st.integers(0, 2**32 - 1), skip=st.integers(0, 7),
       kind=st.sampled_from(["bytes", "bytearray", "memoryview"]))
def test_crc32_is_zlibs(data, seed, skip, kind):
    buf = {"bytes": bytes, "bytearray": bytearray, "memoryview": lambda d: memoryview(bytearray(d))}[kind](data)
    view = buf[skip:] if kind != "bytes" else memoryview(buf)[skip:]
    assert I.crc32(view, seed) == zlib.crc32(view, seed)
    assert I.crc32(buf) == zlib.crc32(buf)


def test_crc32_is_isal_where_pyproject_requires_it():
    """pyproject.toml requires isal on the machines PyPI has wheels for;
    there the ICRC must not have fallen back to zlib."""
    deps = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())["project"]["dependencies"]
    spec = [d for d in deps if d.startswith("isal")]
    assert spec, "isal is a declared dependency"
    if platform.machine() in ("x86_64", "aarch64", "AMD64", "arm64"):
        assert I.CRC32_IMPL == "isal"


# --- the ICRC over random packets --------------------------------------------------------

ipv4 = st.integers(0, 2**32 - 1).map(lambda v: ipaddress.IPv4Address(v).packed)
ipv6 = st.integers(0, 2**128 - 1).map(lambda v: ipaddress.IPv6Address(v).packed)
port = st.integers(0, 0xFFFF)


@PROPS
@given(ib=random_ib(), src=ipv4, dst=ipv4, sport=port, dport=port, ident=port, df=st.booleans(),
       ttl=st.integers(0, 255), tos=st.integers(0, 255), udp_csum=port, as_view=st.booleans())
def test_ipv4_icrc_and_flow_match_reference(ib, src, dst, sport, dport, ident, df, ttl, tos, udp_csum, as_view):
    n = len(ib) + 4
    ip = ipv4_header(src, dst, n, ident=ident, df=df, ttl=ttl, tos=tos)
    udp = udp_header(sport, dport, n, udp_csum)
    pkt = memoryview(bytearray(ib)) if as_view else bytes(ib)
    want = ref_icrc(ip, udp, ib)
    assert icrc(ip, udp, pkt) == want
    assert ref_flow_icrc(src, dst, sport, dport, ident, df, bytes(ib)) == want
    flow = Ipv4Flow(src, dst, sport, dport, ident=ident, df=df)
    assert flow.icrc(pkt) == want
    assert Ipv4Flow(src, dst, sport, dport, df=df).icrc(pkt, ident) == want


@PROPS
@given(ib=random_ib(), src=ipv6, dst=ipv6, sport=port, tclass=st.integers(0, 255),
       flow_label=st.integers(0, 0xFFFFF), hop=st.integers(0, 255))
def test_ipv6_icrc_matches_reference(ib, src, dst, sport, tclass, flow_label, hop):
    n = len(ib) + 4
    ip = ipv6_header(src, dst, n, tclass=tclass, flow_label=flow_label, hop_limit=hop)
    udp = udp_header(sport, 4791, n)
    assert icrc(ip, udp, ib) == ref_icrc(ip, udp, ib)
    assert verify(bytes(ib) + ICRC.pack(ref_icrc(ip, udp, ib)), src=src, dst=dst, sport=sport) == (
        Verdict.FULL, None)


@pytest.mark.parametrize("n", range(0, 8))
def test_flow_icrc_of_packets_shorter_than_a_bth(n):
    """Never sent (verify() rejects them), but defined as before: the
    masked byte 4 is appended when the packet has none."""
    ib = bytes(range(1, n + 1))
    src, dst = bytes((10, 0, 0, 1)), bytes((10, 0, 0, 2))
    want = ref_flow_icrc(src, dst, 1000, 4791, 7, True, ib)
    assert Ipv4Flow(src, dst, 1000, ident=7).icrc(ib) == want
    assert Ipv4Flow(src, dst, 1000, ident=7).icrc(memoryview(ib)) == want


# --- verify(): identical verdicts --------------------------------------------------------

@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ib=random_ib(), src=ipv4, dst=ipv4, sport=port, ident=port, df=st.booleans(),
       damage=st.one_of(st.none(), st.tuples(st.integers(0, 10_000), st.integers(1, 255))),
       expect=st.integers(0, (1 << 17) - 1), as_view=st.booleans())
def test_verify_ipv4_matches_reference(ib, src, dst, sport, ident, df, damage, expect, as_view):
    """Intact and damaged datagrams, any ``expect`` hint: the same verdict and
    recovered ID as a brute-force search of the reference."""
    up = bytearray(bytes(ib) + ICRC.pack(ref_flow_icrc(src, dst, sport, 4791, ident, df, bytes(ib))))
    if damage is not None:
        up[damage[0] % len(up)] ^= damage[1]
    arg = memoryview(up) if as_view else bytes(up)
    got = verify(arg, src=src, dst=dst, sport=sport, expect=expect)
    assert got == ref_verify_v4(bytes(up), src, dst, sport, 4791)
    if damage is None:
        assert got == (Verdict.ID_RECOVERED, ident | df << 16)


@PROPS
@given(ib=random_ib(), src=ipv4, dst=ipv4, sport=port, ident=port, df=st.booleans(),
       damage=st.one_of(st.none(), st.tuples(st.integers(0, 10_000), st.integers(1, 255))))
def test_verify_full_matches_reference(ib, src, dst, sport, ident, df, damage):
    n = len(ib) + 4
    ip = ipv4_header(src, dst, n, ident=ident, df=df)
    up = bytearray(bytes(ib) + ICRC.pack(ref_icrc(ip, udp_header(sport, 4791, n), ib)))
    if damage is not None:
        up[damage[0] % len(up)] ^= damage[1]
    want = ref_icrc(ip, udp_header(sport, 4791, n), up[:-4]) == ICRC.unpack_from(up, n - 4)[0]
    assert verify(up, ip_hdr=ip, sport=sport) == ((Verdict.FULL if want else Verdict.BAD), None)
