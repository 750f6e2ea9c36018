"""Shared receive queues (pyverbs.srq): SRQ, SrqAttr, SrqInitAttr; a
tag-matching SRQ (``tm=``) and ibv_post_srq_ops (``post_srq_ops``: each
operation is a control command -- the list lives in the device, which
matches incoming messages against it, ``transport.tm``).

An XRC SRQ (``SRQ(pd, init_attr, xrcd=, cq=)``, what pyverbs' SRQ makes of
an SrqInitAttrEx of type IBV_SRQT_XRC) is also on an XRC domain and has
its own CQ; ``get_srq_num`` gives the number an XRC sender names it by."""

from __future__ import annotations

import errno
import os

from ..enums import IBV_SRQ_LIMIT, IBV_SRQ_MAX_WR
from ..uapi import abi
from ..uapi.commands import CMD
from ..uapi.queues import WorkQueueProducer
from .base import PDObject
from .connection import Gone
from .cq import users
from .errors import PyverbsRDMAError
from .pd import RES_TYPE_SRQ, alloc_ring, free_ring


class SrqAttr:
    def __init__(self, max_wr: int = 100, max_sge: int = 1, srq_limit: int = 0):
        self.max_wr, self.max_sge, self.srq_limit = max_wr, max_sge, srq_limit


class SrqInitAttr:
    def __init__(self, attr: SrqAttr | None = None):
        self.attr = attr or SrqAttr()


class SRQ(PDObject):
    destroy_cmd = CMD.destroy_srq
    close_rank = 6                  # a PD closes its SRQs last (pyverbs' PD.close)

    def __init__(self, pd, init_attr: SrqInitAttr, tm: tuple | None = None, *, xrcd=None, cq=None):
        """``tm``: (cq, max_num_tags, max_ops) for a tag-matching SRQ."""
        a = init_attr.attr
        self.pd = pd
        self.max_sge = a.max_sge
        self.cq = tm[0] if tm is not None else None
        self.ring = alloc_ring(pd, a.max_wr, abi.recv_slot_size(a.max_sge), "softrdma-srq", RES_TYPE_SRQ)
        self.doorbell = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        try:
            if tm is not None:
                reply, _ = pd.ctx.conn.call(CMD.create_tm_srq, fds=[self.ring.fd, self.doorbell], pd=pd.handle,
                                            max_wr=a.max_wr, max_sge=a.max_sge, srq_limit=a.srq_limit,
                                            cq=tm[0].handle, max_num_tags=tm[1], max_ops=tm[2])
            elif xrcd is not None:
                reply, _ = pd.ctx.conn.call(CMD.create_xrc_srq, fds=[self.ring.fd, self.doorbell],
                                            xrcd=xrcd.handle, pd=pd.handle, cq=cq.handle, max_wr=a.max_wr,
                                            max_sge=a.max_sge, srq_limit=a.srq_limit)
            else:
                reply, _ = pd.ctx.conn.call(CMD.create_srq, fds=[self.ring.fd, self.doorbell], pd=pd.handle,
                                            max_wr=a.max_wr, max_sge=a.max_sge, srq_limit=a.srq_limit)
        except PyverbsRDMAError:
            free_ring(self.ring)
            os.close(self.doorbell)
            raise
        self.handle = reply["srq"]
        self.xrcd, self.xrc_cq = xrcd, cq
        self.srq_num = reply["srq_num"] if xrcd is not None else None
        self.wq = WorkQueueProducer(self.ring, self.doorbell, a.max_wr)
        self.closed = False
        self.pd.add_ref(self)
        pd.ctx.conn.track(self)
        if xrcd is not None:
            xrcd.add_ref(self)

    def get_srq_num(self) -> int:
        """ibv_get_srq_num: an XRC SRQ's number (a basic SRQ has none to
        give: EOPNOTSUPP)."""
        if self.srq_num is None:
            raise PyverbsRDMAError("Failed to retrieve SRQ number", errno.EOPNOTSUPP)
        return self.srq_num

    def device_gone(self) -> None:
        """The daemon is gone: posting fails from now on."""
        self.wq = Gone("post SRQ recv")

    def post_recv(self, wr, bad_wr=None) -> None:
        while wr is not None:
            if len(wr.sg_list) > self.max_sge:
                raise PyverbsRDMAError("Failed to post receive to SRQ", errno.EINVAL)
            slot = self.wq.next_slot()
            if slot is None:
                self.pd.ctx.conn.check_alive("post SRQ recv")    # (nothing drains a dead daemon's queues)
                raise PyverbsRDMAError("Failed to post receive to SRQ: queue full", errno.ENOMEM)
            abi.encode_recv_wqe(slot, wr.wr_id, [s.as_tuple() for s in wr.sg_list])
            self.wq.commit()
            wr = wr.next_wr

    def post_srq_ops(self, wr, bad_wr=None) -> None:
        """ibv_post_srq_ops: each operation of the chain in order; an ADD
        gets its entry's handle (``wr.handle``).  The first refused one
        stops the chain: 'post SRQ ops failed.' with the device's errno
        (EINVAL: not a TM SRQ, a bad opcode or handle, too many SGEs;
        ENOMEM: the tag list is full)."""
        conn = self.pd.ctx.conn
        while wr is not None:
            sges = [s.as_tuple() for s in wr.sg_list[:wr.num_sge]]
            try:
                reply, _ = conn.call(CMD.post_srq_ops, srq=self.handle, wr_id=wr.wr_id, opcode=int(wr.opcode),
                                     flags=int(wr.flags), unexpected_cnt=wr.unexpected_cnt, handle=wr.handle,
                                     recv_wr_id=wr.recv_wr_id, sg_list=[list(g) for g in sges], tag=wr.tag,
                                     mask=wr.mask)
            except PyverbsRDMAError as e:
                raise PyverbsRDMAError("post SRQ ops failed.", e.error_code) from None
            if wr.opcode == 0:                 # IBV_WR_TAG_ADD: the handle is an output
                wr.handle = reply["handle"]
            wr = wr.next_wr

    def modify(self, attr: SrqAttr, comp_mask: int) -> None:
        """ibv_modify_srq: IBV_SRQ_LIMIT arms the limit event (EINVAL above
        max_wr); IBV_SRQ_MAX_WR resizes the SRQ -- a new ring goes to the
        daemon, which keeps the WQEs still posted (EINVAL when they do not
        fit, or max_wr below the armed limit or above max_srq_wr, as
        rxe_srq_chk_attr and rxe_queue_resize)."""
        mask = int(comp_mask)
        if mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT):
            raise PyverbsRDMAError("Failed to modify SRQ", errno.EINVAL)
        if mask & IBV_SRQ_MAX_WR:
            self._resize(attr.max_wr, attr.srq_limit if mask & IBV_SRQ_LIMIT else None)
        elif mask & IBV_SRQ_LIMIT:
            try:
                self.pd.ctx.conn.call(CMD.modify_srq, srq=self.handle, srq_limit=attr.srq_limit)
            except PyverbsRDMAError as e:
                raise PyverbsRDMAError("Failed to modify SRQ", e.error_code) from None

    def _resize(self, max_wr: int, srq_limit: int | None) -> None:
        if type(max_wr) is not int or not 0 < max_wr <= 0xFFFFFFFF:
            raise PyverbsRDMAError("Failed to modify SRQ", errno.EINVAL)
        ring = alloc_ring(self.pd, max_wr, abi.recv_slot_size(self.max_sge), "softrdma-srq", RES_TYPE_SRQ)
        try:
            self.pd.ctx.conn.call(CMD.resize_srq, fds=[ring.fd], srq=self.handle, max_wr=max_wr,
                                  srq_limit=srq_limit)
        except PyverbsRDMAError as e:
            free_ring(ring)
            raise PyverbsRDMAError("Failed to modify SRQ", e.error_code) from None
        old, self.ring = self.ring, ring
        self.wq = WorkQueueProducer(ring, self.doorbell, max_wr)
        free_ring(old)

    def query(self) -> SrqAttr:
        """ibv_query_srq: max_wr, max_sge and srq_limit (0 once the limit
        event has fired)."""
        try:
            reply, _ = self.pd.ctx.conn.call(CMD.query_srq, srq=self.handle)
        except PyverbsRDMAError as e:
            raise PyverbsRDMAError("Failed to query SRQ", e.error_code) from None
        return SrqAttr(reply["max_wr"], reply["max_sge"], reply["srq_limit"])

    def _close_children(self) -> None:
        for qp in users(self.pd.ctx, "srq", self):     # pyverbs: an SRQ closes the QPs using it
            qp.close()

    def _release(self) -> None:
        os.close(self.doorbell)
        free_ring(self.ring)
