"""RMPP, the reliable multi-packet transaction protocol of MADs (IBA 13.6): the codec.

Owns the RMPP header (bytes 24..35 of a MAD: version, type, RRespTime:5 |
flags:3, status, Data1 = segment number, Data2 = payload length or, in an
ACK, NewWindowLast), its constants (types, flags, RMPPStatus), and the
control MADs (ACK, STOP, ABORT) built from a data segment.  The two ends of
a transfer -- segmenting, windows, ACKs, timers, reassembly -- are the MAD
agent's (``softrdma.mgmt.rmpp``).
"""

from __future__ import annotations

import struct

from .errors import WireError

RMPP_HDR = struct.Struct(">BBBBII")
RMPP_OFFSET = 24
RMPP_VERSION = 1
RMPP_TYPE_DATA, RMPP_TYPE_ACK, RMPP_TYPE_STOP, RMPP_TYPE_ABORT = 1, 2, 3, 4
RMPP_FLAG_ACTIVE, RMPP_FLAG_FIRST, RMPP_FLAG_LAST = 1, 2, 4
RMPP_NO_RESP_TIME = 0x1F
# RMPPStatus (IBA 13.6.2.2 table 169)
RMPP_STATUS_SUCCESS = 0
RMPP_STATUS_RESX = 1             # STOP: out of resources
RMPP_STATUS_T2L = 118            # ABORT: total time too long
RMPP_STATUS_BAD_LEN = 119        # ABORT: inconsistent last and payload length
RMPP_STATUS_BAD_SEG = 120        # ABORT: inconsistent first and segment number
RMPP_STATUS_BADT = 121           # ABORT: bad RMPPType
RMPP_STATUS_W2S = 122            # ABORT: NewWindowLast too small
RMPP_STATUS_S2B = 123            # ABORT: segment number too big
RMPP_STATUS_BAD_STATUS = 124
RMPP_STATUS_UNV = 125            # ABORT: unsupported version
RMPP_STATUS_TMR = 126            # ABORT: too many retries
RMPP_STATUS_UNSPEC = 127

MAD_SIZE = 256
SEG_RMPP_SIZE = MAD_SIZE - RMPP_OFFSET - RMPP_HDR.size      # 220


class RmppHeader:
    __slots__ = ("version", "type", "resp_time", "flags", "status", "seg", "paylen")

    def __init__(self, version, type_, resp_time, flags, status, seg, paylen):
        self.version, self.type, self.resp_time, self.flags = version, type_, resp_time, flags
        self.status, self.seg, self.paylen = status, seg, paylen

    @property
    def active(self) -> bool:
        return bool(self.flags & RMPP_FLAG_ACTIVE)


def parse_rmpp(mad) -> RmppHeader:
    if len(mad) < RMPP_OFFSET + RMPP_HDR.size:
        raise WireError("bad_length", f"MAD of {len(mad)} bytes has no RMPP header")
    v, t, rf, st, d1, d2 = RMPP_HDR.unpack_from(mad, RMPP_OFFSET)
    return RmppHeader(v, t, rf >> 3, rf & 7, st, d1, d2)


def set_rmpp(mad: bytearray, type_: int, flags: int, seg: int, paylen: int, status: int = 0,
             resp_time: int = RMPP_NO_RESP_TIME) -> None:
    RMPP_HDR.pack_into(mad, RMPP_OFFSET, RMPP_VERSION, type_, (resp_time << 3) | flags, status,
                       seg, paylen)


def is_segmented(mad) -> bool:
    """A DATA segment of a real RMPP transfer (ACTIVE, segment numbers from 1)."""
    h = parse_rmpp(mad)
    return h.version == RMPP_VERSION and h.active and h.type == RMPP_TYPE_DATA and h.seg >= 1


def control_mad(data_mad, type_: int, seg: int = 0, newwin: int = 0, status: int = 0,
                hdr_len: int = 56) -> bytes:
    """An ACK, STOP or ABORT for a transfer: the data's first ``hdr_len`` bytes
    with the response bit flipped (format_ack), the rest zero."""
    mad = bytearray(MAD_SIZE)
    mad[:hdr_len] = bytes(data_mad[:hdr_len])
    mad[3] ^= 0x80
    set_rmpp(mad, type_, RMPP_FLAG_ACTIVE, seg, newwin, status)
    return bytes(mad)
