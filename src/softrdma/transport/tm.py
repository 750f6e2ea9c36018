"""Tag matching on a shared receive queue (IBV_SRQT_TM), as mlx5 offloads it.

The sender puts a tag-matching header (``ibv_tmh``, 16 bytes, big-endian:
u8 opcode, 3 reserved, u32 app_ctx, u64 tag) at the start of a SEND's
payload.  The responder of an RC QP on a TM SRQ parses it as the message
starts (``receive_rc``, the QP's entry for every SEND opcode; everything
else stays the responder's) and:

* IBV_TMH_EAGER whose tag matches an entry of the SRQ's tag list (entries
  in posting order; TMH.tag & entry.mask == entry.tag, as
  ibv_post_srq_ops(3) says) -- the data after the TMH goes into the entry's
  buffer, one completion IBV_WC_TM_RECV with IBV_WC_TM_MATCH |
  IBV_WC_TM_DATA_VALID and the entry's recv_wr_id; the entry is consumed;
* IBV_TMH_RNDV that matches -- a completion TM_RECV with TM_MATCH, then the
  device reads the data the rendezvous header (``ibv_rvh``: u64 va, u32 rkey,
  u32 len) names with an RDMA READ on the same QP into the entry's buffer,
  sends the initiator a FIN (a SEND of a TMH with opcode IBV_TMH_FIN) and
  completes TM_RECV with TM_DATA_VALID (mlx5's CONSUMED then EXPECTED).  A
  buffer too small for it completes at once with IBV_WC_TM_RNDV_INCOMPLETE
  (software must fetch the data, as mlx5's SW rendezvous);
* EAGER or RNDV that matches no entry, or arrives while matching is off
  (below) -- unexpected: the whole message, TMH included, goes to an
  ordinary SRQ receive buffer, completion TM_RECV with neither flag, and
  the device's unexpected count grows;
* IBV_TMH_NO_TAG -- the whole message to an ordinary buffer, IBV_WC_TM_NO_TAG;
* anything else (no TMH, a FIN) -- an ordinary receive, IBV_WC_RECV.

Phase synchronization (ibv_post_srq_ops(3)): the device counts unexpected
messages; software reports how many it has handled with an operation
flagged IBV_OPS_TM_SYNC.  The device matches only while the two counts are
equal.  An ADD completes with IBV_WC_TM_SYNC_REQ when the entry was added
with a count the device has passed (mlx5's phase_cnt check), an
unexpected completion when the counts drift more than 0x3fff apart.

``TagMatching`` is the SRQ's list and counts; the list operations complete
on the SRQ's CQ (``ops``).  Sans-IO, as the rest of the transport.
"""

from __future__ import annotations

import errno
import struct

from ..enums import (
    IBV_QPT_RC, ibv_ops_flags, ibv_ops_wr_opcode, ibv_tmh_op, ibv_wc_flags, ibv_wc_opcode, ibv_wc_status, ibv_wr_opcode, ints,
)
from ..errors import einval
from ..uapi.abi import TmWC
from ..uapi.limits import TM_MAX_NUM_TAGS, TM_MAX_OPS, TM_MAX_RNDV_HDR_SIZE, TM_MAX_SGE
from ..wire.headers import AETH_ACK_UNLIMITED, AETH_NAK_INVALID_REQ, AETH_NAK_REM_OP_ERR, BTH_SE, IETH, IMMDT
from ..wire.opcodes import END_MASK, IETH_MASK, IMMDT_MASK, OPCODE_TABLE, RESP_MASK, SEND_MASK, START_MASK
from . import responder as r
from .counters import Counter
from .sgl import scatter
from .wr import WQE_DONE, WQE_ERROR, RecvWQE, SendWQE

TMH = struct.Struct(">B3xIQ")          # ibv_tmh: opcode, reserved[3], app_ctx, tag
RVH = struct.Struct(">QII")            # ibv_rvh: va, rkey, len
TMH_BYTES = TMH.size
RVH_BYTES = RVH.size
MAX_RNDV_HDR_SIZE, MAX_NUM_TAGS, MAX_OPS, MAX_SGE = TM_MAX_RNDV_HDR_SIZE, TM_MAX_NUM_TAGS, TM_MAX_OPS, TM_MAX_SGE
MAX_SYNC_DIFF = 0x3FFF

OPS = ints(ibv_ops_wr_opcode)
OPF = ints(ibv_ops_flags)
TMH_OP = ints(ibv_tmh_op)
WF = ints(ibv_wc_flags)
WCO = ints(ibv_wc_opcode)
ST = ints(ibv_wc_status)
C = ints(Counter)
WR = ints(ibv_wr_opcode)
RC = int(IBV_QPT_RC)
MATCH, DATA_VALID, SYNC_REQ = WF.IBV_WC_TM_MATCH, WF.IBV_WC_TM_DATA_VALID, WF.IBV_WC_TM_SYNC_REQ
NO_TAG, RNDV, FIN, EAGER = TMH_OP.IBV_TMH_NO_TAG, TMH_OP.IBV_TMH_RNDV, TMH_OP.IBV_TMH_FIN, TMH_OP.IBV_TMH_EAGER


class TmError(Exception):
    """A list operation the device refuses before it runs (errno, message)."""

    def __init__(self, errno_: int, msg: str):
        super().__init__(msg)
        self.errno = errno_


class TagEntry:
    __slots__ = ("handle", "tag", "mask", "wqe", "phase")

    def __init__(self, handle: int, tag: int, mask: int, wqe: RecvWQE, phase: int):
        self.handle, self.tag, self.mask, self.wqe, self.phase = handle, tag, mask, wqe, phase


class TagMatching:
    """One TM SRQ's tag list, unexpected counts and list-operation CQ."""

    def __init__(self, max_num_tags: int, max_ops: int, ops_cq, qp_num: int = 0):
        self.max_num_tags = max_num_tags
        self.max_ops = max_ops
        self.ops_cq = ops_cq             # where ADD/DEL/SYNC complete (the SRQ's CQ)
        self.qp_num = qp_num             # reported in their completions (the SRQ's number)
        self.entries: dict[int, TagEntry] = {}    # by handle, in posting order
        self.free = list(range(max_num_tags - 1, -1, -1))
        self.hw_unexp = 0                # unexpected messages the device has seen
        self.sw_unexp = 0                # what software last said it handled (IBV_OPS_TM_SYNC)

    @property
    def in_sync(self) -> bool:
        return self.hw_unexp == self.sw_unexp

    # ------------------------------------------------------------ list ops
    def post_op(self, wr_id: int, opcode: int, flags: int, unexpected_cnt: int = 0, handle: int = 0,
                recv_wr_id: int = 0, sg_list=(), tag: int = 0, mask: int = 0) -> int:
        """ibv_post_srq_ops for one operation: the ADD's handle (else 0).
        Refusals before anything changes raise ``TmError`` (mlx5's ENOMEM
        for a full list, EINVAL otherwise)."""
        if opcode == OPS.IBV_WR_TAG_ADD:
            if len(sg_list) > MAX_SGE:
                raise TmError(errno.EINVAL, f"num_sge {len(sg_list)} > max_sge {MAX_SGE}")
            if not self.free:
                raise TmError(errno.ENOMEM, "tag matching list is full")
        elif opcode == OPS.IBV_WR_TAG_DEL:
            if not 0 <= handle < self.max_num_tags:
                raise TmError(errno.EINVAL, f"no tag entry with handle {handle}")
        elif opcode != OPS.IBV_WR_TAG_SYNC:
            raise TmError(errno.EINVAL, f"bad opcode {opcode}")
        if flags & OPF.IBV_OPS_TM_SYNC:
            self.sw_unexp = unexpected_cnt & 0xFFFFFFFF
        status, wc_flags, wco, out = ST.IBV_WC_SUCCESS, 0, WCO.IBV_WC_TM_SYNC, 0
        if opcode == OPS.IBV_WR_TAG_ADD:
            out = self.free.pop()
            self.entries[out] = TagEntry(out, tag, mask, RecvWQE(recv_wr_id, sg_list), self.sw_unexp)
            wco = WCO.IBV_WC_TM_ADD
            if self.hw_unexp != self.sw_unexp:    # added in a phase the device has left
                wc_flags = SYNC_REQ
        elif opcode == OPS.IBV_WR_TAG_DEL:
            wco = WCO.IBV_WC_TM_DEL
            if self.entries.pop(handle, None) is None:
                status = ST.IBV_WC_TM_ERR      # consumed by a message meanwhile
            else:
                self.free.append(handle)
        if flags & OPF.IBV_OPS_SIGNALED and self.ops_cq is not None:
            self.ops_cq.push(TmWC(wr_id, status, wco, self.qp_num, 0, wc_flags))
        return out

    def match(self, tag: int) -> TagEntry | None:
        """The first entry whose tag matches, while matching is on."""
        if self.hw_unexp != self.sw_unexp:
            return None
        for e in self.entries.values():
            if tag & e.mask == e.tag:
                return e
        return None

    def consume(self, e: TagEntry) -> None:
        del self.entries[e.handle]
        self.free.append(e.handle)

    def unexpected(self) -> int:
        """Count one unexpected message: the wc_flags its completion gets."""
        self.hw_unexp = (self.hw_unexp + 1) & 0xFFFFFFFF
        return SYNC_REQ if (self.hw_unexp - self.sw_unexp) & 0xFFFFFFFF > MAX_SYNC_DIFF else 0


# ----------------------------------------------------------------- responder
def attach(qp) -> None:
    """A QP joins a TM SRQ: RC only (IBV_TM_CAP_RC: EINVAL otherwise); its
    SEND opcodes and READ responses go through this module.  The engine
    that hosts it must not run whole messages to it without packets (the
    device's ``local_peer`` declines a TM SRQ's QPs)."""
    if qp.qp_type != RC:
        raise einval("a tag-matching SRQ takes RC QPs only")
    qp._rx = rx_table(qp._rx)
    qp.resp_tm = None
    qp.tm_rndv = []


def rx_table(table: tuple) -> tuple:
    """An RC QP's receive table for a QP on a TM SRQ: every SEND opcode
    through ``receive_rc``, every response (a READ's data, a NAK that fails
    it) through ``receive_read_response``."""
    out = []
    for i, e in enumerate(table):
        if e is not None and OPCODE_TABLE[i].mask & SEND_MASK:
            e = receive_rc
        elif e is not None and OPCODE_TABLE[i].mask & RESP_MASK:     # read responses, and NAKs
            e = _read_response(e)
        out.append(e)
    return tuple(out)


def receive_rc(qp, pkt, info, now: float, grh) -> None:
    """A SEND packet for an RC QP on a TM SRQ.  Whatever is not a SEND at
    the expected PSN in a valid sequence (duplicates, gaps, sequence errors)
    is the responder's, unchanged."""
    psn = (pkt[9] << 16) | (pkt[10] << 8) | pkt[11]
    mask = info.mask
    cur = qp.resp_opcode
    if psn != qp.resp_psn or (cur == r._NONE) != bool(mask & START_MASK) or cur == r._IN_WRITE:
        r.receive_rc(qp, pkt, info, now, grh)
        return
    qp.sent_psn_nak = False
    hlen = info.length
    n = len(pkt) - hlen - ((pkt[1] >> 4) & 3)
    # --- CHK_LENGTH (the packet)
    if (n > qp.mtu) if mask & END_MASK else (n != qp.mtu):
        r._nak(qp, AETH_NAK_INVALID_REQ, psn, ST.IBV_WC_REM_INV_REQ_ERR, r.EV.IBV_EVENT_QP_REQ_ERR)
        return
    skip = 0
    if mask & START_MASK:
        # --- CHK_RESOURCE, with the TMH deciding which buffer
        tm = qp.srq.tm
        op = app_ctx = tag = None
        if n >= TMH_BYTES:
            op, app_ctx, tag = TMH.unpack_from(pkt, hlen)
        entry = tm.match(tag) if op == EAGER or op == RNDV else None
        if entry is not None and op == RNDV:
            _rndv(qp, pkt, info, psn, mask, hlen, n, tm, entry, app_ctx, tag)
            return
        if entry is not None:
            wqe = entry.wqe
            skip = TMH_BYTES
            kind = (WCO.IBV_WC_TM_RECV, MATCH | DATA_VALID, tag, app_ctx)
        else:
            wqe = qp.srq.take()
            if wqe is None:
                r._rnr(qp, psn)
                return
            if op == NO_TAG:
                kind = (WCO.IBV_WC_TM_NO_TAG, 0, 0, 0)
            elif op == EAGER or op == RNDV:
                kind = (WCO.IBV_WC_TM_RECV, tm.unexpected(), 0, 0)
            else:
                kind = (WCO.IBV_WC_RECV, 0, 0, 0)
        if entry is not None:
            tm.consume(entry)
        qp.resp_wqe = wqe
        qp.resp_tm = kind
        off = qp.resp_offset = 0
        if wqe.views is None and not r.resolve_rwqe(qp, wqe):
            r._nak(qp, AETH_NAK_REM_OP_ERR, psn, ST.IBV_WC_LOC_PROT_ERR, r.EV.IBV_EVENT_QP_FATAL)
            return
    else:
        wqe = qp.resp_wqe
        off = qp.resp_offset
    n -= skip
    if off + n > wqe.length:
        r._nak(qp, AETH_NAK_INVALID_REQ, psn, ST.IBV_WC_LOC_LEN_ERR, r.EV.IBV_EVENT_QP_REQ_ERR)
        return
    # --- EXECUTE
    if n:
        scatter(wqe.views, off, pkt, hlen + skip, n)
    off += n
    qp.cnt[C.rcvd_bytes] += n
    qp.resp_psn = (psn + 1) & 0xFFFFFF
    if mask & END_MASK:
        # --- COMPLETE
        wco, flags, tag, priv = qp.resp_tm
        wc = TmWC(wqe.wr_id, ST.IBV_WC_SUCCESS, wco, qp.qp_num, off, flags, tag, priv, qp.dest_qpn)
        if mask & IMMDT_MASK:
            (wc.imm_data,) = IMMDT.unpack_from(pkt, info.immdt)
            wc.wc_flags |= WF.IBV_WC_WITH_IMM
        elif mask & IETH_MASK:                 # SEND with invalidate, as the responder's
            (wc.imm_data,) = IETH.unpack_from(pkt, info.ieth)
            if not qp.memory.invalidate(qp.pd, wc.imm_data):
                r._nak(qp, AETH_NAK_INVALID_REQ, psn, ST.IBV_WC_REM_INV_REQ_ERR, r.EV.IBV_EVENT_QP_REQ_ERR)
                return
            wc.wc_flags |= WF.IBV_WC_WITH_INV
        qp.resp_wqe = qp.resp_tm = None
        qp.resp_opcode = r._NONE
        qp.msn += 1
        qp.cnt[C.rdma_recvs] += 1
        qp.recv_cq.push(wc, pkt[1] & BTH_SE)
    else:
        qp.resp_offset = off
        qp.resp_opcode = r._IN_SEND
    # --- ACKNOWLEDGE
    if pkt[8] & 0x80:
        r.send_ack(qp, AETH_ACK_UNLIMITED, psn)


class HwSendWQE(SendWQE):
    """A send WQE the device posts itself on a QP (a rendezvous READ, its
    FIN): never signalled, not the application's (``hidden``)."""

    __slots__ = ("tm_done",)
    hidden = True


def hidden(sq) -> int:
    """How many WQEs of ``sq`` the device posted itself (not in the app's ring)."""
    return sum(1 for w in sq if w.hidden)


def _post_hw(qp, wqe: HwSendWQE) -> None:
    wqe.signaled = False
    qp.sq.append(wqe)
    qp.req_sched = True                  # the QP runs the requester once this engine returns


def _rndv(qp, pkt, info, psn, mask, hlen, n, tm, entry, app_ctx, tag) -> None:
    """A rendezvous header matched ``entry``: the first completion (TM_MATCH)
    now, then an RDMA READ of the initiator's buffer into the entry's; the
    READ's end sends the FIN and completes TM_DATA_VALID
    (``_read_response``).  A buffer too small: IBV_WC_TM_RNDV_INCOMPLETE
    (software reads it), as mlx5's software rendezvous."""
    if not mask & END_MASK or n < TMH_BYTES + RVH_BYTES or n > MAX_RNDV_HDR_SIZE:
        r._nak(qp, AETH_NAK_INVALID_REQ, psn, None, r.EV.IBV_EVENT_QP_REQ_ERR)
        return
    va, rkey, length = RVH.unpack_from(pkt, hlen + TMH_BYTES)
    tm.consume(entry)
    wqe = entry.wqe
    qp.resp_psn = (psn + 1) & 0xFFFFFF
    qp.msn += 1
    qp.cnt[C.rdma_recvs] += 1
    if length > wqe.length:
        qp.recv_cq.push(TmWC(wqe.wr_id, ST.IBV_WC_TM_RNDV_INCOMPLETE, WCO.IBV_WC_TM_RECV, qp.qp_num, 0, MATCH,
                             tag, app_ctx, qp.dest_qpn))
    else:
        qp.recv_cq.push(TmWC(wqe.wr_id, ST.IBV_WC_SUCCESS, WCO.IBV_WC_TM_RECV, qp.qp_num, 0, MATCH, tag, app_ctx,
                             qp.dest_qpn))
        addr, _, lkey = wqe.sg_list[0] if wqe.sg_list else (0, 0, 0)
        read = HwSendWQE(0, WR.IBV_WR_RDMA_READ, [(addr, length, lkey)] if length else [], remote_addr=va,
                         rkey=rkey)
        read.tm_done = (wqe.wr_id, tag, app_ctx, length)
        _post_hw(qp, read)
        qp.tm_rndv.append(read)
    if pkt[8] & 0x80:
        r.send_ack(qp, AETH_ACK_UNLIMITED, psn)


def _read_response(engine):
    def receive_read_response(qp, pkt, info, now: float, grh) -> None:
        """The completer's, then the rendezvous READs it finished: FIN to
        the initiator, TM_DATA_VALID to the application."""
        engine(qp, pkt, info, now, grh)
        pending = qp.tm_rndv
        while pending and (pending[0].state in (WQE_DONE, WQE_ERROR) or pending[0] not in qp.sq):
            read = pending.pop(0)
            if read.state not in (WQE_DONE, WQE_ERROR):
                continue                 # flushed with the QP's send queue (reset, error)
            wr_id, tag, app_ctx, length = read.tm_done
            if read.state == WQE_ERROR:
                qp.recv_cq.push(TmWC(wr_id, read.status, WCO.IBV_WC_TM_RECV, qp.qp_num))
                continue
            _post_hw(qp, HwSendWQE(0, WR.IBV_WR_SEND, inline_data=TMH.pack(FIN, app_ctx, tag)))
            # the second completion carries no TMH (mlx5's EXPECTED CQE): the
            # first one told the tag
            qp.recv_cq.push(TmWC(wr_id, ST.IBV_WC_SUCCESS, WCO.IBV_WC_TM_RECV, qp.qp_num, length, DATA_VALID,
                                 0, 0, qp.dest_qpn))
    return receive_read_response
