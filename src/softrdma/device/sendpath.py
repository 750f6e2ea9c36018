"""SENDs and RDMA WRITEs between two RC QPs of this daemon, slot to slot.

The object path of a SEND whose peer QP lives in this daemon decodes the
slot into a ``SendWQE`` (``device.wqe``), runs ``QP.post_send``'s checks and
the requester (``_start``: the lkey, the PSNs), then
``transport.loopback.execute`` (the responder's checks, the receive WQE --
itself decoded from the peer's ring into a ``RecvWQE`` beforehand --, the
copy, the counters) and completes twice, a ``WC`` object per CQE: ~40
Python calls for one 64-byte message.  ``send_burst`` does the same work for
a run of single-SGE SEND / SEND_WITH_IMM / RDMA WRITE slots straight from
the two rings: it reads each send slot and the receive slot a SEND consumes
with one unpack each, checks (a WRITE: the peer's access flags and its
rkey, as ``loopback.execute``), copies, and at the end of the run advances
both QPs' PSNs, MSN and counters once (``loopback.exchanged``), frees the
slots and writes the CQEs of the run in one batch per CQ
(``DevCQ.push_cqes``).

It is a short cut of the short cut, never a second protocol: it runs only
where the object path would certainly complete the message in one step,
and gives the same completions (wr_id, opcode, byte_len, imm_data, src_qp,
flags, the solicited bit, their order on each CQ), the same bytes and the
same counters.  The sending QP in RTS with nothing outstanding (empty SQ:
no RNR back-off, no retry, nothing to keep order with), the peer an RC QP
of this daemon reachable without packets (``Device.local_peer_dqp``: no
fault injection, no capture), in RTR/RTS, connected back, idle at our PSN,
with its own receive queue; the slot a SEND, SEND_WITH_IMM or WRITE with one SGE,
no inline data, no fence, no address handle, within max_msg_sz; both lkeys
valid; a receive WQE there (the peer's ``RecvWQE`` objects first, then its
ring) with one SGE (or, objects, any) large enough.  The first slot that
misses any of it ends the run and is left in the ring for the object path,
which gives the spec's answer (RNR, IBV_WC_LOC_LEN_ERR, LOC_PROT_ERR,
flush, ...).
"""

from __future__ import annotations

from ..enums import ibv_qp_state, ibv_send_flags, ibv_wc_flags, ibv_wc_opcode, ibv_wr_opcode, ints
from ..transport.counters import Counter
from ..transport.loopback import exchanged, wire_bytes
from ..transport.memory import LOCAL_READ, LOCAL_WRITE, REMOTE_WRITE
from ..transport.responder import idle, take_rwqe_for
from ..transport.sgl import scatter
from ..uapi.shm import HEADER_BYTES, W_PRODUCER
from ..wire.opcodes import WRITE_MASK
from .wqe import RECV_SGE1, SEND_SGE1

S = ints(ibv_qp_state)
WR = ints(ibv_wr_opcode)
SF = ints(ibv_send_flags)
WCO = ints(ibv_wc_opcode)
WF = ints(ibv_wc_flags)
RC = 2                                       # IBV_QPT_RC
RTS = S.IBV_QPS_RTS
_RECEIVING = (S.IBV_QPS_RTR, S.IBV_QPS_RTS)
SEND, SEND_IMM, WRITE = WR.IBV_WR_SEND, WR.IBV_WR_SEND_WITH_IMM, WR.IBV_WR_RDMA_WRITE
SIGNALED, SOLICITED = SF.IBV_SEND_SIGNALED, SF.IBV_SEND_SOLICITED
_OBJECT_PATH_FLAGS = SF.IBV_SEND_FENCE | SF.IBV_SEND_INLINE
WC_RECV, WC_SEND, WC_WRITE, WITH_IMM = WCO.IBV_WC_RECV, WCO.IBV_WC_SEND, WCO.IBV_WC_RDMA_WRITE, WF.IBV_WC_WITH_IMM
RDMA_RECVS, RX_WRITE_REQUESTS = ints(Counter).rdma_recvs, ints(Counter).rx_write_requests
MAX_BURST = 64               # messages per run: bounds how long the first CQE of a run waits


_ONLY_WIRE: dict = {}


def _only_wire(opclass: int) -> dict:
    """{SEND / SEND_WITH_IMM / WRITE: the UDP payload bytes of its one packet
    but the payload and pad} for a transport ``opclass``, computed once."""
    got = _ONLY_WIRE[opclass] = {op: wire_bytes(opclass, op, 0, 4096, 1) for op in (SEND, SEND_IMM, WRITE)}
    return got


def send_burst(dev, dqp, budget: int, now: float) -> int:
    """Run the SENDs at the head of ``dqp``'s send ring that qualify (see
    the module docstring), at most ``budget``; how many went (0: the head
    slot is for the object path, nothing was touched)."""
    qp = dqp.qp
    if qp.state != RTS or qp.sq or qp.rnr_at is not None or qp.qp_type != RC or qp.req_psn != qp.comp_psn:
        return 0
    sqc = dqp.sq
    ring = sqc.ring
    words = ring.words
    tail = sqc.tail
    if words[W_PRODUCER] == tail or ring.slot_size < SEND_SGE1.size:
        return 0
    buf, mask, size, unpack = ring.buf, ring.mask, ring.slot_size, SEND_SGE1.unpack_from
    wr_id, op, nsge, flags, imm, raddr, rkey, ah, saddr, slen, slkey = unpack(
        buf, HEADER_BYTES + (tail & mask) * size)
    if (op != SEND and op != SEND_IMM and op != WRITE) or nsge != 1 or flags & _OBJECT_PATH_FLAGS or ah:
        return 0
    found = dev.local_peer_dqp(qp)
    if found is None:
        return 0
    pdqp = found[1]
    peer = pdqp.qp
    rqc = pdqp.rq
    scq, rcq = qp.send_cq, peer.recv_cq
    cap, pcap = qp.cap, peer.cap
    if (rqc is None or peer.qp_type != RC or peer.state not in _RECEIVING or peer.dest_qpn != qp.qp_num
            or not idle(peer, qp.req_psn) or rqc.ring.slot_size < RECV_SGE1.size
            or cap.max_send_wr < 1 or cap.max_send_sge < 1 or pcap.max_recv_wr < 1 or pcap.max_recv_sge < 1
            or not hasattr(scq, "push_cqes") or not hasattr(rcq, "push_cqes")):
        return 0
    rring = rqc.ring
    rwords, rbuf, rmask, rsize, runpack = rring.words, rring.buf, rring.mask, rring.slot_size, RECV_SGE1.unpack_from
    rtail = rqc.tail
    objects = peer.rq                        # receive WQEs read from the ring before: they come first
    smem, spd = qp.memory.local_view, qp.pd
    rmem, ppd = peer.memory.local_view, peer.pd
    remote = peer.memory.remote_view
    max_msg = qp.caps.max_msg_sz
    sig_all = qp.sq_sig_all
    mtu, opclass = qp.mtu, qp.opclass
    qpn, pqpn = qp.qp_num, peer.qp_num
    base = _ONLY_WIRE.get(opclass) or _only_wire(opclass)
    rcqes = []
    scqes = rcqes if scq is rcq else []      # one CQ: the two completions of each message stay in order
    n = npkts = nbytes = wire = nwrites = 0
    psn = qp.req_psn
    limit = budget if budget < MAX_BURST else MAX_BURST
    # the last buffers resolved: an application that sends from (receives
    # into) the same buffer again gets the same view without a lookup (no MR
    # can change during the run: the daemon is single-threaded)
    skey = rvkey = None
    sv = rv = None
    while True:
        if slen > max_msg:
            break
        if slen and (saddr, slen, slkey) != skey:
            sv = smem(spd, slkey, saddr, slen, LOCAL_READ)
            if sv is None:
                break
            skey = (saddr, slen, slkey)
        if op == WRITE:
            # loopback.execute's CHK_OP_VALID and CHK_RKEY; no receive WQE
            if peer.resp_denied & WRITE_MASK:
                break
            if slen:
                dst = remote(ppd, rkey, raddr, slen, REMOTE_WRITE, peer)
                if dst is None:
                    break
                dst[0:slen] = sv[0:slen]
            nwrites += 1
        elif objects:
            rwqe = take_rwqe_for(peer, slen)
            if rwqe is None:
                break
            rwr_id = rwqe.wr_id
            if slen:
                scatter(rwqe.views, 0, sv, 0, slen)
        else:
            if rwords[W_PRODUCER] == rtail:
                break                        # no receive posted: RNR, the packets' business
            rwr_id, rnsge, rbuf_addr, rlen, rlkey = runpack(rbuf, HEADER_BYTES + (rtail & rmask) * rsize)
            if rnsge != 1 or rlen < slen:
                break
            if rlen and (rbuf_addr, rlen, rlkey) != rvkey:
                rv = rmem(ppd, rlkey, rbuf_addr, rlen, LOCAL_WRITE)
                if rv is None:
                    break                    # (the object path resolves the receive WQE whatever the length)
                rvkey = (rbuf_addr, rlen, rlkey)
            if slen:
                rv[0:slen] = sv[0:slen]      # (a paged view gives its bytes when sliced)
            rtail = (rtail + 1) & 0xFFFFFFFF
        # done: the message is delivered
        tail = (tail + 1) & 0xFFFFFFFF
        n += 1
        if slen <= mtu:
            npkts += 1
            wire += base[op] + slen + (-slen & 3)
        else:
            k = -(-slen // mtu)
            npkts += k
            wire += wire_bytes(opclass, op, slen, mtu, k)
        nbytes += slen
        if op == WRITE:
            if sig_all or flags & SIGNALED:
                scqes.append((wr_id, slen, 0, qpn, 0, 0, 0, 0, 0, WC_WRITE, 0, 0, 0, 0))
        else:
            sol = 1 if flags & SOLICITED else 0
            if op == SEND:
                rcqes.append((rwr_id, slen, 0, pqpn, qpn, 0, 0, 0, 0, WC_RECV, 0, 0, 0, sol))
            else:
                rcqes.append((rwr_id, slen, imm, pqpn, qpn, 0, 0, 0, 0, WC_RECV, WITH_IMM, 0, 0, sol))
            if sig_all or flags & SIGNALED:
                scqes.append((wr_id, slen, 0, qpn, 0, 0, 0, 0, 0, WC_SEND, 0, 0, 0, 0))
        # the next slot, if it qualifies too
        if n == limit or words[W_PRODUCER] == tail:
            break
        wr_id, op, nsge, flags, imm, raddr, rkey, ah, saddr, slen, slkey = unpack(
            buf, HEADER_BYTES + (tail & mask) * size)
        if (op != SEND and op != SEND_IMM and op != WRITE) or nsge != 1 or flags & _OBJECT_PATH_FLAGS or ah:
            break
    if not n:
        return 0
    qp.now = now
    sqc.tail = tail
    rqc.tail = rtail
    exchanged(qp, peer, (psn + npkts) & 0xFFFFFF, n, npkts, nbytes, wire)
    pc = peer.cnt
    pc[RDMA_RECVS] += n - nwrites
    pc[RX_WRITE_REQUESTS] += nwrites
    # the slots are free before their completions are visible (DevCQ.push)
    dqp.publish_sq()
    pdqp.publish_rq()
    rcq.push_cqes(rcqes)
    if scqes and scqes is not rcqes:
        scq.push_cqes(scqes)
    return n
