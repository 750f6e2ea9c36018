"""SMP / PerfMgt codecs: field positions against the byte offsets of IBA ch. 14/16
(the same as rdma-core libibmad/fields.c), round trips, and untrusted input."""

import random
import struct

import pytest

from softrdma.wire import smp
from softrdma.wire.errors import WireError
from softrdma.wire.mad import parse_mad, MgmtClass, Method


def test_nodeinfo_positions():
    d = smp.NODE_INFO.encode(BaseVers=1, ClassVers=1, NodeType=2, NumPorts=36,
                             SystemGuid=0x1122334455667788, Guid=0x0002C90300000001,
                             PortGuid=0x0002C90300000002, PartCap=8, DevId=0xBD36,
                             Revision=0xA0, LocalPort=5, VendorId=0x02C9)
    assert d[0:4] == bytes([1, 1, 2, 36])
    assert struct.unpack_from(">Q", d, 4)[0] == 0x1122334455667788
    assert struct.unpack_from(">Q", d, 12)[0] == 0x0002C90300000001
    assert struct.unpack_from(">Q", d, 20)[0] == 0x0002C90300000002
    assert struct.unpack_from(">HH", d, 28) == (8, 0xBD36)
    assert struct.unpack_from(">I", d, 32)[0] == 0xA0
    assert d[36] == 5 and d[37:40] == b"\x00\x02\xc9"
    back = smp.NODE_INFO.decode(d)
    assert back["Guid"] == 0x0002C90300000001 and back["VendorId"] == 0x2C9


def test_portinfo_positions():
    d = smp.PORT_INFO.encode(Lid=0x1234, SMLid=0x0102, CapMask=0x02514868, LocalPort=7,
                             LinkWidthEnabled=3, LinkWidthSupported=3, LinkWidthActive=2,
                             LinkSpeedSupported=7, LinkState=4, PhysLinkState=5, LMC=3,
                             LinkSpeedActive=4, LinkSpeedEnabled=7, NeighborMTU=5, VLCap=4,
                             MtuCap=5, OperVLs=4, HoqLife=0x1F, LinkSpeedExtActive=2,
                             LinkSpeedExtEnabled=0x1E, CapabilityMask2=0x1234)
    assert struct.unpack_from(">HH", d, 16) == (0x1234, 0x0102)
    assert struct.unpack_from(">I", d, 20)[0] == 0x02514868
    assert d[28] == 7 and d[29] == 3 and d[30] == 3 and d[31] == 2
    assert d[32] == 0x74            # LinkSpeedSupported:4 | PortState:4
    assert d[33] >> 4 == 5          # PortPhysicalState
    assert d[34] & 7 == 3           # LMC in the low 3 bits
    assert d[35] == 0x47            # LinkSpeedActive:4 | LinkSpeedEnabled:4
    assert d[36] == 0x50 and d[37] >> 4 == 4
    assert d[41] & 0xF == 5         # MTUCap
    assert d[42] & 0x1F == 0x1F     # HOQLife
    assert d[43] >> 4 == 4          # OperationalVLs
    assert struct.unpack_from(">H", d, 60)[0] == 0x1234
    assert d[62] >> 4 == 2 and d[63] & 0x1F == 0x1E
    assert smp.PORT_INFO.get(d, "LinkState") == 4
    smp.PORT_INFO.set(d, "LinkState", 2)
    assert d[32] == 0x72 and smp.PORT_INFO.decode(d)["Lid"] == 0x1234


def test_switchinfo_sminfo_notice_positions():
    d = smp.SWITCH_INFO.encode(LinearFdbCap=49152, McastFdbCap=1024, LinearFdbTop=0x40,
                               LifeTime=0x12, StateChange=1, PartEnforceCap=32,
                               EnhancedPort0=1, MulticastFDBTop=0xC000)
    assert struct.unpack_from(">HHHH", d, 0) == (49152, 0, 1024, 0x40)
    assert d[11] == (0x12 << 3) | 0x04
    assert struct.unpack_from(">H", d, 14)[0] == 32
    assert d[16] & 0x08
    assert struct.unpack_from(">H", d, 18)[0] == 0xC000
    s = smp.SM_INFO.encode(SmInfoGuid=7, SmInfoKey=9, SmActivity=3, SmPriority=5, SmState=3)
    assert struct.unpack_from(">QQI", s, 0) == (7, 9, 3) and s[20] == 0x53
    n = smp.NOTICE.encode(NoticeIsGeneric=1, NoticeType=1, NoticeProducerType=2,
                          NoticeTrapNumber=128, NoticeIssuerLID=5, NoticeDataLID=5)
    assert n[0] == 0x81 and n[1:4] == b"\0\0\x02"
    assert struct.unpack_from(">HH", n, 4) == (128, 5)
    assert struct.unpack_from(">H", n, 10)[0] == 5


def test_perf_positions():
    d = smp.PORT_COUNTERS.encode(PortSelect=3, CounterSelect=0xFFFF, SymbolErrorCounter=1,
                                 LinkDownedCounter=2, PortXmitDiscards=4, VL15Dropped=6,
                                 PortXmitData=0x11111111, PortRcvData=0x22222222,
                                 PortXmitPkts=0x33, PortRcvPkts=0x44, PortXmitWait=0x55)
    assert d[1] == 3 and struct.unpack_from(">H", d, 2)[0] == 0xFFFF
    assert struct.unpack_from(">H", d, 4)[0] == 1 and d[7] == 2
    assert struct.unpack_from(">H", d, 14)[0] == 4
    assert struct.unpack_from(">H", d, 22)[0] == 6
    assert struct.unpack_from(">IIIII", d, 24) == (0x11111111, 0x22222222, 0x33, 0x44, 0x55)
    e = smp.PORT_COUNTERS_EXT.encode(PortSelect=1, PortXmitData=1 << 40, PortRcvPkts=9,
                                     PortMulticastRcvPkts=7)
    assert struct.unpack_from(">Q", e, 8)[0] == 1 << 40
    assert struct.unpack_from(">Q", e, 32)[0] == 9
    assert struct.unpack_from(">Q", e, 64)[0] == 7
    c = smp.CLASS_PORT_INFO.encode(BaseVersion=1, ClassVersion=1, CapabilityMask=0x1300,
                                   RespTimeVal=0x12, TrapLID=9, TrapQP=1)
    assert c[:4] == b"\x01\x01\x13\x00" and c[7] & 0x1F == 0x12
    assert struct.unpack_from(">H", c, 60)[0] == 9 and c[65:68] == b"\0\0\x01"


def test_tables():
    assert smp.decode_sl2vl(smp.encode_sl2vl(range(16))) == tuple(range(16))
    assert smp.encode_sl2vl([1, 2])[0] == 0x12
    vl = [(i % 8, i * 3 % 256) for i in range(32)]
    assert smp.decode_vlarb(smp.encode_vlarb(vl)) == tuple(vl)
    assert smp.decode_pkey_table(smp.encode_pkey_table([0xFFFF]))[:2] == (0xFFFF, 0)
    assert smp.decode_guid_info(smp.encode_guid_info([1, 2]))[:3] == (1, 2, 0)
    assert smp.decode_mft(smp.encode_mft([0x8001]))[0] == 0x8001
    assert smp.split_mft_attr_mod(smp.mft_attr_mod(3, 2)) == (3, 2)
    assert smp.mft_attr_mod(1, 1) == 0x10000001
    assert smp.decode_node_desc(smp.encode_node_desc("leaf001")) == "leaf001"


def test_dr_smp_layout():
    m = smp.build_dr_smp(Method.GET, smp.SmpAttr.NODE_INFO, [1, 3, 5], tid=0x42)
    hdr, _ = parse_mad(m)
    assert hdr.mgmt_class == MgmtClass.SUBN_DIRECTED_ROUTE and hdr.tid == 0x42
    assert m[4:8] == b"\0\0\0\x03"
    assert m[32:36] == b"\xff\xff\xff\xff"
    assert bytes(m[128:132]) == b"\0\x01\x03\x05"
    dr = smp.parse_dr(m)
    assert (dr.direction, dr.hop_ptr, dr.hop_cnt, dr.dr_slid) == (0, 0, 3, 0xFFFF)
    smp.set_dr_word(m, 1, 0x1C, 4, 3)
    assert m[4:8] == b"\x80\x1c\x04\x03"
    dr = smp.parse_dr(m)
    assert (dr.direction, dr.status, dr.hop_ptr) == (1, 0x1C, 4)
    smp.dr_path(m, ret=True)[1] = 9
    assert m[193] == 9
    lr = smp.build_smp(Method.SET, smp.SmpAttr.PORT_INFO, 3, b"\x01" * 64, mkey=5)
    assert lr[1] == 1 and struct.unpack_from(">Q", lr, 24)[0] == 5 and lr[64:128] == b"\x01" * 64
    p = smp.build_perf(Method.GET, smp.PerfAttr.PORT_COUNTERS, data=b"\x00\x01")
    assert p[1] == 4 and p[65] == 1


def test_untrusted():
    with pytest.raises(WireError):
        smp.parse_dr(b"\x00" * 10)
    with pytest.raises(WireError):
        smp.parse_dr(bytes(256))              # class 0 is not DR
    with pytest.raises(WireError):
        smp.PORT_INFO.decode(b"\0" * 63)
    with pytest.raises(WireError):
        smp.NODE_INFO.encode(NumPorts=256)
    with pytest.raises(WireError):
        smp.NODE_INFO.encode(Nope=1)
    with pytest.raises(WireError):
        smp.build_dr_smp(1, 0x11, [1] * 64)
    rng = random.Random(1)
    for _ in range(300):
        b = bytes(rng.getrandbits(8) for _ in range(rng.choice([0, 5, 63, 64, 255, 256, 300])))
        for f in (smp.parse_dr, smp.decode_sl2vl, smp.decode_vlarb, smp.decode_mft,
                  smp.decode_node_desc, smp.PORT_INFO.decode, smp.PORT_COUNTERS.decode):
            try:
                f(b)
            except WireError:
                pass
