"""Memory regions and memory windows: reg_mr (with the RLIMIT_MEMLOCK
charge ib_umem_get makes), reg_dm_mr (an MR on device memory), dereg_mr, alloc_mw,
dealloc_mw, and what freeing each undoes.

An MR's entry is ``[mr, region, dm]``: the transport's MR, the shared
memory the daemon mapped for it (None on device memory), the
``dm.DeviceMemory`` it is registered on (else None)."""

from __future__ import annotations

import errno

from ...enums import (IBV_ACCESS_FLUSH_PERSISTENT, IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_ON_DEMAND, IBV_ACCESS_REMOTE_ATOMIC,
                      IBV_ACCESS_REMOTE_WRITE, IBV_ACCESS_ZERO_BASED)
from ...errors import VerbsError
from ...transport.mw import MW
from ...uapi import request as rq
from ..session import PAGE_SIZE, room_for
from ...uapi.shm import SharedRegion


def _check_access(access: int) -> None:
    if access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC) and not access & IBV_ACCESS_LOCAL_WRITE:
        # ib_check_mr_access: the remote end may write only what we may
        raise VerbsError(errno.EINVAL, "REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE")
    if access & IBV_ACCESS_FLUSH_PERSISTENT:
        # rxe_mr_fill_pages_from_sgt: persistent flush only on pmem pages; an
        # MR here is the application's shared memory, never persistent memory
        raise VerbsError(errno.EINVAL, "IBV_ACCESS_FLUSH_PERSISTENT needs persistent memory (pmem)")


def _check_wrap(addr: int, length: int) -> None:
    if addr + length - 1 > rq.U64:                 # ib_umem_get: the range wraps
        raise VerbsError(errno.EINVAL, "addr + length overflows")


def _check_size(c, length: int) -> None:
    max_size = c.device.caps.max_mr_size
    if length > max_size:
        raise VerbsError(errno.EINVAL, f"MR of {length} bytes, above the device's max_mr_size ({max_size})")


def _pages(daemon, c, addr: int, length: int) -> int:
    """ib_umem_get's RLIMIT_MEMLOCK charge, per user: the pages to pin."""
    if c.memlock is None:
        return 0
    if c.memlock == 0:                             # can_do_mlock
        raise VerbsError(errno.EPERM, "RLIMIT_MEMLOCK is 0: no memory may be pinned")
    pages = ((addr + length + PAGE_SIZE - 1) // PAGE_SIZE) - addr // PAGE_SIZE
    if daemon.locked_pages[c.uid] + pages > c.memlock // PAGE_SIZE:
        raise VerbsError(errno.ENOMEM, f"pinning {pages} more pages exceeds RLIMIT_MEMLOCK"
                                       f" ({c.memlock} bytes; user {c.uid} has"
                                       f" {daemon.locked_pages[c.uid]} pinned)")
    return pages


def _region(fds, length: int, what: str) -> SharedRegion:
    if len(fds) != 1:
        raise VerbsError(errno.EINVAL, f"{what} needs the memory fd")
    try:
        return SharedRegion.map_fd(fds[0], length)
    except ValueError as e:
        raise VerbsError(errno.EINVAL, f"bad MR memory: {e}") from None


def _charge(daemon, c, entry, pages: int) -> None:
    daemon.locked_pages[c.uid] += pages
    if pages:
        c.pinned[id(entry)] = pages


def cmd_reg_mr(daemon, c, m, fds):
    pd = c.get(m.get("pd"), "pd")
    length = rq.uint(m, "length", rq.U64, lo=1)
    addr = rq.uint(m, "addr", rq.U64)
    access = rq.uint(m, "access", rq.U32)
    offset = rq.uint(m, "offset", rq.U64, 0)
    _check_wrap(addr, length)
    _check_wrap(offset, length)
    _check_access(access)
    _check_size(c, length)
    room_for(c, "mr")
    pages = _pages(daemon, c, addr, length)
    region = _region(fds, offset + length, "reg_mr")
    try:
        mr = c.device.memory.register(pd, addr, length, access, region.view[offset:offset + length])
    except BaseException:
        region.close()
        raise
    entry = [mr, region, None]
    h = c.add("mr", entry)
    _charge(daemon, c, entry, pages)
    return {"mr": h, "lkey": mr.lkey, "rkey": mr.rkey}, []


def cmd_reg_dm_mr(daemon, c, m, fds):
    """ibv_reg_dm_mr: an MR on ``length`` bytes of a DM from ``offset``,
    zero-based (IBV_ACCESS_ZERO_BASED, as mlx5 requires: its address is
    the offset into the MR).  Device memory is not pinned: no memlock charge."""
    pd = c.get(m.get("pd"), "pd")
    dm = c.get(m.get("dm"), "dm")
    offset = rq.uint(m, "offset", rq.U64)
    length = rq.uint(m, "length", rq.U64)             # 0 is an MR of no bytes (mlx5 registers it)
    access = rq.uint(m, "access", rq.U32)
    if not access & IBV_ACCESS_ZERO_BASED:
        raise VerbsError(errno.EINVAL, "an MR on device memory needs IBV_ACCESS_ZERO_BASED")
    if access & IBV_ACCESS_ON_DEMAND:               # (mlx5: not in MLX5_IB_DM_ALLOWED_ACCESS)
        raise VerbsError(errno.EINVAL, "an MR on device memory cannot be on demand")
    _check_access(access)
    if offset > dm.length or length > dm.length - offset:
        raise VerbsError(errno.EINVAL, f"{length} bytes at offset {offset} of a {dm.length}-byte DM")
    room_for(c, "mr")
    mr = c.device.memory.register(pd, 0, length, access, dm.region.view[offset:offset + length])
    dm.mrs += 1
    entry = [mr, None, dm]
    return {"mr": c.add("mr", entry), "lkey": mr.lkey, "rkey": mr.rkey}, []


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
    mr, region, dm = obj
    c.device.memory.dereg_mr(mr)
    mr.view = None
    mr.buf = None
    if region is not None:
        region.close()
    if dm is not None:
        dm.mrs -= 1
    pages = c.pinned.pop(id(obj), 0)
    if pages:
        daemon.locked_pages[c.uid] -= pages


def free_mw(daemon, c, mw) -> None:
    mw.dealloc()
