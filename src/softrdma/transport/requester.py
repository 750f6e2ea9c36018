"""The requester: send WQEs -> request packets (rxe_req.c's job).

Walks the send queue from ``qp.req_idx``, segmenting each message by the
path MTU and numbering packets with 24-bit PSNs.  Stops when the QP may not
send: not RTS (or SQD and the WQE not yet started), an RNR back-off running,
the go-back window full (RC; each run that ends so counts ``req_window_full``),
a READ/ATOMIC beyond max_rd_atomic, or a fenced WQE behind an outstanding
READ/ATOMIC.  IBA 1.5's ATOMIC WRITE and FLUSH go as one request packet
each and count as READ/ATOMIC do (max_rd_atomic, fences): their answer is
a zero-length READ RESPONSE ONLY, as in rxe.  LOCAL_INV and BIND_MW
execute here, in SQ order, without the wire (``mw.local_op``).  AckReq goes
on the last packet of each message, at least every 64 packets, and on the
packet that fills the window.

Where the port says the QP's packets leave through a socket
(``qp.tx_runs``), the MIDDLE packets of a message -- and its FIRST and LAST
when they are as long, with a 12-byte header (a SEND's) -- go into ``tx`` as one
``wire.fastpath.SegmentRun``, ending where AckReq is due; the socket builds
them (the same bytes as one by one, ``tests/test_transport_segments.py``).

The go-back window (``qp.cwnd``) is at most 128 unacknowledged PSNs, as in
rxe (512 for a QP whose packets go out as runs: ``QP.enable_runs``). Every
go-back (a sequence NAK, an implied NAK, a timeout) halves it, down to 16;
acknowledged PSNs grow it back by one per window's worth. On a clean link it
stays at 128; on a lossy one it keeps a single loss from costing 128
retransmissions (go-back-N re-sends everything in flight).

A QP that got CNPs has a DCQCN rate limiter (``qp.rp``, ``transport.dcqcn``):
the requester stops when its token bucket is empty and asks for a wake-up
at the next token (``qp.rl_at``), which ``QP.tick`` turns into a run.

The requester is a task, as rxe's (rxe_run_task(&qp->req.task)): the
completer never calls it.  It asks for a run with ``qp.req_sched`` and for
a go-back with ``qp.req_need_retry`` as well (rxe's qp->req.need_retry), and
the QP's dispatch (``QP.receive``, ``QP.tick``) runs ``retry`` or ``run``
once the completer has returned; posts and modify run it directly.

Retransmission (go-back-N) is ``retry``: it restarts from
``qp.comp_psn``; the WQEs keep their PSNs, so the packets are re-sent
identically, except a READ, which is re-requested only for the part whose
responses are missing (IBA 9.7.5.1.6 allows the shortened re-request).
"""

from __future__ import annotations

from math import ceil

from ..enums import ibv_qp_state, ibv_qp_type, ibv_wc_status, ibv_wr_opcode, ints
from ..uapi.wr import WR_SOLICITED_MASK, wr_opcodes
from ..wire.headers import (
    ATMETH, BTH, BTH_ACKREQ, BTH_PAD_SHIFT, BTH_SE, DETH, FETH, IETH, IMMDT, RETH, XRCETH, XRCETH_SRQN_MASK, feth_word,
    psn_diff,
)
from ..wire.fastpath import BTH_BYTES, SegmentRun
from ..wire.opcodes import IB_OPCODE_XRC, OP_RDMA_READ_REQUEST, OPCODE_TABLE
from . import completer
from . import loopback
from . import mw
from .counters import Counter
from .limits import MAX_PKT_PER_ACK
from .memory import LOCAL_READ, LOCAL_WRITE
from .sgl import gather, resolve
from .wr import ATOMIC_OPS, FLUSH_AW_OPS, SEGMENT_OPS, WQE_DONE, WQE_ERROR, WQE_PENDING, WQE_POSTED, WQE_PROCESSING

S = ints(ibv_qp_state)
T = ints(ibv_qp_type)
ST = ints(ibv_wc_status)
WR = ints(ibv_wr_opcode)
C = ints(Counter)
SENT_PKTS, SENT_BYTES, RDMA_SENDS, WINDOW_FULL = C.sent_pkts, C.sent_bytes, C.rdma_sends, C.req_window_full
LOCAL_OPS = mw.LOCAL_OPS
QPS_ERR = S.IBV_QPS_ERR

RTS, SQD = S.IBV_QPS_RTS, S.IBV_QPS_SQD
RC, UC, UD = T.IBV_QPT_RC, T.IBV_QPT_UC, T.IBV_QPT_UD

SEND_FENCE = 1
SEND_SOLICITED = 4

_SOLICITABLE = wr_opcodes(WR_SOLICITED_MASK)     # IBV_SEND_SOLICITED -> BTH SE on the last packet


def _start(qp, wqe) -> bool:
    """First time a WQE is processed: look up its local buffers (lkey, PD,
    bounds, access), assign PSNs."""
    if wqe.opcode in FLUSH_AW_OPS:
        wqe.views = []                       # no local buffer: the 8 bytes / the range are in the WQE
    elif wqe.inline_data is not None:
        wqe.views = [memoryview(wqe.inline_data)]
    else:
        # READ and ATOMIC write into the local buffers; the rest only read them.
        wqe.views = resolve(qp.memory, qp.pd, wqe.sg_list, LOCAL_WRITE if wqe.is_rd_atomic else LOCAL_READ)
        if wqe.views is None:
            wqe.status = ST.IBV_WC_LOC_PROT_ERR
            return False
    if wqe.is_rd_atomic and wqe.opcode != WR.IBV_WR_RDMA_READ or qp.qp_type == UD:
        npkts = 1
    else:
        npkts = -(-wqe.length // qp.mtu) or 1
    psn = qp.req_psn
    wqe.npkts = npkts
    wqe.first_psn = psn
    wqe.last_psn = (psn + npkts - 1) & 0xFFFFFF
    wqe.state = WQE_PROCESSING
    wqe.offset = 0
    wqe.pkts_sent = 0
    return True


def _local_op(qp, wqe) -> None:
    """LOCAL_INV / BIND_MW execute in the requester, in order, without the wire."""
    status = mw.local_op(qp, wqe)
    if status == ST.IBV_WC_SUCCESS:
        wqe.state = WQE_DONE
    else:
        wqe.status = status
        wqe.state = WQE_ERROR


def run(qp, now: float) -> None:
    state = qp.state
    if (state != RTS and state != SQD) or qp.rnr_at is not None:
        return
    sq = qp.sq
    nsq = len(sq)
    idx = qp.req_idx
    if idx >= nsq:
        return
    rc = qp.rc
    tx = qp.tx
    rp = qp.rp
    if rp is not None:                         # DCQCN's rate limiter (``dcqcn``)
        rp.advance(now)
        if rp.recovered:
            qp.rp = rp = None
        elif rp.tokens <= 0:
            qp.rl_at = rp.ready_at()
            return
    while idx < nsq:
        wqe = sq[idx]
        wst = wqe.state
        if wst == WQE_POSTED:
            if state == SQD:
                break
            if wqe.send_flags & SEND_FENCE and qp.rd_atomic_out:
                break
            if wqe.opcode in LOCAL_OPS:
                _local_op(qp, wqe)
                if wqe.state == WQE_ERROR:     # nothing after it may go out
                    qp.req_idx = idx
                    completer.retire(qp)
                    return
                qp.req_idx = idx + 1
                completer.retire(qp)
                idx, nsq = qp.req_idx, len(sq)
                continue
            if wqe.is_rd_atomic and qp.rd_atomic_out >= qp.max_rd_atomic:
                break
            if rc and (qp.req_psn - qp.comp_psn) & 0xFFFFFF >= qp.cwnd:
                qp.cnt[WINDOW_FULL] += 1
                break
            if not _start(qp, wqe):
                # A local error: nothing after this WQE goes out; it completes
                # in error (QP -> ERR) once the WQEs before it have.
                wqe.state = WQE_ERROR
                qp.req_idx = idx
                completer.retire(qp)
                return
            if idx == 0 and qp.local_peer is not None and qp.req_psn == qp.comp_psn:
                peer = qp.local_peer(qp)
                if peer is not None and loopback.execute(qp, peer, wqe):
                    qp.req_idx = 1
                    completer.retire(qp)
                    idx, nsq = qp.req_idx, len(sq)
                    continue
        elif wst == WQE_ERROR:
            break
        elif wst != WQE_PROCESSING:
            idx += 1
            continue
        elif wqe.pkts_sent == 0 and wqe.is_rd_atomic and qp.rd_atomic_out >= qp.max_rd_atomic:
            break                              # a READ/ATOMIC re-sent after a retry counts again
        # send this WQE's remaining packets, as far as the window allows
        if wqe.is_rd_atomic:
            if rc and (qp.req_psn - qp.comp_psn) & 0xFFFFFF >= qp.cwnd:
                qp.cnt[WINDOW_FULL] += 1
                break
            _send_rd_atomic(qp, wqe, tx)
            qp.rd_atomic_out += 1
        elif not _send_segments(qp, wqe, tx, rc):
            if rp is None or rp.tokens > 0:
                qp.cnt[WINDOW_FULL] += 1       # window full mid-message (not the rate limiter)
            break
        idx += 1
        if not rc:
            wqe.state = WQE_DONE
            qp.req_idx = idx
            completer.retire(qp)
            idx, nsq = qp.req_idx, len(sq)
    qp.req_idx = idx
    if rp is not None and rp.tokens <= 0 and idx < len(sq):
        qp.rl_at = rp.ready_at()               # wake up when the limiter lets the rest go
    # The ACK timer runs whenever something is unacknowledged -- also when the
    # window closed in the middle of a message.
    if rc and qp.timer_at is None and qp.timeout_s is not None and qp.req_psn != qp.comp_psn:
        qp.timer_at = now + qp.timeout_s
    if state == SQD:
        completer.check_drained(qp)


def _send_segments(qp, wqe, tx, rc: bool) -> bool:
    """Emit the SEND/WRITE packets of ``wqe``; False if the window closed."""
    mtu = qp.mtu
    length = wqe.length
    ops = SEGMENT_OPS[wqe.opcode]
    opclass = qp.opclass
    ud = qp.qp_type == UD
    # an XRC INI QP's requests name the remote XRC SRQ (XRCETH)
    xrc_srqn = wqe.remote_srqn & XRCETH_SRQN_MASK if opclass == IB_OPCODE_XRC else -1
    if ud:
        av, dqpn = wqe.ah, wqe.remote_qpn
    else:
        av, dqpn = qp.av, qp.dest_qpn
    pkey = qp.pkey
    views = wqe.views
    cnt = qp.cnt
    flags_last = BTH_SE if wqe.send_flags & SEND_SOLICITED and wqe.opcode in _SOLICITABLE else 0
    psn = qp.req_psn
    off = off0 = wqe.offset
    sent = 0
    done = False
    # runs of MIDDLE packets go as one SegmentRun where the port asked for
    # them (``qp.tx_runs``: the packets leave through a socket)
    runs = rc and qp.tx_runs and xrc_srqn < 0 and len(views) == 1 and type(views[0]) is memoryview
    # ... from the FIRST on when that is as long as a MIDDLE (a SEND's: no RETH)
    first_info = OPCODE_TABLE[opclass | ops[0]] if runs else None
    first_ok = runs and first_info.length == BTH_BYTES
    rp = qp.rp
    while True:
        if rc and (psn - qp.comp_psn) & 0xFFFFFF >= qp.cwnd:
            break
        if rp is not None and rp.tokens <= 0:
            break
        rem = length - off
        if runs and rem > 2 * mtu and (off or first_ok):
            # k MIDDLEs: not the LAST, within the window, and ending where
            # AckReq is due (every 64th packet, the one that fills the window)
            room = ceil(qp.cwnd - ((psn - qp.comp_psn) & 0xFFFFFF))      # (cwnd regrows in fractions)
            k = min((rem - 1) // mtu, room, MAX_PKT_PER_ACK - qp.noack_pkts)
            if rp is not None:
                k = min(k, int(rp.tokens // mtu) + 1)
            if k >= 2:
                # ... and the LAST too when it is as long and fits (a 12-byte header, a full MTU,
                # in the window, and the MIDDLE before it not one that asks for an ACK)
                last_hdr = b""
                if rem == (k + 1) * mtu and k < room and qp.noack_pkts + k < MAX_PKT_PER_ACK:
                    linfo = OPCODE_TABLE[opclass | ops[2]]
                    if linfo.length == BTH_BYTES:
                        last_hdr = BTH.pack(linfo.opcode, flags_last, pkey, dqpn, 0)
                        k += 1
                        done = True
                ackreq = done or qp.noack_pkts + k >= MAX_PKT_PER_ACK or k == room
                qp.noack_pkts = 0 if ackreq else qp.noack_pkts + k
                info = OPCODE_TABLE[opclass | ops[1]]
                first_hdr = b"" if off else BTH.pack(first_info.opcode, 0, pkey, dqpn, 0)
                tx.append((qp, SegmentRun(BTH.pack(info.opcode, 0, pkey, dqpn, 0), psn, k, mtu,
                                          views[0][off:off + k * mtu], ackreq, last_hdr, first_hdr), av))
                psn = (psn + k) & 0xFFFFFF
                off += k * mtu
                sent += k
                if rp is not None:
                    rp.consume(k * (mtu + BTH_BYTES))
                if done:
                    break
                continue
        if rem <= mtu:
            n = rem
            info = OPCODE_TABLE[opclass | (ops[3] if off == 0 else ops[2])]
            flags = flags_last
            done = True
        else:
            n = mtu
            info = OPCODE_TABLE[opclass | (ops[0] if off == 0 else ops[1])]
            flags = 0
        hlen = info.length
        pad = -n & 3
        buf = bytearray(hlen + n + pad)
        ackreq = 0
        if rc:
            qp.noack_pkts += 1
            # ask for an ACK at the end, every 64 packets, and when this
            # packet fills the window (nothing more can go until it is ACKed)
            if done or qp.noack_pkts >= MAX_PKT_PER_ACK or (psn + 1 - qp.comp_psn) & 0xFFFFFF >= qp.cwnd:
                ackreq = BTH_ACKREQ
                qp.noack_pkts = 0
        BTH.pack_into(buf, 0, info.opcode, flags | (pad << BTH_PAD_SHIFT), pkey, dqpn, ackreq | psn)
        if xrc_srqn >= 0:
            XRCETH.pack_into(buf, info.xrceth, xrc_srqn)
        if info.reth >= 0:
            RETH.pack_into(buf, info.reth, wqe.remote_addr, wqe.rkey, length)
        if info.immdt >= 0:
            IMMDT.pack_into(buf, info.immdt, wqe.imm_data)
        elif info.ieth >= 0:
            IETH.pack_into(buf, info.ieth, wqe.invalidate_rkey)
        if ud:
            qkey = wqe.remote_qkey
            if qkey & 0x80000000:            # IBA 10.2.5: high bit set -> use the QP's Q_Key
                qkey = qp.attr.qkey
            DETH.pack_into(buf, info.deth, qkey, qp.qp_num)
        if n:
            if len(views) == 1:
                buf[hlen:hlen + n] = views[0][off:off + n]
            else:
                gather(views, off, n, buf, hlen)
        tx.append((qp, buf, av))
        if rp is not None:
            rp.consume(len(buf))
        psn = (psn + 1) & 0xFFFFFF
        off += n
        sent += 1
        if done:
            break
    qp.req_psn = psn
    if rc:
        _advance_sent_end(qp, psn, sent)
    wqe.offset = off
    wqe.pkts_sent += sent
    cnt[SENT_PKTS] += sent
    cnt[SENT_BYTES] += off - off0
    if done:
        wqe.state = WQE_PENDING
        cnt[RDMA_SENDS] += 1
    return done


def _send_rd_atomic(qp, wqe, tx) -> None:
    """Emit the single request packet of a READ, ATOMIC, ATOMIC WRITE or FLUSH."""
    ackreq = BTH_ACKREQ
    qp.noack_pkts = 0
    if wqe.opcode == WR.IBV_WR_RDMA_READ:
        done = wqe.read_done
        info = OPCODE_TABLE[qp.opclass | OP_RDMA_READ_REQUEST]
        buf = bytearray(info.length)
        psn = (wqe.first_psn + done // qp.mtu) & 0xFFFFFF if done else wqe.first_psn
        wqe.read_psn = psn                     # where its responses must start (completer)
        BTH.pack_into(buf, 0, info.opcode, 0, qp.pkey, qp.dest_qpn, ackreq | psn)
        RETH.pack_into(buf, info.reth, wqe.remote_addr + done, wqe.rkey, wqe.length - done)
    elif wqe.opcode in FLUSH_AW_OPS:
        info = OPCODE_TABLE[qp.opclass | FLUSH_AW_OPS[wqe.opcode]]
        psn = wqe.first_psn
        if info.feth >= 0:                     # FLUSH: FETH, then RETH with the range
            buf = bytearray(info.length)
            BTH.pack_into(buf, 0, info.opcode, 0, qp.pkey, qp.dest_qpn, ackreq | psn)
            FETH.pack_into(buf, info.feth, feth_word(wqe.swap & 0xFF, (wqe.swap >> 8) & 0xFF))
            RETH.pack_into(buf, info.reth, wqe.remote_addr, wqe.rkey, wqe.length)
        else:                                  # ATOMIC WRITE: RETH, then the 8 bytes as given
            buf = bytearray(info.length + 8)
            BTH.pack_into(buf, 0, info.opcode, 0, qp.pkey, qp.dest_qpn, ackreq | psn)
            RETH.pack_into(buf, info.reth, wqe.remote_addr, wqe.rkey, 8)
            buf[info.length:] = (wqe.compare_add & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "little")
    else:
        info = OPCODE_TABLE[qp.opclass | ATOMIC_OPS[wqe.opcode]]
        buf = bytearray(info.length)
        psn = wqe.first_psn
        BTH.pack_into(buf, 0, info.opcode, 0, qp.pkey, qp.dest_qpn, ackreq | psn)
        if wqe.opcode == WR.IBV_WR_ATOMIC_CMP_AND_SWP:
            ATMETH.pack_into(buf, info.atmeth, wqe.remote_addr, wqe.rkey, wqe.swap, wqe.compare_add)
        else:
            ATMETH.pack_into(buf, info.atmeth, wqe.remote_addr, wqe.rkey, wqe.compare_add, 0)
    if info.xrceth >= 0:
        XRCETH.pack_into(buf, info.xrceth, wqe.remote_srqn & XRCETH_SRQN_MASK)
    qp.tx.append((qp, buf, qp.av))
    qp.cnt[SENT_PKTS] += 1
    qp.req_psn = (wqe.last_psn + 1) & 0xFFFFFF
    _advance_sent_end(qp, qp.req_psn, 1)
    wqe.pkts_sent = 1
    wqe.state = WQE_PENDING


def _advance_sent_end(qp, end: int, sent: int) -> None:
    """After sending ``sent`` packets ending before PSN ``end``: count the
    re-sent ones and move ``sent_end`` (the PSN after the highest ever sent)."""
    behind = (qp.sent_end - end) & 0xFFFFFF
    if behind < 0x800000:                  # all of them were sent before
        qp.cnt[C.retransmitted_pkts] += sent
    else:
        qp.cnt[C.retransmitted_pkts] += max(0, sent - (0x1000000 - behind))
        qp.sent_end = end


def retry(qp, now: float) -> None:
    """Go back to ``qp.comp_psn``: re-send from the oldest unacknowledged
    packet.  The head WQE holds comp_psn (older ones are complete)."""
    sq = qp.sq
    qp.req_psn = qp.comp_psn
    qp.rd_atomic_out = 0
    qp.noack_pkts = 0
    first = True
    for wqe in sq:                      # every started WQE, incl. one cut short by the window
        if wqe.state == WQE_POSTED:
            break
        if wqe.state not in (WQE_PROCESSING, WQE_PENDING):
            continue
        sent_pkts = (psn_diff(qp.comp_psn, wqe.first_psn)) if first else 0
        if sent_pkts < 0:
            sent_pkts = 0
        first = False
        wqe.state = WQE_PROCESSING
        if wqe.opcode == WR.IBV_WR_RDMA_READ:
            wqe.read_done = min(sent_pkts * qp.mtu, wqe.length)
            wqe.pkts_sent = 0
        else:
            wqe.offset = min(sent_pkts * qp.mtu, wqe.length)
            wqe.pkts_sent = 0 if wqe.is_rd_atomic else sent_pkts
    qp.req_idx = 0
    qp.timer_at = now + qp.timeout_s if qp.timeout_s is not None else None
    run(qp, now)
