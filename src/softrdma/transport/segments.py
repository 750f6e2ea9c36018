"""A checked GRO buffer through an RC QP: the MIDDLE packets in runs.

The device hands a QP a whole UDP GRO buffer, or a whole PACKETS message
of native IB packets (``wire.fastpath.Segments``: packets at a fixed
stride, with the IB framing around each), once its framing and every
CRC are checked.  Most of such a buffer is
usually MIDDLE packets of one message, each needing the same few checks
and one copy; ``receive_segments`` gives runs of them to
``fastpath.place_middles`` (compiled where built), with the checks the
responder (``receive_rc`` → ``_rc_write`` / ``_rc_send``) or the completer
(``receive`` → COMPST_READ) would make of each, and keeps the QP's state,
counters and ACKs exactly as the packet-by-packet path would leave them
(``tests/test_transport_segments.py`` compares the two).  Every other
packet, and any that fails a check, goes through ``QP.receive``.
"""

from __future__ import annotations

from ..enums import ibv_qp_state, ibv_wr_opcode, ints
from ..wire.fastpath import place_middles
from ..wire.headers import AETH_ACK_UNLIMITED
from ..wire.opcodes import OP_RDMA_READ_RESPONSE_MIDDLE, OP_RDMA_WRITE_MIDDLE, OP_SEND_MIDDLE, WRITE_MASK
from . import completer, responder
from .counters import Counter

C = ints(Counter)
S = ints(ibv_qp_state)
RCVD_PKTS, RCVD_BYTES, ACK_DEFERRED = C.rcvd_pkts, C.rcvd_bytes, C.ack_deferred
RTR, RTS, ERR = S.IBV_QPS_RTR, S.IBV_QPS_RTS, S.IBV_QPS_ERR
RC = 2                                     # IBV_QPT_RC
RDMA_READ = int(ibv_wr_opcode.IBV_WR_RDMA_READ)
FRAME_BYTES = 16                           # a MIDDLE packet's BTH and ICRC around its payload


def receive_segments(qp, segs, now: float) -> None:
    """The packets of ``segs`` for ``qp``, in order."""
    view, n, stride = segs.view, segs.n, segs.seg
    hoff, tail = segs.hoff, segs.tail
    extra = hoff + tail                    # bytes of each stride around BTH .. ICRC
    mtu = qp.mtu
    fast = qp.qp_type == RC and stride == mtu + FRAME_BYTES + extra
    read_middle = qp.opclass | OP_RDMA_READ_RESPONSE_MIDDLE
    off = segs.base + hoff                 # the BTH of the packet at hand
    while off < n:
        if fast and RTR <= qp.state < ERR:
            if qp.resp_opcode != responder.RESP_NONE:
                k = _request_middles(qp, view, off, n, stride, mtu, extra)
            elif view[off] == read_middle:
                k = _read_middles(qp, view, off, n, stride, mtu, now, extra)
            else:
                k = 0
            if k:
                qp.now = now
                qp.cnt[RCVD_PKTS] += k
                off += k * stride
                continue
        qp.receive(view[off:min(off - hoff + stride, n) - 4 - tail], now)
        off += stride


def _request_middles(qp, view, off: int, n: int, stride: int, mtu: int, extra: int = 0) -> int:
    """The responder's side: MIDDLE packets of the WRITE or SEND in
    progress placed; how many (0: the first is not one, or fails a check)."""
    if qp.resp_opcode == responder.RESP_IN_SEND:
        wqe = qp.resp_wqe
        views = wqe.views
        if len(views) != 1 or views[0].__class__ is not memoryview:
            return 0
        pos = qp.resp_offset
        # _rc_send: n == mtu, off + n <= the receive WQE's length
        k, ack, nacks = place_middles(view, off, n, stride, qp.opclass | OP_SEND_MIDDLE, qp.resp_psn, qp.pkey, mtu,
                                      views[0], pos, wqe.length - pos, extra)
        if not k:
            return 0
    else:
        dst = qp.resp_view
        if qp.resp_denied & WRITE_MASK or dst.__class__ is not memoryview:
            return 0
        pos = qp.resp_offset
        # _rc_write: n == mtu < the bytes the RETH has still to come
        k, ack, nacks = place_middles(view, off, n, stride, qp.opclass | OP_RDMA_WRITE_MIDDLE, qp.resp_psn, qp.pkey,
                                      mtu, dst, pos, qp.resp_remaining - 1, extra)
        if not k:
            return 0
        qp.resp_remaining -= k * mtu
    qp.resp_offset = pos + k * mtu
    qp.resp_psn = (qp.resp_psn + k) & 0xFFFFFF
    qp.sent_psn_nak = False
    qp.cnt[RCVD_BYTES] += k * mtu
    if ack >= 0:
        # one ACK for the last that asked; receive_batch would have
        # coalesced the earlier ones, so they count as deferred
        responder.send_ack(qp, AETH_ACK_UNLIMITED, ack)
        if nacks > 1:
            qp.cnt[ACK_DEFERRED] += nacks - 1
    return k


def _read_middles(qp, view, off: int, n: int, stride: int, mtu: int, now: float, extra: int = 0) -> int:
    """The completer's side: READ RESPONSE MIDDLE packets of the READ in
    progress placed (COMPST_READ); how many."""
    if qp.state < RTS:
        return 0
    psn = qp.comp_psn
    wqe = completer.responding_wqe(qp)
    if wqe is None or wqe.opcode != RDMA_READ or psn == wqe.first_psn:
        return 0
    views = wqe.views
    if len(views) != 1 or views[0].__class__ is not memoryview:
        return 0
    pos = ((psn - wqe.first_psn) & 0xFFFFFF) * mtu
    # n == mtu < the bytes still to come, and no PSN at or beyond what was requested
    room = min(wqe.length - pos - 1, ((qp.sent_end - psn) & 0xFFFFFF) * mtu)
    k, _ack, _nacks = place_middles(view, off, n, stride, qp.opclass | OP_RDMA_READ_RESPONSE_MIDDLE, psn, qp.pkey,
                                    mtu, views[0], pos, room, extra)
    if not k:
        return 0
    qp.cnt[RCVD_BYTES] += k * mtu
    wqe.read_done = pos + k * mtu
    qp.comp_psn = (psn + k) & 0xFFFFFF
    if qp.cwnd < qp.cwnd_max:                  # the window grows per PSN, as one by one
        for _ in range(k):
            completer.update_comp(qp, now, 1)
    else:
        completer.update_comp(qp, now, k)
    return k
