"""Management datagrams (IBA 13.4): the common MAD header and the 256-byte MAD.

Names and values as the kernel's include/rdma/ib_mad.h.  A MAD travels as
the whole payload of a UD SEND to QP1 (the GSI, Q_Key ``IB_QP1_QKEY``) or
QP0 (the SMI, subnet management classes only); it is always exactly
``IB_MGMT_MAD_SIZE`` bytes, the 24-byte common header then 232 bytes of
class data.

Common header (24 bytes)::

    base_version:8 mgmt_class:8 class_version:8 method:8
    status:16 class_specific:16
    tid:64
    attr_id:16 resv:16
    attr_mod:32

The class layers (``wire.cm``, later SA/PMA) own their data layouts;
this module only frames and checks the header.
"""

from __future__ import annotations

import struct
from enum import IntEnum
from typing import NamedTuple

from .errors import WireError

# --- sizes (enum in ib_mad.h) ------------------------------------------------
IB_MGMT_MAD_HDR = 24
IB_MGMT_MAD_DATA = 232
IB_MGMT_RMPP_HDR = 36
IB_MGMT_RMPP_DATA = 220
IB_MGMT_VENDOR_HDR = 40
IB_MGMT_VENDOR_DATA = 216
IB_MGMT_SA_HDR = 56
IB_MGMT_SA_DATA = 200
IB_MGMT_DEVICE_HDR = 64
IB_MGMT_DEVICE_DATA = 192
IB_MGMT_MAD_SIZE = IB_MGMT_MAD_HDR + IB_MGMT_MAD_DATA

# --- versions ------------------------------------------------------------------
IB_MGMT_BASE_VERSION = 1
OPA_MGMT_BASE_VERSION = 0x80   # not spoken here: rejected as bad_base_version


class MgmtClass(IntEnum):
    """IB_MGMT_CLASS_* (IBA 13.4.4, table 133)."""

    SUBN_LID_ROUTED = 0x01
    SUBN_ADM = 0x03
    PERF_MGMT = 0x04
    BM = 0x05
    DEVICE_MGMT = 0x06
    CM = 0x07
    SNMP = 0x08
    DEVICE_ADM = 0x10
    BOOT_MGMT = 0x11
    BIS = 0x12
    CONG_MGMT = 0x21
    SUBN_DIRECTED_ROUTE = 0x81


IB_MGMT_CLASS_VENDOR_RANGE2_START = 0x30
IB_MGMT_CLASS_VENDOR_RANGE2_END = 0x4F
IB_OPENIB_OUI = 0x001405

#: Classes that travel on QP0 (the SMI); every other class uses QP1 (the GSI).
SMI_CLASSES = frozenset((MgmtClass.SUBN_LID_ROUTED, MgmtClass.SUBN_DIRECTED_ROUTE))


class Method(IntEnum):
    """IB_MGMT_METHOD_* and the SA's (ib_sa.h); a response has bit 0x80 set."""

    GET = 0x01
    SET = 0x02
    SEND = 0x03
    TRAP = 0x05
    REPORT = 0x06
    TRAP_REPRESS = 0x07
    SA_GET_TABLE = 0x12
    SA_GET_TRACE_TBL = 0x13
    SA_GET_MULTI = 0x14
    SA_DELETE = 0x15
    GET_RESP = 0x81
    REPORT_RESP = 0x86
    SA_GET_TABLE_RESP = 0x92
    SA_GET_MULTI_RESP = 0x94
    SA_DELETE_RESP = 0x95


IB_MGMT_METHOD_RESP = 0x80
IB_MGMT_MAX_METHODS = 128

# --- MAD status (bit masks) ------------------------------------------------------
IB_MGMT_MAD_STATUS_SUCCESS = 0x0000
IB_MGMT_MAD_STATUS_BUSY = 0x0001
IB_MGMT_MAD_STATUS_REDIRECT_REQD = 0x0002
IB_MGMT_MAD_STATUS_BAD_VERSION = 0x0004
IB_MGMT_MAD_STATUS_UNSUPPORTED_METHOD = 0x0008
IB_MGMT_MAD_STATUS_UNSUPPORTED_METHOD_ATTRIB = 0x000C
IB_MGMT_MAD_STATUS_INVALID_ATTRIB_VALUE = 0x001C

# --- attributes common to every class ------------------------------------------
IB_MGMT_CLASSPORTINFO_ATTR_ID = 0x0001
IB_MGMT_NOTICE_ATTR_ID = 0x0002

# --- the special QPs --------------------------------------------------------------
IB_QP0 = 0
IB_QP1 = 1
IB_QP1_QKEY = 0x80010000
IB_QP_SET_QKEY = 0x80000000       # a Q_Key with this bit set is privileged
IB_DEFAULT_PKEY_PARTIAL = 0x7FFF
IB_DEFAULT_PKEY_FULL = 0xFFFF

# --- the header ------------------------------------------------------------------
MAD_HDR = struct.Struct(">BBBBHHQHHI")
assert MAD_HDR.size == IB_MGMT_MAD_HDR


class MadHdr(NamedTuple):
    """struct ib_mad_hdr, host order."""

    base_version: int
    mgmt_class: int
    class_version: int
    method: int
    status: int
    class_specific: int
    tid: int
    attr_id: int
    resv: int
    attr_mod: int


def pack_mad_hdr(buf, mgmt_class: int, class_version: int, method: int, attr_id: int, *,
                 tid: int = 0, attr_mod: int = 0, status: int = 0, class_specific: int = 0,
                 base_version: int = IB_MGMT_BASE_VERSION, resv: int = 0, offset: int = 0) -> None:
    try:
        MAD_HDR.pack_into(buf, offset, base_version, mgmt_class, class_version, method, status,
                          class_specific, tid, attr_id, resv, attr_mod)
    except struct.error as e:
        raise WireError("bad_field", f"MAD header: {e}") from None


def build_mad(mgmt_class: int, class_version: int, method: int, attr_id: int, data=b"",
              **hdr) -> bytearray:
    """A whole 256-byte MAD: header, ``data`` (at most 232 bytes), zeros."""
    if len(data) > IB_MGMT_MAD_DATA:
        raise WireError("bad_length", f"MAD data {len(data)} bytes > {IB_MGMT_MAD_DATA}")
    buf = bytearray(IB_MGMT_MAD_SIZE)
    pack_mad_hdr(buf, mgmt_class, class_version, method, attr_id, **hdr)
    buf[IB_MGMT_MAD_HDR:IB_MGMT_MAD_HDR + len(data)] = data
    return buf


def parse_mad(buf) -> tuple[MadHdr, memoryview]:
    """Frame an untrusted MAD: (header, the 232 data bytes as a view).

    Checks what ib_mad's validate_mad checks before any agent sees the MAD:
    the length and the base version.  Class, class version, method and
    attribute are the class layer's to check."""
    mv = memoryview(buf)
    if mv.ndim != 1 or mv.itemsize != 1:
        mv = mv.cast("B")
    n = len(mv)
    if n < IB_MGMT_MAD_SIZE:
        raise WireError("truncated", f"MAD of {n} bytes, needs {IB_MGMT_MAD_SIZE}")
    if n > IB_MGMT_MAD_SIZE:
        raise WireError("bad_length", f"MAD of {n} bytes, is {IB_MGMT_MAD_SIZE}")
    hdr = MadHdr(*MAD_HDR.unpack_from(mv, 0))
    if hdr.base_version != IB_MGMT_BASE_VERSION:
        raise WireError("bad_base_version", f"base version {hdr.base_version}")
    return hdr, mv[IB_MGMT_MAD_HDR:]


def is_response(method: int) -> bool:
    """ib_response_mad() for the plain (non-BM) classes: TrapRepress or a
    method with the response bit."""
    return bool(method & IB_MGMT_METHOD_RESP) or method == Method.TRAP_REPRESS


# --- ClassPortInfo (IBA 13.4.8.1, struct ib_class_port_info) -------------------------
CLASS_PORT_INFO = struct.Struct(">BBH3sB16sIHHII16sIHHII")


class ClassPortInfo(NamedTuple):
    base_version: int
    class_version: int
    capability_mask: int
    reserved: bytes                # reserved[3] + resp_time_value: CapabilityMask2:27 ...
    resp_time_value: int           # ... RespTimeValue:5 (low bits of this byte)
    redirect_gid: bytes
    redirect_tcslfl: int           # TClass:8 SL:4 FlowLabel:20
    redirect_lid: int
    redirect_pkey: int
    redirect_qp: int               # resv:8 QP:24
    redirect_qkey: int
    trap_gid: bytes
    trap_tcslfl: int
    trap_lid: int
    trap_pkey: int
    trap_hlqp: int                 # HopLimit:8 QP:24
    trap_qkey: int


def pack_class_port_info(cpi: ClassPortInfo) -> bytes:
    try:
        return CLASS_PORT_INFO.pack(*cpi)
    except struct.error as e:
        raise WireError("bad_field", f"ClassPortInfo: {e}") from None


def unpack_class_port_info(data) -> ClassPortInfo:
    if len(data) < CLASS_PORT_INFO.size:
        raise WireError("truncated", f"ClassPortInfo of {len(data)} bytes")
    return ClassPortInfo(*CLASS_PORT_INFO.unpack_from(data, 0))
