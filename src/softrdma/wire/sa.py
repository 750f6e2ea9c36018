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


class SaAttr(IntEnum):
    CLASS_PORT_INFO = 0x0001
    NODE_RECORD = 0x0011
    PORT_INFO_RECORD = 0x0012
    SM_INFO_RECORD = 0x0018
    LINK_RECORD = 0x0020
    PATH_RECORD = 0x0035


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
