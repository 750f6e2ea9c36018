"""The rsockets wire protocol as librdmacm's rsocket.c defines it: pure
values and codecs, no I/O.

* the 32-bit message carried as a WRITE WITH IMMEDIATE's immediate data
  (``rs_msg_set``: op in the top 3 bits, data in the low 29);
* ``struct rs_conn_data``, the 40-byte private data of the connection's
  REQ and REP (big-endian; version 1);
* ``struct rs_sge`` as a peer writes it into the target SGL (the writer's
  host order: little-endian here, swapped when the peer's
  RS_CONN_FLAG_NET differs from ours);
* the defaults and limits (RS_BUF_SIZE is def_mem/def_wmem: 128 KiB);
* the 16-bit sequence arithmetic of the credits, and the 8-bit scale
  of the iomap size.
"""

from __future__ import annotations

import struct
import sys
from dataclasses import dataclass

# rsocket.c's defines
RS_OLAP_START_SIZE = 2048
RS_MAX_TRANSFER = 65536
RS_SNDLOWAT = 2048
RS_QP_MIN_SIZE = 16
RS_QP_MAX_SIZE = 0xFFFE
RS_QP_CTRL_SIZE = 4
RS_CONN_RETRIES = 6
RS_SGL_SIZE = 2

# its defaults (rs_configure: /etc/rdma/rsocket/* may change them there)
DEF_INLINE = 64
DEF_SQSIZE = 384
DEF_RQSIZE = 384
DEF_MEM = 1 << 17
DEF_WMEM = 1 << 17
DEF_IOMAP_SIZE = 0

# enum { RS_OP_* }: what an immediate's top three bits say
RS_OP_DATA = 0
RS_OP_RSVD_DATA_MORE = 1
RS_OP_WRITE = 2                    # never sent: the wr_id of a direct write
RS_OP_RSVD_DRA_MORE = 3
RS_OP_SGL = 4
RS_OP_RSVD = 5
RS_OP_IOMAP_SGL = 6
RS_OP_CTRL = 7

# RS_OP_CTRL's data
RS_CTRL_DISCONNECT = 0
RS_CTRL_KEEPALIVE = 1
RS_CTRL_SHUTDOWN = 2

RS_CONN_FLAG_NET = 1 << 0
RS_CONN_FLAG_IOMAP = 1 << 1

RS_WR_ID_FLAG_RECV = 1 << 63

# <rdma/rsocket.h>
SOL_RDMA = 0x10000
RDMA_SQSIZE = 0
RDMA_RQSIZE = 1
RDMA_INLINE = 2
RDMA_IOMAPSIZE = 3
RDMA_ROUTE = 4

HOST_IS_NET = sys.byteorder == "big"


def rs_msg_set(op: int, data: int) -> int:
    return ((op << 29) | data) & 0xFFFFFFFF


def rs_msg_op(msg: int) -> int:
    return msg >> 29


def rs_msg_data(msg: int) -> int:
    return msg & 0x1FFFFFFF


def rs_value_to_scale(value: int, bits: int) -> int:
    return value if value <= (1 << (bits - 1)) else (1 << (bits - 1)) | (value >> bits)


def rs_scale_to_value(value: int, bits: int) -> int:
    return value if value <= (1 << (bits - 1)) else (value & ~(1 << (bits - 1))) << bits


def seq16(v: int) -> int:
    return v & 0xFFFF


def seq16_ge(a: int, b: int) -> bool:
    """``(short)((short) a - (short) b) >= 0``: a is at or past b."""
    d = (a - b) & 0xFFFF
    return d < 0x8000


# struct rs_sge { uint64_t addr; uint32_t key; uint32_t length; }
SGE_HOST = struct.Struct("<QII" if not HOST_IS_NET else ">QII")
SGE_SWAPPED = struct.Struct(">QII" if not HOST_IS_NET else "<QII")
RS_SGE_SIZE = SGE_HOST.size                 # RS_MAX_CTRL_MSG
RS_IOMAP_SIZE = 8 + RS_SGE_SIZE             # struct rs_iomap

CONN_DATA = struct.Struct(">BBH3sBQIIQII")  # struct rs_conn_data, network order


@dataclass
class Sge:
    addr: int
    key: int
    length: int


@dataclass
class ConnData:
    """struct rs_conn_data."""
    version: int
    flags: int
    credits: int
    target_iomap_size: int          # scaled (rs_value_to_scale(size, 8))
    target_sgl: Sge
    data_buf: Sge

    def pack(self) -> bytes:
        return CONN_DATA.pack(self.version, self.flags, self.credits, b"\0\0\0", self.target_iomap_size,
                              self.target_sgl.addr, self.target_sgl.key, self.target_sgl.length,
                              self.data_buf.addr, self.data_buf.key, self.data_buf.length)

    @classmethod
    def unpack(cls, data: bytes) -> "ConnData":
        if len(data) < CONN_DATA.size:
            raise ValueError(f"rsocket connection data is {CONN_DATA.size} bytes, got {len(data)}")
        v, fl, cr, _, iom, ta, tk, tl, da, dk, dl = CONN_DATA.unpack_from(data)
        return cls(v, fl, cr, iom, Sge(ta, tk, tl), Sge(da, dk, dl))

    @property
    def swapped(self) -> bool:
        """RS_OPT_SWAP_SGL: the peer's host order is not ours."""
        return bool(self.flags & RS_CONN_FLAG_NET) != HOST_IS_NET


def format_conn_data(rq_size: int, iomap_size: int, target_sgl: Sge, data_buf: Sge) -> ConnData:
    """rs_format_conn_data."""
    return ConnData(1, RS_CONN_FLAG_IOMAP | (RS_CONN_FLAG_NET if HOST_IS_NET else 0), rq_size,
                    rs_value_to_scale(iomap_size, 8) & 0xFF, target_sgl, data_buf)


def pack_sge(sge: Sge, swapped: bool) -> bytes:
    """The 16 bytes an SGL update writes into the peer's target SGL."""
    return (SGE_SWAPPED if swapped else SGE_HOST).pack(sge.addr, sge.key, sge.length)


def unpack_sge(buf, offset: int = 0) -> Sge:
    """A target SGL entry as the peer wrote it (always in our order: it
    swaps for us when our orders differ)."""
    a, k, n = SGE_HOST.unpack_from(buf, offset)
    return Sge(a, k, n)


def qp_size(size: int, max_size: int) -> int:
    """rs_set_qp_size: clamp to [RS_QP_MIN_SIZE, min(device, RS_QP_MAX_SIZE)]."""
    max_size = min(max_size, RS_QP_MAX_SIZE)
    return max(RS_QP_MIN_SIZE, min(size, max_size))
