"""Queue pairs: create (the send and receive rings and the doorbell the
library brings), modify, query, destroy, and what freeing one undoes.
Raw packet QPs take their own branch (``raw_qp``)."""

from __future__ import annotations

import contextlib
import errno
import os
import selectors

from ...enums import IBV_QPT_RAW_PACKET
from ...errors import VerbsError
from ...transport.qp import QP, QPAttr, QPCap
from ...uapi import abi
from ...uapi import request as rq
from ..core import DevQP
from ..raw_queues import RawQP
from ..session import room_for
from .ah import checked_av
from .fds import eventfd, ring
from .mcast import close_mcast_sockets
from .raw_qp import create_raw_qp, destroy_raw_qp, free_raw_qp, modify_raw_qp
from .srq import TmDevQP, attach_tm
from .stat import stat_destroy_qp, stat_modify_qp
from .xrcd import XRC_INI, XRC_TGT


def cmd_create_qp(daemon, c, m, fds):
    if m.get("qp_type") == IBV_QPT_RAW_PACKET:
        return create_raw_qp(daemon, c, m, fds)
    dev = c.device
    pd = c.get(m.get("pd"), "pd")
    scq = c.get(m.get("send_cq"), "cq")
    rcq = c.get(m.get("recv_cq"), "cq")
    srq = c.get(m["srq"], "srq") if m.get("srq") else None
    need = 2 if srq is not None else 3
    if len(fds) != need:
        raise VerbsError(errno.EINVAL, f"create_qp needs {need} fds")
    room_for(c, "qp")
    cap = QPCap(**rq.fields(rq.obj(m, "cap", {}), rq.QP_CAP, "cap"))
    if rq.uint(m, "qp_type") in (XRC_INI, XRC_TGT):
        raise VerbsError(errno.EINVAL, "XRC QPs are made with create_xrc_qp (no receive queue, or on a domain)")
    qp = QP(rq.uint(m, "qp_type"), dev.alloc_qpn(), pd=pd, memory=dev.memory, send_cq=scq, recv_cq=rcq,
            cap=cap, srq=srq.srq if srq else None, sq_sig_all=bool(m.get("sq_sig_all")), caps=dev.caps,
            tx=dev.tx, events=dev.events)
    tm_srq = srq is not None and srq.srq.tm is not None
    if tm_srq:
        attach_tm(qp)
    with contextlib.ExitStack() as undo:            # every step undone if a later one fails
        sq = ring(fds[0], "send queue", min_slot=abi.send_slot_size(cap.max_send_sge, cap.max_inline_data))
        undo.callback(sq.close)
        rqr = None
        if srq is None:
            rqr = ring(fds[1], "receive queue", min_slot=abi.recv_slot_size(cap.max_recv_sge))
            undo.callback(rqr.close)
        doorbell = eventfd(fds[-1], "QP")
        undo.callback(os.close, doorbell)
        dqp = (TmDevQP if tm_srq else DevQP)(0, qp, sq, rqr, doorbell, c, srq)
        daemon.sel.register(doorbell, selectors.EVENT_READ, ("doorbell", dqp))
        undo.pop_all()
    dqp.handle = c.add("qp", dqp)
    dev.add_qp(dqp)
    if tm_srq:
        qp.local_peer = None                        # every SEND parsed by the responder (attach_tm)
    daemon.adopt_sleep(dqp.sq, dqp.rq)
    return {"qp": dqp.handle, "qp_num": qp.qp_num}, []


def cmd_modify_qp(daemon, c, m, fds):
    dqp = c.get(m.get("qp"), "qp")
    if isinstance(dqp, RawQP):
        modify_raw_qp(dqp, m)
        return {}, []
    mask = rq.uint(m, "mask")
    raw = rq.obj(m, "attr", {})
    a = rq.fields({k: v for k, v in raw.items() if k not in ("ah_attr", "cap")}, rq.QP_ATTR, "attr")
    if "ah_attr" in raw:
        a["ah_attr"] = checked_av(daemon, c, raw["ah_attr"])
    if "cap" in raw:
        a["cap"] = QPCap(**rq.fields(rq.obj(raw, "cap"), rq.QP_CAP, "cap"))
    stat_modify_qp(daemon, c.device, dqp, a, mask)
    dqp.qp.modify(QPAttr(**a), mask)
    return {}, []


def cmd_query_qp(daemon, c, m, fds):
    dqp = c.get(m.get("qp"), "qp")
    if isinstance(dqp, RawQP):
        return {"attr": dqp.query()}, []
    a = dqp.qp.query()
    out = {k: getattr(a, k) for k in ("qp_state", "cur_qp_state", "path_mtu", "qkey", "rq_psn", "sq_psn",
                                      "dest_qp_num", "qp_access_flags", "pkey_index", "sq_draining",
                                      "max_rd_atomic", "max_dest_rd_atomic", "min_rnr_timer", "port_num",
                                      "timeout", "retry_cnt", "rnr_retry", "en_sqd_async_notify")}
    out = {k: int(v) for k, v in out.items()}
    av = a.ah_attr
    out["ah_attr"] = {"dgid": av.dgid.hex(), "sgid_index": av.sgid_index, "flow_label": av.flow_label,
                      "hop_limit": av.hop_limit, "traffic_class": av.traffic_class, "sl": av.sl,
                      "is_global": av.is_global, "port_num": av.port_num, "dlid": av.dlid}
    cap = dqp.qp.cap
    out["cap"] = {k: getattr(cap, k) for k in ("max_send_wr", "max_recv_wr", "max_send_sge",
                                               "max_recv_sge", "max_inline_data")}
    return {"attr": out}, []


def cmd_destroy_qp(daemon, c, m, fds):
    dqp = c.get(m.get("qp"), "qp")
    if isinstance(dqp, RawQP):
        destroy_raw_qp(dqp)
    free_qp(daemon, c, dqp)
    del c.objects[m["qp"]]
    return {}, []


def free_qp(daemon, c, dqp) -> None:
    if isinstance(dqp, RawQP):
        free_raw_qp(daemon, c, dqp)
        return
    dev = c.device
    close_mcast_sockets(daemon, dev.mcast.detach_all(dqp.qp))
    stat_destroy_qp(daemon, dev, dqp)
    dev.remove_qp(dqp)
    if dqp.doorbell is None:                        # an XRC TGT QP: no rings, no doorbell
        return
    try:
        daemon.sel.unregister(dqp.doorbell)
    except (KeyError, ValueError):
        pass
    os.close(dqp.doorbell)
    dqp.sq_ring.close()
    if dqp.rq_ring is not None:
        dqp.rq_ring.close()
