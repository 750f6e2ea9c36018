"""Queue pairs (pyverbs.qp): QPCap, QPInitAttr, QPAttr, QP.

``post_send``/``post_recv`` check the work request as a provider does
(SGE count, inline size, queue room) and write it into the shared ring; the
daemon's transport does the rest.  ``modify``/``query`` go over the control
connection, where the transport checks every attribute (EINVAL etc. come
back as PyverbsRDMAError)."""

from __future__ import annotations

import ctypes
import errno
import os

from ..device import abi
from ..device.queues import WorkQueueProducer
from ..device.shm import Ring
from ..enums import (
    IBV_MTU_1024, IBV_QP_ACCESS_FLAGS, IBV_QP_AV, IBV_QP_DEST_QPN, IBV_QP_MAX_DEST_RD_ATOMIC,
    IBV_QP_MAX_QP_RD_ATOMIC, IBV_QP_MIN_RNR_TIMER, IBV_QP_PATH_MTU, IBV_QP_PKEY_INDEX, IBV_QP_PORT,
    IBV_QP_QKEY, IBV_QP_RETRY_CNT, IBV_QP_RNR_RETRY, IBV_QP_RQ_PSN, IBV_QP_SQ_PSN, IBV_QP_STATE,
    IBV_QP_TIMEOUT, IBV_QPS_INIT, IBV_QPS_RESET, IBV_QPS_RTR, IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD,
    IBV_SEND_INLINE, IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_SEND_WITH_IMM, IBV_WR_SEND_WITH_INV,
    ibv_qp_attr_mask,
)
from .addr import AHAttr
from .cq import bswap32
from .errors import PyverbsRDMAError

_IMM_OPS = (IBV_WR_SEND_WITH_IMM, IBV_WR_RDMA_WRITE_WITH_IMM)
# mask bit -> QPAttr field sent to the daemon
_FIELDS = [(int(b), b.name[len("IBV_QP_"):].lower()) for b in ibv_qp_attr_mask]
_ATTR_NAME = {"state": "qp_state", "cur_state": "cur_qp_state", "access_flags": "qp_access_flags",
              "av": "ah_attr", "dest_qpn": "dest_qp_num", "max_qp_rd_atomic": "max_rd_atomic",
              "port": "port_num"}
_NOT_SENT = ("alt_path", "path_mig_state", "rate_limit")     # the mask bit alone gets EOPNOTSUPP
# a plain int: ``int & IntFlag`` builds an IntFlag (two enum calls) on every post
_SEND_INLINE = int(IBV_SEND_INLINE)


class QPCap:
    def __init__(self, max_send_wr: int = 1, max_recv_wr: int = 10, max_send_sge: int = 1,
                 max_recv_sge: int = 1, max_inline_data: int = 0):
        self.max_send_wr = max_send_wr
        self.max_recv_wr = max_recv_wr
        self.max_send_sge = max_send_sge
        self.max_recv_sge = max_recv_sge
        self.max_inline_data = max_inline_data

    def to_wire(self) -> dict:
        return dict(self.__dict__)


class QPInitAttr:
    def __init__(self, qp_type: int = IBV_QPT_UD, qp_context=None, scq=None, rcq=None, srq=None,
                 cap: QPCap | None = None, sq_sig_all: int = 1):
        self.qp_type = qp_type
        self.qp_context = qp_context
        self.send_cq = scq
        self.recv_cq = rcq
        self.srq = srq
        self.cap = cap or QPCap()
        self.sq_sig_all = sq_sig_all


class QPAttr:
    def __init__(self, qp_state: int = IBV_QPS_INIT, cur_qp_state: int = IBV_QPS_RESET):
        self.qp_state = qp_state
        self.cur_qp_state = cur_qp_state
        self.path_mtu = IBV_MTU_1024
        self.path_mig_state = 0
        self.qkey = 0
        self.rq_psn = 0
        self.sq_psn = 0
        self.dest_qp_num = 0
        self.qp_access_flags = 0
        self.cap = QPCap()
        self.ah_attr = AHAttr()
        self.pkey_index = 0
        self.en_sqd_async_notify = 0
        self.sq_draining = 0
        self.max_rd_atomic = 0
        self.max_dest_rd_atomic = 0
        self.min_rnr_timer = 0
        self.port_num = 1
        self.timeout = 0
        self.retry_cnt = 0
        self.rnr_retry = 0

    def to_wire(self, mask: int) -> dict:
        out = {}
        for bit, name in _FIELDS:
            if mask & bit:
                field = _ATTR_NAME.get(name, name)
                if field in _NOT_SENT:
                    continue
                v = getattr(self, field)
                out[field] = v.to_wire() if hasattr(v, "to_wire") else int(v)
        return out


class QP:
    def __init__(self, pd, init_attr: QPInitAttr, qp_attr: QPAttr | None = None):
        self.pd = pd
        self.ctx = pd.ctx
        self.qp_type = init_attr.qp_type
        self.init_attr = init_attr
        cap = init_attr.cap
        self.cap = cap
        if init_attr.send_cq is None or init_attr.recv_cq is None:
            raise PyverbsRDMAError("Failed to create QP: send and receive CQs are required", errno.EINVAL)
        self.sq = Ring.create(max(cap.max_send_wr, 1), abi.send_slot_size(cap.max_send_sge, cap.max_inline_data),
                              "softrdma-sq")
        self.rq = None if init_attr.srq is not None else \
            Ring.create(max(cap.max_recv_wr, 1), abi.recv_slot_size(cap.max_recv_sge), "softrdma-rq")
        self.doorbell = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        fds = [self.sq.fd] + ([self.rq.fd] if self.rq else []) + [self.doorbell]
        try:
            reply, _ = self.ctx.conn.call(
                "create_qp", fds=fds, pd=pd.handle, qp_type=int(self.qp_type), send_cq=init_attr.send_cq.handle,
                recv_cq=init_attr.recv_cq.handle, srq=init_attr.srq.handle if init_attr.srq else None,
                cap=cap.to_wire(), sq_sig_all=bool(init_attr.sq_sig_all))
        except PyverbsRDMAError:
            self._release()
            raise
        self.handle = reply["qp"]
        self.qp_num = reply["qp_num"]
        self.sq_wq = WorkQueueProducer(self.sq, self.doorbell)
        self.rq_wq = WorkQueueProducer(self.rq, self.doorbell) if self.rq else None
        self.closed = False
        if qp_attr is not None:
            if self.qp_type == IBV_QPT_UD:
                self.to_rts(qp_attr)
            else:
                self.to_init(qp_attr)

    # ---------------------------------------------------------------- state
    def modify(self, qp_attr: QPAttr, attr_mask: int) -> None:
        self.ctx.conn.call("modify_qp", qp=self.handle, attr=qp_attr.to_wire(int(attr_mask)), mask=int(attr_mask))

    def query(self, attr_mask: int = 0) -> tuple[QPAttr, QPInitAttr]:
        a = self.ctx.conn.call("query_qp", qp=self.handle, mask=int(attr_mask))[0]["attr"]
        attr = QPAttr()
        for k, v in a.items():
            if k == "ah_attr":
                v = AHAttr.from_wire(v)
            elif k == "cap":
                v = QPCap(**v)
            setattr(attr, k, v)
        return attr, self.init_attr

    @property
    def qp_state(self) -> int:
        return self.query(IBV_QP_STATE)[0].qp_state

    def to_init(self, qp_attr: QPAttr) -> None:
        if self.qp_type == IBV_QPT_UD:
            mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY
        else:
            mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS
        qp_attr.qp_state = IBV_QPS_INIT
        self.modify(qp_attr, mask)

    def to_rtr(self, qp_attr: QPAttr) -> None:
        if self.qp_state == IBV_QPS_RESET:
            self.to_init(qp_attr)
        mask = IBV_QP_STATE
        if self.qp_type in (IBV_QPT_UC, IBV_QPT_RC):
            mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN
        if self.qp_type == IBV_QPT_RC:
            mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER
        qp_attr.qp_state = IBV_QPS_RTR
        self.modify(qp_attr, mask)

    def to_rts(self, qp_attr: QPAttr) -> None:
        if self.qp_state < IBV_QPS_RTR:
            self.to_rtr(qp_attr)
        mask = IBV_QP_STATE | IBV_QP_SQ_PSN
        if self.qp_type == IBV_QPT_RC:
            mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC
        qp_attr.qp_state = 3
        self.modify(qp_attr, mask)

    # ---------------------------------------------------------------- posting
    def post_recv(self, wr, bad_wr=None) -> None:
        if self.rq_wq is None:
            raise PyverbsRDMAError("Failed to post receive: the QP uses an SRQ", errno.EINVAL)
        while wr is not None:
            if len(wr.sg_list) > self.cap.max_recv_sge:
                raise PyverbsRDMAError("Failed to post receive", errno.EINVAL)
            slot = self.rq_wq.next_slot()
            if slot is None:
                raise PyverbsRDMAError("Failed to post receive: queue full", errno.ENOMEM)
            abi.encode_recv_wqe(slot, wr.wr_id, [s.as_tuple() for s in wr.sg_list])
            self.rq_wq.commit()
            wr = wr.next_wr

    def post_send(self, wr, bad_wr=None) -> None:
        while wr is not None:
            sges = [s.as_tuple() for s in wr.sg_list]
            inline = None
            if wr.send_flags & _SEND_INLINE:
                inline = b"".join(ctypes.string_at(a, n) for a, n, _ in sges)
                if len(inline) > self.cap.max_inline_data:
                    raise PyverbsRDMAError("Failed to post send: inline data exceeds max_inline_data", errno.EINVAL)
            elif len(sges) > self.cap.max_send_sge:
                raise PyverbsRDMAError("Failed to post send: too many SGEs", errno.EINVAL)
            slot = self.sq_wq.next_slot()
            if slot is None:
                raise PyverbsRDMAError("Failed to post send: queue full", errno.ENOMEM)
            if wr.opcode in _IMM_OPS:
                imm = bswap32(wr.imm_data & 0xFFFFFFFF)      # ibv_send_wr.imm_data is __be32
            elif wr.opcode == IBV_WR_SEND_WITH_INV:
                imm = wr.invalidate_rkey
            else:
                imm = 0
            abi.encode_send_wqe(slot, wr.wr_id, wr.opcode, wr.send_flags, sges, inline=inline, imm_data=imm,
                                remote_addr=wr.remote_addr, rkey=wr.rkey, compare_add=wr.compare_add,
                                swap=wr.swap, ah_handle=wr.ah.handle if wr.ah is not None else 0,
                                remote_qpn=wr.remote_qpn, remote_qkey=wr.remote_qkey)
            self.sq_wq.commit()
            wr = wr.next_wr

    # ---------------------------------------------------------------- teardown
    def _release(self) -> None:
        os.close(self.doorbell)
        self.sq.close()
        if self.rq is not None:
            self.rq.close()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if not self.ctx.closed and not self.ctx.conn.dead:
                self.ctx.conn.call("destroy_qp", qp=self.handle)
            self._release()
