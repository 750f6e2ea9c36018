"""The responder: request packets -> memory, receive completions, ACK/NAK and
read/atomic responses (rxe_resp.c's job).

For RC it walks the checks in the spec's (and rxe's) order:

    CHK_PSN -> CHK_OP_SEQ -> CHK_OP_VALID -> CHK_RESOURCE -> CHK_LENGTH
    -> CHK_RKEY -> EXECUTE -> COMPLETE -> ACKNOWLEDGE

* PSN: ahead of ePSN -> one PSN-sequence-error NAK (PSN = ePSN), then silence
  until ePSN arrives; behind -> duplicate: SEND/WRITE re-ACKed, READ replayed
  from the responder resources, ATOMIC answered with the saved result (never
  executed twice).
* op sequence: MIDDLE/LAST must continue a message of the same kind, a new
  message must start with FIRST/ONLY -> else NAK invalid request.
* op valid: READ/WRITE/ATOMIC need the QP's remote access flag -> NAK remote
  access error (rxe: invalid request).
* resource: a message start that needs a receive WQE and finds none -> RNR NAK
  with min_rnr_timer; READ/ATOMIC need max_dest_rd_atomic > 0.
* length: FIRST/MIDDLE exactly one MTU, LAST/ONLY at most one; the data must
  fit the receive buffer / match the RETH length -> NAK invalid request
  (receive WC IBV_WC_LOC_LEN_ERR).
* rkey: key, PD, bounds, access -> NAK remote access error; misaligned
  ATOMIC -> NAK invalid request.
* IBA 1.5, as rxe: ATOMIC WRITE (RETH + 8 bytes; needs REMOTE_WRITE, an
  8-byte aligned 8-byte range) places its 8 bytes in one store; FLUSH
  (FETH + RETH) checks the QP's and the MR's IBV_ACCESS_FLUSH_GLOBAL /
  _PERSISTENT for the placement type it asks, and the range (RANGE) or
  only the key (MR).  Both hold a responder resource (a duplicate is
  answered, not executed again) and are answered by a zero-length READ
  RESPONSE ONLY.  Everything before a FLUSH is already in the MR's memory
  (requests execute in PSN order, into the application's shared pages): the
  flush itself has nothing left to write back.  An rkey may name a memory window
  (``transport.mw``): the window's bounds and rights, and for type 2 the QP
  it is bound to, are checked by the same ``remote_view``.
Errors other than PSN/RNR move the responder's QP to ERR (async event
QP_REQ_ERR / QP_ACCESS_ERR), after the NAK is queued.

UC and UD are ``transport.unreliable``'s, on the helpers here (receive
WQEs, ``write_data``): UC has no ACKs, no NAKs; a PSN gap drops the rest
of the message in progress (its receive WQE is reused) and every packet
until the next FIRST/ONLY.  UD: Q_Key must match, the receive buffer gets
the 40-byte network header first, any PSN is accepted, a message with no
receive WQE is dropped.

XRC (an XRC TGT QP, ``receive_xrc``): RC's rules, once the XRCETH has named
the SRQ a new message takes its receive WQE from.  That SRQ must be an XRC
SRQ of the TGT QP's XRC domain, else NAK invalid request (QP to ERR); its
PD is the one the message's receive buffers and remote accesses are checked
against, and its CQ gets the receive completions.  ACKs and responses carry
the XRC opcodes (the QP's opcode class).

The checks a whole message needs are functions (``idle``, ``denied_ops``,
``take_rwqe_for``, ``add_resource``): ``transport.loopback``, which runs a
message between two QPs of one engine without its packets, makes them
through the same functions.  CHK_OP_VALID is computed once per change of
the access flags (``denied_ops`` -> ``qp.resp_denied``) and read per packet.

An RC QP on a tag-matching SRQ takes its SEND packets through
``transport.tm`` instead (the QP's receive table says so): it parses the
TMH and comes back here for everything that is not a new SEND in order.
"""

from __future__ import annotations

import struct
import sys

from ..enums import (
    ibv_access_flags, ibv_event_type, ibv_placement_type, ibv_qp_type, ibv_selectivity_level, ibv_wc_flags,
    ibv_wc_opcode, ibv_wc_status, ints,
)
from ..wire.headers import (
    AETH, AETH_ACK_UNLIMITED, AETH_NAK_INVALID_REQ, AETH_NAK_PSN_SEQ_ERROR, AETH_NAK_REM_ACC_ERR,
    AETH_NAK_REM_OP_ERR, AETH_RNR_NAK, ATMACK, ATMETH, BTH, BTH_SE, FETH, FETH_PLT_MASK, FETH_SEL_SHIFT,
    IETH, IMMDT, RETH, XRCETH, XRCETH_SRQN_MASK, psn_diff,
)
from ..wire.opcodes import (
    ATOMIC_MASK, ATOMIC_WRITE_MASK, END_MASK, IETH_MASK, IMMDT_MASK, OP_ACKNOWLEDGE, OP_ATOMIC_ACKNOWLEDGE,
    OP_COMPARE_SWAP, OP_RDMA_READ_RESPONSE_FIRST, OP_RDMA_READ_RESPONSE_LAST,
    OP_RDMA_READ_RESPONSE_MIDDLE, OP_RDMA_READ_RESPONSE_ONLY, OPCODE_TABLE, READ_MASK, RWR_MASK,
    SEND_MASK, START_MASK, WRITE_MASK,
)
from ..wire.fastpath import SegmentRun
from .counters import Counter
from .memory import LOCAL_WRITE, REMOTE_ATOMIC, REMOTE_READ, REMOTE_WRITE
from .sgl import resolve, scatter
from ..uapi.abi import WC

EV = ints(ibv_event_type)
T = ints(ibv_qp_type)
WF = ints(ibv_wc_flags)
WCO = ints(ibv_wc_opcode)
ST = ints(ibv_wc_status)
C = ints(Counter)
SUCCESS = ST.IBV_WC_SUCCESS
WC_RECV = WCO.IBV_WC_RECV
SENT_PKTS, RCVD_BYTES, RDMA_RECVS, ACK_DEFERRED = C.sent_pkts, C.rcvd_bytes, C.rdma_recvs, C.ack_deferred
_ACK_HDR = struct.Struct(BTH.format + AETH.format.lstrip(">"))   # BTH + AETH in one pack

RC, UC, UD = T.IBV_QPT_RC, T.IBV_QPT_UC, T.IBV_QPT_UD
_BYTEORDER = sys.byteorder
_U64 = (1 << 64) - 1
GRH_BYTES = 40

# message kinds for the op-sequence check
_NONE, _IN_SEND, _IN_WRITE = -1, 1, 2
RESP_NONE, RESP_IN_SEND = _NONE, _IN_SEND       # what a message in progress is (also transport.unreliable's)

_ACK_INFO = OPCODE_TABLE[OP_ACKNOWLEDGE]
_ATMACK_INFO = OPCODE_TABLE[OP_ATOMIC_ACKNOWLEDGE]
_RESP_INFO = (OPCODE_TABLE[OP_RDMA_READ_RESPONSE_FIRST], OPCODE_TABLE[OP_RDMA_READ_RESPONSE_MIDDLE],
              OPCODE_TABLE[OP_RDMA_READ_RESPONSE_LAST], OPCODE_TABLE[OP_RDMA_READ_RESPONSE_ONLY])

# responder resources: [kind, first_psn, last_psn, va, rkey, length | orig, msn]
RES_READ, RES_ATOMIC, RES_FLUSH_AW = 0, 1, 2       # RES_FLUSH_AW: a FLUSH or an ATOMIC WRITE

A = ints(ibv_access_flags)
FLUSH_GLOBAL, FLUSH_PERSISTENT = int(ibv_placement_type.IBV_FLUSH_GLOBAL), int(ibv_placement_type.IBV_FLUSH_PERSISTENT)
FLUSH_MR = int(ibv_selectivity_level.IBV_FLUSH_MR)


# ----------------------------------------------------------------- checks
def idle(qp, psn: int) -> bool:
    """CHK_PSN and CHK_OP_SEQ for a new message at ``psn`` pass, and nothing
    is owed: ``psn`` is the ePSN, no message is half received, no sequence
    NAK is outstanding and no ACK is held back."""
    return (qp.resp_psn == psn and qp.resp_opcode == _NONE and not qp.sent_psn_nak
            and qp.ack_pending is None)


def denied_ops(access: int) -> int:
    """CHK_OP_VALID for the QP access flags ``access``: the request kinds
    (WRITE_MASK, READ_MASK, ATOMIC_MASK of the opcode table) they refuse.
    The QP keeps it as ``resp_denied``; a request whose opcode mask meets it
    is invalid."""
    return ((0 if access & REMOTE_WRITE else WRITE_MASK | ATOMIC_WRITE_MASK)
            | (0 if access & REMOTE_READ else READ_MASK) | (0 if access & REMOTE_ATOMIC else ATOMIC_MASK))


# ----------------------------------------------------------------- outputs
def send_ack(qp, syndrome: int, psn: int) -> None:
    if qp.ack_pending is not None:
        if qp.ack_coalesce and syndrome == AETH_ACK_UNLIMITED:
            qp.ack_pending = (psn, qp.msn)         # a later ACK covers the earlier one
            qp.cnt[ACK_DEFERRED] += 1
            return
        flush_ack(qp)
    elif qp.ack_coalesce and syndrome == AETH_ACK_UNLIMITED:
        qp.ack_pending = (psn, qp.msn)
        return
    _emit_ack(qp, syndrome, psn, qp.msn)


def flush_ack(qp) -> None:
    """Send the ACK held back while a batch was being received."""
    pending = qp.ack_pending
    if pending is not None:
        qp.ack_pending = None
        _emit_ack(qp, AETH_ACK_UNLIMITED, pending[0], pending[1])


def _emit_ack(qp, syndrome: int, psn: int, msn: int) -> None:
    buf = bytearray(16)
    _ACK_HDR.pack_into(buf, 0, qp.opclass | OP_ACKNOWLEDGE, 0, qp.pkey, qp.dest_qpn, psn & 0xFFFFFF,
                       (syndrome << 24) | (msn & 0xFFFFFF))
    qp.tx.append((qp, buf, qp.av))
    qp.cnt[SENT_PKTS] += 1


def _send_atomic_ack(qp, psn: int, orig: int, msn: int) -> None:
    if qp.ack_pending is not None:
        flush_ack(qp)
    buf = bytearray(_ATMACK_INFO.length)
    BTH.pack_into(buf, 0, qp.opclass | OP_ATOMIC_ACKNOWLEDGE, 0, qp.pkey, qp.dest_qpn, psn)
    AETH.pack_into(buf, 12, (AETH_ACK_UNLIMITED << 24) | (msn & 0xFFFFFF))
    ATMACK.pack_into(buf, 16, orig)
    qp.tx.append((qp, buf, qp.av))
    qp.cnt[C.sent_pkts] += 1


def _read_reply(qp, view, psn: int, length: int) -> None:
    """Emit the READ responses for ``length`` bytes of ``view`` from ``psn``."""
    if qp.ack_pending is not None:
        flush_ack(qp)
    mtu = qp.mtu
    npkts = max(1, -(-length // mtu))
    tx = qp.tx
    pkey = qp.pkey
    dqpn = qp.dest_qpn
    av = qp.av
    msn = qp.msn
    opclass = qp.opclass
    # the MIDDLE responses as one SegmentRun where the port asked for runs
    runs = qp.tx_runs and npkts > 3 and view.__class__ is memoryview
    off = 0
    for i in ((0, npkts - 1) if runs else range(npkts)):
        if runs and i:                           # before the LAST, the MIDDLEs in one run
            k = npkts - 2
            tx.append((qp, SegmentRun(BTH.pack(opclass | OP_RDMA_READ_RESPONSE_MIDDLE, 0, pkey, dqpn, 0),
                                      (psn + 1) & 0xFFFFFF, k, mtu, view[mtu:mtu + k * mtu], False), av))
            off = mtu + k * mtu
        last = i == npkts - 1
        if npkts == 1:
            info = _RESP_INFO[3]
        elif i == 0:
            info = _RESP_INFO[0]
        else:
            info = _RESP_INFO[2] if last else _RESP_INFO[1]
        n = length - off if last else mtu
        pad = -n & 3
        hlen = info.length
        buf = bytearray(hlen + n + pad)
        BTH.pack_into(buf, 0, opclass | info.opcode, pad << 4, pkey, dqpn, (psn + i) & 0xFFFFFF)
        if info.aeth >= 0:
            AETH.pack_into(buf, 12, (AETH_ACK_UNLIMITED << 24) | (msn & 0xFFFFFF))
        if n:
            buf[hlen:hlen + n] = view[off:off + n]
        tx.append((qp, buf, av))
        off += n
    qp.cnt[C.sent_pkts] += npkts
    qp.cnt[C.sent_bytes] += length


def _nak(qp, syndrome: int, psn: int, status: int | None, event: int) -> None:
    """Class A/B/C error: NAK, complete the receive WQE in use with
    ``status`` (if any), move the QP to ERR."""
    send_ack(qp, syndrome, psn)
    if syndrome == AETH_NAK_INVALID_REQ:
        qp.cnt[C.resp_invalid_request_errors] += 1
    elif syndrome == AETH_NAK_REM_ACC_ERR:
        qp.cnt[C.resp_remote_access_errors] += 1
    _error_wqe(qp, status)
    qp.to_error(event)


def _error_wqe(qp, status: int | None) -> None:
    wqe = qp.resp_wqe
    if wqe is not None and status is not None:
        qp.recv_cq.push(WC(wqe.wr_id, status, WCO.IBV_WC_RECV, qp.qp_num))
    qp.resp_wqe = None


def take_rwqe(qp):
    """CHK_RESOURCE: the next receive WQE (of the SRQ if the QP has one), taken."""
    srq = qp.srq
    if srq is not None:
        return srq.take()
    rq = qp.rq
    return rq.popleft() if rq else None


def resolve_rwqe(qp, wqe) -> bool:
    """The receive WQE's buffers (lkey, PD, bounds, local write), once."""
    if wqe.views is None:
        wqe.views = resolve(qp.memory, qp.pd, wqe.sg_list, LOCAL_WRITE)
    return wqe.views is not None


def take_rwqe_for(qp, length: int):
    """CHK_RESOURCE and CHK_LENGTH for a whole message of ``length`` bytes:
    the receive WQE it consumes, resolved, if it is there and large enough;
    else None and nothing taken."""
    srq = qp.srq
    rq = srq.rq if srq is not None else qp.rq
    if not rq:
        return None
    wqe = rq[0]
    if wqe.length < length or (wqe.views is None and not resolve_rwqe(qp, wqe)):
        return None
    return srq.take() if srq is not None else rq.popleft()


def return_rwqe(qp, wqe) -> None:
    """An unfinished message is abandoned (UC): its WQE serves the next one."""
    if qp.srq is not None:
        qp.srq.rq.appendleft(wqe)
    else:
        qp.rq.appendleft(wqe)


# ----------------------------------------------------------------- entry
def receive_xrc(qp, pkt, info, now: float, grh) -> None:
    """An XRC request at a TGT QP: the XRCETH names the XRC SRQ of the
    message (IBA 9.8.3.1); then RC's rules."""
    (w,) = XRCETH.unpack_from(pkt, info.xrceth)
    srq = qp.xrc_srqs.get(w & XRCETH_SRQN_MASK)
    if srq is None or srq.xrcd is not qp.xrcd:
        psn = (pkt[9] << 16) | (pkt[10] << 8) | pkt[11]
        if psn == qp.resp_psn:
            # in sequence: an SRQ of another domain (or none) is an invalid
            # request, as on mlx5; out of sequence, RC's PSN rules answer
            _nak(qp, AETH_NAK_INVALID_REQ, psn, None, EV.IBV_EVENT_QP_REQ_ERR)
            return
    elif qp.resp_opcode == _NONE and srq is not qp.srq:
        # a new message (a MIDDLE/LAST continues the SRQ its FIRST named)
        qp.srq = srq
        qp.pd = srq.pd
        qp.recv_cq = srq.cq
    receive_rc(qp, pkt, info, now, grh)


def receive_rc(qp, pkt, info, now: float, grh) -> None:
    psn = (pkt[9] << 16) | (pkt[10] << 8) | pkt[11]
    d = (psn - qp.resp_psn) & 0xFFFFFF
    # --- CHK_PSN
    if d:
        if d < 0x800000:
            qp.cnt[C.out_of_seq_request] += 1
            if not qp.sent_psn_nak:
                qp.sent_psn_nak = True
                send_ack(qp, AETH_NAK_PSN_SEQ_ERROR, qp.resp_psn)
        else:
            qp.cnt[C.duplicate_request] += 1
            _duplicate(qp, pkt, info, psn)
        return
    qp.sent_psn_nak = False
    mask = info.mask
    # --- CHK_OP_SEQ
    cur = qp.resp_opcode
    if cur == _NONE:
        if not mask & START_MASK:
            _nak(qp, AETH_NAK_INVALID_REQ, psn, None, EV.IBV_EVENT_QP_REQ_ERR)
            return
    elif mask & START_MASK or (cur == _IN_SEND) != bool(mask & SEND_MASK):
        _nak(qp, AETH_NAK_INVALID_REQ, psn, ST.IBV_WC_REM_INV_REQ_ERR, EV.IBV_EVENT_QP_REQ_ERR)
        return
    if mask & SEND_MASK:
        _rc_send(qp, pkt, info, psn, mask)
        return
    # --- CHK_OP_VALID: an operation the QP's access flags do not enable is
    # NAKed as a remote access error, as hardware (mlx5) does; rxe's
    # check_op_valid NAKs it as an invalid request.
    if mask & qp.resp_denied:
        _nak(qp, AETH_NAK_REM_ACC_ERR, psn, None, EV.IBV_EVENT_QP_ACCESS_ERR)
        return
    if mask & WRITE_MASK:
        _rc_write(qp, pkt, info, psn, mask)
    elif mask & READ_MASK:
        _rc_read(qp, pkt, info, psn)
    elif mask & ATOMIC_MASK:
        _rc_atomic(qp, pkt, info, psn)
    elif mask & ATOMIC_WRITE_MASK:
        _rc_atomic_write(qp, pkt, info, psn)
    else:
        _rc_flush(qp, pkt, info, psn)


def payload_len(pkt, info) -> int:
    return len(pkt) - info.length - ((pkt[1] >> 4) & 3)


def _rnr(qp, psn: int) -> None:
    qp.cnt[C.send_rnr_err] += 1
    send_ack(qp, AETH_RNR_NAK | qp.attr.min_rnr_timer, psn)


def _rc_send(qp, pkt, info, psn: int, mask: int) -> None:
    hlen = info.length
    n = len(pkt) - hlen - ((pkt[1] >> 4) & 3)
    mtu = qp.mtu
    # --- CHK_RESOURCE
    if mask & START_MASK:
        srq = qp.srq
        if srq is not None:
            wqe = srq.take()
        else:
            wqe = qp.rq.popleft() if qp.rq else None
        if wqe is None:
            _rnr(qp, psn)
            return
        qp.resp_wqe = wqe
        off = qp.resp_offset = 0
        if wqe.views is None and not resolve_rwqe(qp, wqe):
            _nak(qp, AETH_NAK_REM_OP_ERR, psn, ST.IBV_WC_LOC_PROT_ERR, EV.IBV_EVENT_QP_FATAL)
            return
    else:
        wqe = qp.resp_wqe
        off = qp.resp_offset
    # --- CHK_LENGTH
    if (n > mtu) if mask & END_MASK else (n != mtu):
        _nak(qp, AETH_NAK_INVALID_REQ, psn, ST.IBV_WC_REM_INV_REQ_ERR, EV.IBV_EVENT_QP_REQ_ERR)
        return
    if off + n > wqe.length:
        _nak(qp, AETH_NAK_INVALID_REQ, psn, ST.IBV_WC_LOC_LEN_ERR, EV.IBV_EVENT_QP_REQ_ERR)
        return
    # --- EXECUTE
    if n:
        views = wqe.views
        if len(views) == 1:
            views[0][off:off + n] = pkt[hlen:hlen + n]
        else:
            scatter(views, off, pkt, hlen, n)
    off += n
    cnt = qp.cnt
    cnt[RCVD_BYTES] += n
    qp.resp_psn = (psn + 1) & 0xFFFFFF
    if mask & END_MASK:
        # --- COMPLETE
        flags = 0
        imm = 0
        if mask & IMMDT_MASK:
            (imm,) = IMMDT.unpack_from(pkt, info.immdt)
            flags = WF.IBV_WC_WITH_IMM
        elif mask & IETH_MASK:
            (imm,) = IETH.unpack_from(pkt, info.ieth)
            if not qp.memory.invalidate(qp.pd, imm):
                _nak(qp, AETH_NAK_INVALID_REQ, psn, ST.IBV_WC_REM_INV_REQ_ERR, EV.IBV_EVENT_QP_REQ_ERR)
                return
            flags = WF.IBV_WC_WITH_INV
        qp.resp_wqe = None
        qp.resp_opcode = _NONE
        qp.msn += 1
        cnt[RDMA_RECVS] += 1
        qp.recv_cq.push(WC(wqe.wr_id, SUCCESS, WC_RECV, qp.qp_num, off, imm, qp.dest_qpn, flags),
                        pkt[1] & BTH_SE)
    else:
        qp.resp_offset = off
        qp.resp_opcode = _IN_SEND
    # --- ACKNOWLEDGE
    if pkt[8] & 0x80:
        send_ack(qp, AETH_ACK_UNLIMITED, psn)


def _rc_write(qp, pkt, info, psn: int, mask: int) -> None:
    n = payload_len(pkt, info)
    mtu = qp.mtu
    if mask & START_MASK:
        va, rkey, dma_len = RETH.unpack_from(pkt, info.reth)
        qp.cnt[C.rx_write_requests] += 1
        # --- CHK_LENGTH (the RETH length against the packets to come)
        if (dma_len <= mtu) != bool(mask & END_MASK) and dma_len:
            _nak(qp, AETH_NAK_INVALID_REQ, psn, None, EV.IBV_EVENT_QP_REQ_ERR)
            return
        # --- CHK_RKEY
        if dma_len:
            view = qp.memory.remote_view(qp.pd, rkey, va, dma_len, REMOTE_WRITE, qp)
            if view is None:
                _nak(qp, AETH_NAK_REM_ACC_ERR, psn, None, EV.IBV_EVENT_QP_ACCESS_ERR)
                return
        else:
            view = None
        qp.resp_view = view
        qp.resp_offset = 0
        qp.resp_remaining = dma_len
    rem = qp.resp_remaining
    # --- CHK_LENGTH (this packet)
    if (n != mtu or rem <= mtu) if not mask & END_MASK else (n != rem):
        _nak(qp, AETH_NAK_INVALID_REQ, psn, None, EV.IBV_EVENT_QP_REQ_ERR)
        return
    # --- CHK_RESOURCE (WRITE with immediate consumes a receive WQE at its end)
    wqe = None
    if mask & RWR_MASK:
        wqe = take_rwqe(qp)
        if wqe is None:
            _rnr(qp, psn)
            return
    # --- EXECUTE, COMPLETE
    write_data(qp, pkt, info, mask, n, rem, wqe)
    qp.resp_psn = (psn + 1) & 0xFFFFFF
    if mask & END_MASK:
        qp.msn += 1
    # --- ACKNOWLEDGE
    if pkt[8] & 0x80:
        send_ack(qp, AETH_ACK_UNLIMITED, psn)


def write_data(qp, pkt, info, mask: int, n: int, rem: int, wqe) -> None:
    """Place one checked RDMA WRITE packet; at the end of the message, the
    receive completion of a WRITE with immediate (``wqe``)."""
    off = qp.resp_offset
    if n:
        qp.resp_view[off:off + n] = pkt[info.length:info.length + n]
    qp.resp_offset = off + n
    qp.resp_remaining = rem - n
    qp.cnt[RCVD_BYTES] += n
    if not mask & END_MASK:
        qp.resp_opcode = _IN_WRITE
        return
    qp.resp_opcode = _NONE
    qp.resp_view = None
    if wqe is not None:
        (imm,) = IMMDT.unpack_from(pkt, info.immdt)
        qp.cnt[RDMA_RECVS] += 1
        qp.recv_cq.push(WC(wqe.wr_id, SUCCESS, WCO.IBV_WC_RECV_RDMA_WITH_IMM, qp.qp_num, off + n,
                           imm, qp.dest_qpn, WF.IBV_WC_WITH_IMM),
                        pkt[1] & BTH_SE)


def add_resource(qp, res: list) -> None:
    """Keep a READ/ATOMIC for duplicate replay (``[RES_READ|RES_ATOMIC,
    first_psn, last_psn, va, rkey, length | orig, msn]``)."""
    r = qp.resources
    if len(r) >= qp.max_dest_rd_atomic:
        r.popleft()                           # recycled, as rxe does: the requester keeps the limit
    r.append(res)


def _rc_read(qp, pkt, info, psn: int) -> None:
    va, rkey, dma_len = RETH.unpack_from(pkt, info.reth)
    qp.cnt[C.rx_read_requests] += 1
    if qp.max_dest_rd_atomic == 0:
        _nak(qp, AETH_NAK_INVALID_REQ, psn, None, EV.IBV_EVENT_QP_REQ_ERR)
        return
    if dma_len:
        view = qp.memory.remote_view(qp.pd, rkey, va, dma_len, REMOTE_READ, qp)
        if view is None:
            _nak(qp, AETH_NAK_REM_ACC_ERR, psn, None, EV.IBV_EVENT_QP_ACCESS_ERR)
            return
    else:
        view = b""
    npkts = max(1, -(-dma_len // qp.mtu))
    last_psn = (psn + npkts - 1) & 0xFFFFFF
    qp.msn += 1
    add_resource(qp, [RES_READ, psn, last_psn, va, rkey, dma_len, qp.msn])
    _read_reply(qp, view, psn, dma_len)
    qp.resp_psn = (last_psn + 1) & 0xFFFFFF


def _rc_atomic(qp, pkt, info, psn: int) -> None:
    va, rkey, swap_add, compare = ATMETH.unpack_from(pkt, info.atmeth)
    qp.cnt[C.rx_atomic_requests] += 1
    if qp.max_dest_rd_atomic == 0 or va & 7:
        _nak(qp, AETH_NAK_INVALID_REQ, psn, None, EV.IBV_EVENT_QP_REQ_ERR)
        return
    view = qp.memory.remote_view(qp.pd, rkey, va, 8, REMOTE_ATOMIC, qp)
    if view is None:
        _nak(qp, AETH_NAK_REM_ACC_ERR, psn, None, EV.IBV_EVENT_QP_ACCESS_ERR)
        return
    orig = int.from_bytes(view, _BYTEORDER)
    if (info.opcode & 0x1F) == OP_COMPARE_SWAP:
        if orig == compare:
            view[0:8] = swap_add.to_bytes(8, _BYTEORDER)
    else:
        view[0:8] = ((orig + swap_add) & _U64).to_bytes(8, _BYTEORDER)
    qp.msn += 1
    add_resource(qp, [RES_ATOMIC, psn, psn, va, rkey, orig, qp.msn])
    _send_atomic_ack(qp, psn, orig, qp.msn)
    qp.resp_psn = (psn + 1) & 0xFFFFFF


def _flush_aw_reply(qp, psn: int, msn: int) -> None:
    """The answer to a FLUSH or an ATOMIC WRITE: a READ RESPONSE ONLY of
    length zero (rxe's send_read_response_ack)."""
    if qp.ack_pending is not None:
        flush_ack(qp)
    buf = bytearray(_RESP_INFO[3].length)
    _ACK_HDR.pack_into(buf, 0, _RESP_INFO[3].opcode, 0, qp.pkey, qp.dest_qpn, psn & 0xFFFFFF,
                       (AETH_ACK_UNLIMITED << 24) | (msn & 0xFFFFFF))
    qp.tx.append((qp, buf, qp.av))
    qp.cnt[SENT_PKTS] += 1


def _rc_atomic_write(qp, pkt, info, psn: int) -> None:
    """ATOMIC WRITE (rxe's atomic_write_reply): the payload's 8 bytes to an
    8-byte aligned address of the MR, in one store."""
    va, rkey, dma_len = RETH.unpack_from(pkt, info.reth)
    qp.cnt[C.rx_write_requests] += 1
    # CHK_RESOURCE, CHK_LENGTH (the RETH and the payload: 8 bytes), alignment (oA19-28)
    if qp.max_dest_rd_atomic == 0 or dma_len != 8 or payload_len(pkt, info) != 8 or va & 7:
        _nak(qp, AETH_NAK_INVALID_REQ, psn, None, EV.IBV_EVENT_QP_REQ_ERR)
        return
    view = qp.memory.remote_view(qp.pd, rkey, va, 8, REMOTE_WRITE, qp)        # CHK_RKEY
    if view is None:
        _nak(qp, AETH_NAK_REM_ACC_ERR, psn, None, EV.IBV_EVENT_QP_ACCESS_ERR)
        return
    view[0:8] = pkt[info.length:info.length + 8]
    qp.cnt[RCVD_BYTES] += 8
    qp.msn += 1
    add_resource(qp, [RES_FLUSH_AW, psn, psn, va, rkey, 8, qp.msn])
    _flush_aw_reply(qp, psn, qp.msn)
    qp.resp_psn = (psn + 1) & 0xFFFFFF


def _rc_flush(qp, pkt, info, psn: int) -> None:
    """FLUSH (rxe's process_flush): the placement type's access on the QP
    (CHK_OP_VALID) and on the MR (CHK_RKEY), over the range or the whole MR."""
    (feth,) = FETH.unpack_from(pkt, info.feth)
    va, rkey, dma_len = RETH.unpack_from(pkt, info.reth)
    plt = feth & FETH_PLT_MASK
    access = ((A.IBV_ACCESS_FLUSH_GLOBAL if plt & FLUSH_GLOBAL else 0)
              | (A.IBV_ACCESS_FLUSH_PERSISTENT if plt & FLUSH_PERSISTENT else 0))
    if access & ~qp.attr.qp_access_flags:
        _nak(qp, AETH_NAK_REM_ACC_ERR, psn, None, EV.IBV_EVENT_QP_ACCESS_ERR)
        return
    if qp.max_dest_rd_atomic == 0:
        _nak(qp, AETH_NAK_INVALID_REQ, psn, None, EV.IBV_EVENT_QP_REQ_ERR)
        return
    memory = qp.memory
    if feth >> FETH_SEL_SHIFT & 3 == FLUSH_MR:
        # the whole MR (or window) the rkey names: its va and length do not matter
        obj = memory.lookup(rkey)
        ok = obj is not None and memory.remote_view(qp.pd, rkey, obj.addr, obj.length, access, qp) is not None
    else:
        ok = memory.remote_view(qp.pd, rkey, va, dma_len, access, qp) is not None
    if not ok:
        _nak(qp, AETH_NAK_REM_ACC_ERR, psn, None, EV.IBV_EVENT_QP_ACCESS_ERR)
        return
    qp.msn += 1
    add_resource(qp, [RES_FLUSH_AW, psn, psn, va, rkey, dma_len, qp.msn])
    _flush_aw_reply(qp, psn, qp.msn)
    qp.resp_psn = (psn + 1) & 0xFFFFFF


def _duplicate(qp, pkt, info, psn: int) -> None:
    """C9-104..C9-112: answer a retransmitted request without redoing it."""
    mask = info.mask
    if mask & (SEND_MASK | WRITE_MASK):
        # one ACK per duplicate, never coalesced (as rxe's duplicate_request):
        # the requester retransmits because ACKs were lost, and a single
        # coalesced ACK for the whole re-sent window is lost as easily.  It
        # acknowledges the newest PSN, so it also covers an ACK held back.
        qp.ack_pending = None
        _emit_ack(qp, AETH_ACK_UNLIMITED, (qp.resp_psn - 1) & 0xFFFFFF, qp.msn)
        return
    for res in reversed(qp.resources):
        kind, first, last = res[0], res[1], res[2]
        if psn_diff(psn, first) < 0 or psn_diff(last, psn) < 0:
            continue
        if mask & READ_MASK and kind == RES_READ:
            va, rkey, dma_len = RETH.unpack_from(pkt, info.reth)
            if rkey != res[4] or va < res[3] or va + dma_len > res[3] + res[5]:
                break
            if dma_len:
                view = qp.memory.remote_view(qp.pd, rkey, va, dma_len, REMOTE_READ, qp)
                if view is None:
                    break
            else:
                view = b""
            _read_reply(qp, view, psn, dma_len)
            return
        if mask & ATOMIC_MASK and kind == RES_ATOMIC and psn == first:
            _send_atomic_ack(qp, psn, res[5], res[6])
            return
        if kind == RES_FLUSH_AW and psn == first:   # oA19-14, oA19-15: answered, not redone
            _flush_aw_reply(qp, psn, res[6])
            return
        break
    qp.cnt[C.dropped_ghost_response] += 1     # nothing to replay: drop, the requester will time out


__all__ = ["receive_rc", "receive_xrc", "send_ack", "flush_ack", "idle", "denied_ops",
           "take_rwqe", "take_rwqe_for", "resolve_rwqe", "add_resource", "RES_READ", "RES_ATOMIC", "RES_FLUSH_AW",
           "GRH_BYTES", "payload_len", "return_rwqe", "write_data", "RESP_NONE", "RESP_IN_SEND"]
