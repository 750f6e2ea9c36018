"""Shared receive queues: create (the ring and the doorbell the library
brings), modify (the limit), query, destroy, and what freeing one undoes."""

from __future__ import annotations

import contextlib
import errno
import os
import selectors

from ...errors import VerbsError
from ...transport.qp import SRQ
from ...uapi import abi
from ...uapi import request as rq
from ..core import DevSRQ
from ..session import room_for
from .fds import eventfd, ring


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


def cmd_query_srq(daemon, c, m, fds):
    """ibv_query_srq (rxe_query_srq): max_wr, max_sge and the limit, which
    reads 0 once the limit event has fired (it is one-shot)."""
    srq = c.get(m.get("srq"), "srq").srq
    return {"max_wr": srq.max_wr, "max_sge": srq.max_sge, "srq_limit": srq.srq_limit}, []


def cmd_destroy_srq(daemon, c, m, fds):
    dsrq = c.get(m.get("srq"), "srq")
    if any(o[0] == "qp" and o[1].qp.srq is dsrq.srq for o in c.objects.values()):
        raise VerbsError(errno.EBUSY, "SRQ still used by a QP")
    free_srq(daemon, c, dsrq)
    del c.objects[m["srq"]]
    return {}, []


def free_srq(daemon, c, dsrq) -> None:
    c.device.srqs.remove(dsrq)
    try:
        daemon.sel.unregister(dsrq.doorbell)
    except (KeyError, ValueError):
        pass
    os.close(dsrq.doorbell)
    dsrq.ring.close()
