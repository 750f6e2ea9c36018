"""Subnet management and performance management MADs (IBA ch. 14 and 16.1).

Owns the byte layouts of:

* the SMP framing after the 24-byte common header (``wire.mad`` owns that):
  LID-routed (class 0x01: M_Key, 32 reserved bytes, 64 bytes of data) and
  directed-route (class 0x81: D bit, 15-bit status, hop pointer, hop count,
  M_Key, DrSLID, DrDLID, data, InitialPath[64], ReturnPath[64]);
* the SMP attributes NodeInfo, NodeDescription, PortInfo, SwitchInfo,
  GUIDInfo, P_KeyTable, SLtoVLMappingTable, VLArbitrationTable,
  LinearForwardingTable, MulticastForwardingTable, SMInfo and Notice;
* the PerfMgt (class 0x04) attributes ClassPortInfo, PortCounters and
  PortCountersExtended (data at byte 64 of the MAD, after 40 reserved).

Field names are libibmad's (rdma-core libibmad/fields.c) and every bit
offset is the IBA's: bit 0 is the most significant bit of byte 0 of the
attribute.  A :class:`Layout` is a table of (name, offset, width) rows; it
decodes an attribute into a plain dict and encodes a dict (missing names
are zero) back, and reads/writes single fields in place.  Untrusted bytes
raise only :class:`~softrdma.wire.errors.WireError`.
"""

from __future__ import annotations

import struct
from enum import IntEnum

from .errors import WireError
from .mad import IB_MGMT_MAD_HDR, IB_MGMT_MAD_SIZE, MgmtClass

try:                                   # the compiled bit-field codec, where built
    from ._bitfields import Codec as _Codec
except ImportError:                    # pragma: no cover - no C compiler at install
    _Codec = None

# --- SMP framing (IBA 14.2.1) ----------------------------------------------------------
SMP_DATA_OFFSET = 64           # attribute data in both SMP kinds and in PerfMgt MADs
SMP_DATA_SIZE = 64
GS_DATA_SIZE = 192             # PerfMgt: bytes 64..255
DR_PATH_OFFSET = 128           # InitialPath[64]
DR_RPATH_OFFSET = 192          # ReturnPath[64]
DR_MAX_HOPS = 63               # path[0] is unused, path[1..63]
IB_LID_PERMISSIVE = 0xFFFF
SMP_CLASS_VERSION = 1
PERF_CLASS_VERSION = 1

# bytes 4..7 of a DR SMP: D:1 Status:15, HopPointer:8, HopCount:8
_DR_WORD = struct.Struct(">HBB")
_MKEY = struct.Struct(">Q")
_DR_LIDS = struct.Struct(">HH")       # DrSLID, DrDLID at byte 32
DR_DIRECTION_BIT = 0x8000


class SmpAttr(IntEnum):
    """Subnet management attribute IDs (IBA 14.2.5, table 145)."""

    CLASS_PORT_INFO = 0x0001
    NOTICE = 0x0002
    INFORM_INFO = 0x0003
    NODE_DESC = 0x0010
    NODE_INFO = 0x0011
    SWITCH_INFO = 0x0012
    GUID_INFO = 0x0014
    PORT_INFO = 0x0015
    PKEY_TABLE = 0x0016
    SL_TO_VL_TABLE = 0x0017
    VL_ARB_TABLE = 0x0018
    LINEAR_FWD_TABLE = 0x0019
    RANDOM_FWD_TABLE = 0x001A
    MCAST_FWD_TABLE = 0x001B
    SM_INFO = 0x0020
    VENDOR_DIAG = 0x0030
    LED_INFO = 0x0031
    MLNX_EXT_PORT_INFO = 0xFF90


class PerfAttr(IntEnum):
    """Performance management attribute IDs (IBA 16.1.3, table 208)."""

    CLASS_PORT_INFO = 0x0001
    PORT_SAMPLES_CONTROL = 0x0010
    PORT_SAMPLES_RESULT = 0x0011
    PORT_COUNTERS = 0x0012
    PORT_RCV_ERROR_DETAILS = 0x0015
    PORT_XMIT_DISCARD_DETAILS = 0x0016
    PORT_COUNTERS_EXT = 0x001D


class SmpStatus:
    """MAD status field codes (IBA 13.4.7, table 134): bits 2..4 say why."""

    BUSY = 0x0001
    REDIRECT = 0x0002
    BAD_VERSION = 1 << 2
    METHOD_UNSUPPORTED = 2 << 2
    ATTR_UNSUPPORTED = 3 << 2          # method/attribute combination unsupported
    BAD_PARAM = 7 << 2                 # invalid attribute or modifier value


class NodeType(IntEnum):
    CA = 1
    SWITCH = 2
    ROUTER = 3


class PortState(IntEnum):
    """PortInfo.PortState (IBA 14.2.5.6); 0 in a Set means no change."""

    NOP = 0
    DOWN = 1
    INIT = 2
    ARMED = 3
    ACTIVE = 4


class PhysState(IntEnum):
    """PortInfo.PortPhysicalState; 0 in a Set means no change."""

    NOP = 0
    SLEEP = 1
    POLLING = 2
    DISABLED = 3
    PORT_CONFIG_TRAINING = 4
    LINK_UP = 5
    LINK_ERROR_RECOVERY = 6
    PHY_TEST = 7


# LinkWidth bits (PortInfo.LinkWidth*) and their lane counts
LINK_WIDTH = {1: 1, 2: 4, 4: 8, 8: 12, 16: 2}
WIDTH_CODE = {v: k for k, v in LINK_WIDTH.items()}
# LinkSpeed (SDR/DDR/QDR) and LinkSpeedExt (FDR/EDR/HDR) codes; FDR10 is
# Mellanox's ExtendedPortInfo and is not modelled.
LINK_SPEED = {"SDR": (1, 0), "DDR": (2, 0), "QDR": (4, 0), "FDR": (4, 1), "EDR": (4, 2),
              "HDR": (4, 4), "NDR": (4, 8)}

# PortInfo.CapabilityMask bits used here (IBA 14.2.5.6, table 155)
CAP_IS_SM = 1 << 1
CAP_IS_NOTICE_SUPPORTED = 1 << 2
CAP_IS_TRAP_SUPPORTED = 1 << 3
CAP_IS_AUTOMATIC_MIGRATION = 1 << 5
CAP_IS_SL_MAPPING_SUPPORTED = 1 << 6
CAP_IS_SYSTEM_IMAGE_GUID_SUPPORTED = 1 << 11
CAP_IS_EXTENDED_SPEEDS_SUPPORTED = 1 << 14
CAP_IS_CAPABILITY_MASK2_SUPPORTED = 1 << 15
CAP_IS_COMM_MGMT_SUPPORTED = 1 << 16
CAP_IS_VENDOR_CLASS_SUPPORTED = 1 << 19
CAP_IS_CAP_MASK_NOTICE_SUPPORTED = 1 << 22
CAP_IS_CLIENT_REREGISTRATION_SUPPORTED = 1 << 25

# PerfMgt ClassPortInfo.CapabilityMask bits (IBA 16.1.3.1, libibmad mad.h)
PM_ALL_PORT_SELECT = 1 << 8
PM_EXT_WIDTH_SUPPORTED = 1 << 9
PM_EXT_WIDTH_NOIETF_SUP = 1 << 10
PM_PC_XMIT_WAIT_SUP = 1 << 12

# Notice (trap) numbers
TRAP_LINK_STATE_CHANGE = 128
TRAP_CAPABILITY_MASK_CHANGE = 144
TRAP_144_OTHER_LOCAL_CHANGES = 0x01    # ntc_144 LocalChanges: a change other than the CapabilityMask
TRAP_144_SM_PRIORITY_CHANGE = 0x0008   # ntc_144 ChangeFlags


class Layout:
    """A fixed-size attribute as (name, bit offset, bit width) rows.

    Offsets are IBA ones (MSB first).  ``decode`` and ``encode_into`` run the
    compiled codec (``wire._bitfields``) where it is built and every field fits
    64 bits; their Python references turn the bytes into one big integer and
    shift every field in or out of it."""

    __slots__ = ("name", "size", "fields", "_shift", "_mask", "_codec")

    def __init__(self, name: str, size: int, rows):
        self.name = name
        self.size = size
        self.fields = tuple(rows)
        nbits = size * 8
        self._shift = {}
        self._mask = {}
        for fname, off, width in self.fields:
            if off + width > nbits or width <= 0:
                raise ValueError(f"{name}.{fname}: {off}+{width} past {nbits} bits")
            if fname in self._shift:
                raise ValueError(f"{name}.{fname} twice")
            self._shift[fname] = nbits - off - width
            self._mask[fname] = (1 << width) - 1
        # the compiled codec, where built and every field fits 64 bits; the Python
        # code below stays the reference (and reports errors in its own words)
        self._codec = None
        if _Codec is not None and all(w <= 64 for _, _, w in self.fields):
            self._codec = _Codec(size, [(off, w) for _, off, w in self.fields],
                                 tuple(n for n, _, _ in self.fields))

    def _check(self, buf, offset):
        if len(buf) - offset < self.size:
            raise WireError("truncated", f"{self.name} needs {self.size} bytes at {offset}, "
                                         f"has {max(0, len(buf) - offset)}")

    def decode(self, buf, offset: int = 0) -> dict:
        self._check(buf, offset)
        if self._codec is not None:
            return self._codec.decode(buf, offset)
        return self.decode_reference(buf, offset)

    def decode_reference(self, buf, offset: int = 0) -> dict:
        """``decode`` in Python: what the compiled codec is tested against."""
        self._check(buf, offset)
        v = int.from_bytes(bytes(buf[offset:offset + self.size]), "big")
        return {n: (v >> s) & self._mask[n] for n, s in self._shift.items()}

    def encode(self, values: dict | None = None, **kw) -> bytearray:
        out = bytearray(self.size)
        self.encode_into(out, 0, values, **kw)
        return out

    def encode_into(self, buf, offset: int = 0, values: dict | None = None, **kw) -> None:
        """Write every named field; fields not named keep the buffer's bits."""
        self._check(buf, offset)
        if self._codec is not None:
            try:
                self._codec.encode_into(buf, offset, values if not kw and type(values) is dict
                                        else dict(values or {}, **kw))
                return
            except (KeyError, TypeError, OverflowError, BufferError):
                pass                 # nothing written: the reference path says what is wrong
        self.encode_into_reference(buf, offset, values, **kw)

    def encode_into_reference(self, buf, offset: int = 0, values: dict | None = None, **kw) -> None:
        """``encode_into`` in Python: what the compiled codec is tested against."""
        self._check(buf, offset)
        vals = dict(values or {}, **kw)
        v = int.from_bytes(bytes(buf[offset:offset + self.size]), "big")
        for n, x in vals.items():
            try:
                s = self._shift[n]
            except KeyError:
                raise WireError("bad_field", f"{self.name} has no field {n}") from None
            m = self._mask[n]
            x = int(x)
            if x < 0 or x > m:
                raise WireError("bad_field", f"{self.name}.{n}={x} does not fit")
            v = (v & ~(m << s)) | (x << s)
        buf[offset:offset + self.size] = v.to_bytes(self.size, "big")

    def get(self, buf, name: str, offset: int = 0) -> int:
        self._check(buf, offset)
        s = self._shift[name]
        v = int.from_bytes(bytes(buf[offset:offset + self.size]), "big")
        return (v >> s) & self._mask[name]

    def set(self, buf, name: str, value: int, offset: int = 0) -> None:
        self.encode_into(buf, offset, {name: value})

    def position(self, name: str) -> tuple[int, int]:
        """(bit offset, width) of a field, IBA numbering."""
        for n, off, w in self.fields:
            if n == name:
                return off, w
        raise KeyError(name)


# --- SMP attributes (IBA 14.2.5) ------------------------------------------------------
NODE_INFO = Layout("NodeInfo", 40, [
    ("BaseVers", 0, 8), ("ClassVers", 8, 8), ("NodeType", 16, 8), ("NumPorts", 24, 8),
    ("SystemGuid", 32, 64), ("Guid", 96, 64), ("PortGuid", 160, 64),
    ("PartCap", 224, 16), ("DevId", 240, 16), ("Revision", 256, 32),
    ("LocalPort", 288, 8), ("VendorId", 296, 24),
])

NODE_DESC_SIZE = 64

PORT_INFO = Layout("PortInfo", 64, [
    ("Mkey", 0, 64), ("GidPrefix", 64, 64), ("Lid", 128, 16), ("SMLid", 144, 16),
    ("CapMask", 160, 32), ("DiagCode", 192, 16), ("MkeyLeasePeriod", 208, 16),
    ("LocalPort", 224, 8), ("LinkWidthEnabled", 232, 8), ("LinkWidthSupported", 240, 8),
    ("LinkWidthActive", 248, 8), ("LinkSpeedSupported", 256, 4), ("LinkState", 260, 4),
    ("PhysLinkState", 264, 4), ("LinkDownDefState", 268, 4), ("ProtectBits", 272, 2),
    ("LMC", 277, 3), ("LinkSpeedActive", 280, 4), ("LinkSpeedEnabled", 284, 4),
    ("NeighborMTU", 288, 4), ("SMSL", 292, 4), ("VLCap", 296, 4), ("InitType", 300, 4),
    ("VLHighLimit", 304, 8), ("VLArbHighCap", 312, 8), ("VLArbLowCap", 320, 8),
    ("InitReply", 328, 4), ("MtuCap", 332, 4), ("VLStallCount", 336, 3), ("HoqLife", 339, 5),
    ("OperVLs", 344, 4), ("PartEnforceInb", 348, 1), ("PartEnforceOutb", 349, 1),
    ("FilterRawInb", 350, 1), ("FilterRawOutb", 351, 1), ("MkeyViolations", 352, 16),
    ("PkeyViolations", 368, 16), ("QkeyViolations", 384, 16), ("GuidCap", 400, 8),
    ("ClientReregister", 408, 1), ("McastPkeyTrapSuppressionEnabled", 409, 2),
    ("SubnetTimeout", 411, 5), ("RespTimeVal", 419, 5), ("LocalPhysErr", 424, 4),
    ("OverrunErr", 428, 4), ("MaxCreditHint", 432, 16), ("RoundTrip", 456, 24),
    ("CapabilityMask2", 480, 16), ("LinkSpeedExtActive", 496, 4),
    ("LinkSpeedExtSupported", 500, 4), ("LinkSpeedExtEnabled", 507, 5),
])

SWITCH_INFO = Layout("SwitchInfo", 20, [
    ("LinearFdbCap", 0, 16), ("RandomFdbCap", 16, 16), ("McastFdbCap", 32, 16),
    ("LinearFdbTop", 48, 16), ("DefPort", 64, 8), ("DefMcastPrimPort", 72, 8),
    ("DefMcastNotPrimPort", 80, 8), ("LifeTime", 88, 5), ("StateChange", 93, 1),
    ("OptSLtoVLMapping", 94, 2), ("LidsPerPort", 96, 16), ("PartEnforceCap", 112, 16),
    ("InboundPartEnf", 128, 1), ("OutboundPartEnf", 129, 1), ("FilterRawInbound", 130, 1),
    ("FilterRawOutbound", 131, 1), ("EnhancedPort0", 132, 1), ("MulticastFDBTop", 144, 16),
])

SM_INFO = Layout("SMInfo", 21, [
    ("SmInfoGuid", 0, 64), ("SmInfoKey", 64, 64), ("SmActivity", 128, 32),
    ("SmPriority", 160, 4), ("SmState", 164, 4),
])


class SmState(IntEnum):
    NOT_ACTIVE = 0
    DISCOVERING = 1
    STANDBY = 2
    MASTER = 3


NOTICE = Layout("Notice", 64, [
    ("NoticeIsGeneric", 0, 1), ("NoticeType", 1, 7), ("NoticeProducerType", 8, 24),
    ("NoticeTrapNumber", 32, 16), ("NoticeIssuerLID", 48, 16), ("NoticeToggle", 64, 1),
    ("NoticeCount", 65, 15), ("NoticeDataLID", 80, 16),
])
NOTICE_DATA_DETAILS = (10, 54)        # byte offset, length: the trap-specific part


def notice_144(lid: int, cap_mask: int, *, producer_type: int = 1, local_changes: int = 0,
               change_flags: int = 0) -> bytearray:
    """The Notice of trap 144 (local changes at port ``lid``: CapabilityMask, or
    ``local_changes``/``change_flags`` such as TRAP_144_SM_PRIORITY_CHANGE).
    ntc_144: pad, LIDADDR, pad, LocalChanges, CapabilityMask, ChangeFlags."""
    data = bytearray(NOTICE.encode(NoticeIsGeneric=1, NoticeType=4, NoticeProducerType=producer_type,
                                   NoticeTrapNumber=TRAP_CAPABILITY_MASK_CHANGE, NoticeIssuerLID=lid))
    o = NOTICE_DATA_DETAILS[0]
    data[o + 2:o + 4] = lid.to_bytes(2, "big")
    data[o + 5] = local_changes
    data[o + 6:o + 10] = cap_mask.to_bytes(4, "big")
    data[o + 10:o + 12] = change_flags.to_bytes(2, "big")
    return data

# Tables: fixed-size blocks, as bytes/ints
GUIDS_PER_BLOCK = 8
PKEYS_PER_BLOCK = 32
LFT_BLOCK = 64                       # one port byte per LID, 64 LIDs a block
MFT_BLOCK = 32                       # 32 MLIDs, 16-bit port mask each
VLARB_ENTRIES = 32                   # (VL, weight) pairs per block
_GUID_BLOCK = struct.Struct(">8Q")
_PKEY_BLOCK = struct.Struct(">32H")
_MFT_BLOCK = struct.Struct(">32H")


def decode_guid_info(data) -> tuple[int, ...]:
    _need(data, 64, "GUIDInfo")
    return _GUID_BLOCK.unpack_from(data, 0)


def encode_guid_info(guids) -> bytes:
    g = list(guids)[:GUIDS_PER_BLOCK]
    return _GUID_BLOCK.pack(*(g + [0] * (GUIDS_PER_BLOCK - len(g))))


def decode_pkey_table(data) -> tuple[int, ...]:
    _need(data, 64, "P_KeyTable")
    return _PKEY_BLOCK.unpack_from(data, 0)


def encode_pkey_table(pkeys) -> bytes:
    p = list(pkeys)[:PKEYS_PER_BLOCK]
    return _PKEY_BLOCK.pack(*(p + [0] * (PKEYS_PER_BLOCK - len(p))))


def decode_sl2vl(data) -> tuple[int, ...]:
    """16 VLs, SL0 in the high nibble of byte 0 (IBA 14.2.5.8)."""
    _need(data, 8, "SLtoVLMappingTable")
    return tuple((data[i >> 1] >> (4 if i % 2 == 0 else 0)) & 0xF for i in range(16))


def encode_sl2vl(vls) -> bytes:
    v = list(vls) + [0] * (16 - len(vls))
    return bytes(((v[2 * i] & 0xF) << 4) | (v[2 * i + 1] & 0xF) for i in range(8))


def decode_vlarb(data) -> tuple[tuple[int, int], ...]:
    """32 (VL, weight) entries: VL in the low 4 bits of the first byte."""
    _need(data, 64, "VLArbitrationTable")
    return tuple((data[2 * i] & 0xF, data[2 * i + 1]) for i in range(VLARB_ENTRIES))


def encode_vlarb(entries) -> bytes:
    out = bytearray(64)
    for i, (vl, w) in enumerate(list(entries)[:VLARB_ENTRIES]):
        out[2 * i] = vl & 0xF
        out[2 * i + 1] = w & 0xFF
    return bytes(out)


def decode_lft(data) -> bytes:
    _need(data, LFT_BLOCK, "LinearForwardingTable")
    return bytes(data[:LFT_BLOCK])


def decode_mft(data) -> tuple[int, ...]:
    """32 port masks (16 ports each: attr_mod bits 28..31 pick the position)."""
    _need(data, 64, "MulticastForwardingTable")
    return _MFT_BLOCK.unpack_from(data, 0)


def encode_mft(masks) -> bytes:
    m = list(masks)[:MFT_BLOCK]
    return _MFT_BLOCK.pack(*(m + [0] * (MFT_BLOCK - len(m))))


def mft_attr_mod(block: int, position: int) -> int:
    """MulticastForwardingTable modifier: PortMask position:4, reserved:19, block:9."""
    return ((position & 0xF) << 28) | (block & 0x1FF)


def split_mft_attr_mod(mod: int) -> tuple[int, int]:
    """(block, position)."""
    return mod & 0x1FF, (mod >> 28) & 0xF


def decode_node_desc(data) -> str:
    _need(data, NODE_DESC_SIZE, "NodeDescription")
    return bytes(data[:NODE_DESC_SIZE]).split(b"\0", 1)[0].decode("utf-8", "replace")


def encode_node_desc(text: str) -> bytes:
    b = text.encode("utf-8")[:NODE_DESC_SIZE]
    return b + bytes(NODE_DESC_SIZE - len(b))


# --- PerfMgt attributes (IBA 16.1.3) -----------------------------------------------------
PORT_COUNTERS = Layout("PortCounters", 44, [
    ("PortSelect", 8, 8), ("CounterSelect", 16, 16), ("SymbolErrorCounter", 32, 16),
    ("LinkErrorRecoveryCounter", 48, 8), ("LinkDownedCounter", 56, 8),
    ("PortRcvErrors", 64, 16), ("PortRcvRemotePhysicalErrors", 80, 16),
    ("PortRcvSwitchRelayErrors", 96, 16), ("PortXmitDiscards", 112, 16),
    ("PortXmitConstraintErrors", 128, 8), ("PortRcvConstraintErrors", 136, 8),
    ("CounterSelect2", 144, 8), ("LocalLinkIntegrityErrors", 152, 4),
    ("ExcessiveBufferOverrunErrors", 156, 4), ("VL15Dropped", 176, 16),
    ("PortXmitData", 192, 32), ("PortRcvData", 224, 32), ("PortXmitPkts", 256, 32),
    ("PortRcvPkts", 288, 32), ("PortXmitWait", 320, 32),
])
#: The PortCounters fields a CounterSelect bit clears, in bit order (IBA table 209).
PORT_COUNTERS_SELECT = (
    "SymbolErrorCounter", "LinkErrorRecoveryCounter", "LinkDownedCounter", "PortRcvErrors",
    "PortRcvRemotePhysicalErrors", "PortRcvSwitchRelayErrors", "PortXmitDiscards",
    "PortXmitConstraintErrors", "PortRcvConstraintErrors", "LocalLinkIntegrityErrors",
    "ExcessiveBufferOverrunErrors", "VL15Dropped", "PortXmitData", "PortRcvData",
    "PortXmitPkts", "PortRcvPkts",
)
PORT_COUNTERS_SELECT2 = ("PortXmitWait",)   # CounterSelect2 bit 0

PORT_COUNTERS_EXT = Layout("PortCountersExtended", 72, [
    ("PortSelect", 8, 8), ("CounterSelect", 16, 16), ("PortXmitData", 64, 64),
    ("PortRcvData", 128, 64), ("PortXmitPkts", 192, 64), ("PortRcvPkts", 256, 64),
    ("PortUnicastXmitPkts", 320, 64), ("PortUnicastRcvPkts", 384, 64),
    ("PortMulticastXmitPkts", 448, 64), ("PortMulticastRcvPkts", 512, 64),
])
PORT_COUNTERS_EXT_SELECT = (
    "PortXmitData", "PortRcvData", "PortXmitPkts", "PortRcvPkts", "PortUnicastXmitPkts",
    "PortUnicastRcvPkts", "PortMulticastXmitPkts", "PortMulticastRcvPkts",
)

CLASS_PORT_INFO = Layout("ClassPortInfo", 72, [
    ("BaseVersion", 0, 8), ("ClassVersion", 8, 8), ("CapabilityMask", 16, 16),
    ("CapabilityMask2", 32, 27), ("RespTimeVal", 59, 5), ("RedirectGID", 64, 128),
    ("RedirectTC", 192, 8), ("RedirectSL", 200, 4), ("RedirectFL", 204, 20),
    ("RedirectLID", 224, 16), ("RedirectPKey", 240, 16), ("RedirectQP", 264, 24),
    ("RedirectQKey", 288, 32), ("TrapGID", 320, 128), ("TrapTC", 448, 8), ("TrapSL", 456, 4),
    ("TrapFL", 460, 20), ("TrapLID", 480, 16), ("TrapPKey", 496, 16), ("TrapHL", 512, 8),
    ("TrapQP", 520, 24), ("TrapQKey", 544, 32),
])

ATTRIBUTES = {a.name: a for a in (NODE_INFO, PORT_INFO, SWITCH_INFO, SM_INFO, NOTICE,
                                  PORT_COUNTERS, PORT_COUNTERS_EXT, CLASS_PORT_INFO)}


def _need(data, n, what):
    if len(data) < n:
        raise WireError("truncated", f"{what} needs {n} bytes, has {len(data)}")


# --- SMP header access ------------------------------------------------------------------
def _check_mad(buf):
    if len(buf) != IB_MGMT_MAD_SIZE:
        raise WireError("bad_length" if len(buf) > IB_MGMT_MAD_SIZE else "truncated",
                        f"SMP of {len(buf)} bytes, is {IB_MGMT_MAD_SIZE}")


class DrHeader:
    """The directed-route fields of a class-0x81 SMP, read from the bytes.

    Plain attributes, no validation of meaning (route.py does that): the
    codec only guarantees the buffer is a whole MAD of the right class."""

    __slots__ = ("direction", "status", "hop_ptr", "hop_cnt", "mkey", "dr_slid", "dr_dlid")

    def __init__(self, direction, status, hop_ptr, hop_cnt, mkey, dr_slid, dr_dlid):
        self.direction = direction
        self.status = status
        self.hop_ptr = hop_ptr
        self.hop_cnt = hop_cnt
        self.mkey = mkey
        self.dr_slid = dr_slid
        self.dr_dlid = dr_dlid

    def __repr__(self):
        return (f"DrHeader(D={self.direction} status={self.status:#x} hop_ptr={self.hop_ptr} "
                f"hop_cnt={self.hop_cnt} dr_slid={self.dr_slid:#x} dr_dlid={self.dr_dlid:#x})")


def parse_dr(buf) -> DrHeader:
    _check_mad(buf)
    if buf[1] != MgmtClass.SUBN_DIRECTED_ROUTE:
        raise WireError("bad_class", f"class {buf[1]:#x} is not directed route")
    ds, hp, hc = _DR_WORD.unpack_from(buf, 4)
    (mkey,) = _MKEY.unpack_from(buf, 24)
    sl, dl = _DR_LIDS.unpack_from(buf, 32)
    return DrHeader(ds >> 15, ds & 0x7FFF, hp, hc, mkey, sl, dl)


def set_dr_word(buf, direction: int, status: int, hop_ptr: int, hop_cnt: int) -> None:
    _DR_WORD.pack_into(buf, 4, (direction << 15) | (status & 0x7FFF), hop_ptr, hop_cnt)


def set_dr_hop_ptr(buf, hop_ptr: int) -> None:
    buf[6] = hop_ptr


def dr_path(buf, ret: bool = False) -> memoryview:
    """InitialPath (or ReturnPath) as a writable view of the 64 bytes."""
    _check_mad(buf)
    off = DR_RPATH_OFFSET if ret else DR_PATH_OFFSET
    return memoryview(buf)[off:off + 64]


def build_smp(method: int, attr_id: int, attr_mod: int = 0, data=b"", *, tid: int = 0,
              mkey: int = 0, status: int = 0) -> bytearray:
    """A LID-routed SMP (class 0x01)."""
    if len(data) > SMP_DATA_SIZE:
        raise WireError("bad_length", f"SMP data {len(data)} > {SMP_DATA_SIZE}")
    buf = bytearray(IB_MGMT_MAD_SIZE)
    struct.pack_into(">BBBBHHQHHI", buf, 0, 1, MgmtClass.SUBN_LID_ROUTED, SMP_CLASS_VERSION,
                     method, status, 0, tid, attr_id, 0, attr_mod)
    _MKEY.pack_into(buf, 24, mkey)
    buf[SMP_DATA_OFFSET:SMP_DATA_OFFSET + len(data)] = data
    return buf


def build_dr_smp(method: int, attr_id: int, path, attr_mod: int = 0, data=b"", *,
                 tid: int = 0, mkey: int = 0, dr_slid: int = IB_LID_PERMISSIVE,
                 dr_dlid: int = IB_LID_PERMISSIVE, hop_ptr: int = 0) -> bytearray:
    """A directed-route SMP (class 0x81) going out (D=0) along ``path``:
    the output ports from the first node on, as in ``smpquery -D 0,1,3``
    without the leading 0 (hop count = len(path))."""
    path = list(path)
    if len(path) > DR_MAX_HOPS:
        raise WireError("bad_field", f"{len(path)} hops > {DR_MAX_HOPS}")
    if len(data) > SMP_DATA_SIZE:
        raise WireError("bad_length", f"SMP data {len(data)} > {SMP_DATA_SIZE}")
    buf = bytearray(IB_MGMT_MAD_SIZE)
    struct.pack_into(">BBBBHHQHHI", buf, 0, 1, MgmtClass.SUBN_DIRECTED_ROUTE,
                     SMP_CLASS_VERSION, method, 0, 0, tid, attr_id, 0, attr_mod)
    set_dr_word(buf, 0, 0, hop_ptr, len(path))
    _MKEY.pack_into(buf, 24, mkey)
    _DR_LIDS.pack_into(buf, 32, dr_slid, dr_dlid)
    buf[SMP_DATA_OFFSET:SMP_DATA_OFFSET + len(data)] = data
    try:
        buf[DR_PATH_OFFSET + 1:DR_PATH_OFFSET + 1 + len(path)] = bytes(path)
    except ValueError:
        raise WireError("bad_field", f"path {path}: ports are 0..255") from None
    return buf


def smp_data(buf) -> memoryview:
    """The 64 attribute bytes of an SMP (either class) or the start of a GS MAD's."""
    _check_mad(buf)
    return memoryview(buf)[SMP_DATA_OFFSET:SMP_DATA_OFFSET + SMP_DATA_SIZE]


def build_perf(method: int, attr_id: int, attr_mod: int = 0, data=b"", *, tid: int = 0,
               status: int = 0) -> bytearray:
    """A PerfMgt MAD (class 0x04): header, 40 reserved bytes, data at 64."""
    if len(data) > GS_DATA_SIZE:
        raise WireError("bad_length", f"PerfMgt data {len(data)} > {GS_DATA_SIZE}")
    buf = bytearray(IB_MGMT_MAD_SIZE)
    struct.pack_into(">BBBBHHQHHI", buf, 0, 1, MgmtClass.PERF_MGMT, PERF_CLASS_VERSION,
                     method, status, 0, tid, attr_id, 0, attr_mod)
    buf[SMP_DATA_OFFSET:SMP_DATA_OFFSET + len(data)] = data
    return buf


assert IB_MGMT_MAD_HDR == 24
