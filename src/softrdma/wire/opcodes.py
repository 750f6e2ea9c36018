"""The opcode table: one row per BTH opcode, driving both building and parsing.

Modelled on the kernel's rxe_opcode.c: every opcode has a name, a mask of
the extension headers it carries and of what it means (request/response,
send/write/read/atomic, first/middle/last), and the offsets of each header
within the packet.  The header order is fixed by IBA 9.2:

    BTH, DETH, XRCETH, FETH, RETH, AtomicETH, AETH, AtomicAckETH, ImmDt, IETH, payload

(FETH is IBA 1.5's FLUSH extended header: a FLUSH carries BTH, FETH, RETH.)

so offsets are computed once from the mask.  XRC (IBA 9.8, ib_pack.h's
IB_OPCODE_XRC_*) has every RC operation at 0xA0 + op; its requests carry
the 4-byte XRCETH (the destination XRC SRQ number) right after the BTH,
its responses do not.  Nothing else in softrdma
keeps a list of opcodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

# Header sizes (bytes).
BTH_BYTES = 12
DETH_BYTES = 8
FETH_BYTES = 4
RETH_BYTES = 16
ATMETH_BYTES = 28
AETH_BYTES = 4
ATMACK_BYTES = 8
IMMDT_BYTES = 4
IETH_BYTES = 4
XRCETH_BYTES = 4
CNP_PAD_BYTES = 16   # RoCEv2 CNP: 16 reserved bytes after the BTH
ICRC_BYTES = 4

# Mask bits: which headers an opcode carries ...
DETH_MASK = 1 << 0
RETH_MASK = 1 << 1
ATMETH_MASK = 1 << 2
AETH_MASK = 1 << 3
ATMACK_MASK = 1 << 4
IMMDT_MASK = 1 << 5
IETH_MASK = 1 << 6
PAYLOAD_MASK = 1 << 7
CNP_PAD_MASK = 1 << 8
FETH_MASK = 1 << 9
# ... and what it is.
REQ_MASK = 1 << 10        # sent by a requester
RESP_MASK = 1 << 11       # read response / ACK / atomic ACK
SEND_MASK = 1 << 12
WRITE_MASK = 1 << 13
READ_MASK = 1 << 14
ATOMIC_MASK = 1 << 15
RWR_MASK = 1 << 16        # consumes a receive WQE at the responder
COMP_MASK = 1 << 17       # completes a message at the responder
START_MASK = 1 << 18      # FIRST or ONLY
MIDDLE_MASK = 1 << 19
END_MASK = 1 << 20        # LAST or ONLY
ACK_MASK = 1 << 21        # ACKNOWLEDGE / ATOMIC_ACKNOWLEDGE
CNP_MASK = 1 << 22
UD_MASK = 1 << 23
XRCETH_MASK = 1 << 24     # XRC request: the XRCETH follows the BTH
FLUSH_MASK = 1 << 25         # IBA 1.5 FLUSH (answered by a zero-length READ RESPONSE ONLY)
ATOMIC_WRITE_MASK = 1 << 26  # IBA 1.5 ATOMIC WRITE (ditto)

# (mask bit, size) in wire order.
_HEADER_ORDER = (
    (DETH_MASK, DETH_BYTES),
    (XRCETH_MASK, XRCETH_BYTES),
    (FETH_MASK, FETH_BYTES),
    (RETH_MASK, RETH_BYTES),
    (ATMETH_MASK, ATMETH_BYTES),
    (AETH_MASK, AETH_BYTES),
    (ATMACK_MASK, ATMACK_BYTES),
    (IMMDT_MASK, IMMDT_BYTES),
    (IETH_MASK, IETH_BYTES),
    (CNP_PAD_MASK, CNP_PAD_BYTES),
)

# Transport classes: the opcode's top three bits (IBA 9.2.1, table 38).
IB_OPCODE_RC = 0x00
IB_OPCODE_UC = 0x20
IB_OPCODE_RD = 0x40
IB_OPCODE_UD = 0x60
IB_OPCODE_CNP = 0x80
IB_OPCODE_XRC = 0xA0


class Opcode(IntEnum):
    RC_SEND_FIRST = 0x00
    RC_SEND_MIDDLE = 0x01
    RC_SEND_LAST = 0x02
    RC_SEND_LAST_WITH_IMMEDIATE = 0x03
    RC_SEND_ONLY = 0x04
    RC_SEND_ONLY_WITH_IMMEDIATE = 0x05
    RC_RDMA_WRITE_FIRST = 0x06
    RC_RDMA_WRITE_MIDDLE = 0x07
    RC_RDMA_WRITE_LAST = 0x08
    RC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x09
    RC_RDMA_WRITE_ONLY = 0x0A
    RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x0B
    RC_RDMA_READ_REQUEST = 0x0C
    RC_RDMA_READ_RESPONSE_FIRST = 0x0D
    RC_RDMA_READ_RESPONSE_MIDDLE = 0x0E
    RC_RDMA_READ_RESPONSE_LAST = 0x0F
    RC_RDMA_READ_RESPONSE_ONLY = 0x10
    RC_ACKNOWLEDGE = 0x11
    RC_ATOMIC_ACKNOWLEDGE = 0x12
    RC_COMPARE_SWAP = 0x13
    RC_FETCH_ADD = 0x14
    RC_SEND_LAST_WITH_INVALIDATE = 0x16
    RC_SEND_ONLY_WITH_INVALIDATE = 0x17
    RC_FLUSH = 0x1C
    RC_ATOMIC_WRITE = 0x1D

    UC_SEND_FIRST = 0x20
    UC_SEND_MIDDLE = 0x21
    UC_SEND_LAST = 0x22
    UC_SEND_LAST_WITH_IMMEDIATE = 0x23
    UC_SEND_ONLY = 0x24
    UC_SEND_ONLY_WITH_IMMEDIATE = 0x25
    UC_RDMA_WRITE_FIRST = 0x26
    UC_RDMA_WRITE_MIDDLE = 0x27
    UC_RDMA_WRITE_LAST = 0x28
    UC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x29
    UC_RDMA_WRITE_ONLY = 0x2A
    UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x2B

    UD_SEND_ONLY = 0x64
    UD_SEND_ONLY_WITH_IMMEDIATE = 0x65

    CNP = 0x81

    XRC_SEND_FIRST = 0xA0
    XRC_SEND_MIDDLE = 0xA1
    XRC_SEND_LAST = 0xA2
    XRC_SEND_LAST_WITH_IMMEDIATE = 0xA3
    XRC_SEND_ONLY = 0xA4
    XRC_SEND_ONLY_WITH_IMMEDIATE = 0xA5
    XRC_RDMA_WRITE_FIRST = 0xA6
    XRC_RDMA_WRITE_MIDDLE = 0xA7
    XRC_RDMA_WRITE_LAST = 0xA8
    XRC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0xA9
    XRC_RDMA_WRITE_ONLY = 0xAA
    XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0xAB
    XRC_RDMA_READ_REQUEST = 0xAC
    XRC_RDMA_READ_RESPONSE_FIRST = 0xAD
    XRC_RDMA_READ_RESPONSE_MIDDLE = 0xAE
    XRC_RDMA_READ_RESPONSE_LAST = 0xAF
    XRC_RDMA_READ_RESPONSE_ONLY = 0xB0
    XRC_ACKNOWLEDGE = 0xB1
    XRC_ATOMIC_ACKNOWLEDGE = 0xB2
    XRC_COMPARE_SWAP = 0xB3
    XRC_FETCH_ADD = 0xB4
    XRC_SEND_LAST_WITH_INVALIDATE = 0xB6
    XRC_SEND_ONLY_WITH_INVALIDATE = 0xB7


# Per operation (the low five bits), what it carries and means.  The
# transport class only adds DETH (UD) and restricts which ops exist.
_OP_MASKS = {
    0x00: PAYLOAD_MASK | REQ_MASK | SEND_MASK | RWR_MASK | START_MASK,
    0x01: PAYLOAD_MASK | REQ_MASK | SEND_MASK | MIDDLE_MASK,
    0x02: PAYLOAD_MASK | REQ_MASK | SEND_MASK | COMP_MASK | END_MASK,
    0x03: IMMDT_MASK | PAYLOAD_MASK | REQ_MASK | SEND_MASK | COMP_MASK | END_MASK,
    0x04: PAYLOAD_MASK | REQ_MASK | SEND_MASK | RWR_MASK | COMP_MASK | START_MASK | END_MASK,
    0x05: IMMDT_MASK | PAYLOAD_MASK | REQ_MASK | SEND_MASK | RWR_MASK | COMP_MASK | START_MASK | END_MASK,
    0x06: RETH_MASK | PAYLOAD_MASK | REQ_MASK | WRITE_MASK | START_MASK,
    0x07: PAYLOAD_MASK | REQ_MASK | WRITE_MASK | MIDDLE_MASK,
    0x08: PAYLOAD_MASK | REQ_MASK | WRITE_MASK | END_MASK,
    0x09: IMMDT_MASK | PAYLOAD_MASK | REQ_MASK | WRITE_MASK | RWR_MASK | COMP_MASK | END_MASK,
    0x0A: RETH_MASK | PAYLOAD_MASK | REQ_MASK | WRITE_MASK | START_MASK | END_MASK,
    0x0B: RETH_MASK | IMMDT_MASK | PAYLOAD_MASK | REQ_MASK | WRITE_MASK | RWR_MASK | COMP_MASK | START_MASK | END_MASK,
    0x0C: RETH_MASK | REQ_MASK | READ_MASK | START_MASK | END_MASK,
    0x0D: AETH_MASK | PAYLOAD_MASK | RESP_MASK | READ_MASK | START_MASK,
    0x0E: PAYLOAD_MASK | RESP_MASK | READ_MASK | MIDDLE_MASK,
    0x0F: AETH_MASK | PAYLOAD_MASK | RESP_MASK | READ_MASK | END_MASK,
    0x10: AETH_MASK | PAYLOAD_MASK | RESP_MASK | READ_MASK | START_MASK | END_MASK,
    0x11: AETH_MASK | RESP_MASK | ACK_MASK | START_MASK | END_MASK,
    0x12: AETH_MASK | ATMACK_MASK | RESP_MASK | ACK_MASK | ATOMIC_MASK | START_MASK | END_MASK,
    0x13: ATMETH_MASK | REQ_MASK | ATOMIC_MASK | START_MASK | END_MASK,
    0x14: ATMETH_MASK | REQ_MASK | ATOMIC_MASK | START_MASK | END_MASK,
    0x16: IETH_MASK | PAYLOAD_MASK | REQ_MASK | SEND_MASK | COMP_MASK | END_MASK,
    0x17: IETH_MASK | PAYLOAD_MASK | REQ_MASK | SEND_MASK | RWR_MASK | COMP_MASK | START_MASK | END_MASK,
    0x1C: FETH_MASK | RETH_MASK | REQ_MASK | FLUSH_MASK | START_MASK | END_MASK,
    0x1D: RETH_MASK | PAYLOAD_MASK | REQ_MASK | ATOMIC_WRITE_MASK | START_MASK | END_MASK,
}


@dataclass(frozen=True, slots=True)
class OpInfo:
    """One row of the opcode table."""

    opcode: int
    name: str
    mask: int
    length: int          # BTH + all extension headers = payload offset
    deth: int            # offset of each header, -1 if absent
    feth: int
    reth: int
    atmeth: int
    aeth: int
    atmack: int
    immdt: int
    ieth: int
    transport: int       # IB_OPCODE_RC / UC / UD / CNP / XRC
    xrceth: int = -1     # offset of the XRCETH (XRC requests)

    @property
    def has_payload(self) -> bool:
        return bool(self.mask & PAYLOAD_MASK)


def _row(op: Opcode) -> OpInfo:
    cls = op & 0xE0
    if op == Opcode.CNP:
        mask = CNP_PAD_MASK | CNP_MASK
    else:
        mask = _OP_MASKS[op & 0x1F]
        if cls == IB_OPCODE_UD:
            mask |= DETH_MASK | UD_MASK
        elif cls == IB_OPCODE_XRC and mask & REQ_MASK:
            mask |= XRCETH_MASK
    offs = {}
    at = BTH_BYTES
    for bit, size in _HEADER_ORDER:
        if mask & bit:
            offs[bit] = at
            at += size
    return OpInfo(
        opcode=int(op), name=op.name, mask=mask, length=at,
        deth=offs.get(DETH_MASK, -1), feth=offs.get(FETH_MASK, -1), reth=offs.get(RETH_MASK, -1),
        atmeth=offs.get(ATMETH_MASK, -1), aeth=offs.get(AETH_MASK, -1),
        atmack=offs.get(ATMACK_MASK, -1), immdt=offs.get(IMMDT_MASK, -1),
        ieth=offs.get(IETH_MASK, -1), transport=cls, xrceth=offs.get(XRCETH_MASK, -1),
    )


#: OPCODE_TABLE[opcode] -> OpInfo, or None for opcodes softrdma does not speak
#: (RD, reserved, manufacturer-specific): such packets are dropped as bad_opcode.
OPCODE_TABLE: tuple[OpInfo | None, ...] = tuple(
    _row(Opcode(i)) if i in Opcode._value2member_map_ else None for i in range(256)
)


def opcode_info(opcode: int) -> OpInfo | None:
    return OPCODE_TABLE[opcode & 0xFF]


def opcode_for(transport: int, op_low5: int) -> int:
    """The opcode of operation ``op_low5`` (e.g. 0x04 SEND_ONLY) in a class."""
    return transport | op_low5


# Operation numbers (low five bits), shared by RC, UC and XRC; used to build
# opcodes for a QP's class without a second table.
OP_SEND_FIRST = 0x00
OP_SEND_MIDDLE = 0x01
OP_SEND_LAST = 0x02
OP_SEND_LAST_WITH_IMMEDIATE = 0x03
OP_SEND_ONLY = 0x04
OP_SEND_ONLY_WITH_IMMEDIATE = 0x05
OP_RDMA_WRITE_FIRST = 0x06
OP_RDMA_WRITE_MIDDLE = 0x07
OP_RDMA_WRITE_LAST = 0x08
OP_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x09
OP_RDMA_WRITE_ONLY = 0x0A
OP_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x0B
OP_RDMA_READ_REQUEST = 0x0C
OP_RDMA_READ_RESPONSE_FIRST = 0x0D
OP_RDMA_READ_RESPONSE_MIDDLE = 0x0E
OP_RDMA_READ_RESPONSE_LAST = 0x0F
OP_RDMA_READ_RESPONSE_ONLY = 0x10
OP_ACKNOWLEDGE = 0x11
OP_ATOMIC_ACKNOWLEDGE = 0x12
OP_COMPARE_SWAP = 0x13
OP_FETCH_ADD = 0x14
OP_SEND_LAST_WITH_INVALIDATE = 0x16
OP_SEND_ONLY_WITH_INVALIDATE = 0x17
OP_FLUSH = 0x1C
OP_ATOMIC_WRITE = 0x1D
