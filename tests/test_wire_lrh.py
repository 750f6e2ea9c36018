"""wire.lrh (native IB packets: LRH, GRH, ICRC, VCRC) and wire.fabriclink
(the device <-> fabric server messages)."""

import struct
from zlib import crc32

import pytest

from softrdma.wire import fabriclink as fl
from softrdma.wire import lrh
from softrdma.wire.errors import WireError
from softrdma.wire.headers import BTH, DETH
from softrdma.wire.icrc import icrc as roce_icrc, ipv4_header, udp_header

BTH_UD = BTH.pack(0x64, 0, 0xFFFF, 0x12, 5)
PAYLOAD = BTH_UD + DETH.pack(0x11111111, 0x33) + b"hello world!"


def test_lrh_fields_round_trip():
    b = lrh.pack_lrh(vl=15, sl=9, lnh=lrh.LNH_IBA_GLOBAL, dlid=0xC001, slid=0x1234, pkt_len=0x7FF)
    assert lrh.parse_lrh(b) == lrh.Lrh(15, 0, 9, 3, 0xC001, 0x7FF, 0x1234)


def test_encap_decap_local_and_global():
    p = lrh.encap(PAYLOAD, dlid=3, slid=1, sl=2)
    assert len(p) == 8 + len(PAYLOAD) + 4 + 2
    h, grh, ib = lrh.decap(p)
    assert (h.dlid, h.slid, h.sl, h.lnh, h.pkt_len * 4) == (3, 1, 2, lrh.LNH_IBA_LOCAL, len(p) - 2)
    assert grh is None and bytes(ib) == PAYLOAD
    g = lrh.pack_grh(sgid=bytes(range(16)), dgid=bytes(range(16, 32)), pay_len=len(PAYLOAD) + 4)
    p = lrh.encap(PAYLOAD, dlid=3, slid=1, grh=g)
    h, grh, ib = lrh.decap(p)
    assert h.lnh == lrh.LNH_IBA_GLOBAL and bytes(grh) == g and bytes(ib) == PAYLOAD
    assert lrh.parse_grh(grh).dgid == bytes(range(16, 32))


def test_every_corrupted_bit_is_caught():
    p = lrh.encap(PAYLOAD, dlid=3, slid=1)
    for i in range(len(p) * 8):
        b = bytearray(p)
        b[i // 8] ^= 1 << (i % 8)
        with pytest.raises(WireError):
            lrh.decap(b)


def test_variant_fields_do_not_change_the_icrc():
    """VL, TClass, FlowLabel, HopLmt, FECN/BECN are outside the ICRC: a
    switch may change them and fix only the VCRC."""
    g = lrh.pack_grh(sgid=bytes(16), dgid=bytes(16), pay_len=len(PAYLOAD) + 4)
    p = bytearray(lrh.encap(PAYLOAD, dlid=3, slid=1, grh=g))
    icrc0 = p[-6:-2]
    lrh.set_vl(p, 7)
    p[8 + 1] ^= 0xFF                    # traffic class / flow label bits
    p[8 + 7] = 3                        # hop limit
    p[8 + 40 + 4] |= 0xC0               # FECN, BECN
    end = len(p) - 2
    struct.pack_into("<H", p, end, lrh.vcrc(p[:end]))
    assert p[-6:-2] == icrc0
    assert lrh.decap(p)[0].vl == 7


def test_icrc_is_rocev2s_with_the_lrh_in_place_of_ones():
    """RoCEv2's ICRC is the IB one with 8 bytes of ones for the LRH; both
    are the same CRC, so over identical bytes they agree."""
    ip = ipv4_header(bytes(4), bytes(4), 8 + len(PAYLOAD) + 4)
    udp = udp_header(0xC000, 4791, len(PAYLOAD) + 4)
    masked = bytearray(ip)
    masked[1] = masked[8] = 0xFF
    masked[10:12] = b"\xff\xff"
    ref = crc32(bytes(PAYLOAD[:4]) + b"\xff" + bytes(PAYLOAD[5:]),
                crc32(bytes(udp[:6]) + b"\xff\xff", crc32(bytes(masked), crc32(b"\xff" * 8))))
    assert roce_icrc(ip, udp, PAYLOAD) == ref


def test_compiled_vcrc_is_the_reference():
    """Every length around the compiled loops' steps (256- and 64-byte folds, then
    16-byte ones, then bytes) and packet sizes, against the Python
    reference; large buffers against the compiled table loop."""
    import random
    from softrdma.wire import fastpath
    r = random.Random(5)
    for n in [*range(0, 300), 2048 + 28, 4096 + 30, 4096 + 70]:
        data = r.randbytes(n)
        assert fastpath.vcrc(data) == fastpath.py_vcrc(data), n
    c = fastpath._C
    assert c is not None, "the compiled module is built (setup.py build_ext)"
    for n in (64 * 1024, 256 * 1024 + 13):
        data = r.randbytes(n)
        assert c.vcrc(data) == c.vcrc_table(data), n


def test_vcrc_reference_value():
    # CRC-16 poly 0x100B reflected (0xD008), init 0xFFFF, xorout 0xFFFF:
    # the check value over "123456789", computed bit by bit
    c = 0xFFFF
    for b in b"123456789":
        c ^= b
        for _ in range(8):
            c = (c >> 1) ^ 0xD008 if c & 1 else c >> 1
    assert lrh.vcrc(b"123456789") == c ^ 0xFFFF


def test_decap_refuses_bad_lengths_and_lnh():
    p = lrh.encap(PAYLOAD, dlid=3, slid=1)
    with pytest.raises(WireError):
        lrh.decap(p[:-4])
    with pytest.raises(WireError):
        lrh.decap(p + b"\0\0\0\0")
    b = bytearray(p)
    b[1] = b[1] & 0xFC                  # LNH raw
    with pytest.raises(WireError):
        lrh.decap(b)
    with pytest.raises(WireError):
        lrh.decap(b"\0" * 10)


def test_fabriclink_messages_round_trip():
    m = fl.pack_attach(1, "H-0001 HCA-1", "mlx5_0")
    assert fl.msg_type(m) is fl.MsgType.ATTACH
    assert fl.parse_attach(m) == (1, "H-0001 HCA-1", "mlx5_0")
    m = fl.pack_port_info(bytes(range(40)), bytes(64), bytes(64), (0xFFFF, 0x8001))
    pi = fl.parse_port_info(m)
    assert pi.node_info == bytes(range(40)) and pi.pkeys == (0xFFFF, 0x8001)
    pkts = [bytes([i]) * (i * 100 + 30) for i in range(1, 40)]
    msgs = list(fl.batches(pkts, limit=4096))
    assert len(msgs) > 1 and all(len(x) <= 4096 for x in msgs)
    assert [bytes(p) for x in msgs for p in fl.iter_packets(x)] == pkts
    assert fl.parse_error(fl.pack_error(16, "port taken")) == (16, "port taken")
    m = fl.pack_port_cap(1 << 1, 1 << 5)
    assert fl.msg_type(m) is fl.MsgType.PORT_CAP and fl.parse_port_cap(m) == (2, 32)


def test_fabriclink_refuses_malformed():
    for bad in (b"", b"\x03", b"\x09\x01\0\0", b"\x03\x02\0\0"):
        with pytest.raises(WireError):
            fl.msg_type(bad)
    m = bytearray(fl.pack_packets([b"abcd", b"efgh"]))
    with pytest.raises(WireError):
        list(fl.iter_packets(m[:-1]))
    with pytest.raises(WireError):
        list(fl.iter_packets(m + b"x"))
    with pytest.raises(WireError):
        fl.parse_port_info(fl.pack_port_info(bytes(40), bytes(64), bytes(64), (1,))[:-1])
    with pytest.raises(WireError):
        fl.parse_attach(fl.HDR.pack(1, 1, 0) + b"\x01\0\0\0")
    with pytest.raises(WireError):
        fl.parse_port_cap(fl.pack_port_cap(2)[:-1])


def test_data_socket_path(monkeypatch):
    monkeypatch.setenv(fl.DIR_ENV, "/x/y/")
    assert fl.data_socket_path("sim") == "/x/y/sim.data"


def test_fabric_link_buffers_pass_wmem_max_where_allowed():
    """The link's sockets get the buffers asked for: past net.core.wmem_max
    for root (SO_SNDBUFFORCE; the kernel doubles what it is given), as far
    as wmem_max allows otherwise."""
    import os
    import socket
    size = 4 << 20
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with a, b:
        fl.set_buffers(a, size)
        got = a.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
        if os.geteuid() == 0:
            assert got == 2 * size
        else:
            with open("/proc/sys/net/core/wmem_max") as f:
                assert got == 2 * min(size, int(f.read()))
