"""Shared receive queues: create (the ring and the doorbell the library
brings), modify (the limit), resize (a new ring), query, destroy, and what freeing one undoes."""

from __future__ import annotations

import contextlib
import errno
import os
import selectors

from ...errors import VerbsError
from ...transport.qp import SRQ
from ...uapi import abi
from ...uapi import request as rq
from ...uapi.queues import WorkQueueConsumer
from ..core import DevSRQ
from ..wqe import decode_recv_wqe
from ..session import room_for
from .fds import eventfd, ring
from .xrcd import forget_xrc_srq


def cmd_create_srq(daemon, c, m, fds):
    pd = c.get(m.get("pd"), "pd")
    if len(fds) != 2:
        raise VerbsError(errno.EINVAL, "create_srq needs 2 fds")
    dev = c.device
    max_wr, max_sge = rq.uint(m, "max_wr", rq.U32, 256), rq.uint(m, "max_sge", rq.U32, 4)
    if not 1 <= max_wr <= dev.caps.max_qp_wr or max_sge > dev.caps.max_sge:     # rxe_srq_chk_init
        raise VerbsError(errno.EINVAL, f"SRQ max_wr {max_wr} (1..{dev.caps.max_qp_wr}), max_sge {max_sge}"
                                       f" (at most {dev.caps.max_sge})")
    room_for(c, "srq")
    srq = SRQ(max_wr, max_sge, rq.uint(m, "srq_limit", rq.U32, 0), events=dev.events)
    srq.pd = pd
    with contextlib.ExitStack() as undo:
        r = ring(fds[0], "SRQ", min_slot=abi.recv_slot_size(max_sge))
        undo.callback(r.close)
        doorbell = eventfd(fds[1], "SRQ")
        undo.callback(os.close, doorbell)
        dsrq = DevSRQ(0, srq, r, doorbell, c)
        daemon.sel.register(doorbell, selectors.EVENT_READ, ("doorbell", dsrq))
        undo.pop_all()
    dsrq.handle = c.add("srq", dsrq)
    dev.srqs.append(dsrq)
    daemon.adopt_sleep(dsrq.wq)
    return {"srq": dsrq.handle}, []


def cmd_modify_srq(daemon, c, m, fds):
    c.get(m.get("srq"), "srq").srq.modify(rq.uint(m, "srq_limit"))
    return {}, []


def cmd_resize_srq(daemon, c, m, fds):
    """ibv_modify_srq with IBV_SRQ_MAX_WR (and maybe IBV_SRQ_LIMIT), as
    rxe_srq_chk_attr then rxe_srq_from_attr: the library brings a new ring
    of at least ``max_wr`` slots; the WQEs still posted move with the SRQ
    (EINVAL when they do not fit, as rxe_queue_resize)."""
    dsrq = c.get(m.get("srq"), "srq")
    if len(fds) != 1:
        raise VerbsError(errno.EINVAL, "resize_srq needs the ring fd")
    srq, caps = dsrq.srq, c.device.caps
    max_wr = rq.uint(m, "max_wr", rq.U32)
    limit = rq.uint(m, "srq_limit", rq.U32, None)
    if not 1 <= max_wr <= caps.max_qp_wr:
        raise VerbsError(errno.EINVAL, f"max_wr({max_wr}) not in 1..max_srq_wr({caps.max_qp_wr})")
    if limit is None and srq.srq_limit and max_wr < srq.srq_limit:
        raise VerbsError(errno.EINVAL, f"max_wr ({max_wr}) < srq->limit ({srq.srq_limit})")
    if limit is not None and limit > max_wr:
        raise VerbsError(errno.EINVAL, f"srq_limit ({limit}) > max_wr ({max_wr})")
    new = ring(fds[0], "SRQ", min_slot=abi.recv_slot_size(srq.max_sge))
    wq = dsrq.wq
    while (slot := wq.take()) is not None:          # what the library posted so far joins the SRQ first
        try:
            srq.post_recv(decode_recv_wqe(slot))
        except (ValueError, VerbsError):
            pass                                    # a malformed WQE: dropped, as the data path drops it
        wq.release()
    count = len(srq.rq)
    if new.nslots < max_wr or count > max_wr:
        got = new.nslots
        new.close()
        wq.publish(count)
        raise VerbsError(errno.EINVAL, f"SRQ of {max_wr} WQEs: {count} posted, a ring of {got} slots")
    # the posted WQEs keep their places in the new ring's accounting: its
    # first ``count`` slots are taken until messages consume them
    new.producer = count
    new.consumer = 0
    nwq = WorkQueueConsumer(new)
    nwq.release(count)
    dsrq.ring, dsrq.wq = new, nwq
    srq.max_wr = max_wr
    if limit is not None:
        srq.modify(limit)
    daemon.adopt_sleep(nwq)
    wq.ring.close()
    return {"max_wr": max_wr}, []


def cmd_query_srq(daemon, c, m, fds):
    """ibv_query_srq (rxe_query_srq): max_wr, max_sge and the limit, which
    reads 0 once the limit event has fired (it is one-shot)."""
    srq = c.get(m.get("srq"), "srq").srq
    return {"max_wr": srq.max_wr, "max_sge": srq.max_sge, "srq_limit": srq.srq_limit}, []


def cmd_destroy_srq(daemon, c, m, fds):
    dsrq = c.get(m.get("srq"), "srq")
    if any(o[0] == "qp" and o[1].qp.srq is dsrq.srq and o[1].qp.xrcd is None for o in c.objects.values()):
        raise VerbsError(errno.EBUSY, "SRQ still used by a QP")
    free_srq(daemon, c, dsrq)
    del c.objects[m["srq"]]
    return {}, []


def free_srq(daemon, c, dsrq) -> None:
    c.device.srqs.remove(dsrq)
    if dsrq.srq.xrcd is not None:
        forget_xrc_srq(c.device, dsrq.srq)
    try:
        daemon.sel.unregister(dsrq.doorbell)
    except (KeyError, ValueError):
        pass
    os.close(dsrq.doorbell)
    dsrq.ring.close()
