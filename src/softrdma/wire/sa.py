"""Subnet administration (SA) MADs (IBA 15.2): the SA header and the records an SM answers.

Owns the byte layouts of the SA MAD after the 24-byte common header
(``wire.mad`` owns that): the RMPP header (bytes 24..35: version, type,
RRespTime:5|flags:3, status, segment number, payload length), SM_Key,
AttributeOffset (in 8-byte words), ComponentMask, and 200 bytes of records
from byte 56; and the records NodeRecord, PortInfoRecord and PathRecord
(IBA 15.2.5.2, .3, .16), each a ``wire.smp.Layout`` (or a NodeInfo /
PortInfo embedded at its offset).  Status codes of the SA class
(``SA_STATUS_*``, in bits 8..15 of the MAD status).
"""

from __future__ import annotations

import struct
from enum import IntEnum

from .errors import WireError
from .mad import IB_MGMT_MAD_SIZE
from .smp import Layout

SA_CLASS_VERSION = 2
SA_HDR = struct.Struct(">BBBBII QHH Q")          # RMPP (12) + SM_Key, AttrOffset, rsvd, CompMask
SA_HDR_OFFSET = 24
SA_DATA_OFFSET = 56
SA_DATA_SIZE = IB_MGMT_MAD_SIZE - SA_DATA_OFFSET      # 200
SA_HDR_PAYLOAD = 20          # SM_Key .. ComponentMask: counted in an RMPP payload length

RMPP_TYPE_DATA = 1
RMPP_FLAG_ACTIVE, RMPP_FLAG_FIRST, RMPP_FLAG_LAST = 1, 2, 4

# SA status (the class-specific byte of the MAD status, IBA 15.2.1.2)
SA_STATUS_NO_RESOURCES = 1 << 8
SA_STATUS_REQ_INVALID = 2 << 8
SA_STATUS_NO_RECORDS = 3 << 8
SA_STATUS_TOO_MANY_RECORDS = 4 << 8


SA_STATUS_REQ_INVALID_GID = 5 << 8
SA_STATUS_INSUFFICIENT_COMPONENTS = 6 << 8
SA_STATUS_REQ_DENIED = 7 << 8


class SaAttr(IntEnum):
    CLASS_PORT_INFO = 0x0001
    NODE_RECORD = 0x0011
    PORT_INFO_RECORD = 0x0012
    SWITCH_INFO_RECORD = 0x0014
    LFT_RECORD = 0x0015
    MFT_RECORD = 0x0017
    SM_INFO_RECORD = 0x0018
    SL2VL_TABLE_RECORD = 0x0013
    PKEY_TABLE_RECORD = 0x0033
    VL_ARB_TABLE_RECORD = 0x0036
    LINK_RECORD = 0x0020
    GUIDINFO_RECORD = 0x0030
    SERVICE_RECORD = 0x0031
    PATH_RECORD = 0x0035
    MCMEMBER_RECORD = 0x0038


class SaMethod(IntEnum):
    """The SA's own methods besides Get/Set/GetResp (IBA 15.2.2)."""
    GET_TABLE = 0x12
    GET_TABLE_RESP = 0x92
    DELETE = 0x15
    DELETE_RESP = 0x95


NODE_RECORD_SIZE = 108            # LID, reserved, NodeInfo[40], NodeDescription[64]
NODE_RECORD_NODE_INFO = 4
NODE_RECORD_DESC = 44
PORT_INFO_RECORD_SIZE = 68        # EndportLID, PortNum, Options, PortInfo[64]
PORT_INFO_RECORD_PORT_INFO = 4

PATH_RECORD = Layout("PathRecord", 64, [
    ("ServiceID", 0, 64), ("DGID", 64, 128), ("SGID", 192, 128), ("DLID", 320, 16),
    ("SLID", 336, 16), ("RawTraffic", 352, 1), ("FlowLabel", 356, 20), ("HopLimit", 376, 8),
    ("TClass", 384, 8), ("Reversible", 392, 1), ("NumbPath", 393, 7), ("PKey", 400, 16),
    ("QosClass", 416, 12), ("SL", 428, 4), ("MtuSelector", 432, 2), ("Mtu", 434, 6),
    ("RateSelector", 440, 2), ("Rate", 442, 6), ("PacketLifeTimeSelector", 448, 2),
    ("PacketLifeTime", 450, 6), ("Preference", 456, 8),
])
# ClassPortInfo (IBA 13.4.8.1), 72 bytes; CapabilityMask2 and RespTimeValue share a word
CLASS_PORT_INFO = Layout("ClassPortInfo", 72, [
    ("BaseVersion", 0, 8), ("ClassVersion", 8, 8), ("CapabilityMask", 16, 16),
    ("CapabilityMask2", 32, 27), ("RespTimeValue", 59, 5), ("RedirectGID", 64, 128),
    ("RedirectTC", 192, 8), ("RedirectSL", 200, 4), ("RedirectFL", 204, 20), ("RedirectLID", 224, 16),
    ("RedirectPKey", 240, 16), ("RedirectQP", 264, 24), ("RedirectQKey", 288, 32),
    ("TrapGID", 320, 128), ("TrapTC", 448, 8), ("TrapSL", 456, 4), ("TrapFL", 460, 20),
    ("TrapLID", 480, 16), ("TrapPKey", 496, 16), ("TrapHL", 512, 8), ("TrapQP", 520, 24),
    ("TrapQKey", 544, 32),
])
# MCMemberRecord (IBA 15.2.5.17): 52 bytes, 56 with opensm's pad (AttributeOffset 7)
MCMEMBER_RECORD_SIZE = 56
MCMEMBER_RECORD = Layout("MCMemberRecord", 52, [
    ("MGID", 0, 128), ("PortGID", 128, 128), ("QKey", 256, 32), ("MLID", 288, 16),
    ("MtuSelector", 304, 2), ("Mtu", 306, 6), ("TClass", 312, 8), ("PKey", 320, 16),
    ("RateSelector", 336, 2), ("Rate", 338, 6), ("PacketLifeTimeSelector", 344, 2),
    ("PacketLifeTime", 346, 6), ("SL", 352, 4), ("FlowLabel", 356, 20), ("HopLimit", 376, 8),
    ("Scope", 384, 4), ("JoinState", 388, 4), ("ProxyJoin", 392, 1),
])
MCR_COMP = {n: 1 << i for i, n in enumerate(
    ["MGID", "PortGID", "QKey", "MLID", "MtuSelector", "Mtu", "TClass", "PKey", "RateSelector", "Rate",
     "PacketLifeTimeSelector", "PacketLifeTime", "SL", "FlowLabel", "HopLimit", "Scope", "JoinState",
     "ProxyJoin"])}
# ServiceRecord (IBA 15.2.5.14), 176 bytes
SERVICE_RECORD_SIZE = 176
SERVICE_RECORD = Layout("ServiceRecord", 176, [
    ("ServiceID", 0, 64), ("ServiceGID", 64, 128), ("ServiceP_Key", 192, 16),
    ("ServiceLease", 224, 32), ("ServiceKey", 256, 128),
])
SR_SERVICE_NAME, SR_SERVICE_DATA = 48, 112        # 64-byte name, then 64 bytes of data
SR_COMP_ID, SR_COMP_GID, SR_COMP_PKEY, SR_COMP_LEASE, SR_COMP_KEY, SR_COMP_NAME = (1 << i for i in range(6))
# the little records (IBA 15.2.5.x; sizes as opensm declares them, which set AttributeOffset)
SWITCH_INFO_RECORD_SIZE = 27          # LID, reserved, SwitchInfo[20], pad[3]
SM_INFO_RECORD_SIZE = 28              # LID, reserved, SMInfo[21], pad
LINK_RECORD_SIZE = 8                  # FromLID, FromPort, ToPort, ToLID, pad
LFT_RECORD_SIZE = MFT_RECORD_SIZE = 72   # LID, block (MFT: position:4 | block:12), reserved, 64 bytes
LR_COMP_FROM_LID, LR_COMP_FROM_PORT, LR_COMP_TO_PORT, LR_COMP_TO_LID = 1, 2, 4, 8
LFTR_COMP_LID, LFTR_COMP_BLOCK = 1, 2
MFTR_COMP_LID, MFTR_COMP_POSITION, MFTR_COMP_BLOCK = 1, 4, 8
SWIR_COMP_LID = SMIR_COMP_LID = 1
PIR_COMP_CAPMASK = 1 << 7

# ComponentMask bits of the fields an SM is asked by most
PR_COMP_DGID, PR_COMP_SGID, PR_COMP_DLID, PR_COMP_SLID = 1 << 2, 1 << 3, 1 << 4, 1 << 5
PR_COMP_NUMBPATH = 1 << 12
NR_COMP_LID = 1 << 0
PIR_COMP_LID, PIR_COMP_PORTNUM = 1 << 0, 1 << 1


class SaHeader:
    __slots__ = ("rmpp_version", "rmpp_type", "rmpp_flags", "rmpp_status", "seg", "paylen",
                 "sm_key", "attr_offset", "comp_mask")

    def __init__(self, rmpp_version, rmpp_type, rmpp_flags, rmpp_status, seg, paylen, sm_key,
                 attr_offset, comp_mask):
        self.rmpp_version, self.rmpp_type, self.rmpp_flags = rmpp_version, rmpp_type, rmpp_flags
        self.rmpp_status, self.seg, self.paylen = rmpp_status, seg, paylen
        self.sm_key, self.attr_offset, self.comp_mask = sm_key, attr_offset, comp_mask


def parse_sa(buf) -> tuple[SaHeader, memoryview]:
    """An SA MAD: a whole 256-byte one, or an RMPP segment cut to its payload (>= 56 bytes)."""
    if not SA_DATA_OFFSET <= len(buf) <= IB_MGMT_MAD_SIZE:
        raise WireError("bad_length", f"SA MAD of {len(buf)} bytes (56..{IB_MGMT_MAD_SIZE})")
    v, t, f, st, seg, plen, key, off, _r, mask = SA_HDR.unpack_from(buf, SA_HDR_OFFSET)
    return SaHeader(v, t, f, st, seg, plen, key, off, mask), memoryview(buf)[SA_DATA_OFFSET:]


def set_sa_response(buf: bytearray, method: int, records: list[bytes], record_size: int,
                    status: int = 0, rmpp: bool = False) -> None:
    """Turn a request (in place) into its response carrying ``records``.

    ``rmpp``: a GetTable response is an RMPP transfer; one segment here (ACTIVE,
    FIRST, LAST), whose payload length counts the SA header and the records."""
    words = (record_size + 7) // 8
    buf[3] = method
    buf[4:6] = status.to_bytes(2, "big")
    data = bytearray(SA_DATA_SIZE)
    for i, r in enumerate(records):
        data[i * words * 8:i * words * 8 + len(r)] = r
    v, _t, _f, _s, _seg, _pl, key, _o, _r, mask = SA_HDR.unpack_from(buf, SA_HDR_OFFSET)
    if rmpp:
        SA_HDR.pack_into(buf, SA_HDR_OFFSET, 1, RMPP_TYPE_DATA,
                         (0x1F << 3) | RMPP_FLAG_ACTIVE | RMPP_FLAG_FIRST | RMPP_FLAG_LAST, 0, 1,
                         SA_HDR_PAYLOAD + len(records) * words * 8, key, words, 0, mask)
    else:
        SA_HDR.pack_into(buf, SA_HDR_OFFSET, 0, 0, 0, 0, 0, 0, key, words, 0, mask)
    buf[SA_DATA_OFFSET:] = data


def records_per_mad(record_size: int) -> int:
    return SA_DATA_SIZE // (((record_size + 7) // 8) * 8)
