"""Shared receive queues: create (the ring and the doorbell the library
brings), modify (the limit), resize (a new ring), query, destroy, and what freeing one undoes.
Tag-matching SRQs (IBV_SRQT_TM): create with the tag list's sizes and the
CQ its list operations complete on, ibv_post_srq_ops, and the QPs on one
(``TmDevQP``, ``attach_tm``: the SEND receive path of ``transport.tm``)."""

from __future__ import annotations

import errno
import os

from ...errors import VerbsError
from ...transport import tm
from ...transport.qp import SRQ
from ...uapi import abi
from ...uapi import request as rq
from ...uapi.queues import WorkQueueConsumer
from ..core import DevQP
from ..wqe import decode_recv_wqe
from ..session import room_for
from .fds import ring, srq_queue
from .xrcd import forget_xrc_srq


def cmd_create_srq(daemon, c, m, fds, tm_attrs=None):
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
    if tm_attrs is not None:
        srq.tm = tm.TagMatching(*tm_attrs)
    dsrq = srq_queue(daemon, c, srq, fds, max_sge)
    dsrq.handle = c.add("srq", dsrq)
    dev.srqs.append(dsrq)
    daemon.adopt_sleep(dsrq.wq)
    return {"srq": dsrq.handle}, []


def cmd_create_tm_srq(daemon, c, m, fds):
    """ibv_create_srq_ex with IBV_SRQT_TM: a basic SRQ (its ordinary
    receive buffers take the unexpected and NO_TAG messages) with a tag list
    of ``max_num_tags`` entries and the CQ its list operations complete on;
    sizes beyond the device's tm_caps are EINVAL, as mlx5's create_srq_ex."""
    c.get(m.get("pd"), "pd")
    cq = c.get(m.get("cq"), "cq")
    tags, ops = rq.uint(m, "max_num_tags"), rq.uint(m, "max_ops")
    if not 1 <= tags <= tm.MAX_NUM_TAGS or not 1 <= ops <= tm.MAX_OPS:
        raise VerbsError(errno.EINVAL, f"max_num_tags {tags} (1..{tm.MAX_NUM_TAGS}), max_ops {ops}"
                                       f" (1..{tm.MAX_OPS})")
    return cmd_create_srq(daemon, c, m, fds, (tags, ops, cq))


def cmd_post_srq_ops(daemon, c, m, fds):
    """ibv_post_srq_ops, one operation: ADD (the entry's handle back), DEL,
    SYNC; a signalled one completes on the SRQ's CQ before the reply."""
    dsrq = c.get(m.get("srq"), "srq")
    t = dsrq.srq.tm
    if t is None:                                   # mlx5: no command QP on a non-TM SRQ
        raise VerbsError(errno.EINVAL, "not a tag-matching SRQ")
    sges = m.get("sg_list") or []
    if not isinstance(sges, list) or not all(
            isinstance(g, list) and len(g) == 3 and all(type(v) is int and v >= 0 for v in g) for g in sges):
        raise VerbsError(errno.EINVAL, "sg_list: a list of [addr, length, lkey]")
    try:
        h = t.post_op(rq.uint(m, "wr_id", rq.U64, 0), rq.uint(m, "opcode"), rq.uint(m, "flags", rq.U32, 0),
                      rq.uint(m, "unexpected_cnt", rq.U32, 0), rq.uint(m, "handle", rq.U32, 0),
                      rq.uint(m, "recv_wr_id", rq.U64, 0), [tuple(g) for g in sges if g[1]],
                      rq.uint(m, "tag", rq.U64, 0), rq.uint(m, "mask", rq.U64, 0))
    except tm.TmError as e:
        raise VerbsError(e.errno, str(e)) from None
    return {"handle": h}, []


class TmDevQP(DevQP):
    """A QP on a TM SRQ: the WQEs the device posts itself on it (rendezvous
    READs, FINs) are not the application's, so its ring does not count them."""

    def publish_sq(self) -> None:
        sq = self.qp.sq
        self.sq.publish(len(sq) - tm.hidden(sq) if sq else 0)


def attach_tm(qp) -> None:
    """A QP joins a TM SRQ (``transport.tm.attach``: RC only, EINVAL)."""
    tm.attach(qp)


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
