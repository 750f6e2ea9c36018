"""Completion channels and completion queues: create, resize (the CQ) and
destroy each, and what freeing each undoes."""

from __future__ import annotations

import errno

from ...errors import VerbsError
from ...uapi import abi
from ...uapi import request as rq
from ...uapi import clock
from ...uapi.queues import NOTIFY_NONE, NOTIFY_SOLICITED, CompletionQueueProducer, ExtCompletionQueueProducer
from ..core import DevChannel, DevCQ
from ..session import room_for
from .fds import ring


def cmd_create_comp_channel(daemon, c, m, fds):
    ch = DevChannel(0)
    h = c.add("channel", ch)
    ch.handle = h
    # the application's end goes with the reply (which closes our copy
    # once sent); the daemon keeps its own end only
    theirs, ch.theirs = ch.theirs, None
    return {"channel": h}, [theirs.detach()]


def cmd_destroy_comp_channel(daemon, c, m, fds):
    ch = c.get(m.get("channel"), "channel")
    if any(o[0] == "cq" and o[1].channel is ch for o in c.objects.values()):
        raise VerbsError(errno.EBUSY, "completion channel still used by a CQ")
    ch.close()
    del c.objects[m["channel"]]
    return {}, []


def cmd_create_cq(daemon, c, m, fds):
    if len(fds) != 1:
        raise VerbsError(errno.EINVAL, "create_cq needs the ring fd")
    ch = c.get(m["channel"], "channel") if m.get("channel") else None
    room_for(c, "cq")
    max_cqe = c.device.caps.max_cqe
    cqe = rq.uint(m, "cqe", rq.U32, 1)
    if not 1 <= cqe <= max_cqe:                     # rxe_cq_chk_attr
        raise VerbsError(errno.EINVAL, f"CQ of {cqe} entries (1..max_cqe, {max_cqe})")
    wc_flags = rq.uint(m, "wc_flags", rq.U64, 0)
    if wc_flags & ~abi.SUPPORTED_WC_FLAGS:          # the provider's create_cq_ex check
        raise VerbsError(errno.EOPNOTSUPP, f"wc_flags 0x{wc_flags & ~abi.SUPPORTED_WC_FLAGS:x} not supported")
    r = ring(fds[0], "CQ", slot_size=abi.CQE_BYTES)
    if r.nslots > 1 << max_cqe.bit_length():        # the ring holds cqe + 1, a power of two
        r.close()
        raise VerbsError(errno.EINVAL, f"CQ ring of {r.nslots} slots for max_cqe {max_cqe}")
    cq = DevCQ(0, r, ch, c)
    if wc_flags & abi.WC_EX_WORDS:                  # only these CQs pay for the extended words
        cq.producer = ext_producer(r, wc_flags)
    cq.wc_flags = wc_flags
    cq.handle = c.add("cq", cq)
    return {"cq": cq.handle}, []


def cmd_destroy_cq(daemon, c, m, fds):
    cq = c.get(m.get("cq"), "cq")
    if any(o[0] == "qp" and cq in (o[1].qp.send_cq, o[1].qp.recv_cq) for o in c.objects.values()):
        raise VerbsError(errno.EBUSY, "CQ still used by a QP")
    if any(o[0] == "wq" and o[1].recv_cq is cq for o in c.objects.values()):
        raise VerbsError(errno.EBUSY, "CQ still used by a WQ")
    if any(o[0] == "srq" and o[1].srq.cq is cq for o in c.objects.values()):
        raise VerbsError(errno.EBUSY, "CQ still used by an XRC SRQ")
    free_cq(daemon, c, cq)
    del c.objects[m["cq"]]
    return {}, []


def cmd_resize_cq(daemon, c, m, fds):
    """ibv_resize_cq as rxe_resize_cq: the library brings a new ring of
    at least ``cqe`` + 1 slots; the CQEs not yet polled move into it in
    order (rxe_cq_resize_queue), then it replaces the old one."""
    cq = c.get(m.get("cq"), "cq")
    if len(fds) != 1:
        raise VerbsError(errno.EINVAL, "resize_cq needs the ring fd")
    old = cq.ring
    max_cqe = c.device.caps.max_cqe
    cqe = rq.uint(m, "cqe", rq.U32, 1)
    # What the application posted before it asked has run first, as rxe's
    # post_send runs the requester in the posting call: the CQEs it makes
    # count (a resize below them fails as on rxe)
    dev, now = c.device, daemon.now()
    dev.poll_rings(now)
    dev.route(daemon.by_ip, now)
    count = (cq.producer.head - old.consumer) & 0xFFFFFFFF
    if not 1 <= cqe <= max_cqe:                     # rxe_cq_chk_attr
        raise VerbsError(errno.EINVAL, f"CQ of {cqe} entries (1..max_cqe, {max_cqe})")
    if cqe < count:                                 # rxe_cq_chk_attr: the CQEs still queued must fit
        raise VerbsError(errno.EINVAL, f"cqe({cqe}) < current # elements in queue ({count})")
    new = ring(fds[0], "CQ", slot_size=abi.CQE_BYTES)
    if new.nslots <= cqe or new.nslots > 1 << max_cqe.bit_length():
        got = new.nslots
        new.close()
        raise VerbsError(errno.EINVAL, f"CQ ring of {got} slots for {cqe} entries (max_cqe {max_cqe})")
    tail = old.consumer
    for i in range(count):                          # oldest first; each owner byte last, as write_cqe
        src = old.slot((tail + i) & 0xFFFFFFFF)
        dst = new.slot(i)
        dst[:abi.CQE_OWNER] = src[:abi.CQE_OWNER]
        dst[abi.CQE_OWNER] = new.phase(i)
    new.consumer = 0
    new.producer = count
    state, _ = old.notify
    if state != NOTIFY_NONE:                        # an armed CQ stays armed
        new.arm(state == NOTIFY_SOLICITED)
    cq.ring = new
    cq.producer = (ext_producer(new, cq.wc_flags) if cq.wc_flags & abi.WC_EX_WORDS
                   else CompletionQueueProducer(new))
    cq.overrun_reported = False
    old.close()
    return {"cqe": new.nslots - 1}, []


def ext_producer(r, wc_flags: int) -> ExtCompletionQueueProducer:
    """The producer of a CQ with the extended CQE words: each CQE stamped,
    as the device writes it, with the clock the CQ asked for (abi: the
    free-running counter when asked, else the wall clock)."""
    if wc_flags & abi.WC_EX_TIMESTAMP:
        stamp = clock.read_free_running
    elif wc_flags & abi.WC_EX_WALLCLOCK:
        stamp = clock.read_real_time_ns
    else:
        stamp = None
    return ExtCompletionQueueProducer(r, stamp)


def free_cq(daemon, c, cq) -> None:
    for kind, o in c.objects.values():             # a TM SRQ's list operations no longer complete
        if kind == "srq" and o.srq.tm is not None and o.srq.tm.ops_cq is cq:
            o.srq.tm.ops_cq = None
    cq.ring.close()


def free_channel(daemon, c, ch) -> None:
    ch.close()
