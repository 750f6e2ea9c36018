"""pyverbs.wq: receive work queues, RSS indirection tables and the RX hash
configuration (pyverbs/wq.pyx).

The attribute classes are ibv_wq_init_attr, ibv_wq_attr,
ibv_rwq_ind_table_init_attr and ibv_rx_hash_conf, with pyverbs' checks.
``WQ`` is a receive ring shared with the daemon as a QP's (posting writes
the ring, no system call); the daemon fills it with the frames an RSS QP's
Toeplitz hash sends to it (``device.raw_queues``)."""

from __future__ import annotations

import errno
import os
import struct
import weakref

from ..enums import IBV_WQT_RQ
from ..uapi import abi
from ..uapi.commands import CMD
from ..uapi.queues import WorkQueueProducer
from ..uapi.shm import Ring
from .base import VerbsObject
from .connection import Gone
from .errors import PyverbsRDMAError, PyverbsUserError


class WQInitAttr:
    def __init__(self, wq_context=None, wq_pd=None, wq_cq=None, wq_type=IBV_WQT_RQ,
                 max_wr=100, max_sge=1, comp_mask=0, create_flags=0):
        self.wq_context = wq_context
        self.pd = wq_pd
        self.cq = wq_cq
        self.wq_type = wq_type
        self.max_wr = max_wr
        self.max_sge = max_sge
        self.comp_mask = comp_mask
        self.create_flags = create_flags


class WQAttr:
    def __init__(self, attr_mask=0, wq_state=0, curr_wq_state=0, flags=0, flags_mask=0):
        self.attr_mask = attr_mask
        self.wq_state = wq_state
        self.curr_wq_state = curr_wq_state
        self.flags = flags
        self.flags_mask = flags_mask


class WQ(VerbsObject):
    """ibv_create_wq: a receive WQ on a Context (its PD and CQ from
    ``WQInitAttr``); ``modify`` (ibv_modify_wq), ``post_recv``
    (ibv_post_wq_recv), ``wqn``.  Closing it closes the indirection tables
    that name it (and so their QPs) first."""

    destroy_cmd = CMD.destroy_wq
    close_rank = 4
    ctx_close_rank = 1

    def __init__(self, ctx, attr: WQInitAttr):
        self.closed = True
        self.ctx = ctx
        self.init_attr = attr
        self.pd, self.cq = attr.pd, attr.cq
        a = ctx._attr
        if attr.pd is None or attr.cq is None:
            raise PyverbsRDMAError("Failed to create WQ: a PD and a CQ are required", errno.EINVAL)
        if not 0 < attr.max_wr <= a["max_qp_wr"] or not 0 < attr.max_sge <= a["max_sge"]:
            raise PyverbsRDMAError("Failed to create WQ", errno.EINVAL)
        self.max_sge = attr.max_sge
        self.ring = Ring.create(attr.max_wr, abi.recv_slot_size(attr.max_sge), "softrdma-wq")
        self.doorbell = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        try:
            reply, _ = ctx.conn.call(CMD.create_wq, fds=[self.ring.fd, self.doorbell], pd=attr.pd.handle,
                                     cq=attr.cq.handle, wq_type=int(attr.wq_type), max_wr=int(attr.max_wr),
                                     max_sge=int(attr.max_sge), create_flags=int(attr.create_flags))
        except PyverbsRDMAError as e:
            self._release()
            raise PyverbsRDMAError(f"Failed to create WQ ({getattr(e, 'reason', None) or e})",
                                   e.error_code) from None
        self.handle = reply["wq"]
        self.wq_num = reply["wq_num"]
        self.wq = WorkQueueProducer(self.ring, self.doorbell, attr.max_wr)
        self.closed = False
        self._tables = weakref.WeakSet()
        ctx.conn.track(self)
        attr.pd.add_ref(self)

    @property
    def wqn(self) -> int:
        return self.wq_num

    def add_ref(self, obj) -> None:
        self._tables.add(obj)

    def _close_children(self) -> None:
        for t in list(self._tables):
            t.close()

    def modify(self, wq_attr: "WQAttr") -> None:
        try:
            self.ctx.conn.call(CMD.modify_wq, wq=self.handle, attr_mask=int(wq_attr.attr_mask),
                               wq_state=int(wq_attr.wq_state), curr_wq_state=int(wq_attr.curr_wq_state),
                               flags_mask=int(wq_attr.flags_mask))
        except PyverbsRDMAError as e:
            raise PyverbsRDMAError("Failed to modify WQ", e.error_code) from None

    def post_recv(self, wr, bad_wr=None) -> None:
        while wr is not None:
            if len(wr.sg_list) > self.max_sge:
                raise PyverbsRDMAError("Failed to post recv", errno.EINVAL)
            slot = self.wq.next_slot()
            if slot is None:
                self.ctx.conn.check_alive("post recv")
                raise PyverbsRDMAError("Failed to post recv", errno.ENOMEM)
            try:
                abi.encode_recv_wqe(slot, wr.wr_id, [s.as_tuple() for s in wr.sg_list])
            except (struct.error, TypeError, ValueError, OverflowError):
                raise PyverbsRDMAError("Failed to post recv", errno.EINVAL) from None
            self.wq.commit()
            wr = wr.next_wr

    def device_gone(self) -> None:
        self.wq = Gone("post recv")

    def _release(self) -> None:
        os.close(self.doorbell)
        self.ring.close()


class RwqIndTableInitAttr:
    def __init__(self, log_ind_tbl_size=5, wqs_list=None, comp_mask=0):
        wqs_list = list(wqs_list or [])
        if log_ind_tbl_size <= 0:
            raise PyverbsUserError('Invalid indirection table size. Log size must be > 0')
        if (1 << log_ind_tbl_size) < len(wqs_list):
            raise PyverbsUserError(f'Requested table size ({1 << log_ind_tbl_size}) is smaller '
                                   f'than the number of wqs ({len(wqs_list)})')
        self.log_ind_tbl_size = log_ind_tbl_size
        self.wqs_list = wqs_list
        self.comp_mask = comp_mask


class RwqIndTable(VerbsObject):
    """ibv_create_rwq_ind_table: 2^log_ind_tbl_size entries over the WQs
    given (repeated when fewer); ``wqs``; an RSS QP on it is a QPEx with
    IBV_QP_INIT_ATTR_IND_TABLE.  Closing it closes its QPs first."""

    destroy_cmd = CMD.destroy_rwq_ind_table
    close_rank = 2
    ctx_close_rank = 1

    def __init__(self, ctx, attr: RwqIndTableInitAttr):
        self.closed = True
        self.ctx = ctx
        self.wqs = list(attr.wqs_list)
        try:
            reply, _ = ctx.conn.call(CMD.create_rwq_ind_table, log_size=int(attr.log_ind_tbl_size),
                                     wqs=[wq.handle for wq in self.wqs])
        except PyverbsRDMAError as e:
            raise PyverbsRDMAError(f"Failed to create RwqIndTable ({getattr(e, 'reason', None) or e})",
                                   e.error_code) from None
        self.handle = reply["ind_table"]
        self.ind_tbl_num = reply["ind_tbl_num"]
        self.closed = False
        self._qps = weakref.WeakSet()
        for wq in self.wqs:
            wq.add_ref(self)

    def add_ref(self, obj) -> None:
        self._qps.add(obj)

    def _close_children(self) -> None:
        for qp in list(self._qps):
            qp.close()


class RxHashConf:
    """ibv_rx_hash_conf: the hash function, its key, and which header fields
    (IBV_RX_HASH_*) feed it."""

    def __init__(self, rx_hash_function=0, rx_hash_key_len=0, rx_hash_key=None, rx_hash_fields_mask=0):
        self.rx_hash_function = rx_hash_function
        self._key_len = 0
        self._key = b""
        if rx_hash_key:
            if rx_hash_key_len != len(rx_hash_key):
                raise PyverbsUserError('Length of rx_hash_key not equal to rx_hash_key_len')
            self.rx_hash_key_len = rx_hash_key_len
            self.rx_hash_key = rx_hash_key
        self.rx_hash_fields_mask = rx_hash_fields_mask

    @property
    def rx_hash_key_len(self):
        return self._key_len

    @rx_hash_key_len.setter
    def rx_hash_key_len(self, val):
        if val <= 0:
            raise PyverbsUserError('Invalid rx_hash_key_len. Must be greater then 0')
        self._key_len = val

    @property
    def rx_hash_key(self):
        return list(self._key)

    @rx_hash_key.setter
    def rx_hash_key(self, vals):
        self._key = bytes(vals)
        self._key_len = len(self._key)
