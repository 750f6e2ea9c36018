"""Memory regions and memory windows: reg_mr (with the RLIMIT_MEMLOCK
charge ib_umem_get makes), dereg_mr, alloc_mw, dealloc_mw, and what
freeing each undoes."""

from __future__ import annotations

import errno

from ...enums import IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_ATOMIC, IBV_ACCESS_REMOTE_WRITE
from ...errors import VerbsError
from ...transport.mw import MW
from ...uapi import request as rq
from ..session import PAGE_SIZE, room_for
from ...uapi.shm import SharedRegion


def cmd_reg_mr(daemon, c, m, fds):
    pd = c.get(m.get("pd"), "pd")
    length = rq.uint(m, "length", rq.U64, lo=1)
    addr = rq.uint(m, "addr", rq.U64)
    access = rq.uint(m, "access", rq.U32)
    if addr + length - 1 > rq.U64:                 # ib_umem_get: the range wraps
        raise VerbsError(errno.EINVAL, "addr + length overflows")
    if access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC) and not access & IBV_ACCESS_LOCAL_WRITE:
        # ib_check_mr_access: the remote end may write only what we may
        raise VerbsError(errno.EINVAL, "REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE")
    max_size = c.device.caps.max_mr_size
    if length > max_size:
        raise VerbsError(errno.EINVAL, f"MR of {length} bytes, above the device's max_mr_size ({max_size})")
    room_for(c, "mr")
    pages = 0
    if c.memlock is not None:                      # ib_umem_get's RLIMIT_MEMLOCK charge, per user
        if c.memlock == 0:                         # can_do_mlock
            raise VerbsError(errno.EPERM, "RLIMIT_MEMLOCK is 0: no memory may be pinned")
        pages = ((addr + length + PAGE_SIZE - 1) // PAGE_SIZE) - addr // PAGE_SIZE
        if daemon.locked_pages[c.uid] + pages > c.memlock // PAGE_SIZE:
            raise VerbsError(errno.ENOMEM, f"pinning {pages} more pages exceeds RLIMIT_MEMLOCK"
                                           f" ({c.memlock} bytes; user {c.uid} has"
                                           f" {daemon.locked_pages[c.uid]} pinned)")
    if len(fds) != 1:
        raise VerbsError(errno.EINVAL, "reg_mr needs the memory fd")
    try:
        region = SharedRegion.map_fd(fds[0], length)
    except ValueError as e:
        raise VerbsError(errno.EINVAL, f"bad MR memory: {e}") from None
    try:
        mr = c.device.memory.register(pd, addr, length, access, region.view[:length])
    except BaseException:
        region.close()
        raise
    entry = (mr, region)
    h = c.add("mr", entry)
    if pages:
        c.pinned[id(entry)] = pages
        daemon.locked_pages[c.uid] += pages
    return {"mr": h, "lkey": mr.lkey, "rkey": mr.rkey}, []


def cmd_dereg_mr(daemon, c, m, fds):
    obj = c.get(m.get("mr"), "mr")
    if obj[0].mws:                          # rxe_dereg_mr: not while windows are bound
        raise VerbsError(errno.EINVAL, "memory windows are bound to the MR")
    free_mr(daemon, c, obj)
    del c.objects[m["mr"]]
    return {}, []


def cmd_alloc_mw(daemon, c, m, fds):
    """ibv_alloc_mw: type 1 or 2 (uverbs: any other type is EINVAL)."""
    pd = c.get(m.get("pd"), "pd")
    mw_type = m.get("type")
    if type(mw_type) is not int or mw_type not in (1, 2):
        raise VerbsError(errno.EINVAL, f"memory window type {mw_type!r}")
    room_for(c, "mw")
    mw = MW(c.device.memory, pd, mw_type)
    return {"mw": c.add("mw", mw), "rkey": mw.rkey}, []


def cmd_dealloc_mw(daemon, c, m, fds):
    mw = c.get(m.get("mw"), "mw")
    free_mw(daemon, c, mw)
    del c.objects[m["mw"]]
    return {}, []


def free_mr(daemon, c, obj) -> None:
    mr, region = obj
    c.device.memory.dereg_mr(mr)
    mr.view = None
    mr.buf = None
    region.close()
    pages = c.pinned.pop(id(obj), 0)
    if pages:
        daemon.locked_pages[c.uid] -= pages


def free_mw(daemon, c, mw) -> None:
    mw.dealloc()
