"""The work-request opcodes: what each ibv_wr_opcode is, in one table.

rxe keeps these facts in ``rxe_wr_opcode_info[]`` (rxe_opcode.c) and the
rxe provider's ``RXE_SUP_*_QP_SEND_OPS_FLAGS``; here ``WR_OPCODE_INFO`` maps
every ibv_wr_opcode to a ``WROpcodeInfo``:

* ``name`` -- as rxe spells it;
* ``qp_types`` -- the QP types a posted WR of it is valid on (the
  transport's post_send check: EINVAL on another type; on RC, which takes
  every opcode softrdma carries, EOPNOTSUPP); an XRC INI QP takes what RC
  takes;
* ``mask`` -- rxe_wr_mask bits: WR_INLINE_MASK (may carry inline data),
  WR_ATOMIC_MASK, WR_SEND_MASK, WR_READ_MASK, WR_WRITE_MASK,
  WR_LOCAL_OP_MASK (executed by the requester, no packet), WR_FLUSH_MASK and
  WR_ATOMIC_WRITE_MASK (IBA 1.5's FLUSH and ATOMIC WRITE: one request
  packet, answered like a READ with a zero-length READ RESPONSE), and softrdma's
  WR_IMM_MASK (carries ImmDt), WR_INV_MASK (carries an rkey to invalidate)
  and WR_SOLICITED_MASK (IBV_SEND_SOLICITED sets the BTH SE bit);
* ``wc_opcode`` -- the ibv_wc_opcode of its send completion;
* ``send_ops_flag`` -- the IBV_QP_EX_WITH_* flag that gives an extended QP
  its ibv_wr_* builder, and ``ex_qp_types``, the QP types that offer it
  (LOCAL_INV is a valid WR on UC, but rxe's provider has the builder on RC
  only).

Every other module asks this table (or a set derived from it at import):
the library's post checks (verbs.qp, verbs.qpex), the transport's
(transport.qp, transport.wr) and the engines (requester, completer,
loopback).
"""

from __future__ import annotations

from typing import NamedTuple

from ..enums import ibv_qp_create_send_ops_flags as X
from ..enums import ibv_qp_type, ibv_wc_opcode, ibv_wr_opcode

WR = ibv_wr_opcode
WC = ibv_wc_opcode

# rxe_wr_mask
WR_INLINE_MASK = 1 << 0
WR_ATOMIC_MASK = 1 << 1
WR_SEND_MASK = 1 << 2
WR_READ_MASK = 1 << 3
WR_WRITE_MASK = 1 << 4
WR_LOCAL_OP_MASK = 1 << 5
WR_FLUSH_MASK = 1 << 6
WR_ATOMIC_WRITE_MASK = 1 << 7
# softrdma's: what the WR carries besides rxe's classes
WR_IMM_MASK = 1 << 8
WR_INV_MASK = 1 << 9
WR_SOLICITED_MASK = 1 << 10
WR_READ_OR_WRITE_MASK = WR_READ_MASK | WR_WRITE_MASK
WR_WRITE_OR_SEND_MASK = WR_WRITE_MASK | WR_SEND_MASK
WR_ATOMIC_OR_READ_MASK = WR_ATOMIC_MASK | WR_READ_MASK

RC, UC, UD = int(ibv_qp_type.IBV_QPT_RC), int(ibv_qp_type.IBV_QPT_UC), int(ibv_qp_type.IBV_QPT_UD)
# an XRC INI QP (IBV_QPT_XRC_SEND) sends what an RC QP sends (IBA 9.8; mlx5's
# XRC send_ops_flags are RC's); an XRC TGT QP has no send queue
XRC_SEND = int(ibv_qp_type.IBV_QPT_XRC_SEND)
_CONNECTED = frozenset((RC, UC, XRC_SEND))
_ALL = frozenset((RC, UC, UD, XRC_SEND))
_RC = frozenset((RC, XRC_SEND))
_NONE = frozenset()


class WROpcodeInfo(NamedTuple):
    name: str
    qp_types: frozenset
    mask: int
    wc_opcode: int
    send_ops_flag: int
    ex_qp_types: frozenset


def _info(name, qp_types, mask, wc_opcode, send_ops_flag, ex_qp_types=None) -> WROpcodeInfo:
    return WROpcodeInfo(name, qp_types, mask, int(wc_opcode), int(send_ops_flag),
                        qp_types if ex_qp_types is None else ex_qp_types)


WR_OPCODE_INFO: dict[int, WROpcodeInfo] = {
    WR.IBV_WR_RDMA_WRITE: _info("IB_WR_RDMA_WRITE", _CONNECTED, WR_INLINE_MASK | WR_WRITE_MASK,
                                WC.IBV_WC_RDMA_WRITE, X.IBV_QP_EX_WITH_RDMA_WRITE),
    WR.IBV_WR_RDMA_WRITE_WITH_IMM: _info("IB_WR_RDMA_WRITE_WITH_IMM", _CONNECTED,
                                         WR_INLINE_MASK | WR_WRITE_MASK | WR_IMM_MASK | WR_SOLICITED_MASK,
                                         WC.IBV_WC_RDMA_WRITE, X.IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM),
    WR.IBV_WR_SEND: _info("IB_WR_SEND", _ALL, WR_INLINE_MASK | WR_SEND_MASK | WR_SOLICITED_MASK,
                          WC.IBV_WC_SEND, X.IBV_QP_EX_WITH_SEND),
    WR.IBV_WR_SEND_WITH_IMM: _info("IB_WR_SEND_WITH_IMM", _ALL,
                                   WR_INLINE_MASK | WR_SEND_MASK | WR_IMM_MASK | WR_SOLICITED_MASK,
                                   WC.IBV_WC_SEND, X.IBV_QP_EX_WITH_SEND_WITH_IMM),
    WR.IBV_WR_RDMA_READ: _info("IB_WR_RDMA_READ", _RC, WR_READ_MASK, WC.IBV_WC_RDMA_READ,
                               X.IBV_QP_EX_WITH_RDMA_READ),
    WR.IBV_WR_ATOMIC_CMP_AND_SWP: _info("IB_WR_ATOMIC_CMP_AND_SWP", _RC, WR_ATOMIC_MASK, WC.IBV_WC_COMP_SWAP,
                                        X.IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP),
    WR.IBV_WR_ATOMIC_FETCH_AND_ADD: _info("IB_WR_ATOMIC_FETCH_AND_ADD", _RC, WR_ATOMIC_MASK,
                                          WC.IBV_WC_FETCH_ADD, X.IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD),
    WR.IBV_WR_LOCAL_INV: _info("IB_WR_LOCAL_INV", _CONNECTED, WR_LOCAL_OP_MASK | WR_INV_MASK,
                               WC.IBV_WC_LOCAL_INV, X.IBV_QP_EX_WITH_LOCAL_INV, ex_qp_types=_RC),
    WR.IBV_WR_BIND_MW: _info("IB_WR_BIND_MW", _CONNECTED, WR_LOCAL_OP_MASK, WC.IBV_WC_BIND_MW,
                             X.IBV_QP_EX_WITH_BIND_MW),
    WR.IBV_WR_SEND_WITH_INV: _info("IB_WR_SEND_WITH_INV", _RC,
                                   WR_INLINE_MASK | WR_SEND_MASK | WR_INV_MASK | WR_SOLICITED_MASK,
                                   WC.IBV_WC_SEND, X.IBV_QP_EX_WITH_SEND_WITH_INV),
    # valid on no QP type softrdma has: raw packet QPs, a provider's own
    WR.IBV_WR_TSO: _info("IB_WR_TSO", _NONE, 0, WC.IBV_WC_SEND, X.IBV_QP_EX_WITH_TSO),
    WR.IBV_WR_DRIVER1: _info("IB_WR_DRIVER1", _NONE, 0, WC.IBV_WC_SEND, 0),
    # IBA 1.5: RC only, as in rxe (the builders ibv_wr_flush / ibv_wr_atomic_write)
    WR.IBV_WR_FLUSH: _info("IB_WR_FLUSH", _RC, WR_FLUSH_MASK, WC.IBV_WC_FLUSH, X.IBV_QP_EX_WITH_FLUSH),
    WR.IBV_WR_ATOMIC_WRITE: _info("IB_WR_ATOMIC_WRITE", _RC, WR_ATOMIC_WRITE_MASK, WC.IBV_WC_ATOMIC_WRITE,
                                  X.IBV_QP_EX_WITH_ATOMIC_WRITE),
}


def wr_opcodes(mask: int) -> frozenset:
    """The opcodes whose mask has any bit of ``mask``."""
    return frozenset(int(op) for op, i in WR_OPCODE_INFO.items() if i.mask & mask)


def valid_opcodes(qp_type: int) -> frozenset:
    """The opcodes a WR may have on a QP of ``qp_type``."""
    return frozenset(int(op) for op, i in WR_OPCODE_INFO.items() if qp_type in i.qp_types)


def send_ops_flags(qp_type: int) -> int:
    """The IBV_QP_EX_WITH_* builders an extended QP of ``qp_type`` may ask for."""
    flags = 0
    for i in WR_OPCODE_INFO.values():
        if qp_type in i.ex_qp_types:
            flags |= i.send_ops_flag
    return flags


def wc_opcodes() -> dict[int, int]:
    """ibv_wr_opcode -> the ibv_wc_opcode of its send completion."""
    return {int(op): i.wc_opcode for op, i in WR_OPCODE_INFO.items()}


__all__ = ["WR_OPCODE_INFO", "WROpcodeInfo", "wr_opcodes", "valid_opcodes", "send_ops_flags", "wc_opcodes",
           "WR_INLINE_MASK", "WR_ATOMIC_MASK", "WR_SEND_MASK", "WR_READ_MASK", "WR_WRITE_MASK",
           "WR_LOCAL_OP_MASK", "WR_FLUSH_MASK", "WR_ATOMIC_WRITE_MASK", "WR_IMM_MASK", "WR_INV_MASK", "WR_SOLICITED_MASK", "WR_READ_OR_WRITE_MASK",
           "WR_WRITE_OR_SEND_MASK", "WR_ATOMIC_OR_READ_MASK"]
