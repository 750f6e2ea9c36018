"""ibsim client protocol codecs: sizes and offsets of include/ibsim.h's structs."""

import struct

import pytest

from softrdma.wire import ibsim
from softrdma.wire.errors import WireError


def test_ctl():
    b = ibsim.build_ctl(ibsim.SimCtlType.CONNECT, b"abc", clientid=3)
    assert len(b) == 80
    assert struct.unpack_from("<IIII", b, 0) == (0xDEADBEEF, 3, 1, 3)
    assert b[16:19] == b"abc"
    c = ibsim.parse_ctl(b)
    assert c.type == 1 and c.clientid == 3 and c.data[:3] == b"abc"
    with pytest.raises(WireError):
        ibsim.parse_ctl(b[:79])
    with pytest.raises(WireError):
        ibsim.parse_ctl(b"\0" * 80)


def test_client_info_vendor_pkeys():
    ci = ibsim.build_client_info(1234, 0, 1, "host0001")
    assert len(ci) == 44 and struct.unpack_from("<III", ci) == (1234, 0, 1)
    assert ibsim.parse_client_info(ci) == (1234, 0, 1, "host0001")
    v = ibsim.build_vendor(0x2C9, 0xBD36, 0xA0, 1)
    assert len(v) == 24 and struct.unpack_from("<Q", v, 16)[0] == 1
    assert ibsim.parse_vendor(v) == (0x2C9, 0xBD36, 0xA0, 1)
    p = ibsim.build_pkeys([0xFFFF])
    assert len(p) == 64 and p[:4] == b"\xff\xff\0\0"
    assert ibsim.parse_issm(struct.pack("<i", 1)) == 1


def test_request():
    mad = bytes(range(256))
    r = ibsim.build_request(0x0102, 0xFFFF, 1, 0, mad, status=110)
    assert len(r) == 288
    assert r[0:4] == b"\x01\x02\0\0" and r[4:8] == b"\xff\xff\0\0"
    assert r[8:12] == b"\0\0\0\x01" and r[16:20] == b"\0\0\0\x6e"
    assert r[24:32] == struct.pack(">Q", 256) and r[32:] == mad
    q = ibsim.parse_request(r)
    assert (q.dlid, q.slid, q.dqp, q.status, q.length) == (0x0102, 0xFFFF, 1, 110, 256)
    with pytest.raises(WireError):
        ibsim.parse_request(r + b"x")


def test_tid_and_names():
    t = ibsim.tid_with_client(0xFFFF_0005_1234_5678, 7)
    assert t == 0x0007_0005_1234_5678 and ibsim.tid_client(t) == 7
    assert ibsim.abstract_name("sim", "ctl") == b"\0sim:ctl\0"
