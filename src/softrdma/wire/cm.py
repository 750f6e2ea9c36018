"""The IB Communication Manager's messages (IBA 12.6), byte-compatible with ib_cm.

One table, ``CM_MESSAGES``, drives encoding and decoding: per message its
attribute ID and its fields as (name, byte offset, bit offset, bit width),
copied from the kernel's include/rdma/ibta_vol1_c12.h (the CM_*_LOC
definitions, IBA tables 106-120, with the ECE vendor-ID bits).  Byte
offsets count from the start of the MAD data (after the 24-byte common
header), as the spec's tables do; the bit offset is the spec's Byte[Bit]
notation, counted from the most significant bit.  Field names are the
kernel's macro names, lower case, without the message prefix
(CM_REQ_LOCAL_QPN -> ``local_qpn``).

Integer fields are read and written through the precompiled Struct of the
word that holds them (the 8/16/32/64-bit container the kernel's
IBA_FIELD*_LOC macros use), shift and mask; fields of more than 64 bits
(GIDs, ARI, private data) are byte strings.  Reserved bits are written as
zero and ignored on receipt.

``decode`` is the gate for untrusted MADs: it raises only ``WireError``.
It rejects what no CM can answer (wrong length, base/class version, class,
method, unknown attribute, reserved "message" codes, info lengths past
their field); values the CM answers with a REJ (transport type, MTU, ...)
are the state machine's to judge.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from .errors import WireError
from .mad import (
    IB_MGMT_MAD_DATA,
    IB_MGMT_MAD_HDR,
    Method,
    MgmtClass,
    build_mad,
    parse_mad,
)

IB_CM_CLASS_VERSION = 2   # IB specification 1.2


class CmAttr(IntEnum):
    """CM_*_ATTR_ID (ib_cm.h); ClassPortInfo is every class's 0x0001."""

    CLASS_PORT_INFO = 0x0001
    REQ = 0x0010
    MRA = 0x0011
    REJ = 0x0012
    REP = 0x0013
    RTU = 0x0014
    DREQ = 0x0015
    DREP = 0x0016
    SIDR_REQ = 0x0017
    SIDR_REP = 0x0018
    LAP = 0x0019
    APR = 0x001A


class CmMsgResponse(IntEnum):
    """The message a REJ rejects / an MRA acknowledges (enum cm_msg_response)."""

    REQ = 0x0
    REP = 0x1
    OTHER = 0x2   # LAP for an MRA; 3 is reserved


class RejReason(IntEnum):
    """enum ib_cm_rej_reason."""

    NO_QP = 1
    NO_EEC = 2
    NO_RESOURCES = 3
    TIMEOUT = 4
    UNSUPPORTED = 5
    INVALID_COMM_ID = 6
    INVALID_COMM_INSTANCE = 7
    INVALID_SERVICE_ID = 8
    INVALID_TRANSPORT_TYPE = 9
    STALE_CONN = 10
    RDC_NOT_EXIST = 11
    INVALID_GID = 12
    INVALID_LID = 13
    INVALID_SL = 14
    INVALID_TRAFFIC_CLASS = 15
    INVALID_HOP_LIMIT = 16
    INVALID_PACKET_RATE = 17
    INVALID_ALT_GID = 18
    INVALID_ALT_LID = 19
    INVALID_ALT_SL = 20
    INVALID_ALT_TRAFFIC_CLASS = 21
    INVALID_ALT_HOP_LIMIT = 22
    INVALID_ALT_PACKET_RATE = 23
    PORT_CM_REDIRECT = 24
    PORT_REDIRECT = 25
    INVALID_MTU = 26
    INSUFFICIENT_RESP_RESOURCES = 27
    CONSUMER_DEFINED = 28
    INVALID_RNR_RETRY = 29
    DUPLICATE_LOCAL_COMM_ID = 30
    INVALID_CLASS_VERSION = 31
    INVALID_FLOW_LABEL = 32
    INVALID_ALT_FLOW_LABEL = 33
    VENDOR_OPTION_NOT_SUPPORTED = 35


class AprStatus(IntEnum):
    """enum ib_cm_apr_status."""

    SUCCESS = 0
    INVALID_COMM_ID = 1
    UNSUPPORTED = 2
    REJECT = 3
    REDIRECT = 4
    IS_CURRENT = 5
    INVALID_QPN_EECN = 6
    INVALID_LID = 7
    INVALID_GID = 8
    INVALID_FLOW_LABEL = 9
    INVALID_TCLASS = 10
    INVALID_HOP_LIMIT = 11
    INVALID_PACKET_RATE = 12
    INVALID_SL = 13


class SidrStatus(IntEnum):
    """enum ib_cm_sidr_status."""

    SUCCESS = 0
    UNSUPPORTED = 1
    REJECT = 2
    NO_QP = 3
    REDIRECT = 4
    UNSUPPORTED_VERSION = 5


# REQ transport service type (cm_req_get_qp_type): 3 = extended, whose
# extended transport type 1 is XRC.
CM_TRANSPORT_RC = 0
CM_TRANSPORT_UC = 1
CM_TRANSPORT_RD = 2
CM_TRANSPORT_EXTENDED = 3
CM_EXT_TRANSPORT_XRC = 1

# REP failover accepted.
CM_FAILOVER_ACCEPT = 0
CM_FAILOVER_REJECT = 1
CM_FAILOVER_UNSUPPORTED = 2

#: The largest value of any "info length" field (ARI, APR and SIDR_REP info).
IB_CM_REJ_ARI_LENGTH = 72
IB_CM_APR_INFO_LENGTH = 72
IB_CM_SIDR_REP_INFO_LENGTH = 72

_CONTAINERS = {1: struct.Struct(">B"), 2: struct.Struct(">H"), 4: struct.Struct(">I"),
               8: struct.Struct(">Q")}


@dataclass(frozen=True, slots=True)
class Field:
    """One row: where a field is, and how to reach it."""

    name: str
    byte: int       # offset in the MAD data (ibta_vol1_c12.h's byte_offset)
    bit: int        # Byte[Bit]: bits from the MSB of ``byte``
    width: int      # bits
    at: int         # offset of the container word (-1: a byte string)
    word: struct.Struct | None
    shift: int
    mask: int       # (1 << width) - 1

    @property
    def nbytes(self) -> int:
        return self.width // 8


def _field(name: str, byte: int, bit: int, width: int) -> Field:
    if width > 64:
        if bit or width % 8:
            raise AssertionError(f"{name}: a byte string must be whole bytes")
        return Field(name, byte, bit, width, -1, None, 0, 0)
    start, end = byte * 8 + bit, byte * 8 + bit + width
    for size in (1, 2, 4, 8):   # the smallest naturally aligned word holding it
        at = (start // 8) & ~(size - 1)
        if at * 8 <= start and end <= (at + size) * 8:
            break
    else:
        at, size = start // 8, 8   # 64-bit fields are only 4-byte aligned (IBA_FIELD64_LOC)
    return Field(name, byte, bit, width, at, _CONTAINERS[size], (at + size) * 8 - end,
                 (1 << width) - 1)


@dataclass(frozen=True, slots=True)
class CmMessage:
    """One CM message: its attribute and its field table."""

    name: str
    attr_id: int
    fields: tuple[Field, ...]
    by_name: dict


def _message(name: str, attr_id: int, rows) -> CmMessage:
    fields = tuple(_field(*r) for r in rows)
    used = bytearray(IB_MGMT_MAD_DATA * 8)
    for f in fields:
        lo = f.byte * 8 + f.bit
        if lo + f.width > IB_MGMT_MAD_DATA * 8 or any(used[lo:lo + f.width]):
            raise AssertionError(f"{name}.{f.name} overlaps or overruns")
        used[lo:lo + f.width] = b"\x01" * f.width
        if f.word is not None and f.at + f.word.size > IB_MGMT_MAD_DATA:
            raise AssertionError(f"{name}.{f.name} container overruns")
    return CmMessage(name, attr_id, fields, {f.name: f for f in fields})


def _path(prefix: str, base: int):
    """The path fields of a REQ (primary at 52, alternate at 96)."""
    return (
        (f"{prefix}_local_port_lid", base, 0, 16),
        (f"{prefix}_remote_port_lid", base + 2, 0, 16),
        (f"{prefix}_local_port_gid", base + 4, 0, 128),
        (f"{prefix}_remote_port_gid", base + 20, 0, 128),
        (f"{prefix}_flow_label", base + 36, 0, 20),
        (f"{prefix}_packet_rate", base + 39, 2, 6),
        (f"{prefix}_traffic_class", base + 40, 0, 8),
        (f"{prefix}_hop_limit", base + 41, 0, 8),
        (f"{prefix}_sl", base + 42, 0, 4),
        (f"{prefix}_subnet_local", base + 42, 4, 1),
        (f"{prefix}_local_ack_timeout", base + 43, 0, 5),
    )


# --- the table (ibta_vol1_c12.h) ---------------------------------------------------
_REQ = (
    ("local_comm_id", 0, 0, 32),
    ("vendor_id", 5, 0, 24),
    ("service_id", 8, 0, 64),
    ("local_ca_guid", 16, 0, 64),
    ("local_q_key", 28, 0, 32),
    ("local_qpn", 32, 0, 24),
    ("responder_resources", 35, 0, 8),
    ("local_eecn", 36, 0, 24),
    ("initiator_depth", 39, 0, 8),
    ("remote_eecn", 40, 0, 24),
    ("remote_cm_response_timeout", 43, 0, 5),
    ("transport_service_type", 43, 5, 2),
    ("end_to_end_flow_control", 43, 7, 1),
    ("starting_psn", 44, 0, 24),
    ("local_cm_response_timeout", 47, 0, 5),
    ("retry_count", 47, 5, 3),
    ("partition_key", 48, 0, 16),
    ("path_packet_payload_mtu", 50, 0, 4),
    ("rdc_exists", 50, 4, 1),
    ("rnr_retry_count", 50, 5, 3),
    ("max_cm_retries", 51, 0, 4),
    ("srq", 51, 4, 1),
    ("extended_transport_type", 51, 5, 3),
    *_path("primary", 52),
    *_path("alternate", 96),
    ("sap_supported", 139, 5, 1),
    ("private_data", 140, 0, 736),
)
_MRA = (
    ("local_comm_id", 0, 0, 32),
    ("remote_comm_id", 4, 0, 32),
    ("message_mraed", 8, 0, 2),
    ("service_timeout", 9, 0, 5),
    ("private_data", 10, 0, 1776),
)
_REJ = (
    ("local_comm_id", 0, 0, 32),
    ("remote_comm_id", 4, 0, 32),
    ("message_rejected", 8, 0, 2),
    ("rejected_info_length", 9, 0, 7),
    ("reason", 10, 0, 16),
    ("ari", 12, 0, 576),
    ("private_data", 84, 0, 1184),
)
_REP = (
    ("local_comm_id", 0, 0, 32),
    ("remote_comm_id", 4, 0, 32),
    ("local_q_key", 8, 0, 32),
    ("local_qpn", 12, 0, 24),
    ("vendor_id_h", 15, 0, 8),
    ("local_ee_context_number", 16, 0, 24),
    ("vendor_id_m", 19, 0, 8),
    ("starting_psn", 20, 0, 24),
    ("vendor_id_l", 23, 0, 8),
    ("responder_resources", 24, 0, 8),
    ("initiator_depth", 25, 0, 8),
    ("target_ack_delay", 26, 0, 5),
    ("failover_accepted", 26, 5, 2),
    ("end_to_end_flow_control", 26, 7, 1),
    ("rnr_retry_count", 27, 0, 3),
    ("srq", 27, 3, 1),
    ("local_ca_guid", 28, 0, 64),
    ("private_data", 36, 0, 1568),
)
_RTU = (
    ("local_comm_id", 0, 0, 32),
    ("remote_comm_id", 4, 0, 32),
    ("private_data", 8, 0, 1792),
)
_DREQ = (
    ("local_comm_id", 0, 0, 32),
    ("remote_comm_id", 4, 0, 32),
    ("remote_qpn_eecn", 8, 0, 24),
    ("private_data", 12, 0, 1760),
)
_DREP = (
    ("local_comm_id", 0, 0, 32),
    ("remote_comm_id", 4, 0, 32),
    ("private_data", 8, 0, 1792),
)
_LAP = (
    ("local_comm_id", 0, 0, 32),
    ("remote_comm_id", 4, 0, 32),
    ("remote_qpn_eecn", 12, 0, 24),
    ("remote_cm_response_timeout", 15, 0, 5),
    ("alternate_local_port_lid", 20, 0, 16),
    ("alternate_remote_port_lid", 22, 0, 16),
    ("alternate_local_port_gid", 24, 0, 128),
    ("alternate_remote_port_gid", 40, 0, 128),
    ("alternate_flow_label", 56, 0, 20),
    ("alternate_traffic_class", 59, 0, 8),
    ("alternate_hop_limit", 60, 0, 8),
    ("alternate_packet_rate", 61, 2, 6),
    ("alternate_sl", 62, 0, 4),
    ("alternate_subnet_local", 62, 4, 1),
    ("alternate_local_ack_timeout", 63, 0, 5),
    ("private_data", 64, 0, 1344),
)
_APR = (
    ("local_comm_id", 0, 0, 32),
    ("remote_comm_id", 4, 0, 32),
    ("additional_information_length", 8, 0, 8),
    ("ar_status", 9, 0, 8),
    ("additional_information", 12, 0, 576),
    ("private_data", 84, 0, 1184),
)
_SIDR_REQ = (
    ("requestid", 0, 0, 32),
    ("partition_key", 4, 0, 16),
    ("serviceid", 8, 0, 64),
    ("private_data", 16, 0, 1728),
)
_SIDR_REP = (
    ("requestid", 0, 0, 32),
    ("status", 4, 0, 8),
    ("additional_information_length", 5, 0, 8),
    ("vendor_id_h", 6, 0, 16),
    ("qpn", 8, 0, 24),
    ("vendor_id_l", 11, 0, 8),
    ("serviceid", 12, 0, 64),
    ("q_key", 20, 0, 32),
    ("additional_information", 24, 0, 576),
    ("private_data", 96, 0, 1088),
)

#: name -> CmMessage, in attribute order.
CM_MESSAGES: dict[str, CmMessage] = {
    m.name: m for m in (
        _message("REQ", CmAttr.REQ, _REQ),
        _message("MRA", CmAttr.MRA, _MRA),
        _message("REJ", CmAttr.REJ, _REJ),
        _message("REP", CmAttr.REP, _REP),
        _message("RTU", CmAttr.RTU, _RTU),
        _message("DREQ", CmAttr.DREQ, _DREQ),
        _message("DREP", CmAttr.DREP, _DREP),
        _message("SIDR_REQ", CmAttr.SIDR_REQ, _SIDR_REQ),
        _message("SIDR_REP", CmAttr.SIDR_REP, _SIDR_REP),
        _message("LAP", CmAttr.LAP, _LAP),
        _message("APR", CmAttr.APR, _APR),
    )
}
CM_BY_ATTR: dict[int, CmMessage] = {int(m.attr_id): m for m in CM_MESSAGES.values()}

#: Private data sizes (enum ib_cm_data_size), from the table.
PRIVATE_DATA_SIZE = {n: m.by_name["private_data"].nbytes for n, m in CM_MESSAGES.items()}

# Length field -> the byte string it measures (checked on decode and encode).
_INFO_LENGTHS = {
    "REJ": ("rejected_info_length", "ari"),
    "APR": ("additional_information_length", "additional_information"),
    "SIDR_REP": ("additional_information_length", "additional_information"),
}


def _message_for(msg) -> CmMessage:
    if isinstance(msg, CmMessage):
        return msg
    m = CM_MESSAGES.get(msg)
    if m is None:
        raise WireError("bad_attr", f"no CM message {msg!r}")
    return m


def encode(msg, **fields) -> bytearray:
    """The 232 bytes of MAD data of CM message ``msg`` ("REQ", ...).

    Fields not given are zero; byte strings shorter than their field are
    zero-padded.  A length field left out is set from its byte string
    (REJ ``rejected_info_length`` from ``ari``, ...)."""
    m = _message_for(msg)
    lens = _INFO_LENGTHS.get(m.name)
    if lens is not None and lens[0] not in fields and lens[1] in fields:
        fields[lens[0]] = len(fields[lens[1]])
    buf = bytearray(IB_MGMT_MAD_DATA)
    by_name = m.by_name
    for name, value in fields.items():
        f = by_name.get(name)
        if f is None:
            raise WireError("bad_field", f"{m.name} has no field {name!r}")
        if f.word is None:
            n = len(value)
            if n > f.nbytes:
                raise WireError("bad_length", f"{m.name}.{name}: {n} bytes > {f.nbytes}")
            buf[f.byte:f.byte + n] = value
            continue
        if not 0 <= value <= f.mask:
            raise WireError("bad_field", f"{m.name}.{name} = {value} does not fit {f.width} bits")
        (w,) = f.word.unpack_from(buf, f.at)
        f.word.pack_into(buf, f.at, w | value << f.shift)
    _check(m, buf)
    return buf


def encode_mad(msg, *, tid: int = 0, attr_mod: int = 0, mad_status: int = 0,
               class_version: int = IB_CM_CLASS_VERSION, **fields) -> bytearray:
    """The whole 256-byte MAD (method Send, class CM) of ``msg``.  The header's
    status is ``mad_status`` (SIDR_REP has a field named ``status``)."""
    m = _message_for(msg)
    return build_mad(MgmtClass.CM, class_version, Method.SEND, m.attr_id, encode(m, **fields),
                     tid=tid, attr_mod=attr_mod, status=mad_status)


def decode_data(msg, data) -> dict:
    """The fields of CM message ``msg`` from its (at least 232) data bytes."""
    m = _message_for(msg)
    if len(data) < IB_MGMT_MAD_DATA:
        raise WireError("truncated", f"{m.name} data of {len(data)} bytes, needs {IB_MGMT_MAD_DATA}")
    _check(m, data)
    out = {}
    for f in m.fields:
        if f.word is None:
            out[f.name] = bytes(data[f.byte:f.byte + f.nbytes])
        else:
            out[f.name] = (f.word.unpack_from(data, f.at)[0] >> f.shift) & f.mask
    return out


def decode(buf) -> dict:
    """An untrusted CM MAD -> {"message": "REQ", "tid": ..., "attr_mod": ...,
    "mad_status": ..., fields...}; ``encode_mad(**d)`` with ``message`` as the
    first argument rebuilds the same bytes (reserved bits aside)."""
    hdr, data = parse_mad(buf)
    if hdr.mgmt_class != MgmtClass.CM:
        raise WireError("bad_class", f"management class 0x{hdr.mgmt_class:02x}, not CM")
    if hdr.class_version != IB_CM_CLASS_VERSION:
        raise WireError("bad_class_version", f"CM class version {hdr.class_version}")
    if hdr.method != Method.SEND:
        raise WireError("bad_method", f"CM method 0x{hdr.method:02x}, not Send")
    m = CM_BY_ATTR.get(hdr.attr_id)
    if m is None:
        raise WireError("bad_attr", f"CM attribute 0x{hdr.attr_id:04x}")
    out = {"message": m.name, "tid": hdr.tid, "attr_mod": hdr.attr_mod,
           "mad_status": hdr.status}
    out.update(decode_data(m, data))
    return out


def _check(m: CmMessage, data) -> None:
    """Values the spec reserves: no CM can act on these."""
    name = m.name
    if name == "MRA" or name == "REJ":
        f = m.fields[2]      # message_mraed / message_rejected: 2 bits at byte 8
        if data[8] >> 6 == 3:
            raise WireError("bad_field", f"{name}.{f.name} = 3 (reserved)")
    lens = _INFO_LENGTHS.get(name)
    if lens is not None:
        lf, bf = m.by_name[lens[0]], m.by_name[lens[1]]
        n = (lf.word.unpack_from(data, lf.at)[0] >> lf.shift) & lf.mask
        if n > bf.nbytes:
            raise WireError("bad_length", f"{name}.{lf.name} = {n} > {bf.nbytes}")


def message_name(attr_id: int) -> str | None:
    m = CM_BY_ATTR.get(attr_id)
    return None if m is None else m.name


# Offset of the MAD data in the MAD, for code indexing whole MADs.
CM_DATA_OFFSET = IB_MGMT_MAD_HDR
