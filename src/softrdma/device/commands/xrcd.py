"""XRC domains and what lives in one (IBA 9.8; the kernel's
uverbs_std_types_xrcd.c and ib_uverbs_open_xrcd): open_xrcd, close_xrcd,
create_xrc_srq, create_xrc_qp.

An XRC domain opened with a file is shared by every context, of any
process, that opens it with the same inode, as ib_uverbs_open_xrcd finds
it in the device's inode table: the library passes the file's fd, the
daemon keys the domain by (st_dev, st_ino).  No domain for the inode
without O_CREAT is EAGAIN, one with O_EXCL is EINVAL; without an fd the
domain is the context's own.  Each open is a handle (``XrcdOpen``); the
domain lives while any handle does (``DevXRCD.opens``), and a handle with
SRQs or QPs made through it cannot be closed (EBUSY, the uobject's use
count).

An XRC SRQ has its number (what an XRCETH names: ``Device.xrc_srqs``), its
domain, its PD and its CQ.  An XRC INI QP is a send queue on a PD with a
send CQ and no receive queue; an XRC TGT QP is created on a domain and has
no queue at all: it answers what INI QPs send it, taking each message's
receive WQE, PD and CQ from the SRQ the XRCETH names (``transport.responder.
receive_xrc``), from the SRQs of the device it lives on.
"""

from __future__ import annotations

import contextlib
import errno
import os
import selectors

from ...errors import VerbsError
from ...transport.qp import QP, SRQ, QPCap
from ...uapi import abi
from ...uapi import request as rq
from ...transport.port import PortQP
from ..core import DevQP
from ..session import room_for
from .fds import eventfd, ring, srq_queue

XRC_INI, XRC_TGT = 9, 10               # IBV_QPT_XRC_SEND, IBV_QPT_XRC_RECV
O_CREAT, O_EXCL = os.O_CREAT, os.O_EXCL


class DevXRCD:
    """An XRC domain: the inode it is shared through (None: private) and
    its open handles."""

    def __init__(self, key):
        self.key = key
        self.opens = 0

    def __repr__(self) -> str:
        return f"DevXRCD(key={self.key}, opens={self.opens})"


class XrcdOpen:
    """One open of a domain: a client's "xrcd" object; the SRQs and QPs made
    through it name it as ``xrcd_open``."""

    __slots__ = ("domain",)

    def __init__(self, domain: DevXRCD):
        self.domain = domain


class _NoQueue:
    """The send queue an XRC TGT QP does not have: the daemon's ring walks
    (poll_rings, sleep/wake, publish) find it empty and asleep."""

    class ring:                        # noqa: N801 -- as a Ring is asked: its slot count
        nslots = 0

    @staticmethod
    def take():
        return None

    def release(self, n: int = 1) -> None:
        pass

    def publish(self, outstanding: int) -> None:
        pass

    def sleep(self) -> bool:
        return True

    def wake(self) -> None:
        pass

    def close(self) -> None:
        pass


NO_QUEUE = _NoQueue()


class DevTgtQP(DevQP):
    """An XRC TGT QP as the daemon hosts it: no rings, no doorbell; the
    receive slots its messages free are the SRQ's each message named."""

    def __init__(self, qp: QP, owner):
        PortQP.__init__(self, qp)
        self.handle = 0
        self.sq = self.sq_ring = NO_QUEUE
        self.rq = self.rq_ring = None
        self.doorbell = None
        self.owner = owner
        self.srq = None

    def publish_rq(self) -> None:
        srq = self.qp.srq
        if srq is not None and srq.host is not None:
            srq.host.wq.publish(len(srq.rq))


def cmd_open_xrcd(daemon, c, m, fds):
    """ibv_open_xrcd: the library checked the init attributes and brings
    the file's fd, or none for a private domain."""
    oflags = rq.uint(m, "oflags", rq.U32, 0)
    if len(fds) > 1:
        raise VerbsError(errno.EINVAL, "open_xrcd takes at most the file's fd")
    dev = c.device
    key = None
    xrcd = None
    if fds:
        try:
            st = os.fstat(fds[0])
        except OSError:
            raise VerbsError(errno.EBADF, "open_xrcd: bad file descriptor") from None
        key = (st.st_dev, st.st_ino)
        xrcd = dev.xrcds.get(key)
        if xrcd is None and not oflags & O_CREAT:
            raise VerbsError(errno.EAGAIN, "no XRC domain for this file, and no O_CREAT")
        if xrcd is not None and oflags & O_EXCL:
            raise VerbsError(errno.EINVAL, "the file has an XRC domain already (O_EXCL)")
    if xrcd is None:
        xrcd = DevXRCD(key)
        if key is not None:
            dev.xrcds[key] = xrcd
    xrcd.opens += 1
    return {"xrcd": c.add("xrcd", XrcdOpen(xrcd))}, []


def cmd_close_xrcd(daemon, c, m, fds):
    xopen = c.get(m.get("xrcd"), "xrcd")
    for kind, obj in c.objects.values():        # uverbs_free_xrcd: objects made through this handle
        if kind in ("srq", "qp") and getattr(obj, "xrcd_open", None) is xopen:
            raise VerbsError(errno.EBUSY, "XRC domain still used by an SRQ or a QP")
    free_xrcd(daemon, c, xopen)
    del c.objects[m["xrcd"]]
    return {}, []


def free_xrcd(daemon, c, xopen) -> None:
    xrcd = xopen.domain
    xrcd.opens -= 1
    if xrcd.opens == 0 and xrcd.key is not None:
        c.device.xrcds.pop(xrcd.key, None)


def _alloc_srqn(dev) -> int:
    n = dev.next_srqn
    while n in dev.xrc_srqs or n == 0:
        n = (n + 1) & 0xFFFFFF
    dev.next_srqn = (n + 1) & 0xFFFFFF
    return n


def cmd_create_xrc_srq(daemon, c, m, fds):
    """ibv_create_srq_ex with IBV_SRQT_XRC: on a domain, a PD and a CQ."""
    xopen = c.get(m.get("xrcd"), "xrcd")
    pd = c.get(m.get("pd"), "pd")
    cq = c.get(m.get("cq"), "cq")
    if len(fds) != 2:
        raise VerbsError(errno.EINVAL, "create_xrc_srq needs 2 fds")
    dev = c.device
    max_wr, max_sge = rq.uint(m, "max_wr", rq.U32, 256), rq.uint(m, "max_sge", rq.U32, 4)
    if not 1 <= max_wr <= dev.caps.max_qp_wr or max_sge > dev.caps.max_sge:
        raise VerbsError(errno.EINVAL, f"SRQ max_wr {max_wr} (1..{dev.caps.max_qp_wr}), max_sge {max_sge}"
                                       f" (at most {dev.caps.max_sge})")
    room_for(c, "srq")
    srq = SRQ(max_wr, max_sge, rq.uint(m, "srq_limit", rq.U32, 0), events=dev.events)
    srq.pd, srq.xrcd, srq.cq = pd, xopen.domain, cq
    dsrq = srq_queue(daemon, c, srq, fds, max_sge)
    srq.host = dsrq
    dsrq.xrcd_open = xopen
    srq.srq_num = _alloc_srqn(dev)
    dsrq.handle = c.add("srq", dsrq)
    dev.srqs.append(dsrq)
    dev.xrc_srqs[srq.srq_num] = srq
    daemon.adopt_sleep(dsrq.wq)
    return {"srq": dsrq.handle, "srq_num": srq.srq_num}, []


def forget_xrc_srq(dev, srq) -> None:
    """An XRC SRQ goes (free_srq): no XRCETH finds it any more, and a TGT QP
    whose last message used it lets go of its PD and CQ."""
    if dev.xrc_srqs.get(srq.srq_num) is srq:
        del dev.xrc_srqs[srq.srq_num]
    for dqp in dev.qps.values():
        qp = dqp.qp
        if qp.srq is srq and qp.xrcd is not None:
            qp.srq = qp.pd = qp.recv_cq = None
            qp.resp_wqe = None


def cmd_create_xrc_qp(daemon, c, m, fds):
    """ibv_create_qp_ex of IBV_QPT_XRC_SEND (a PD, a send CQ, the send ring
    and the doorbell) or IBV_QPT_XRC_RECV (a domain, nothing else)."""
    qp_type = rq.uint(m, "qp_type")
    dev = c.device
    if qp_type == XRC_INI:
        pd = c.get(m.get("pd"), "pd")
        scq = c.get(m.get("send_cq"), "cq")
        if len(fds) != 2:
            raise VerbsError(errno.EINVAL, "an XRC INI QP needs its send ring and doorbell")
        room_for(c, "qp")
        cap = QPCap(**rq.fields(rq.obj(m, "cap", {}), rq.QP_CAP, "cap"))
        cap.max_recv_wr = cap.max_recv_sge = 0
        qp = QP(XRC_INI, dev.alloc_qpn(), pd=pd, memory=dev.memory, send_cq=scq, recv_cq=None, cap=cap,
                sq_sig_all=bool(m.get("sq_sig_all")), caps=dev.caps, tx=dev.tx, events=dev.events)
        with contextlib.ExitStack() as undo:
            sq = ring(fds[0], "send queue", min_slot=abi.send_slot_size(cap.max_send_sge, cap.max_inline_data))
            undo.callback(sq.close)
            doorbell = eventfd(fds[1], "QP")
            undo.callback(os.close, doorbell)
            dqp = DevQP(0, qp, sq, None, doorbell, c)
            daemon.sel.register(doorbell, selectors.EVENT_READ, ("doorbell", dqp))
            undo.pop_all()
    elif qp_type == XRC_TGT:
        xopen = c.get(m.get("xrcd"), "xrcd")
        if fds:
            raise VerbsError(errno.EINVAL, "an XRC TGT QP has no queues")
        room_for(c, "qp")
        qp = QP(XRC_TGT, dev.alloc_qpn(), pd=None, memory=dev.memory, send_cq=None, recv_cq=None,
                cap=QPCap(0, 0, 0, 0, 0), caps=dev.caps, tx=dev.tx, events=dev.events, xrcd=xopen.domain,
                xrc_srqs=dev.xrc_srqs)
        dqp = DevTgtQP(qp, c)
        dqp.xrcd_open = xopen
    else:
        raise VerbsError(errno.EINVAL, f"qp_type {qp_type} is not an XRC QP type")
    dqp.handle = c.add("qp", dqp)
    dev.add_qp(dqp)
    if dqp.doorbell is not None:
        daemon.adopt_sleep(dqp.sq)
    return {"qp": dqp.handle, "qp_num": qp.qp_num}, []


__all__ = ["cmd_open_xrcd", "cmd_close_xrcd", "cmd_create_xrc_srq", "cmd_create_xrc_qp", "free_xrcd",
           "forget_xrc_srq", "DevXRCD", "XrcdOpen", "DevTgtQP"]
