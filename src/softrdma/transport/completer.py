"""The completer: responses -> send completions, and when to go back (rxe_comp.c).

Every response acknowledges, implicitly, all PSNs before its own; an ACK
(or the AETH of a read response) acknowledges its own PSN too.  WQEs
complete in send-queue order once all their PSNs are acknowledged and, for
READ/ATOMIC, their response data has arrived.

The completer never calls the requester (rxe: rxe_sched_task(&qp->req.task)):
it sets ``qp.req_sched`` for a run and ``qp.req_need_retry`` for a go-back,
and the QP's dispatch runs the requester when the completer has returned.

Its steps are rxe_comp.c's states, named as there (``comp_state``; the code
is straight-line, each step marked with its COMPST_* name):
COMPST_GET_ACK (``receive``) -> COMPST_CHECK_PSN (ghosts, gaps) ->
COMPST_CHECK_ACK (ACK/NAK syndrome, response kind) -> COMPST_READ /
COMPST_ATOMIC (response data) or COMPST_WRITE_SEND (``ack_upto``; and the
zero-length READ RESPONSE ONLY that answers an ATOMIC WRITE or a FLUSH) ->
COMPST_UPDATE_COMP (``update_comp``) -> COMPST_GET_WQE / COMPST_COMP_WQE
(``retire``) -> COMPST_DONE or COMPST_EXIT; COMPST_COMP_ACK when an ACK
completes no WQE; COMPST_ERROR_RETRY (``_error_retry``), COMPST_RNR_RETRY
(an RNR NAK) and COMPST_ERROR (``_comp_error``) on the way.

Going back (the requester's ``retry``) happens on:
* a local ACK timeout (retry_cnt; ``timeout`` 0 = never),
* a PSN-sequence-error NAK (retry_cnt),
* an implied NAK: an ACK beyond a READ/ATOMIC whose response is missing, or
  a gap in read responses -- at most once per comp_psn, then the timer,
* the end of an RNR back-off (rnr_retry; 7 = infinite).
Exhausted counters complete the oldest WQE with IBV_WC_RETRY_EXC_ERR or
IBV_WC_RNR_RETRY_EXC_ERR; error NAKs with IBV_WC_REM_INV_REQ_ERR /
REM_ACCESS_ERR / REM_OP_ERR; a response at the expected PSN that does not
fit (wrong kind for the WQE, a READ response opcode out of sequence, a
length that does not match) with IBV_WC_BAD_RESP_ERR -- never retried.
Any error completion moves the QP to ERR, which flushes the rest with
IBV_WC_WR_FLUSH_ERR.

Responses older than comp_psn (duplicates, ghosts) and responses to PSNs
never sent are dropped and counted.
"""

from __future__ import annotations

import sys
from enum import IntEnum

from ..enums import ibv_qp_state, ibv_wc_opcode, ibv_wc_status, ibv_wr_opcode, ints
from ..uapi.abi import WC
from ..uapi.wr import wc_opcodes
from ..wire.headers import (
    AETH_ACK, AETH_NAK_INVALID_REQ, AETH_NAK_PSN_SEQ_ERROR, AETH_NAK_REM_ACC_ERR,
    AETH_NAK_REM_OP_ERR, AETH_RNR_NAK, ATMACK, RNR_TIMER_US, psn_diff,
)
from ..wire.opcodes import (
    ACK_MASK, ATOMIC_MASK, END_MASK, OP_ACKNOWLEDGE, START_MASK,
)
from . import limits
from .counters import Counter
from .sgl import scatter
from .wr import ATOMIC_OPS, FLUSH_AW_OPS, WQE_DONE, WQE_ERROR, WQE_PENDING, WQE_POSTED, WQE_PROCESSING

S = ints(ibv_qp_state)
WCO = ints(ibv_wc_opcode)
ST = ints(ibv_wc_status)
WR = ints(ibv_wr_opcode)
C = ints(Counter)
SUCCESS = ST.IBV_WC_SUCCESS
QPS_SQD = S.IBV_QPS_SQD
QPS_RTR = S.IBV_QPS_RTR

_WC_OPCODE = wc_opcodes()
_NAK_STATUS = {
    AETH_NAK_INVALID_REQ: ST.IBV_WC_REM_INV_REQ_ERR,
    AETH_NAK_REM_ACC_ERR: ST.IBV_WC_REM_ACCESS_ERR,
    AETH_NAK_REM_OP_ERR: ST.IBV_WC_REM_OP_ERR,
}
_BYTEORDER = sys.byteorder


class comp_state(IntEnum):
    """rxe_comp.c's enum comp_state: the names of the completer's steps."""
    COMPST_GET_ACK = 0
    COMPST_GET_WQE = 1
    COMPST_COMP_WQE = 2
    COMPST_COMP_ACK = 3
    COMPST_CHECK_PSN = 4
    COMPST_CHECK_ACK = 5
    COMPST_READ = 6
    COMPST_ATOMIC = 7
    COMPST_WRITE_SEND = 8
    COMPST_UPDATE_COMP = 9
    COMPST_ERROR_RETRY = 10
    COMPST_RNR_RETRY = 11
    COMPST_ERROR = 12
    COMPST_EXIT = 13
    COMPST_DONE = 14


def wc_opcode(wr_opcode: int) -> int:
    return _WC_OPCODE.get(wr_opcode, WCO.IBV_WC_SEND)


def complete_wqe(qp, wqe) -> None:
    if wqe.signaled:
        qp.send_cq.push(WC(wqe.wr_id, SUCCESS, _WC_OPCODE[wqe.opcode], qp.qp_num, wqe.length))


def retire(qp) -> None:
    """COMPST_GET_WQE / COMPST_COMP_WQE: pop finished WQEs off the head of
    the SQ, completing them in order."""
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
            if not wqe.hidden:
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


def _comp_error(qp, status: int) -> None:
    """COMPST_ERROR: complete the oldest outstanding WQE with ``status`` (QP -> ERR)."""
    for wqe in qp.sq:
        if wqe.state in (WQE_PROCESSING, WQE_PENDING):
            wqe.state = WQE_ERROR
            wqe.status = status
            break
    retire(qp)


def update_comp(qp, now: float, acked: int) -> None:
    """COMPST_UPDATE_COMP: forward progress of ``acked`` PSNs: counters back to their attribute
    values, timer re-armed, go-back window grown."""
    cwnd = qp.cwnd
    if cwnd < qp.cwnd_max:
        cwnd += acked / cwnd
        qp.cwnd = cwnd if cwnd < qp.cwnd_max else qp.cwnd_max
    qp.retry_cnt = qp.retry_cnt_init
    qp.rnr_retry = qp.rnr_retry_init
    qp.retry_psn = None
    if qp.comp_psn != qp.req_psn and qp.timeout_s is not None:
        qp.timer_at = now + qp.timeout_s
    else:
        qp.timer_at = None


def ack_upto(qp, psn: int, now: float) -> bool:
    """COMPST_WRITE_SEND: acknowledge every PSN up to and including ``psn``.
    Returns False if this revealed a missing READ/ATOMIC response (an
    implied NAK: COMPST_ERROR_RETRY asked for)."""
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
        update_comp(qp, now, (new_comp - comp) & 0xFFFFFF)
        retire(qp)
        ahead = (new_comp - qp.req_psn) & 0xFFFFFF
        if 0 < ahead < 0x800000:
            _skip_resent(qp, new_comp)
    if implied:
        _error_retry(qp, now, once=True, implied=True)
        return False
    return True


def _skip_resent(qp, psn: int) -> None:
    """An ACK acknowledged PSNs this go-back pass had not re-sent yet (the
    responder had them from the earlier pass): the requester resumes
    re-sending at ``psn``.  The WQEs wholly covered are already retired;
    the one ``psn`` falls in continues from there (as rxe's completer moves
    its WQEs' state, the requester reads it)."""
    qp.req_psn = psn
    qp.req_idx = 0
    for wqe in qp.sq:
        if wqe.state == WQE_POSTED:
            break
        if wqe.state != WQE_PROCESSING and wqe.state != WQE_PENDING:
            continue
        done = (psn - wqe.first_psn) & 0xFFFFFF
        if done < 0x800000 and not wqe.is_rd_atomic:
            wqe.state = WQE_PROCESSING
            wqe.offset = min(done * qp.mtu, wqe.length)
            wqe.pkts_sent = done
        break


def _error_retry(qp, now: float, once: bool, implied: bool = False) -> None:
    """COMPST_ERROR_RETRY: retransmit from comp_psn, spending one retry
    (retry_cnt); the requester goes back when it next runs.  ``once``:
    NAK-driven, so not when a retry from the same PSN has started, by a NAK
    or a timeout, until progress (the timer covers a lost retransmission);
    timeouts always go back.  This is rxe's started_retry: a NAK the peer
    sent before it saw the go-back (a stale one, or the gap of a lost
    retransmission) does not spend a second retry on the same stall."""
    if qp.state == S.IBV_QPS_ERR:
        return
    if once and qp.retry_psn == qp.comp_psn:
        return
    qp.retry_psn = qp.comp_psn
    if implied:
        qp.cnt[C.implied_nak_seq_err] += 1
    qp.cnt[C.completer_retry_err] += 1
    if qp.retry_cnt == 0:
        qp.cnt[C.retry_exceeded_err] += 1
        _comp_error(qp, ST.IBV_WC_RETRY_EXC_ERR)
        return
    qp.retry_cnt -= 1
    qp.cwnd = max(limits.MIN_CWND, qp.cwnd * 0.5)
    qp.req_need_retry = True
    qp.req_sched = True


def receive(qp, pkt, info, now: float, grh=None) -> None:
    """COMPST_GET_ACK: one response packet (ACK/NAK, READ response, ATOMIC
    ACKNOWLEDGE) for this QP."""
    cnt = qp.cnt
    if qp.state == QPS_RTR:                    # no requests sent yet: nothing to answer
        cnt[C.dropped_bad_state] += 1
        return
    # --- COMPST_CHECK_PSN
    psn = (pkt[9] << 16) | (pkt[10] << 8) | pkt[11]
    if (psn - qp.sent_end) & 0xFFFFFF < 0x800000 or (psn - qp.comp_psn) & 0xFFFFFF >= 0x800000:
        # a response to nothing outstanding: duplicate ACK, stale read response, ghost
        cnt[C.dropped_ghost_response] += 1
        return
    # --- COMPST_CHECK_ACK
    mask = info.mask
    syn = pkt[info.aeth] if info.aeth >= 0 else AETH_ACK
    op = info.opcode & 0x1F
    if op == OP_ACKNOWLEDGE:
        kind = syn & 0xE0
        if kind == AETH_ACK:
            ack_upto(qp, psn, now)             # COMPST_WRITE_SEND (COMPST_COMP_ACK if no WQE ends)
        elif kind == AETH_RNR_NAK:             # COMPST_RNR_RETRY
            if not ack_upto(qp, (psn - 1) & 0xFFFFFF, now):
                return
            cnt[C.rcvd_rnr_err] += 1
            if qp.rnr_retry == 0:
                cnt[C.retry_rnr_exceeded_err] += 1
                cnt[C.rnr_nak_retry_err] += 1
                _comp_error(qp, ST.IBV_WC_RNR_RETRY_EXC_ERR)
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
                _error_retry(qp, now, once=True)
        else:
            if not ack_upto(qp, (psn - 1) & 0xFFFFFF, now):
                return
            _comp_error(qp, _NAK_STATUS.get(syn, ST.IBV_WC_REM_OP_ERR))
        # --- COMPST_DONE: the requester may send what the ACK made room for
        if qp.req_idx < len(qp.sq):
            qp.req_sched = True
        return
    # READ response or ATOMIC ACKNOWLEDGE: everything before it is acknowledged
    if mask & ACK_MASK or info.aeth >= 0:
        if syn & 0xE0 != AETH_ACK:
            cnt[C.dropped_ghost_response] += 1
            return
    if psn != qp.comp_psn:                     # COMPST_CHECK_PSN: responses skipped?
        if not ack_upto(qp, (psn - 1) & 0xFFFFFF, now):
            return
        if psn != qp.comp_psn:                 # a gap inside the responses
            _error_retry(qp, now, once=True, implied=True)
            return
    # --- COMPST_GET_WQE: the READ/ATOMIC the response belongs to
    wqe = responding_wqe(qp)
    if wqe is None or not wqe.is_rd_atomic:
        cnt[C.dropped_ghost_response] += 1
        return
    if mask & ATOMIC_MASK:                     # --- COMPST_ATOMIC
        if wqe.opcode not in ATOMIC_OPS or psn != wqe.first_psn:
            _comp_error(qp, ST.IBV_WC_BAD_RESP_ERR)
            return
        (orig,) = ATMACK.unpack_from(pkt, info.atmack)
        scatter(wqe.views, 0, orig.to_bytes(8, _BYTEORDER), 0, 8)
        _finish_rd_atomic(qp, wqe, now)
        return
    if wqe.opcode in FLUSH_AW_OPS:
        # an ATOMIC WRITE / FLUSH is answered by one READ RESPONSE ONLY of
        # length zero at its PSN (rxe's check_ack: COMPST_WRITE_SEND for the
        # one, COMPST_READ of nothing for the other)
        if mask & START_MASK and mask & END_MASK and psn == wqe.first_psn \
                and len(pkt) == info.length and not pkt[1] & 0x30:
            _finish_rd_atomic(qp, wqe, now)
        else:
            _comp_error(qp, ST.IBV_WC_BAD_RESP_ERR)
        return
    # --- COMPST_READ: place the payload at this PSN's offset
    if wqe.opcode != WR.IBV_WR_RDMA_READ:
        _comp_error(qp, ST.IBV_WC_BAD_RESP_ERR)
        return
    # The opcode must fit the sequence (rxe's check_ack on comp.opcode): a
    # response stream starts with FIRST/ONLY at the PSN its READ request
    # carried (``read_psn``: the WQE's first PSN, or where a go-back
    # re-requested the missing part), and only there; MIDDLE/LAST continue
    # one, so never at the WQE's first PSN.  At a re-request's PSN a
    # MIDDLE/LAST is as good: the first pass's, delayed rather than lost, or
    # kernel rxe's replay of a re-request (rdatm_res_state_replay).
    if mask & START_MASK:
        if psn != wqe.read_psn:
            _comp_error(qp, ST.IBV_WC_BAD_RESP_ERR)
            return
    elif psn == wqe.first_psn:
        _comp_error(qp, ST.IBV_WC_BAD_RESP_ERR)
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
        _comp_error(qp, ST.IBV_WC_BAD_RESP_ERR)
        return
    if n:
        scatter(wqe.views, off, pkt, hlen, n)
    cnt[C.rcvd_bytes] += n                     # the responder counted them as sent_bytes
    wqe.read_done = off + n
    qp.comp_psn = (psn + 1) & 0xFFFFFF
    update_comp(qp, now, 1)
    if mask & END_MASK:
        _finish_rd_atomic(qp, wqe, now)


def responding_wqe(qp):
    """COMPST_GET_WQE: the WQE a response is for -- the first of the SQ that
    is being sent or waits for its answer, past the finished ones -- or None."""
    for w in qp.sq:
        if w.state == WQE_PROCESSING or w.state == WQE_PENDING:
            return w
        if w.state != WQE_DONE and w.state != WQE_ERROR:
            return None
    return None


def _finish_rd_atomic(qp, wqe, now: float) -> None:
    """The READ/ATOMIC ``wqe`` has all its response: COMPST_UPDATE_COMP,
    COMPST_COMP_WQE, and the requester may send the next one."""
    new_comp = (wqe.last_psn + 1) & 0xFFFFFF
    acked = (new_comp - qp.comp_psn) & 0xFFFFFF
    qp.comp_psn = new_comp
    wqe.state = WQE_DONE
    if qp.rd_atomic_out:
        qp.rd_atomic_out -= 1
    update_comp(qp, now, acked)
    retire(qp)
    qp.req_sched = True


def ack_timeout(qp, now: float) -> None:
    """The local ACK timer fired (rxe's retransmit_timer): COMPST_ERROR_RETRY."""
    qp.timer_at = None
    if qp.state == S.IBV_QPS_ERR or qp.comp_psn == qp.req_psn:
        return
    qp.cnt[C.local_ack_timeout_err] += 1
    _error_retry(qp, now, once=False)


def rnr_expired(qp, now: float) -> None:
    """The RNR back-off ended (rxe's rnr_nak_timer): the requester re-sends
    from the NAKed PSN."""
    if qp.state != S.IBV_QPS_ERR:
        qp.req_need_retry = True
        qp.req_sched = True
