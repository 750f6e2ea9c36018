"""The responder of the unreliable services (IBA 9.7.7.2 / 9.8.2): UC and UD
request packets into receive WQEs and memory, beside ``responder``'s RC.

UC has no ACKs and no retries: a packet out of sequence, a message that
does not fit (length, receive buffer, rkey, an operation the QP's access
flags do not enable) or a missing receive WQE drops the whole message --
every packet up to its LAST (``uc_drop``) -- and counts it; the next FIRST
or ONLY starts afresh.  UD checks the Q_Key, takes one receive WQE per
datagram and writes the 40-byte network header (the GRH, or zeros) before
the payload, as rxe does.
"""

from __future__ import annotations

from ..enums import ibv_wc_flags, ibv_wc_opcode, ibv_wc_status, ints
from ..uapi.abi import WC
from ..wire.headers import BTH_SE, DETH, IMMDT, RETH
from ..wire.opcodes import END_MASK, IMMDT_MASK, RWR_MASK, SEND_MASK, START_MASK
from .counters import Counter
from .memory import REMOTE_WRITE
from .responder import (GRH_BYTES, RESP_IN_SEND as _IN_SEND, RESP_NONE as _NONE, payload_len, resolve_rwqe,
                        return_rwqe, take_rwqe, write_data)
from .sgl import scatter

WF = ints(ibv_wc_flags)
WCO = ints(ibv_wc_opcode)
ST = ints(ibv_wc_status)
C = ints(Counter)


def receive_uc(qp, pkt, info, now: float, grh) -> None:
    psn = (pkt[9] << 16) | (pkt[10] << 8) | pkt[11]
    _receive_uc(qp, pkt, info, psn, (psn - qp.resp_psn) & 0xFFFFFF)


def receive_ud(qp, pkt, info, now: float, grh) -> None:
    _receive_ud(qp, pkt, info, grh)


# ----------------------------------------------------------------- UC
def _receive_uc(qp, pkt, info, psn: int, d: int) -> None:
    mask = info.mask
    cnt = qp.cnt
    qp.resp_psn = (psn + 1) & 0xFFFFFF
    if d:
        cnt[C.out_of_seq_request] += 1
        _uc_abandon(qp)
    if qp.uc_drop or (qp.resp_opcode == _NONE and not mask & START_MASK):
        if mask & START_MASK:
            qp.uc_drop = False
        else:
            qp.uc_drop = not mask & END_MASK
            return
    if qp.resp_opcode != _NONE and (mask & START_MASK or
                                    (qp.resp_opcode == _IN_SEND) != bool(mask & SEND_MASK)):
        _uc_abandon(qp)
        if not mask & START_MASK:
            qp.uc_drop = not mask & END_MASK
            return
    n = payload_len(pkt, info)
    mtu = qp.mtu
    if (n != mtu) if not mask & END_MASK else (n > mtu):
        _uc_drop_msg(qp, mask)
        return
    if mask & SEND_MASK:
        if mask & START_MASK:
            wqe = take_rwqe(qp)
            if wqe is None:
                _uc_drop_msg(qp, mask)
                return
            qp.resp_wqe = wqe
            qp.resp_offset = 0
            if not resolve_rwqe(qp, wqe):
                qp.recv_cq.push(WC(wqe.wr_id, ST.IBV_WC_LOC_PROT_ERR, WCO.IBV_WC_RECV, qp.qp_num))
                qp.resp_wqe = None
                _uc_drop_msg(qp, mask)
                return
        wqe = qp.resp_wqe
        off = qp.resp_offset
        if off + n > wqe.length:
            qp.recv_cq.push(WC(wqe.wr_id, ST.IBV_WC_LOC_LEN_ERR, WCO.IBV_WC_RECV, qp.qp_num))
            qp.resp_wqe = None
            _uc_drop_msg(qp, mask)
            return
        if n:
            scatter(wqe.views, off, pkt, info.length, n)
        qp.resp_offset = off + n
        cnt[C.rcvd_bytes] += n
        if mask & END_MASK:
            imm, flags = 0, 0
            if mask & IMMDT_MASK:
                (imm,) = IMMDT.unpack_from(pkt, info.immdt)
                flags = WF.IBV_WC_WITH_IMM
            qp.resp_wqe = None
            qp.resp_opcode = _NONE
            cnt[C.rdma_recvs] += 1
            qp.recv_cq.push(WC(wqe.wr_id, ST.IBV_WC_SUCCESS, WCO.IBV_WC_RECV, qp.qp_num,
                               byte_len=off + n, imm_data=imm, src_qp=qp.dest_qpn, wc_flags=flags),
                            bool(pkt[1] & BTH_SE))
        else:
            qp.resp_opcode = _IN_SEND
        return
    # RDMA WRITE
    if mask & qp.resp_denied:                  # CHK_OP_VALID
        _uc_drop_msg(qp, mask)
        return
    if mask & START_MASK:
        va, rkey, dma_len = RETH.unpack_from(pkt, info.reth)
        view = qp.memory.remote_view(qp.pd, rkey, va, dma_len, REMOTE_WRITE, qp) if dma_len else None
        if dma_len and view is None:
            _uc_drop_msg(qp, mask)
            return
        qp.resp_view = view
        qp.resp_offset = 0
        qp.resp_remaining = dma_len
    rem = qp.resp_remaining
    if (n != mtu or rem <= mtu) if not mask & END_MASK else (n != rem):
        _uc_drop_msg(qp, mask)
        return
    wqe = None
    if mask & RWR_MASK:
        wqe = take_rwqe(qp)
        if wqe is None:
            _uc_drop_msg(qp, mask)
            return
    write_data(qp, pkt, info, mask, n, rem, wqe)


def _uc_abandon(qp) -> None:
    """Forget a partly received UC message (packets were lost)."""
    if qp.resp_wqe is not None:
        return_rwqe(qp, qp.resp_wqe)
        qp.resp_wqe = None
    qp.resp_opcode = _NONE
    qp.resp_view = None


def _uc_drop_msg(qp, mask: int) -> None:
    _uc_abandon(qp)
    qp.uc_drop = not mask & END_MASK


# ----------------------------------------------------------------- UD
class LinkSource:
    """What an InfiniBand link knows of a received UD packet, handed where a
    RoCE port hands the 40-byte network header: the LRH's SLID and SL, the
    DLID's path bits, and the GRH (bytes) or None.  The completion carries
    slid, sl and dlid_path_bits, and IBV_WC_GRH only with a GRH (the buffer's
    first 40 bytes are then undefined: zeros here)."""

    __slots__ = ("grh", "slid", "sl", "dlid_path_bits")

    def __init__(self, grh, slid: int, sl: int, dlid_path_bits: int):
        self.grh = grh
        self.slid = slid
        self.sl = sl
        self.dlid_path_bits = dlid_path_bits


def _receive_ud(qp, pkt, info, grh) -> None:
    cnt = qp.cnt
    qkey, sqp = DETH.unpack_from(pkt, info.deth)
    if qkey != qp.attr.qkey:
        cnt[C.dropped_bad_qkey] += 1
        return
    wqe = take_rwqe(qp)
    if wqe is None:
        cnt[C.dropped_bad_state] += 1
        return
    n = payload_len(pkt, info)
    if not resolve_rwqe(qp, wqe):
        qp.recv_cq.push(WC(wqe.wr_id, ST.IBV_WC_LOC_PROT_ERR, WCO.IBV_WC_RECV, qp.qp_num))
        return
    if n + GRH_BYTES > wqe.length:
        qp.recv_cq.push(WC(wqe.wr_id, ST.IBV_WC_LOC_LEN_ERR, WCO.IBV_WC_RECV, qp.qp_num))
        return
    slid = sl = path_bits = 0
    flags = WF.IBV_WC_GRH
    if grh.__class__ is LinkSource:                  # an InfiniBand port's packet: LRH fields, a GRH or none
        slid, sl, path_bits, grh = grh.slid, grh.sl, grh.dlid_path_bits, grh.grh
        if grh is None:
            flags = 0
    scatter(wqe.views, 0, grh if grh is not None else bytes(GRH_BYTES), 0, GRH_BYTES)
    if n:
        scatter(wqe.views, GRH_BYTES, pkt, info.length, n)
    imm = 0
    if info.mask & IMMDT_MASK:
        (imm,) = IMMDT.unpack_from(pkt, info.immdt)
        flags |= WF.IBV_WC_WITH_IMM
    cnt[C.rcvd_bytes] += n
    cnt[C.rdma_recvs] += 1
    qp.recv_cq.push(WC(wqe.wr_id, ST.IBV_WC_SUCCESS, WCO.IBV_WC_RECV, qp.qp_num, byte_len=n + GRH_BYTES,
                       imm_data=imm, src_qp=sqp & 0xFFFFFF, wc_flags=flags, slid=slid, sl=sl,
                       dlid_path_bits=path_bits),
                    bool(pkt[1] & BTH_SE))


__all__ = ["receive_uc", "receive_ud", "LinkSource"]
