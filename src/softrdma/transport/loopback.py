"""Whole messages between two RC QPs of the same device engine, without packets.

When a requester's peer QP is reachable in the same process (two QPs of one
daemon, no fault injection or capture between them), a message can be
executed at once instead of being cut into MTU packets that are built,
parsed and acknowledged one by one: one memory copy from the source buffers
to the destination, one receive completion, one send completion.  This is
what makes same-host RDMA run at memory speed.

It is a short cut, never a second protocol.  It is taken only when the
packet path would certainly succeed the same way -- nothing in flight on
either side, PSNs in step, every check the responder makes passed (op
allowed by the QP's access flags, rkey/PD/bounds/access, a receive WQE
present and large enough).  Anything else -- an RNR, a bad rkey, an op the
short cut does not cover (ATOMIC, SEND_WITH_INV), a QP not in RTR/RTS --
goes through the packets, which give the spec's NAKs, retries and errors.
Both QPs' PSNs, MSN and counters advance exactly as if the packets had been
exchanged (one ACK per message), so the two paths mix freely on one QP; the
engine learns the packets and wire bytes that did not fly through
``qp.local_traffic`` (port counters).  What a run of SEND / WRITE messages
does to both QPs' PSNs, MSN and counters is ``exchanged``: ``execute``
applies it per message, ``device.sendpath`` (single-SGE SENDs and WRITEs
straight from the ring slots) once per run.
"""

from __future__ import annotations

from ..enums import ibv_qp_state, ibv_wc_flags, ibv_wc_opcode, ibv_wc_status, ibv_wr_opcode, ints
from ..uapi.wr import WR_INV_MASK, WR_READ_MASK, WR_SEND_MASK, WR_WRITE_MASK, wr_opcodes
from ..wire.opcodes import (
    OP_ACKNOWLEDGE, OP_RDMA_READ_REQUEST, OP_RDMA_READ_RESPONSE_FIRST, OP_RDMA_READ_RESPONSE_LAST,
    OP_RDMA_READ_RESPONSE_MIDDLE, OP_RDMA_READ_RESPONSE_ONLY, OPCODE_TABLE, READ_MASK, WRITE_MASK,
)
from .counters import Counter
from .memory import REMOTE_READ, REMOTE_WRITE
from .responder import RES_READ, add_resource, idle, take_rwqe_for
from .sgl import gather, scatter
from ..uapi.abi import WC
from .wr import SEGMENT_OPS, WQE_DONE

S = ints(ibv_qp_state)
WR = ints(ibv_wr_opcode)
WCO = ints(ibv_wc_opcode)
WF = ints(ibv_wc_flags)
ST = ints(ibv_wc_status)
C = ints(Counter)
_RECEIVING = frozenset((S.IBV_QPS_RTR, S.IBV_QPS_RTS))
SEND, SEND_IMM = WR.IBV_WR_SEND, WR.IBV_WR_SEND_WITH_IMM
WRITE, WRITE_IMM, READ = WR.IBV_WR_RDMA_WRITE, WR.IBV_WR_RDMA_WRITE_WITH_IMM, WR.IBV_WR_RDMA_READ
SEND_SOLICITED = 4
SENT_PKTS, RCVD_PKTS, SENT_BYTES, RCVD_BYTES = C.sent_pkts, C.rcvd_pkts, C.sent_bytes, C.rcvd_bytes
RDMA_SENDS, RDMA_RECVS = C.rdma_sends, C.rdma_recvs
RX_READ_REQUESTS, RX_WRITE_REQUESTS = C.rx_read_requests, C.rx_write_requests
# every SEND, WRITE and READ but SEND with invalidate (the short cut carries no IETH)
_OPS = wr_opcodes(WR_SEND_MASK | WR_WRITE_MASK | WR_READ_MASK) - wr_opcodes(WR_INV_MASK)
_READ_RESPONSES = (OP_RDMA_READ_RESPONSE_FIRST, OP_RDMA_READ_RESPONSE_MIDDLE, OP_RDMA_READ_RESPONSE_LAST,
                   OP_RDMA_READ_RESPONSE_ONLY)


def _wire_bytes(opclass: int, ops, length: int, mtu: int, npkts: int) -> int:
    """UDP payload bytes (headers, payload, pad, ICRC) of a message cut
    into ``npkts`` packets by the (first, middle, last, only) ``ops``."""
    hdr = OPCODE_TABLE
    if npkts == 1:
        return hdr[opclass | ops[3]].length + length + (-length & 3) + 4
    rem = length - (npkts - 1) * mtu
    return (hdr[opclass | ops[0]].length + (npkts - 2) * hdr[opclass | ops[1]].length
            + hdr[opclass | ops[2]].length + length + (-rem & 3) + 4 * npkts)


def _source(views, length: int):
    """The message bytes as one buffer (a view when there is one SGE)."""
    if len(views) == 1:
        return views[0]
    buf = bytearray(length)
    gather(views, 0, length, buf, 0)
    return buf


def exchanged(qp, peer, end: int, nmsg: int, npkts: int, nbytes: int, wire_bytes: int) -> None:
    """Both QPs as after ``nmsg`` SEND / WRITE messages of ``npkts`` packets,
    ``nbytes`` payload and ``wire_bytes`` UDP payload in all went from
    ``qp`` to ``peer`` and each was acknowledged by one ACK, the last
    packet's PSN being ``end`` - 1: the responder's ePSN, MSN and counters,
    the requester's PSNs (everything acknowledged), counters and retry
    counts, and the port counts (``qp.local_traffic``).  The per-op counters
    (rdma_recvs, rx_write_requests) and the completions are the caller's.
    ``execute`` calls it per message, ``device.sendpath`` once per burst."""
    peer.resp_psn = end
    peer.msn += nmsg
    pc = peer.cnt
    pc[RCVD_PKTS] += npkts
    pc[RCVD_BYTES] += nbytes
    pc[SENT_PKTS] += nmsg                               # the ACKs
    qp.req_psn = qp.comp_psn = qp.sent_end = end
    qc = qp.cnt
    qc[SENT_PKTS] += npkts
    qc[SENT_BYTES] += nbytes
    qc[RCVD_PKTS] += nmsg
    qc[RDMA_SENDS] += nmsg
    account = qp.local_traffic
    if account is not None:
        account(qp, peer, (npkts, wire_bytes), (nmsg, nmsg * (OPCODE_TABLE[qp.opclass | OP_ACKNOWLEDGE].length + 4)))
    qp.retry_cnt = qp.retry_cnt_init
    qp.rnr_retry = qp.rnr_retry_init


def wire_bytes(opclass: int, op: int, length: int, mtu: int, npkts: int) -> int:
    """The UDP payload bytes of a SEND / WRITE work request ``op`` of
    ``length`` bytes in ``npkts`` packets."""
    return _wire_bytes(opclass, SEGMENT_OPS[op], length, mtu, npkts)


def execute(qp, peer, wqe) -> bool:
    """Run the started ``wqe`` of ``qp`` against ``peer`` as one message.
    True: done (``wqe`` is WQE_DONE, every effect applied); False: nothing
    was touched, send it as packets."""
    op = wqe.opcode
    # the responder's checks, as its packets would meet them: the QP's state
    # and the PSN / op sequence (CHK_PSN, CHK_OP_SEQ) ...
    if (op not in _OPS or peer.state not in _RECEIVING or peer.dest_qpn != qp.qp_num
            or not peer.rc or not idle(peer, qp.req_psn)):
        return False
    length = wqe.length
    rwqe = None
    # ... then per operation CHK_OP_VALID, CHK_RESOURCE, CHK_LENGTH, CHK_RKEY
    if op == READ:
        if peer.resp_denied & READ_MASK or peer.max_dest_rd_atomic == 0:
            return False
        src = peer.memory.remote_view(peer.pd, wqe.rkey, wqe.remote_addr, length, REMOTE_READ, peer) \
            if length else b""
        if src is None:
            return False
        if length:
            scatter(wqe.views, 0, src, 0, length)
    elif op == WRITE or op == WRITE_IMM:
        if peer.resp_denied & WRITE_MASK:
            return False
        dst = None
        if length:
            dst = peer.memory.remote_view(peer.pd, wqe.rkey, wqe.remote_addr, length, REMOTE_WRITE, peer)
            if dst is None:
                return False
        if op == WRITE_IMM:
            rwqe = take_rwqe_for(peer, 0)
            if rwqe is None:
                return False
        if length:
            views = wqe.views
            if len(views) == 1:
                dst[:] = views[0][:]           # (a paged view gives its bytes when sliced)
            else:
                gather(views, 0, length, dst, 0)
    else:
        rwqe = take_rwqe_for(peer, length)
        if rwqe is None:
            return False
        if length:
            scatter(rwqe.views, 0, _source(wqe.views, length), 0, length)
    npkts = wqe.npkts
    end = (qp.req_psn + npkts) & 0xFFFFFF
    if op == READ:
        # the responder: ePSN, MSN, a READ resource and counters as after the
        # packets; the requester: the request sent, every response received
        peer.resp_psn = end
        peer.msn += 1
        add_resource(peer, [RES_READ, wqe.first_psn, wqe.last_psn, wqe.remote_addr, wqe.rkey, length,
                             peer.msn])
        pc = peer.cnt
        pc[RX_READ_REQUESTS] += 1
        pc[RCVD_PKTS] += 1
        pc[SENT_PKTS] += npkts
        pc[SENT_BYTES] += length
        qp.req_psn = qp.comp_psn = qp.sent_end = end
        qc = qp.cnt
        qc[SENT_PKTS] += 1
        qc[RCVD_PKTS] += npkts
        qc[RCVD_BYTES] += length
        account = qp.local_traffic
        if account is not None:
            oc = qp.opclass
            account(qp, peer, (1, OPCODE_TABLE[oc | OP_RDMA_READ_REQUEST].length + 4),
                    (npkts, _wire_bytes(oc, _READ_RESPONSES, length, qp.mtu, npkts)))
        qp.retry_cnt = qp.retry_cnt_init
        qp.rnr_retry = qp.rnr_retry_init
    else:
        if op == WRITE or op == WRITE_IMM:
            peer.cnt[RX_WRITE_REQUESTS] += 1
        exchanged(qp, peer, end, 1, npkts, length, wire_bytes(qp.opclass, op, length, qp.mtu, npkts))
    if rwqe is not None:
        peer.cnt[RDMA_RECVS] += 1
        if op == WRITE_IMM:
            wc = WC(rwqe.wr_id, ST.IBV_WC_SUCCESS, WCO.IBV_WC_RECV_RDMA_WITH_IMM, peer.qp_num, length,
                    wqe.imm_data, qp.qp_num, WF.IBV_WC_WITH_IMM)
        else:
            wc = WC(rwqe.wr_id, ST.IBV_WC_SUCCESS, WCO.IBV_WC_RECV, peer.qp_num, length,
                    wqe.imm_data if op == SEND_IMM else 0, qp.qp_num,
                    WF.IBV_WC_WITH_IMM if op == SEND_IMM else 0)
        peer.recv_cq.push(wc, wqe.send_flags & SEND_SOLICITED)
    wqe.offset = length
    wqe.pkts_sent = npkts
    wqe.state = WQE_DONE
    return True
