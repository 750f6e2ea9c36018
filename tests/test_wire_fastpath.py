"""The data path's per-packet loops (softrdma.wire.fastpath): the compiled
functions against the Python reference, byte for byte, on the same inputs;
the reference against the independent checks (``icrc.verify``, scapy's
RoCE ICRC, ``packet.rx_check``)."""

from __future__ import annotations

import os
import random

import pytest
from hypothesis import given, settings, strategies as st

from softrdma.wire import fastpath as F
from softrdma.wire.errors import WireError
from softrdma.wire.icrc import COMBO_DF, ICRC, Ipv4Flow, Verdict, verify
from softrdma.wire.packet import rx_check

try:
    from softrdma.wire import _fastpath as C
except ImportError:                # CI builds the extension: its absence there is a failure, not a skip
    if os.environ.get("CI") == "true":
        raise
    pytest.skip("the compiled data path is not built here", allow_module_level=True)

SRC, DST = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
MTUS = (256, 512, 1024, 2048, 4096)


def test_the_compiled_loops_are_the_ones_in_use():
    """Where the extension is built (as by CI's install), it runs -- with
    ISA-L's CRC-32 when isal is installed -- unless the environment asks
    for the reference."""
    assert F.IMPL == "c"
    assert F.build_middles is C.build_middles
    assert C.crc32(b"123456789") == 0xCBF43926


def test_set_crc32_refuses_a_function_that_is_not_crc32():
    import ctypes
    libc = ctypes.CDLL(None)
    with pytest.raises(ValueError):
        C.set_crc32(ctypes.cast(libc.abs, ctypes.c_void_p).value)     # abs(crc) is no CRC-32
    assert C.crc32(b"abc") == 0x352441C2                               # the one in use is kept


def bth(opcode=0x07, dqpn=0x1234, pkey=0xFFFF, se=0, pad=0) -> bytes:
    return bytes([opcode, (se << 7) | (pad << 4), pkey >> 8, pkey & 0xFF, 0, dqpn >> 16, (dqpn >> 8) & 0xFF,
                  dqpn & 0xFF, 0, 0, 0, 0])


def build_both(mtu, count, psn0, ackreq, payload=None, hdr=None, sport=4791, dport=4791):
    payload = os.urandom(mtu * count) if payload is None else payload
    hdr = bth() if hdr is None else hdr
    outs = []
    for fn in (C.build_middles, F.py_build_middles):
        out = bytearray(count * (mtu + 16))
        n = fn(out, hdr, payload, mtu, count, psn0, ackreq, SRC, DST, sport, dport)
        outs.append((n, out))
    assert outs[0] == outs[1]
    return outs[0][1], payload


@settings(max_examples=60, deadline=None)
@given(mtu=st.sampled_from(MTUS), count=st.integers(1, 64), psn0=st.integers(0, 0xFFFFFF),
       ackreq=st.booleans(), sport=st.integers(1, 0xFFFF))
def test_build_middles_c_equals_reference_and_every_segment_verifies(mtu, count, psn0, ackreq, sport):
    out, payload = build_both(mtu, count, psn0, ackreq, sport=sport)
    stride = mtu + 16
    for k in range(count):
        seg = memoryview(out)[k * stride:(k + 1) * stride]
        # the independent check: the ICRC holds for IP ID k with DF
        assert verify(seg, src=SRC, dst=DST, sport=sport, dport=4791, expect=COMBO_DF | k) == \
            (Verdict.ID_RECOVERED, COMBO_DF | k)
        psn = (psn0 + k) & 0xFFFFFF
        assert int.from_bytes(seg[9:12], "big") == psn
        assert seg[8] == (0x80 if ackreq and k == count - 1 else 0)
        assert bytes(seg[12:12 + mtu]) == payload[k * mtu:(k + 1) * mtu]
        assert rx_check(seg[:-4]) == 0x1234


def test_build_middles_icrc_matches_scapy():
    """scapy, given the IPv4 header the kernel emits for segment k of a GSO
    send (ID k, DF), computes the same ICRC."""
    pytest.importorskip("scapy.contrib.roce")
    from test_wire_icrc_scapy import ip4, scapy_frame, split
    out, _ = build_both(256, 3, 0xFFFFFF, True)
    for k in range(3):
        seg = bytes(out[k * 272:(k + 1) * 272])
        frame = scapy_frame(seg[:-4], ip4(src="10.0.0.1", dst="10.0.0.2", id=k, flags="DF"), sport=4791,
                            udp_chksum=0)
        assert split(frame)[2] == seg[:-4] and split(frame)[3] == seg[-4:]


@pytest.mark.parametrize("bad", [dict(hdr=b"\0" * 11), dict(mtu=0), dict(mtu=1022), dict(count=0),
                                 dict(count=65), dict(src=b"\0" * 16), dict(short_out=True),
                                 dict(short_payload=True)])
def test_build_middles_refuses_what_it_cannot_build(bad):
    mtu, count = bad.get("mtu", 256), bad.get("count", 2)
    out = bytearray(max(0, count * (mtu + 16) - (1 if bad.get("short_out") else 0)))
    payload = bytes(max(0, mtu * count - (1 if bad.get("short_payload") else 0)))
    for fn in (C.build_middles, F.py_build_middles):
        with pytest.raises(ValueError):
            fn(out, bad.get("hdr", bth()), payload, mtu, count, 0, False, bad.get("src", SRC), DST, 4791, 4791)


def segments_of(pkts: list[bytes], sport=4791) -> tuple[bytearray, int, int]:
    """A GRO buffer of these packets (ICRC for IP ID k appended)."""
    flow = Ipv4Flow(SRC, DST, sport, 4791)
    seg = max(len(p) for p in pkts) + 4
    buf = bytearray()
    for k, p in enumerate(pkts):
        buf += p + ICRC.pack(flow.icrc(p, k))
    return buf, len(buf), seg


def both_verify(buf, n, seg, sport=4791):
    got = C.verify_segments(buf, n, seg, SRC, DST, sport, 4791)
    assert got == F.py_verify_segments(buf, n, seg, SRC, DST, sport, 4791)
    return got


def test_verify_segments_takes_a_clean_buffer_and_names_its_qp():
    out, _ = build_both(1024, 15, 5, True)
    assert both_verify(out, len(out), 1040) == 0x1234
    # a shorter last datagram (a LAST packet, as GRO appends it)
    last = bth(0x08) + bytes(100)
    buf, n, seg = segments_of([bytes(out[i * 1040:(i + 1) * 1040 - 4]) for i in range(3)] + [last])
    assert seg == 1040 and both_verify(buf, n, seg) == 0x1234


@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_verify_segments_refuses_any_damage(data):
    """Any flipped bit, a datagram for another QP, a wrong IP ID (a packet
    out of its GSO position), bad framing: -1, so the checked path takes it."""
    out, _ = build_both(256, 4, 0, False)
    n = len(out)
    kind = data.draw(st.sampled_from(["bit", "qp", "swap", "opcode", "tver", "pad", "short"]))
    buf = bytearray(out)
    if kind == "bit":
        bit = data.draw(st.integers(0, n * 8 - 1))
        buf[bit >> 3] ^= 1 << (bit & 7)
    elif kind == "qp":
        pkts = [bytes(out[i * 272:(i + 1) * 272 - 4]) for i in range(4)]
        pkts[2] = pkts[2][:7] + b"\x35" + pkts[2][8:]
        buf, n, _ = segments_of(pkts)
    elif kind == "swap":                 # two segments exchanged: each has the other's IP ID
        buf[0:272], buf[272:544] = out[272:544], out[0:272]
    elif kind == "short":                # 11 bytes: no room for a BTH
        buf = bytearray(out[:11]) + bytes(4)
        n = len(buf)
    else:
        pkt = bytearray(out[:268])
        if kind == "opcode":
            pkt[0] = 0x1F                # no such RC opcode
        elif kind == "tver":
            pkt[1] |= 1
        else:                            # 2 bytes of payload, pad 1: not a multiple of 4
            pkt = bytearray(bth(0x07, pad=1)) + bytes(2)
        buf, n, _ = segments_of([bytes(pkt)])
    if kind == "bit" and (bit >> 3) % 272 == 4:
        # BTH byte 4 (FECN, BECN, resv6) is what the ICRC leaves out: a switch may set it
        assert both_verify(buf, n, 272) == 0x1234
        return
    assert both_verify(buf, n, 272) == -1
    # the per-packet path agrees that something is wrong with it
    if kind in ("bit", "swap"):
        bad = []
        for k in range(4):
            seg = memoryview(buf)[k * 272:(k + 1) * 272]
            bad.append(verify(seg, src=SRC, dst=DST, sport=4791, dport=4791, expect=COMBO_DF | k)
                       != (Verdict.ID_RECOVERED, COMBO_DF | k))
        assert any(bad)
    elif kind in ("opcode", "tver", "pad", "short"):
        with pytest.raises(WireError):
            rx_check(memoryview(buf)[:n - 4])


def test_verify_segments_framing_agrees_with_rx_check_for_every_opcode():
    """Every opcode with a 0-, 4- and 8-byte payload and every pad: the
    fast check takes exactly what ``rx_check`` takes."""
    rng = random.Random(7)
    for op in range(256):
        for plen in (0, 4, 8, 3):
            for pad in range(4):
                hl = F._OP_TABLE[op] & 0x7F or 12
                pkt = bytes(bth(op, pad=pad)) + bytes(rng.randrange(256) for _ in range(hl - 12 + plen))
                try:
                    rx_check(pkt)
                    ok = True
                except WireError:
                    ok = False
                buf, n, seg = segments_of([pkt])
                assert (both_verify(buf, n, seg) == 0x1234) == ok, (hex(op), plen, pad)


def place_both(buf, off, end, stride, opcode, psn, pkey, mtu, dst_len, dst_off, room):
    dc, dp = bytearray(dst_len), bytearray(dst_len)
    rc = C.place_middles(buf, off, end, stride, opcode, psn, pkey, mtu, dc, dst_off, room)
    rp = F.py_place_middles(buf, off, end, stride, opcode, psn, pkey, mtu, dp, dst_off, room)
    assert rc == rp and dc == dp
    return rc, dc


@settings(max_examples=80, deadline=None)
@given(mtu=st.sampled_from((256, 1024)), count=st.integers(1, 20), psn0=st.integers(0xFFFFF0, 0x100000F),
       data=st.data())
def test_place_middles_c_equals_reference(mtu, count, psn0, data):
    psn0 &= 0xFFFFFF
    out, payload = build_both(mtu, count, psn0, data.draw(st.booleans()))
    stride = mtu + 16
    # stop conditions: a packet with another opcode / PSN / P_Key / pad, too little room
    k = data.draw(st.integers(0, count - 1))
    change = data.draw(st.sampled_from(["none", "opcode", "psn", "pkey", "pkey_member", "pad", "room", "dst"]))
    if change == "opcode":
        out[k * stride] = 0x08
    elif change == "psn":
        out[k * stride + 11] ^= 1
    elif change == "pkey":
        out[k * stride + 3] ^= 0x01
    elif change == "pkey_member":           # the membership bit is not compared
        out[k * stride + 2] ^= 0x80
    elif change == "pad":
        out[k * stride + 1] |= 0x10
    room = k * mtu if change == "room" else count * mtu
    dst_len = 8 + k * mtu if change == "dst" else 8 + count * mtu
    (placed, ack, nacks), dst = place_both(out, 0, len(out), stride, 0x07, psn0, 0xFFFF, mtu, dst_len, 8, room)
    expect = k if change in ("opcode", "psn", "pkey", "pad", "room", "dst") else count
    assert placed == expect
    assert dst[8:8 + placed * mtu] == payload[:placed * mtu]
    assert nacks == sum(1 for i in range(placed) if out[i * stride + 8] & 0x80)


def test_place_middles_refuses_a_stride_that_is_not_a_middle():
    out, _ = build_both(256, 2, 0, False)
    assert place_both(out, 0, len(out), 276, 0x07, 0, 0xFFFF, 256, 1024, 0, 1024)[0] == (0, -1, 0)
    assert place_both(out, 0, len(out) + 1, 272, 0x07, 0, 0xFFFF, 256, 1024, 0, 1024)[0] == (0, -1, 0)


def test_segment_run_packets_are_the_built_segments_without_icrc():
    payload = os.urandom(4 * 512)
    run = F.SegmentRun(bth(0x01), 0xFFFFFE, 4, 512, memoryview(payload), True)
    out, _ = build_both(512, 4, 0xFFFFFE, True, payload=payload, hdr=bth(0x01))
    assert [bytes(p) for p in run.packets()] == [bytes(out[i * 528:(i + 1) * 528 - 4]) for i in range(4)]
    assert len(run) == 4 * 524
    segs = F.Segments(memoryview(out), len(out) - 100, 528, 0x1234)
    assert segs.count == 4 and [len(p) for p in segs.packets()] == [524, 524, 524, 424]


@settings(max_examples=60, deadline=None)
@given(n=st.integers(12, 300), ident=st.integers(0, 0xFFFF), sport=st.integers(1, 0xFFFF), data=st.data())
def test_icrc_v4_c_equals_reference_and_ipv4flow(n, ident, sport, data):
    pkt = data.draw(st.binary(min_size=n, max_size=n))
    got = C.icrc_v4(pkt, ident, SRC, DST, sport, 4791)
    assert got == F.py_icrc_v4(pkt, ident, SRC, DST, sport, 4791)
    assert got == ICRC.pack(Ipv4Flow(SRC, DST, sport, 4791).icrc(pkt, ident))


def test_icrc_v4_refuses_a_packet_without_a_bth():
    for fn in (C.icrc_v4, F.py_icrc_v4):
        with pytest.raises(ValueError):
            fn(b"\0" * 11, 0, SRC, DST, 4791, 4791)


def test_build_middles_with_its_last():
    """A run may end with the message's LAST (its own BTH template): the C
    and Python builds agree and only the final segment carries it."""
    payload = os.urandom(5 * 256)
    last = bth(0x08, se=1)
    outs = []
    for fn in (C.build_middles, F.py_build_middles):
        out = bytearray(5 * 272)
        fn(out, bth(), payload, 256, 5, 10, True, SRC, DST, 4791, 4791, last)
        outs.append(out)
    assert outs[0] == outs[1]
    assert [outs[0][k * 272] for k in range(5)] == [0x07] * 4 + [0x08] and outs[0][4 * 272 + 1] == 0x80
    run = F.SegmentRun(bth(), 10, 5, 256, memoryview(payload), True, last)
    assert [bytes(p) for p in run.packets()] == [bytes(outs[0][k * 272:(k + 1) * 272 - 4]) for k in range(5)]
    for fn in (C.build_middles, F.py_build_middles):
        with pytest.raises(ValueError):
            fn(bytearray(544), bth(), payload, 256, 2, 0, False, SRC, DST, 4791, 4791, b"\0" * 5)


def test_build_middles_with_its_first_and_a_later_place_in_the_send():
    """A SEND's run starts with its FIRST (as long as a MIDDLE) and may
    start part-way through a GSO send (``id0``): the C and Python builds
    agree, the FIRST's template is used once, each ICRC is for IP ID id0 + i."""
    payload = os.urandom(4 * 256)
    first, last = bth(0x00), bth(0x02)
    outs = []
    for fn in (C.build_middles, F.py_build_middles):
        out = bytearray(4 * 272)
        fn(out, bth(0x01), payload, 256, 4, 0xFFFFFF, True, SRC, DST, 4791, 4791, last, first, 9)
        outs.append(out)
    assert outs[0] == outs[1]
    assert [outs[0][k * 272] for k in range(4)] == [0x00, 0x01, 0x01, 0x02]
    for k in range(4):
        seg = memoryview(outs[0])[k * 272:(k + 1) * 272]
        assert verify(seg, src=SRC, dst=DST, sport=4791, dport=4791, expect=COMBO_DF | (9 + k)) == \
            (Verdict.ID_RECOVERED, COMBO_DF | (9 + k))
    run = F.SegmentRun(bth(0x01), 0xFFFFFF, 4, 256, memoryview(payload), True, last, first)
    assert [bytes(p) for p in run.packets()] == [bytes(outs[0][k * 272:(k + 1) * 272 - 4]) for k in range(4)]
    for fn in (C.build_middles, F.py_build_middles):
        with pytest.raises(ValueError):           # beyond the 64 segments of one GSO send
            fn(bytearray(4 * 272), bth(0x01), payload, 256, 4, 0, False, SRC, DST, 4791, 4791, b"", b"", 61)
