"""Codecs of the InfiniBand transport headers (IBA 9.2-9.3) and PSN arithmetic.

Each header is a precompiled ``struct.Struct`` (big-endian, as on the wire)
plus the field split of its packed words.  The hot path uses the Structs
directly with ``pack_into``/``unpack_from`` at the offsets the opcode table
gives; the named-tuple views below are for tools and tests.

BTH (12 bytes)::

    opcode:8 | SE:1 M:1 Pad:2 TVer:4 | P_Key:16
    FECN:1 BECN:1 resv6:6 | DestQP:24
    AckReq:1 resv7:7 | PSN:24
"""

from __future__ import annotations

import struct
from typing import NamedTuple

# --- BTH -------------------------------------------------------------------
# opcode, flags byte, pkey, (fecn/becn/resv6 << 24 | dqpn), (ackreq << 31 | resv7 << 24 | psn)
BTH = struct.Struct(">BBHII")
BTH_SE = 0x80
BTH_MIG = 0x40
BTH_PAD_SHIFT = 4
BTH_TVER_MASK = 0x0F
BTH_FECN = 1 << 31
BTH_BECN = 1 << 30
BTH_ACKREQ = 1 << 31
BTH_PSN_MASK = 0xFFFFFF
BTH_QPN_MASK = 0xFFFFFF
BTH_RESV8A_OFFSET = 4    # the byte the ICRC masks (FECN, BECN, resv6)

DEFAULT_PKEY = 0xFFFF

# --- extension headers -----------------------------------------------------
RETH = struct.Struct(">QII")         # va, rkey, dma_len
AETH = struct.Struct(">I")           # syndrome << 24 | msn
ATMETH = struct.Struct(">QIQQ")      # va, rkey, swap_add, compare
ATMACK = struct.Struct(">Q")         # original remote data
DETH = struct.Struct(">II")          # qkey, resv8 << 24 | src_qp
IMMDT = struct.Struct(">I")          # immediate data (network order on the wire)
IETH = struct.Struct(">I")           # rkey to invalidate
XRCETH = struct.Struct(">I")         # resv8 << 24 | XRC SRQ number (IBA 9.8.3.1)
XRCETH_SRQN_MASK = 0xFFFFFF
FETH = struct.Struct(">I")           # resv26 | SEL:2 | PLT:4 (IBA 1.5 FLUSH extended header)
FETH_PLT_MASK = 0x0F                 # placement type: ibv_placement_type (GLOBAL 1, PERSISTENT 2)
FETH_SEL_MASK = 0x30                 # selectivity level: ibv_selectivity_level (RANGE 0, MR 1)
FETH_SEL_SHIFT = 4
AETH_MSN_MASK = 0xFFFFFF
DETH_SQP_MASK = 0xFFFFFF

# --- AETH syndromes (IBA 9.7.5.2.1, table 43) ------------------------------
AETH_TYPE_MASK = 0xE0
AETH_ACK = 0x00
AETH_RNR_NAK = 0x20
AETH_NAK = 0x60
AETH_ACK_UNLIMITED = 0x1F            # ACK with "invalid credit count", as rxe sends
AETH_NAK_PSN_SEQ_ERROR = 0x60
AETH_NAK_INVALID_REQ = 0x61
AETH_NAK_REM_ACC_ERR = 0x62
AETH_NAK_REM_OP_ERR = 0x63
AETH_NAK_INV_RD_REQ = 0x64

#: RNR NAK timer field (5 bits) -> microseconds, IBA 9.7.5.2.8 table 45.
RNR_TIMER_US = (
    655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
    2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920,
    122880, 163840, 245760, 327680, 491520,
)

# --- PSN arithmetic (24-bit, wraps) ------------------------------------------
PSN_MODULO = 1 << 24
PSN_HALF = 1 << 23


def psn_add(psn: int, n: int) -> int:
    return (psn + n) & BTH_PSN_MASK


def psn_diff(a: int, b: int) -> int:
    """Signed distance a - b in PSN space (-2^23 .. 2^23-1)."""
    d = (a - b) & BTH_PSN_MASK
    return d - PSN_MODULO if d >= PSN_HALF else d


# --- named views (tools, tests) ---------------------------------------------
class Bth(NamedTuple):
    opcode: int
    se: bool
    mig: bool
    pad: int
    tver: int
    pkey: int
    fecn: bool
    becn: bool
    dqpn: int
    ackreq: bool
    psn: int


class Reth(NamedTuple):
    va: int
    rkey: int
    dma_len: int


class Aeth(NamedTuple):
    syndrome: int
    msn: int


class AtomicEth(NamedTuple):
    va: int
    rkey: int
    swap_add: int
    compare: int


class Deth(NamedTuple):
    qkey: int
    src_qp: int


def pack_bth(buf, opcode: int, dqpn: int, psn: int, *, se=False, mig=False, pad=0,
             tver=0, pkey=DEFAULT_PKEY, fecn=False, becn=False, ackreq=False, offset=0) -> None:
    BTH.pack_into(
        buf, offset, opcode,
        (BTH_SE if se else 0) | (BTH_MIG if mig else 0) | ((pad & 3) << BTH_PAD_SHIFT) | (tver & 0xF),
        pkey,
        (BTH_FECN if fecn else 0) | (BTH_BECN if becn else 0) | (dqpn & BTH_QPN_MASK),
        (BTH_ACKREQ if ackreq else 0) | (psn & BTH_PSN_MASK),
    )


def bth_dqpn(buf) -> int:
    """The DestQP of the packet in ``buf`` (BTH bytes 5..7), read without
    unpacking the BTH: the demux key of the receive path."""
    return (buf[5] << 16) | (buf[6] << 8) | buf[7]


def unpack_bth(buf, offset=0) -> Bth:
    opcode, flags, pkey, w1, w2 = BTH.unpack_from(buf, offset)
    return Bth(opcode, bool(flags & BTH_SE), bool(flags & BTH_MIG), (flags >> BTH_PAD_SHIFT) & 3,
               flags & BTH_TVER_MASK, pkey, bool(w1 & BTH_FECN), bool(w1 & BTH_BECN),
               w1 & BTH_QPN_MASK, bool(w2 & BTH_ACKREQ), w2 & BTH_PSN_MASK)


def feth_word(placement_type: int, selectivity_level: int) -> int:
    """The FETH of a FLUSH (as rxe's feth_init)."""
    return ((selectivity_level << FETH_SEL_SHIFT) & FETH_SEL_MASK) | (placement_type & FETH_PLT_MASK)


def aeth_word(syndrome: int, msn: int) -> int:
    return ((syndrome & 0xFF) << 24) | (msn & AETH_MSN_MASK)
