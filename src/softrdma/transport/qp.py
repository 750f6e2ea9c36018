"""A queue pair: attributes, the state machine of ibv_modify_qp, the queues,
and the dispatch of packets and timers to the three engines.

Theory of operation
-------------------
A ``QP`` is sans-IO.  Its inputs are:

* ``post_send(wqe)`` / ``post_recv(wqe)`` -- work requests (verbs);
* ``receive(pkt, now)`` -- one received packet (BTH .. pad, the ICRC already
  checked and stripped, ``wire.check`` already passed, and the BTH DestQP
  already matched to this QP by the caller);
* ``tick(now)`` -- the clock; call it at ``deadline`` (or later);
* ``stalled(since, until)`` -- the host did not run the QP for a while (a
  descheduled process): that time is not charged to the peer.

Its outputs are appended to lists the caller owns and drains:

* ``tx``: ``(qp, packet, av)`` tuples to send (packet without ICRC);
* completions pushed into ``send_cq`` / ``recv_cq`` (anything with push());
* ``events``: ``(ibv_event_type, qp)`` async events;
* memory reads and writes through ``memory`` (see ``memory.Memory``).

The three engines are modules of functions over a QP, as in rxe:
``requester`` (WQE -> packets), ``responder`` (request packets -> memory,
receive completions, ACK/NAK/read responses) and ``completer`` (ACK/NAK/
responses -> send completions, retransmission).  This file owns the
state (RESET -> INIT -> RTR -> RTS -> SQD/SQE/ERR) and every attribute check.

The engines do not call each other back.  The requester calls forward
(the completer retires what it finished, ``loopback`` runs whole messages);
the completer asks for the requester with ``req_sched`` (and a go-back with
``req_need_retry``), which ``receive`` and ``tick`` service when the
completer returns -- rxe's rxe_sched_task(&qp->req.task).  The attribute
model (ibv_qp_attr / ibv_qp_cap, the mask -> field map) is uapi.qp_attr's;
which work-request opcode a QP type takes is uapi.wr's.
"""

from __future__ import annotations

from collections import deque

from ..enums import (
    ibv_event_type, ibv_qp_attr_mask, ibv_qp_state, ibv_qp_type, ibv_wc_opcode, ibv_wc_status,
    ibv_wr_opcode, ints, mtu_to_bytes,
)
from ..errors import einval, enomem, eopnotsupp
from ..uapi import qp_attr
from ..uapi.abi import WC
from ..uapi.wr import valid_opcodes
from ..wire.fastpath import Segments
from ..wire.headers import DEFAULT_PKEY, RNR_TIMER_US
from ..wire.opcodes import (
    IB_OPCODE_RC, IB_OPCODE_UC, IB_OPCODE_UD, IB_OPCODE_XRC, OPCODE_TABLE, REQ_MASK, RESP_MASK,
)
from . import completer, dcqcn, requester, responder, unreliable
from .limits import MAX_PKT_PER_ACK, MAX_UNACKED_PSNS, RUN_UNACKED_PSNS
from .segments import receive_segments
from .counters import Counter, new_counters
from .wr import ATOMIC_OPS, WQE_DONE, WQE_ERROR, WQE_POSTED, AddressVector, RecvWQE, SendWQE

# enums where names are printed or masks combined; ints on the per-packet path
S, T, M, WR = ibv_qp_state, ibv_qp_type, ibv_qp_attr_mask, ibv_wr_opcode
EV, ST, WCO, C = ints(ibv_event_type), ints(ibv_wc_status), ints(ibv_wc_opcode), ints(Counter)
RESET, INIT, RTR, RTS, SQD, SQE, ERR = range(7)
RC, UC, UD = int(T.IBV_QPT_RC), int(T.IBV_QPT_UC), int(T.IBV_QPT_UD)
# XRC (IBA 9.8): an INI QP is an RC requester whose requests name an SRQ
# (XRCETH); a TGT QP, created on an XRC domain, is an RC responder that takes
# its receive WQEs from the SRQ each message names (responder.receive_xrc)
XRC_INI, XRC_TGT = int(T.IBV_QPT_XRC_SEND), int(T.IBV_QPT_XRC_RECV)
RCVD_PKTS = C.rcvd_pkts
# the opcodes a WR may have, per QP type (uapi.wr); RC carries every one softrdma has
_VALID_OPS = {t: valid_opcodes(t) for t in (RC, UC, UD, XRC_INI)}
_VALID_OPS[XRC_TGT] = frozenset()                # a TGT QP has no send queue



class DeviceCaps:
    """The device limits the attribute checks enforce (ibv_device_attr).

    Besides the per-QP limits the transport checks itself, the object
    counts (``max_qp`` .. ``max_mw``: at most this many of each kind on the
    device at once), ``max_cqe`` (entries of one CQ) and ``max_mr_size``
    (bytes of one MR; the daemon caps it at the host's memory, which backs
    every MR) are what the daemon enforces and ``ibv_query_device``
    reports.  ``LIMITS`` names the ones an administrator may lower
    (``softrdmad --limit``)."""

    LIMITS = ("max_qp", "max_qp_wr", "max_sge", "max_inline_data", "max_cq", "max_cqe", "max_mr",
              "max_mr_size", "max_pd", "max_srq", "max_ah", "max_mw")

    def __init__(self, max_mtu: int = 5, max_qp_rd_atom: int = 128, max_qp_init_rd_atom: int = 128,
                 max_qp_wr: int = 1 << 20, max_sge: int = 32, max_inline_data: int = 256,
                 pkey_table: tuple[int, ...] = (DEFAULT_PKEY,), max_msg_sz: int = 1 << 31,
                 phys_port_cnt: int = 1, active_mtu: int | None = None, max_qp: int = 1 << 20,
                 max_cq: int = 1 << 16, max_cqe: int = (1 << 15) - 1, max_mr: int = 1 << 16,
                 max_mr_size: int = (1 << 64) - 1, max_pd: int = 1 << 16, max_srq: int = 1 << 16,
                 max_ah: int = 1 << 15, max_mw: int = 1 << 16):
        self.max_qp = max_qp
        self.max_cq = max_cq
        self.max_cqe = max_cqe
        self.max_mr = max_mr
        self.max_mr_size = max_mr_size
        self.max_pd = max_pd
        self.max_srq = max_srq
        self.max_ah = max_ah
        self.max_mw = max_mw
        self.max_mtu = max_mtu
        self.active_mtu = max_mtu if active_mtu is None else active_mtu   # port's; UD's path MTU
        self.max_qp_rd_atom = max_qp_rd_atom
        self.max_qp_init_rd_atom = max_qp_init_rd_atom
        self.max_qp_wr = max_qp_wr
        self.max_sge = max_sge
        self.max_inline_data = max_inline_data
        self.pkey_table = pkey_table
        self.max_msg_sz = max_msg_sz
        self.phys_port_cnt = phys_port_cnt
        self.link_layer = 2                     # IBV_LINK_LAYER_ETHERNET; InfiniBand (1): LID-routed paths
        self.cc = dcqcn.CongestionControl()     # the device's ECN / DCQCN settings


class QPCap(qp_attr.QPCap):
    """ibv_qp_cap (uapi.qp_attr) with the defaults of a QP created without one."""

    def __init__(self, max_send_wr: int = 256, max_recv_wr: int = 256, max_send_sge: int = 4,
                 max_recv_sge: int = 4, max_inline_data: int = 0):
        super().__init__(max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data)


class QPAttr(qp_attr.QPAttr):
    """ibv_qp_attr (uapi.qp_attr) whose address vector is the transport's
    ``AddressVector`` (a GRH to nowhere unless given)."""

    def __init__(self, **fields):
        if "ah_attr" not in fields:
            fields["ah_attr"] = AddressVector()
        super().__init__(**fields)


# ib_modify_qp_is_ok()'s table: (cur, next) -> {qp_type: (required, optional)}.
_RTS_OPT = {UD: M.IBV_QP_CUR_STATE | M.IBV_QP_QKEY,
            UC: M.IBV_QP_CUR_STATE | M.IBV_QP_ACCESS_FLAGS | M.IBV_QP_ALT_PATH | M.IBV_QP_PATH_MIG_STATE,
            RC: M.IBV_QP_CUR_STATE | M.IBV_QP_ACCESS_FLAGS | M.IBV_QP_ALT_PATH | M.IBV_QP_PATH_MIG_STATE
            | M.IBV_QP_MIN_RNR_TIMER}
_RTS_OPT[XRC_INI] = _RTS_OPT[XRC_TGT] = _RTS_OPT[RC]
_NONE = {t: (0, 0) for t in (RC, UC, UD, XRC_INI, XRC_TGT)}
TRANSITIONS: dict[tuple[int, int], dict[int, tuple[int, int]]] = {
    (RESET, INIT): {
        UD: (M.IBV_QP_PKEY_INDEX | M.IBV_QP_PORT | M.IBV_QP_QKEY, 0),
        UC: (M.IBV_QP_PKEY_INDEX | M.IBV_QP_PORT | M.IBV_QP_ACCESS_FLAGS, 0),
        RC: (M.IBV_QP_PKEY_INDEX | M.IBV_QP_PORT | M.IBV_QP_ACCESS_FLAGS, 0)},
    (INIT, INIT): {
        UD: (0, M.IBV_QP_PKEY_INDEX | M.IBV_QP_PORT | M.IBV_QP_QKEY),
        UC: (0, M.IBV_QP_PKEY_INDEX | M.IBV_QP_PORT | M.IBV_QP_ACCESS_FLAGS),
        RC: (0, M.IBV_QP_PKEY_INDEX | M.IBV_QP_PORT | M.IBV_QP_ACCESS_FLAGS)},
    (INIT, RTR): {
        UD: (0, M.IBV_QP_PKEY_INDEX | M.IBV_QP_QKEY),
        UC: (M.IBV_QP_AV | M.IBV_QP_PATH_MTU | M.IBV_QP_DEST_QPN | M.IBV_QP_RQ_PSN,
             M.IBV_QP_ALT_PATH | M.IBV_QP_ACCESS_FLAGS | M.IBV_QP_PKEY_INDEX),
        RC: (M.IBV_QP_AV | M.IBV_QP_PATH_MTU | M.IBV_QP_DEST_QPN | M.IBV_QP_RQ_PSN
             | M.IBV_QP_MAX_DEST_RD_ATOMIC | M.IBV_QP_MIN_RNR_TIMER,
             M.IBV_QP_ALT_PATH | M.IBV_QP_ACCESS_FLAGS | M.IBV_QP_PKEY_INDEX)},
    (RTR, RTS): {
        UD: (M.IBV_QP_SQ_PSN, M.IBV_QP_CUR_STATE | M.IBV_QP_QKEY),
        UC: (M.IBV_QP_SQ_PSN, M.IBV_QP_CUR_STATE | M.IBV_QP_ALT_PATH | M.IBV_QP_ACCESS_FLAGS
             | M.IBV_QP_PATH_MIG_STATE),
        RC: (M.IBV_QP_TIMEOUT | M.IBV_QP_RETRY_CNT | M.IBV_QP_RNR_RETRY | M.IBV_QP_SQ_PSN
             | M.IBV_QP_MAX_QP_RD_ATOMIC,
             M.IBV_QP_CUR_STATE | M.IBV_QP_ALT_PATH | M.IBV_QP_ACCESS_FLAGS | M.IBV_QP_MIN_RNR_TIMER
             | M.IBV_QP_PATH_MIG_STATE)},
    (RTS, RTS): {t: (0, o) for t, o in _RTS_OPT.items()},
    (RTS, SQD): {t: (0, M.IBV_QP_EN_SQD_ASYNC_NOTIFY) for t in (RC, UC, UD, XRC_INI, XRC_TGT)},
    (SQD, RTS): {t: (0, o) for t, o in _RTS_OPT.items()},
    (SQD, SQD): {
        UD: (0, M.IBV_QP_PKEY_INDEX | M.IBV_QP_QKEY),
        UC: (0, M.IBV_QP_AV | M.IBV_QP_ALT_PATH | M.IBV_QP_ACCESS_FLAGS | M.IBV_QP_PKEY_INDEX
             | M.IBV_QP_PATH_MIG_STATE),
        RC: (0, M.IBV_QP_PORT | M.IBV_QP_AV | M.IBV_QP_TIMEOUT | M.IBV_QP_RETRY_CNT | M.IBV_QP_RNR_RETRY
             | M.IBV_QP_MAX_QP_RD_ATOMIC | M.IBV_QP_MAX_DEST_RD_ATOMIC | M.IBV_QP_ALT_PATH
             | M.IBV_QP_ACCESS_FLAGS | M.IBV_QP_PKEY_INDEX | M.IBV_QP_MIN_RNR_TIMER
             | M.IBV_QP_PATH_MIG_STATE)},
    (SQE, RTS): {UD: (0, M.IBV_QP_CUR_STATE | M.IBV_QP_QKEY),
                 UC: (0, M.IBV_QP_CUR_STATE | M.IBV_QP_ACCESS_FLAGS),
                 RC: (0, 0)},               # unreachable for RC (never in SQE); the kernel lists none
}
# ib_modify_qp_is_ok()'s XRC_INI and XRC_TGT columns: INI is RC without the
# responder's attributes, TGT is RC without the requester's
_XRC_RTR_OPT = M.IBV_QP_ALT_PATH | M.IBV_QP_ACCESS_FLAGS | M.IBV_QP_PKEY_INDEX
for (_cur, _new), _rule, _ini, _tgt in (
        ((RESET, INIT), "req", M.IBV_QP_PKEY_INDEX | M.IBV_QP_PORT | M.IBV_QP_ACCESS_FLAGS, None),
        ((INIT, INIT), "opt", M.IBV_QP_PKEY_INDEX | M.IBV_QP_PORT | M.IBV_QP_ACCESS_FLAGS, None),
        ((INIT, RTR), "req", M.IBV_QP_AV | M.IBV_QP_PATH_MTU | M.IBV_QP_DEST_QPN | M.IBV_QP_RQ_PSN,
         M.IBV_QP_AV | M.IBV_QP_PATH_MTU | M.IBV_QP_DEST_QPN | M.IBV_QP_RQ_PSN | M.IBV_QP_MAX_DEST_RD_ATOMIC
         | M.IBV_QP_MIN_RNR_TIMER),
        ((RTR, RTS), "req", M.IBV_QP_TIMEOUT | M.IBV_QP_RETRY_CNT | M.IBV_QP_RNR_RETRY | M.IBV_QP_SQ_PSN
         | M.IBV_QP_MAX_QP_RD_ATOMIC, M.IBV_QP_TIMEOUT | M.IBV_QP_SQ_PSN),
        ((SQD, SQD), "opt", M.IBV_QP_PORT | M.IBV_QP_AV | M.IBV_QP_TIMEOUT | M.IBV_QP_RETRY_CNT | M.IBV_QP_RNR_RETRY
         | M.IBV_QP_MAX_QP_RD_ATOMIC | M.IBV_QP_ALT_PATH | M.IBV_QP_ACCESS_FLAGS | M.IBV_QP_PKEY_INDEX
         | M.IBV_QP_PATH_MIG_STATE,
         M.IBV_QP_PORT | M.IBV_QP_AV | M.IBV_QP_TIMEOUT | M.IBV_QP_MAX_DEST_RD_ATOMIC | M.IBV_QP_ALT_PATH
         | M.IBV_QP_ACCESS_FLAGS | M.IBV_QP_PKEY_INDEX | M.IBV_QP_MIN_RNR_TIMER | M.IBV_QP_PATH_MIG_STATE)):
    for _t, _bits in ((XRC_INI, _ini), (XRC_TGT, _ini if _tgt is None else _tgt)):
        if _rule == "opt":
            TRANSITIONS[(_cur, _new)][_t] = (0, _bits)
        elif (_cur, _new) == (INIT, RTR):
            TRANSITIONS[(_cur, _new)][_t] = (_bits, _XRC_RTR_OPT)
        elif (_cur, _new) == (RTR, RTS):
            TRANSITIONS[(_cur, _new)][_t] = (_bits, _RTS_OPT[RC])
        else:
            TRANSITIONS[(_cur, _new)][_t] = (_bits, 0)
TRANSITIONS[(SQE, RTS)][XRC_INI] = TRANSITIONS[(SQE, RTS)][XRC_TGT] = (0, 0)   # as RC: never in SQE
for _s in S:
    if _s != S.IBV_QPS_UNKNOWN:
        TRANSITIONS[(_s, RESET)] = _NONE
        if _s != RESET:                     # RESET's row has only RESET and INIT
            TRANSITIONS[(_s, ERR)] = _NONE


def timeout_seconds(timeout: int) -> float:
    """Local ACK timeout: 4.096 us * 2^timeout; 0 means infinite (None)."""
    return 4.096e-6 * (1 << timeout) if timeout else None


class SRQ:
    """A shared receive queue (ibv_srq) with its limit event.

    An XRC SRQ (IBV_SRQT_XRC) also has its number (the XRCETH names it), its
    XRC domain (only a TGT QP of the same domain may take from it), the PD
    its receive buffers and the TGT QP's remote accesses are checked
    against, and the CQ its completions go to; the host sets them."""

    srq_num = 0
    xrcd = None          # an XRC SRQ's domain (any object; compared by identity)
    pd = None
    cq = None            # an XRC SRQ's completion queue
    host = None          # the host's own object for it (the daemon's ring end)

    tm = None                  # a TM SRQ's tag matching (transport.tm.TagMatching)

    def __init__(self, max_wr: int = 256, max_sge: int = 4, srq_limit: int = 0, events: list | None = None):
        self.max_wr = max_wr
        self.max_sge = max_sge
        self.srq_limit = srq_limit
        self.rq: deque[RecvWQE] = deque()
        self.events = events if events is not None else []

    def post_recv(self, wqe: RecvWQE) -> None:
        if len(self.rq) >= self.max_wr:
            raise enomem("SRQ full")
        if len(wqe.sg_list) > self.max_sge:
            raise einval("too many SGEs")
        self.rq.append(wqe)

    def modify(self, srq_limit: int) -> None:
        if srq_limit > self.max_wr:
            raise einval("srq_limit above max_wr")
        self.srq_limit = srq_limit

    def take(self) -> RecvWQE | None:
        if not self.rq:
            return None
        wqe = self.rq.popleft()
        if self.srq_limit and len(self.rq) < self.srq_limit:
            self.srq_limit = 0                       # one-shot, re-armed by modify
            self.events.append((EV.IBV_EVENT_SRQ_LIMIT_REACHED, self))
        return wqe


def _rx_table(qp_type: int, opclass: int) -> tuple:
    """opcode -> engine entry for this QP type (None: not this transport's)."""
    req = {RC: responder.receive_rc, UC: unreliable.receive_uc, UD: unreliable.receive_ud,
           XRC_INI: None, XRC_TGT: responder.receive_xrc}[qp_type]
    comp = None if qp_type == XRC_TGT else completer.receive     # a TGT QP sends no requests
    table = []
    for info in OPCODE_TABLE:
        if info is None or info.transport != opclass:
            table.append(None)
        elif info.mask & REQ_MASK:
            table.append(req)
        elif info.mask & RESP_MASK:
            table.append(comp)
        else:
            table.append(None)
    table[dcqcn.CNP_OPCODE] = dcqcn.receive_cnp      # a CNP: for every QP type (the reaction point)
    return tuple(table)


class QP:
    def __init__(self, qp_type: int, qp_num: int, *, pd, memory, send_cq, recv_cq,
                 cap: QPCap | None = None, srq: SRQ | None = None, sq_sig_all: bool = False,
                 caps: DeviceCaps | None = None, tx: list | None = None, events: list | None = None,
                 xrcd=None, xrc_srqs: dict | None = None):
        if qp_type not in (RC, UC, UD, XRC_INI, XRC_TGT):
            raise eopnotsupp(f"QP type {qp_type} not supported")
        if qp_type == XRC_TGT and (xrcd is None or xrc_srqs is None):
            raise einval("an XRC TGT QP is created on an XRC domain")
        # XRC TGT: its domain, and the host's XRC SRQs by number (the XRCETH's
        # lookup); pd, srq and recv_cq follow the SRQ of the message received
        self.xrcd = xrcd
        self.xrc_srqs = xrc_srqs
        # post_recv's test: an SRQ, or XRC (whose receive WQEs are an XRC SRQ's)
        self.own_rq = srq is None and qp_type not in (XRC_INI, XRC_TGT)
        self.qp_type = qp_type
        self.qp_num = qp_num
        self.pd = pd
        self.memory = memory
        self.send_cq = send_cq
        self.recv_cq = recv_cq
        self.srq = srq
        self.sq_sig_all = sq_sig_all
        self.caps = caps or DeviceCaps()
        self.cc = self.caps.cc                 # ECN / DCQCN settings (transport.dcqcn)
        self.cap = cap or QPCap()
        if self.cap.max_send_wr > self.caps.max_qp_wr or self.cap.max_recv_wr > self.caps.max_qp_wr:
            raise einval("max_send_wr/max_recv_wr above device max_qp_wr")
        if self.cap.max_send_sge > self.caps.max_sge or self.cap.max_recv_sge > self.caps.max_sge:
            raise einval("max_send_sge/max_recv_sge above device max_sge")
        if self.cap.max_inline_data > self.caps.max_inline_data:
            raise einval("max_inline_data above device limit")
        self.tx = tx if tx is not None else []
        self.events = events if events is not None else []
        self.cnt = new_counters()
        # set by the engine that hosts the QP: qp -> the peer QP when it is in
        # the same engine and nothing lies between them (transport.loopback)
        self.local_peer = None
        self.local_traffic = None      # (qp, peer, (pkts, bytes) to peer, (pkts, bytes) back): port counts
        self.opclass = {RC: IB_OPCODE_RC, UC: IB_OPCODE_UC, UD: IB_OPCODE_UD, XRC_INI: IB_OPCODE_XRC,
                        XRC_TGT: IB_OPCODE_XRC}[qp_type]
        self._rx = _rx_table(qp_type, self.opclass)
        self.attr = QPAttr(cap=self.cap)
        self.state = RESET
        self.sq: deque[SendWQE] = deque()
        self.rq: deque[RecvWQE] = deque()
        self._reset_transport()

    # ------------------------------------------------------------------ state
    def _reset_transport(self) -> None:
        a = self.attr
        self.now = 0.0                 # latest time any input carried
        self._set_live()
        # requester
        self.req_idx = 0               # index in sq of the next WQE to send from
        self.req_psn = a.sq_psn        # next PSN to send
        self.noack_pkts = 0
        self.rd_atomic_out = 0         # READ/ATOMIC requests sent and not completed
        self.cwnd_max = float(MAX_UNACKED_PSNS)   # its ceiling (``enable_runs`` raises it)
        self.cwnd = self.cwnd_max      # go-back window, see requester.py
        # set by the port when this QP's packets leave through a socket: the
        # requester may then emit runs of MIDDLE packets as one SegmentRun
        self.tx_runs = False
        self.req_sched = False         # the completer asks for a requester run ...
        self.req_need_retry = False    # ... that goes back to comp_psn first (rxe's req.need_retry)
        # completer
        self.comp_psn = a.sq_psn       # oldest PSN not yet acknowledged
        self.retry_cnt = a.retry_cnt
        self.rnr_retry = a.rnr_retry
        self.timer_at = None           # local ACK timeout deadline
        self.rnr_at = None             # RNR back-off deadline
        self.rl_at = None              # the rate limiter's next token (``dcqcn``)
        self.rp = None                 # DCQCN's reaction point, from the first CNP on
        self.np_cnp_at = None          # when the notification point last sent a CNP
        self.np_cnp_av = None          # (AV, the CNPs' AV) (``dcqcn.cnp_av``)
        self.retry_psn = None          # PSN at which an immediate go-back was last started
        self.sent_end = a.sq_psn       # the PSN after the highest ever sent (across go-backs)
        self.timeout_s = timeout_seconds(a.timeout)
        # responder
        self.resp_psn = a.rq_psn       # expected PSN (ePSN)
        self.msn = 0
        self.sent_psn_nak = False
        self.resp_opcode = -1          # last request op (low 5 bits) of an unfinished message, -1 none
        self.resp_wqe = None           # receive WQE of the SEND being received
        self.resp_offset = 0           # bytes placed so far in the current message
        self.resp_view = None          # current RDMA WRITE target view
        self.resp_remaining = 0        # RDMA WRITE bytes still expected
        self.uc_drop = False           # UC: discard packets until the next FIRST/ONLY
        self.resources: deque = deque()  # responder resources (READ/ATOMIC replay)
        self.ack_coalesce = False      # inside receive_batch: hold plain ACKs back
        self.ack_pending = None        # (psn, msn) of the ACK held back

    def enable_runs(self) -> None:
        """The port's word that this QP's packets leave through a socket that
        takes SegmentRuns: emit them, and keep up to ``RUN_UNACKED_PSNS``
        unacknowledged (``limits``)."""
        self.tx_runs = True
        if self.cwnd_max < RUN_UNACKED_PSNS:
            if self.cwnd >= self.cwnd_max:     # not backed off: the new ceiling at once
                self.cwnd = float(RUN_UNACKED_PSNS)
            self.cwnd_max = float(RUN_UNACKED_PSNS)

    def _set_live(self) -> None:
        """Copy the attributes the engines read per packet onto the QP."""
        a = self.attr
        self.mtu = mtu_to_bytes(self.caps.active_mtu if self.qp_type == UD else a.path_mtu)
        self.pkey = self.caps.pkey_table[a.pkey_index]
        self.av = a.ah_attr
        self.max_rd_atomic = max(1, a.max_rd_atomic)
        self.max_dest_rd_atomic = a.max_dest_rd_atomic
        self.dest_qpn = a.dest_qp_num
        self.retry_cnt_init = a.retry_cnt
        self.rnr_retry_init = a.rnr_retry
        self.rc = self.qp_type == RC or self.opclass == IB_OPCODE_XRC     # reliable: ACKs, windows
        self.resp_denied = responder.denied_ops(a.qp_access_flags)   # CHK_OP_VALID

    def modify(self, attr: QPAttr, mask: int) -> None:
        """ibv_modify_qp: check everything, then apply atomically."""
        cur = self.state
        if mask & M.IBV_QP_CUR_STATE and attr.cur_qp_state != cur:
            raise einval(f"cur_qp_state {attr.cur_qp_state} but QP is in {S(cur).name}")
        new = attr.qp_state if mask & M.IBV_QP_STATE else cur
        if new not in S._value2member_map_ or new == S.IBV_QPS_UNKNOWN or new == SQE:
            raise einval(f"cannot move a QP to state {new}")
        rule = TRANSITIONS.get((cur, new))
        if rule is None:
            raise einval(f"invalid transition {S(cur).name} -> {S(new).name}")
        req, opt = rule[self.qp_type]
        given = mask & ~(M.IBV_QP_STATE)
        if req & ~given:
            missing = M(req & ~given)
            raise einval(f"{S(cur).name}->{S(new).name} needs {missing!r}")
        if given & ~(req | opt):
            extra = M(given & ~(req | opt))
            raise einval(f"{S(cur).name}->{S(new).name} does not accept {extra!r}")
        self._check_values(attr, mask)
        self._apply(attr, mask, cur, new)

    def _check_values(self, attr: QPAttr, mask: int) -> None:
        caps = self.caps
        if mask & M.IBV_QP_PORT and not 1 <= attr.port_num <= caps.phys_port_cnt:
            raise einval(f"port_num {attr.port_num}")
        if mask & M.IBV_QP_PKEY_INDEX and not 0 <= attr.pkey_index < len(caps.pkey_table):
            raise einval(f"pkey_index {attr.pkey_index}")
        if mask & M.IBV_QP_PATH_MTU and not 1 <= attr.path_mtu <= caps.max_mtu:
            raise einval(f"path_mtu {attr.path_mtu} (device max {caps.max_mtu})")
        if mask & M.IBV_QP_MAX_QP_RD_ATOMIC and attr.max_rd_atomic > caps.max_qp_rd_atom:
            raise einval(f"max_rd_atomic {attr.max_rd_atomic} > {caps.max_qp_rd_atom}")
        if mask & M.IBV_QP_MAX_DEST_RD_ATOMIC and attr.max_dest_rd_atomic > caps.max_qp_init_rd_atom:
            raise einval(f"max_dest_rd_atomic {attr.max_dest_rd_atomic} > {caps.max_qp_init_rd_atom}")
        if mask & M.IBV_QP_TIMEOUT and not 0 <= attr.timeout <= 31:
            raise einval(f"timeout {attr.timeout}")
        if mask & M.IBV_QP_RETRY_CNT and not 0 <= attr.retry_cnt <= 7:
            raise einval(f"retry_cnt {attr.retry_cnt}")
        if mask & M.IBV_QP_RNR_RETRY and not 0 <= attr.rnr_retry <= 7:
            raise einval(f"rnr_retry {attr.rnr_retry}")
        if mask & M.IBV_QP_MIN_RNR_TIMER and not 0 <= attr.min_rnr_timer <= 31:
            raise einval(f"min_rnr_timer {attr.min_rnr_timer}")
        if mask & M.IBV_QP_AV and not attr.ah_attr.is_global and caps.link_layer != 1:
            raise einval("RoCE address vectors need a GRH (is_global)")
        if mask & (M.IBV_QP_ALT_PATH | M.IBV_QP_PATH_MIG_STATE):
            raise eopnotsupp("automatic path migration is not supported")
        if mask & M.IBV_QP_RATE_LIMIT:
            raise eopnotsupp("rate limiting is not supported")

    # the fields a modify applies (the state bits are the state machine's;
    # TRANSITIONS admits no IBV_QP_CAP, _check_values no unsupported bit)
    _FIELDS = tuple((bit, name) for bit, names in qp_attr.ATTR_MASK_FIELDS
                    if not bit & (M.IBV_QP_STATE | M.IBV_QP_CUR_STATE | M.IBV_QP_CAP | qp_attr.UNSUPPORTED_MASK)
                    for name in names)

    def _apply(self, attr: QPAttr, mask: int, cur: int, new: int) -> None:
        a = self.attr
        for bit, name in self._FIELDS:
            if mask & bit:
                setattr(a, name, getattr(attr, name))
        a.rq_psn &= 0xFFFFFF
        a.sq_psn &= 0xFFFFFF
        self._set_live()
        if mask & M.IBV_QP_TIMEOUT:
            self.timeout_s = timeout_seconds(a.timeout)
        if mask & M.IBV_QP_RETRY_CNT:
            self.retry_cnt = a.retry_cnt
        if mask & M.IBV_QP_RNR_RETRY:
            self.rnr_retry = a.rnr_retry
        if mask & M.IBV_QP_RQ_PSN:
            self.resp_psn = a.rq_psn
        if mask & M.IBV_QP_SQ_PSN:
            self.req_psn = self.comp_psn = self.sent_end = a.sq_psn
        self.state = new
        a.qp_state = a.cur_qp_state = new
        if new == RESET:
            self.sq.clear()
            self.rq.clear()
            self.attr = QPAttr(cap=self.cap)
            self._reset_transport()
        elif new == ERR and cur != ERR:
            self.flush()
        elif new == SQD:
            a.sq_draining = 1
            self._check_drained()
        elif new == RTS:
            a.sq_draining = 0
            requester.run(self, self.now)

    def query(self) -> QPAttr:
        a = self.attr
        a.qp_state = a.cur_qp_state = self.state
        a.sq_psn = self.req_psn
        a.rq_psn = self.resp_psn
        return a

    def to_error(self, event: int | None = EV.IBV_EVENT_QP_FATAL) -> None:
        """Move to ERR because of an error the transport found."""
        if self.state == ERR:
            return
        self.state = self.attr.qp_state = ERR
        if event is not None:
            self.events.append((event, self))
        self.flush()

    def flush(self) -> None:
        """ERR: every outstanding WQE completes with IBV_WC_WR_FLUSH_ERR."""
        self.timer_at = self.rnr_at = self.rl_at = None
        sq = self.sq
        while sq:
            wqe = sq.popleft()
            status = wqe.status if wqe.state == WQE_ERROR else ST.IBV_WC_WR_FLUSH_ERR
            if wqe.state == WQE_DONE and status == ST.IBV_WC_SUCCESS:
                completer.complete_wqe(self, wqe)
            elif not wqe.hidden:
                self.send_cq.push(WC(wqe.wr_id, status, completer.wc_opcode(wqe.opcode), self.qp_num))
        self.req_idx = 0
        self.rd_atomic_out = 0
        rq = self.rq
        if self.resp_wqe is not None:
            if self.srq is None:
                rq.appendleft(self.resp_wqe)
            else:                                  # taken from the SRQ: it is this QP's to flush
                self.recv_cq.push(WC(self.resp_wqe.wr_id, ST.IBV_WC_WR_FLUSH_ERR, WCO.IBV_WC_RECV,
                                     self.qp_num))
        self.resp_wqe = None
        while rq:
            wqe = rq.popleft()
            self.recv_cq.push(WC(wqe.wr_id, ST.IBV_WC_WR_FLUSH_ERR, WCO.IBV_WC_RECV, self.qp_num))
        if self.srq is not None:
            self.events.append((EV.IBV_EVENT_QP_LAST_WQE_REACHED, self))

    def _check_drained(self) -> None:
        # Drained when every started WQE has completed: what is left was
        # posted in SQD and waits for RTS.
        sq = self.sq
        if self.state == SQD and self.attr.sq_draining and self.req_idx == 0 and \
                (not sq or sq[0].state == WQE_POSTED):
            self.attr.sq_draining = 0
            if self.attr.en_sqd_async_notify:
                self.events.append((EV.IBV_EVENT_SQ_DRAINED, self))

    # ------------------------------------------------------------------ verbs
    def post_send(self, wqe: SendWQE, now: float | None = None) -> None:
        if now is not None:
            self.now = now
        if self.state == RESET:
            raise einval("post_send on a QP in RESET")
        if len(self.sq) >= self.cap.max_send_wr:
            raise enomem("send queue full")
        if wqe.inline_data is None and len(wqe.sg_list) > self.cap.max_send_sge:
            raise einval(f"{len(wqe.sg_list)} SGEs > max_send_sge {self.cap.max_send_sge}")
        if wqe.inline_data is not None and len(wqe.inline_data) > self.cap.max_inline_data:
            raise einval(f"inline data {len(wqe.inline_data)} > max_inline_data {self.cap.max_inline_data}")
        op = wqe.opcode
        qpt = self.qp_type
        if op not in _VALID_OPS[qpt]:
            if qpt == RC:
                raise eopnotsupp(f"opcode {WR(op).name} is not supported by the transport")
            raise einval(f"opcode {WR(op).name} is not valid on a {T(qpt).name} QP")
        if qpt == UD and wqe.ah is None:
            raise einval("UD send needs an address handle")
        if op in ATOMIC_OPS and sum(s[1] for s in wqe.sg_list) != 8:
            raise einval("an atomic operation needs 8 bytes of local buffer")
        if wqe.length > self.caps.max_msg_sz:
            raise einval(f"message of {wqe.length} bytes > max_msg_sz")
        if qpt == UD and wqe.length > self.mtu:
            raise einval(f"UD message of {wqe.length} bytes > MTU {self.mtu}")
        wqe.signaled = self.sq_sig_all or bool(wqe.send_flags & 2)   # IBV_SEND_SIGNALED
        self.sq.append(wqe)
        if self.state == ERR:
            self.flush()
        else:
            requester.run(self, self.now)

    def post_recv(self, wqe: RecvWQE) -> None:
        if not self.own_rq:
            raise einval("QP uses an SRQ; post to the SRQ")
        if self.state == RESET:
            raise einval("post_recv on a QP in RESET")
        if len(self.rq) >= self.cap.max_recv_wr:
            raise enomem("receive queue full")
        if len(wqe.sg_list) > self.cap.max_recv_sge:
            raise einval(f"{len(wqe.sg_list)} SGEs > max_recv_sge {self.cap.max_recv_sge}")
        self.rq.append(wqe)
        if self.state == ERR:
            self.flush()

    # ------------------------------------------------------------------ inputs
    def receive(self, pkt, now: float, grh: bytes | None = None) -> None:
        """One packet for this QP (see the module docstring for what the
        caller has already checked).  ``grh``: the 40-byte network header
        for UD receive buffers."""
        self.now = now
        cnt = self.cnt
        cnt[RCVD_PKTS] += 1
        state = self.state
        if state < RTR or state == ERR:          # RESET/INIT/ERR receive nothing
            cnt[C.dropped_bad_state] += 1
            return
        opcode = pkt[0]
        engine = self._rx[opcode]
        if engine is None:                       # another transport's opcode
            cnt[C.dropped_bad_transport] += 1
            return
        if ((pkt[2] << 8 | pkt[3]) ^ self.pkey) & 0x7FFF:
            cnt[C.dropped_bad_pkey] += 1
            return
        engine(self, pkt, OPCODE_TABLE[opcode], now, grh)
        if self.req_sched:                       # the completer asked for the requester
            if self.req_need_retry:
                self._req_task(now)
            else:
                self.req_sched = False
                requester.run(self, now)

    def receive_batch(self, pkts, now: float, grhs=None) -> None:
        """Several packets for this QP received together (one recvmmsg).
        Plain ACKs are coalesced: one ACK for the last PSN that asked,
        as the IBA permits (an ACK acknowledges every earlier PSN)."""
        self.ack_coalesce = True
        try:
            if grhs is None:
                for pkt in pkts:
                    if pkt.__class__ is Segments:       # a checked GRO buffer (the port's)
                        receive_segments(self, pkt, now)
                    else:
                        self.receive(pkt, now)
            else:
                for pkt, grh in zip(pkts, grhs):
                    self.receive(pkt, now, grh)
        finally:
            self.ack_coalesce = False
            if self.ack_pending is not None:
                responder.flush_ack(self)

    def run(self, now: float | None = None) -> None:
        """Let the requester send what it may (after posts, ACKs, timers)."""
        requester.run(self, self.now if now is None else now)

    def _req_task(self, now: float) -> None:
        """Run the requester if the completer asked for it (rxe_run_task(&qp->req.task)):
        a go-back first if it asked for one."""
        if self.req_sched:
            self.req_sched = False
            if self.req_need_retry:
                self.req_need_retry = False
                requester.retry(self, now)
            else:
                requester.run(self, now)

    @property
    def deadline(self) -> float | None:
        t, r = self.timer_at, self.rnr_at
        if self.rl_at is not None and (r is None or self.rl_at < r):
            r = self.rl_at
        if t is None:
            return r
        return t if r is None or t < r else r

    def tick(self, now: float) -> None:
        """Fire the timers that are due at ``now``."""
        self.now = now
        if self.rnr_at is not None and now >= self.rnr_at:
            self.rnr_at = None
            completer.rnr_expired(self, now)
            self._req_task(now)
        if self.timer_at is not None and now >= self.timer_at:
            completer.ack_timeout(self, now)
            self._req_task(now)
        if self.rl_at is not None and now >= self.rl_at:        # the rate limiter has tokens again
            self.rl_at = None
            requester.run(self, now)

    def stalled(self, since: float, until: float) -> None:
        """The host did not run this QP from ``since`` to ``until`` (its
        process was descheduled): nothing it sent could be answered into its
        view, no ACK could be seen.  The local ACK timer stops for that span
        -- a deadline after ``since`` moves on by its length; one that
        passed before ``since`` had its chance and fires.  The caller
        leaves some time of every late pass on the clock (the daemon: what a
        pass may take), so a host that keeps stalling still times out a
        silent peer.  The RNR
        back-off is the peer's request to wait at least that long: it fires
        as it is."""
        t = self.timer_at
        if t is not None and t > since:
            self.timer_at = t + (until - since)

    def rnr_timer_us(self) -> int:
        return RNR_TIMER_US[self.attr.min_rnr_timer]

    def __repr__(self) -> str:
        return f"QP({T(self.qp_type).name}, qpn=0x{self.qp_num:06x}, {S(self.state).name})"


__all__ = ["QP", "QPAttr", "QPCap", "SRQ", "DeviceCaps", "TRANSITIONS", "MAX_UNACKED_PSNS",
           "MAX_PKT_PER_ACK", "timeout_seconds"]
