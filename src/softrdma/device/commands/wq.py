"""Receive work queues and RSS indirection tables: create_wq, modify_wq,
destroy_wq (ibv_create_wq & co., IBV_WQT_RQ), create_rwq_ind_table,
destroy_rwq_ind_table (``device.raw_queues.RawWQ``, ``IndTable``).  An RSS
QP on a table is ``raw_qp``'s ``create_rss_qp``."""

from __future__ import annotations

import contextlib
import errno
import os
import selectors

from ...enums import IBV_WQT_RQ
from ...errors import VerbsError
from ...uapi import abi
from ...uapi import request as rq
from ...uapi.raw import MAX_RWQ_IND_TABLE_SIZE, MAX_RWQ_IND_TABLES, MAX_WQ_TYPE_RQ
from ..raw import raw_port, release
from ..raw_queues import IndTable, RawWQ
from .fds import eventfd, ring


def cmd_create_wq(daemon, c, m, fds):
    dev = c.device
    pd = c.get(m.get("pd"), "pd")
    cq = c.get(m.get("cq"), "cq")
    wq_type = rq.uint(m, "wq_type")
    max_wr = rq.uint(m, "max_wr")
    max_sge = rq.uint(m, "max_sge")
    if rq.uint(m, "create_flags", default=0):
        raise VerbsError(errno.EOPNOTSUPP, "WQ create_flags (VLAN stripping, FCS, ...) not supported")
    if wq_type != IBV_WQT_RQ:
        raise VerbsError(errno.EINVAL, f"wq_type {wq_type}: only IBV_WQT_RQ")
    if not 1 <= max_wr <= dev.caps.max_qp_wr or not 1 <= max_sge <= dev.caps.max_sge:
        raise VerbsError(errno.EINVAL, f"max_wr {max_wr} / max_sge {max_sge} outside the device's limits")
    port = dev.raw
    if port is not None and len(port.wqs) >= MAX_WQ_TYPE_RQ:
        raise VerbsError(errno.ENOMEM, f"{dev.name} has max_wq_type_rq ({MAX_WQ_TYPE_RQ}) WQs")
    if len(fds) != 2:
        raise VerbsError(errno.EINVAL, "create_wq needs the ring fd and the doorbell fd")
    port = raw_port(daemon, dev)
    with contextlib.ExitStack() as undo:
        undo.callback(release, dev)
        r = ring(fds[0], "WQ", min_slot=abi.recv_slot_size(max_sge))
        undo.callback(r.close)
        doorbell = eventfd(fds[1], "WQ")
        undo.callback(os.close, doorbell)
        num = dev.alloc_qpn()
        wq = RawWQ(num, pd=pd, cq=cq, ring=r, doorbell=doorbell, memory=dev.memory, max_wr=max_wr,
                   max_sge=max_sge)
        daemon.sel.register(doorbell, selectors.EVENT_READ, ("raw", wq.doorbell_rung))
        undo.pop_all()
    port.numbers.add(num)
    port.wqs[num] = wq
    return {"wq": c.add("wq", wq), "wq_num": num}, []


def cmd_modify_wq(daemon, c, m, fds):
    wq = c.get(m.get("wq"), "wq")
    mask = rq.uint(m, "attr_mask")
    state = rq.uint(m, "wq_state", default=0)
    curr = rq.uint(m, "curr_wq_state", default=0)
    if rq.uint(m, "flags_mask", default=0):
        raise VerbsError(errno.EOPNOTSUPP, "WQ flags (VLAN stripping, FCS, ...) not supported")
    wq.modify(mask, state, curr)
    return {}, []


def cmd_destroy_wq(daemon, c, m, fds):
    wq = c.get(m.get("wq"), "wq")
    if wq.tables:
        raise VerbsError(errno.EBUSY, "WQ still in an indirection table")
    free_wq(daemon, c, wq)
    del c.objects[m["wq"]]
    return {}, []


def free_wq(daemon, c, wq) -> None:
    dev = c.device
    try:
        daemon.sel.unregister(wq.doorbell)
    except (KeyError, ValueError):
        pass
    wq.close()
    port = dev.raw
    if port is not None:
        port.wqs.pop(wq.wq_num, None)
        port.numbers.discard(wq.wq_num)
    release(dev)


def cmd_create_rwq_ind_table(daemon, c, m, fds):
    dev = c.device
    log_size = rq.uint(m, "log_size")
    handles = m.get("wqs")
    if not isinstance(handles, list) or not handles:
        raise VerbsError(errno.EINVAL, "an indirection table needs WQs")
    wqs = [c.get(h, "wq") for h in handles]
    if (1 << min(log_size, 31)) > MAX_RWQ_IND_TABLE_SIZE:
        raise VerbsError(errno.EINVAL, f"indirection table of 2^{log_size} entries: above"
                                       f" max_rwq_indirection_table_size ({MAX_RWQ_IND_TABLE_SIZE})")
    if len(wqs) > 1 << log_size:
        raise VerbsError(errno.EINVAL, f"{len(wqs)} WQs for a table of {1 << log_size} entries")
    port = raw_port(daemon, dev)
    if len(port.tables) >= MAX_RWQ_IND_TABLES:
        raise VerbsError(errno.ENOMEM, f"{dev.name} has max_rwq_indirection_tables ({MAX_RWQ_IND_TABLES})")
    port.next_table += 1
    table = IndTable(port.next_table, log_size, wqs)
    for wq in set(wqs):
        wq.tables.append(table)
    port.tables.append(table)
    return {"ind_table": c.add("rwq_ind_table", table), "ind_tbl_num": table.num}, []


def cmd_destroy_rwq_ind_table(daemon, c, m, fds):
    table = c.get(m.get("ind_table"), "rwq_ind_table")
    if table.qps:
        raise VerbsError(errno.EBUSY, "indirection table still used by a QP")
    free_rwq_ind_table(daemon, c, table)
    del c.objects[m["ind_table"]]
    return {}, []


def free_rwq_ind_table(daemon, c, table) -> None:
    for wq in set(table.wqs):
        if table in wq.tables:
            wq.tables.remove(table)
    port = c.device.raw
    if port is not None and table in port.tables:
        port.tables.remove(table)
    release(c.device)
