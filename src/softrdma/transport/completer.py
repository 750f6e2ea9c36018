"""The completer: responses -> send completions, and when to go back (rxe_comp.c).

Every response acknowledges, implicitly, all PSNs before its own; an ACK
(or the AETH of a read response) acknowledges its own PSN too.  WQEs
complete in send-queue order once all their PSNs are acknowledged and, for
READ/ATOMIC, their response data has arrived.

Going back (``requester.retry``) happens on:
* a local ACK timeout (retry_cnt; ``timeout`` 0 = never),
* a PSN-sequence-error NAK (retry_cnt),
* an implied NAK: an ACK beyond a READ/ATOMIC whose response is missing, or
  a gap in read responses -- at most once per comp_psn, then the timer,
* the end of an RNR back-off (rnr_retry; 7 = infinite).
Exhausted counters complete the oldest WQE with IBV_WC_RETRY_EXC_ERR or
IBV_WC_RNR_RETRY_EXC_ERR; error NAKs with IBV_WC_REM_INV_REQ_ERR /
REM_ACCESS_ERR / REM_OP_ERR.  Any error completion moves the QP to ERR,
which flushes the rest with IBV_WC_WR_FLUSH_ERR.

Responses older than comp_psn (duplicates, ghosts) and responses to PSNs
never sent are dropped and counted.
"""

from __future__ import annotations

import sys

from ..enums import ibv_qp_state, ibv_wc_opcode, ibv_wc_status, ibv_wr_opcode, ints
from ..wire.headers import (
    AETH_ACK, AETH_NAK_INVALID_REQ, AETH_NAK_PSN_SEQ_ERROR, AETH_NAK_REM_ACC_ERR,
    AETH_NAK_REM_OP_ERR, AETH_RNR_NAK, ATMACK, RNR_TIMER_US, psn_diff,
)
from ..wire.opcodes import (
    ACK_MASK, ATOMIC_MASK, END_MASK, OP_ACKNOWLEDGE,
)
from . import requester
from . import limits
from .counters import Counter
from .sgl import scatter
from .wr import WC, WQE_DONE, WQE_ERROR, WQE_PENDING, WQE_PROCESSING

S = ints(ibv_qp_state)
WCO = ints(ibv_wc_opcode)
ST = ints(ibv_wc_status)
WR = ints(ibv_wr_opcode)
C = ints(Counter)
SUCCESS = ST.IBV_WC_SUCCESS
QPS_SQD = S.IBV_QPS_SQD
QPS_RTR = S.IBV_QPS_RTR
_MAX_WND = float(limits.MAX_UNACKED_PSNS)

_WC_OPCODE = {
    WR.IBV_WR_SEND: WCO.IBV_WC_SEND, WR.IBV_WR_SEND_WITH_IMM: WCO.IBV_WC_SEND,
    WR.IBV_WR_SEND_WITH_INV: WCO.IBV_WC_SEND, WR.IBV_WR_RDMA_WRITE: WCO.IBV_WC_RDMA_WRITE,
    WR.IBV_WR_RDMA_WRITE_WITH_IMM: WCO.IBV_WC_RDMA_WRITE, WR.IBV_WR_RDMA_READ: WCO.IBV_WC_RDMA_READ,
    WR.IBV_WR_ATOMIC_CMP_AND_SWP: WCO.IBV_WC_COMP_SWAP,
    WR.IBV_WR_ATOMIC_FETCH_AND_ADD: WCO.IBV_WC_FETCH_ADD, WR.IBV_WR_LOCAL_INV: WCO.IBV_WC_LOCAL_INV,
    WR.IBV_WR_BIND_MW: WCO.IBV_WC_BIND_MW,
}
_NAK_STATUS = {
    AETH_NAK_INVALID_REQ: ST.IBV_WC_REM_INV_REQ_ERR,
    AETH_NAK_REM_ACC_ERR: ST.IBV_WC_REM_ACCESS_ERR,
    AETH_NAK_REM_OP_ERR: ST.IBV_WC_REM_OP_ERR,
}
_BYTEORDER = sys.byteorder


def wc_opcode(wr_opcode: int) -> int:
    return _WC_OPCODE.get(wr_opcode, WCO.IBV_WC_SEND)


def complete_wqe(qp, wqe) -> None:
    if wqe.signaled:
        qp.send_cq.push(WC(wqe.wr_id, SUCCESS, _WC_OPCODE[wqe.opcode], qp.qp_num, wqe.length))


def retire(qp) -> None:
    """Pop finished WQEs off the head of the SQ, completing them in order."""
    sq = qp.sq
    while sq:
        wqe = sq[0]
        st = wqe.state
        if st == WQE_DONE:
            sq.popleft()
            if qp.req_idx:
                qp.req_idx -= 1
            if wqe.signaled:
                qp.send_cq.push(WC(wqe.wr_id, SUCCESS, _WC_OPCODE[wqe.opcode], qp.qp_num, wqe.length))
        elif st == WQE_ERROR:
            sq.popleft()
            if qp.req_idx:
                qp.req_idx -= 1
            qp.cnt[C.send_err] += 1
            qp.send_cq.push(WC(wqe.wr_id, wqe.status, _WC_OPCODE.get(wqe.opcode, 0), qp.qp_num))
            qp.to_error(event=None)
            return
        else:
            break
    if qp.state == QPS_SQD:
        qp._check_drained()


def check_drained(qp) -> None:
    if qp.state == S.IBV_QPS_SQD:
        qp._check_drained()


def _fail_head(qp, status: int) -> None:
    """Complete the oldest outstanding WQE with ``status`` (QP -> ERR)."""
    for wqe in qp.sq:
        if wqe.state in (WQE_PROCESSING, WQE_PENDING):
            wqe.state = WQE_ERROR
            wqe.status = status
            break
    retire(qp)


def _progress(qp, now: float, acked: int) -> None:
    """Forward progress of ``acked`` PSNs: counters back to their attribute
    values, timer re-armed, go-back window grown."""
    cwnd = qp.cwnd
    if cwnd < _MAX_WND:
        cwnd += acked / cwnd
        qp.cwnd = cwnd if cwnd < _MAX_WND else _MAX_WND
    qp.retry_cnt = qp.retry_cnt_init
    qp.rnr_retry = qp.rnr_retry_init
    qp.retry_psn = None
    if qp.comp_psn != qp.req_psn and qp.timeout_s is not None:
        qp.timer_at = now + qp.timeout_s
    else:
        qp.timer_at = None


def ack_upto(qp, psn: int, now: float) -> bool:
    """Acknowledge every PSN up to and including ``psn``.  Returns False if
    this revealed a missing READ/ATOMIC response (implied NAK; handled)."""
    comp = qp.comp_psn
    if (psn - comp) & 0xFFFFFF >= 0x800000:
        return True                            # older than what is already acknowledged
    new_comp = comp
    implied = False
    for wqe in qp.sq:
        st = wqe.state
        if st == WQE_DONE or st == WQE_ERROR:
            continue
        if st != WQE_PROCESSING and st != WQE_PENDING:
            break
        if (psn - wqe.first_psn) & 0xFFFFFF >= 0x800000:
            break                              # psn before this WQE
        if (psn - wqe.last_psn) & 0xFFFFFF < 0x800000:
            if wqe.is_rd_atomic:
                implied = True
                break
            wqe.state = WQE_DONE
            new_comp = (wqe.last_psn + 1) & 0xFFFFFF
            continue
        if not wqe.is_rd_atomic:
            new_comp = (psn + 1) & 0xFFFFFF
        break
    if new_comp != comp:
        qp.comp_psn = new_comp
        _progress(qp, now, (new_comp - comp) & 0xFFFFFF)
        retire(qp)
        ahead = (new_comp - qp.req_psn) & 0xFFFFFF
        if 0 < ahead < 0x800000:
            requester.skip_to(qp, new_comp)
    if implied:
        _go_back(qp, now, once=True, implied=True)
        return False
    return True


def _go_back(qp, now: float, once: bool, implied: bool = False) -> None:
    """Retransmit from comp_psn, spending one retry (retry_cnt).  ``once``:
    NAK-driven, so not again from the same PSN until progress (the timer
    covers a lost retransmission); timeouts always go back."""
    if qp.state == S.IBV_QPS_ERR:
        return
    if once:
        if qp.retry_psn == qp.comp_psn:
            return
        qp.retry_psn = qp.comp_psn
    if implied:
        qp.cnt[C.implied_nak_seq_err] += 1
    qp.cnt[C.completer_retry_err] += 1
    if qp.retry_cnt == 0:
        qp.cnt[C.retry_exceeded_err] += 1
        _fail_head(qp, ST.IBV_WC_RETRY_EXC_ERR)
        return
    qp.retry_cnt -= 1
    qp.cwnd = max(limits.MIN_CWND, qp.cwnd * 0.5)
    requester.retry(qp, now)


def receive(qp, pkt, info, now: float, grh=None) -> None:
    cnt = qp.cnt
    if qp.state == QPS_RTR:                    # no requests sent yet: nothing to answer
        cnt[C.dropped_bad_state] += 1
        return
    psn = (pkt[9] << 16) | (pkt[10] << 8) | pkt[11]
    if (psn - qp.sent_end) & 0xFFFFFF < 0x800000 or (psn - qp.comp_psn) & 0xFFFFFF >= 0x800000:
        # a response to nothing outstanding: duplicate ACK, stale read response, ghost
        cnt[C.dropped_ghost_response] += 1
        return
    mask = info.mask
    syn = pkt[info.aeth] if info.aeth >= 0 else AETH_ACK
    op = info.opcode & 0x1F
    if op == OP_ACKNOWLEDGE:
        kind = syn & 0xE0
        if kind == AETH_ACK:
            ack_upto(qp, psn, now)
        elif kind == AETH_RNR_NAK:
            if not ack_upto(qp, (psn - 1) & 0xFFFFFF, now):
                return
            cnt[C.rcvd_rnr_err] += 1
            if qp.rnr_retry == 0:
                cnt[C.retry_rnr_exceeded_err] += 1
                cnt[C.rnr_nak_retry_err] += 1
                _fail_head(qp, ST.IBV_WC_RNR_RETRY_EXC_ERR)
                return
            if qp.rnr_retry != 7:
                qp.rnr_retry -= 1
            qp.rnr_at = now + RNR_TIMER_US[syn & 0x1F] * 1e-6
            qp.timer_at = None
        elif syn == AETH_NAK_PSN_SEQ_ERROR:
            if not ack_upto(qp, (psn - 1) & 0xFFFFFF, now):
                return
            cnt[C.rcvd_seq_err] += 1
            # Not while an RNR back-off runs (the responder NAKs what followed
            # the RNR'd packet), and once per stall, as rxe's started_retry.
            if qp.rnr_at is None:
                _go_back(qp, now, once=True)
        else:
            if not ack_upto(qp, (psn - 1) & 0xFFFFFF, now):
                return
            _fail_head(qp, _NAK_STATUS.get(syn, ST.IBV_WC_REM_OP_ERR))
        if qp.req_idx < len(qp.sq):
            requester.run(qp, now)
        return
    # READ response or ATOMIC ACKNOWLEDGE: everything before it is acknowledged
    if mask & ACK_MASK or info.aeth >= 0:
        if syn & 0xE0 != AETH_ACK:
            cnt[C.dropped_ghost_response] += 1
            return
    if psn != qp.comp_psn:
        if not ack_upto(qp, (psn - 1) & 0xFFFFFF, now):
            return
        if psn != qp.comp_psn:                 # a gap inside the responses
            _go_back(qp, now, once=True, implied=True)
            return
    wqe = None
    for w in qp.sq:
        if w.state == WQE_PROCESSING or w.state == WQE_PENDING:
            wqe = w
            break
        if w.state != WQE_DONE and w.state != WQE_ERROR:
            break
    if wqe is None or not wqe.is_rd_atomic:
        cnt[C.dropped_ghost_response] += 1
        return
    if mask & ATOMIC_MASK:
        if wqe.opcode == WR.IBV_WR_RDMA_READ or psn != wqe.first_psn:
            _fail_head(qp, ST.IBV_WC_BAD_RESP_ERR)
            return
        (orig,) = ATMACK.unpack_from(pkt, info.atmack)
        scatter(wqe.views, 0, orig.to_bytes(8, _BYTEORDER), 0, 8)
        _finish_rd_atomic(qp, wqe, now)
        return
    # READ response: place the payload at this PSN's offset
    if wqe.opcode != WR.IBV_WR_RDMA_READ:
        _fail_head(qp, ST.IBV_WC_BAD_RESP_ERR)
        return
    mtu = qp.mtu
    hlen = info.length
    n = len(pkt) - hlen - ((pkt[1] >> 4) & 3)
    off = psn_diff(psn, wqe.first_psn) * mtu
    rem = wqe.length - off
    if mask & END_MASK:
        ok = n == rem
    else:
        ok = n == mtu and rem > mtu
    if not ok:
        _fail_head(qp, ST.IBV_WC_BAD_RESP_ERR)
        return
    if n:
        scatter(wqe.views, off, pkt, hlen, n)
    cnt[C.rcvd_bytes] += n                     # the responder counted them as sent_bytes
    wqe.read_done = off + n
    qp.comp_psn = (psn + 1) & 0xFFFFFF
    _progress(qp, now, 1)
    if mask & END_MASK:
        _finish_rd_atomic(qp, wqe, now)


def _finish_rd_atomic(qp, wqe, now: float) -> None:
    new_comp = (wqe.last_psn + 1) & 0xFFFFFF
    acked = (new_comp - qp.comp_psn) & 0xFFFFFF
    qp.comp_psn = new_comp
    wqe.state = WQE_DONE
    if qp.rd_atomic_out:
        qp.rd_atomic_out -= 1
    _progress(qp, now, acked)
    retire(qp)
    requester.run(qp, now)


def ack_timeout(qp, now: float) -> None:
    """The local ACK timer fired."""
    qp.timer_at = None
    if qp.state == S.IBV_QPS_ERR or qp.comp_psn == qp.req_psn:
        return
    qp.cnt[C.local_ack_timeout_err] += 1
    _go_back(qp, now, once=False)


def rnr_expired(qp, now: float) -> None:
    """The RNR back-off ended: re-send from the NAKed PSN."""
    if qp.state != S.IBV_QPS_ERR:
        requester.retry(qp, now)
