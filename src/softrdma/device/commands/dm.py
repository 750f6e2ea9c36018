"""Device memory: alloc_dm and free_dm (ibv_alloc_dm / ibv_free_dm), from
one pool per device of ``uapi.limits.MAX_DM_SIZE`` bytes, and what freeing
a DM undoes.  The memory is a memfd the library creates and the daemon
maps, so ibv_memcpy_to/from_dm are the library's own copies; an MR on it
is ``mr.cmd_reg_dm_mr``."""

from __future__ import annotations

import errno
import os
import weakref

from ...errors import VerbsError
from ...uapi import request as rq
from ...uapi.limits import MAX_DM_SIZE
from ...uapi.shm import SharedRegion

#: the per-device pool: bytes of device memory allocated on each device
_pool_used: "weakref.WeakKeyDictionary[object, int]" = weakref.WeakKeyDictionary()
#: the largest alignment alloc_dm grants (log2: one page, as MEMIC's)
MAX_LOG_ALIGN = 12


class DeviceMemory:
    """One DM: its memory and the MRs registered on it (ib_dm's usecnt)."""

    __slots__ = ("device", "length", "region", "mrs", "fd", "__weakref__")

    def __init__(self, device, length: int, region: SharedRegion, fd: int = -1):
        self.device = device
        self.length = length
        self.region = region
        self.mrs = 0
        self.fd = fd                 # the memory's memfd, for query_dm (ibv_import_dm maps it)


def pool_used(device) -> int:
    return _pool_used.get(device, 0)


def cmd_alloc_dm(daemon, c, m, fds):
    """ibv_alloc_dm: ENOMEM past the pool (mlx5's MEMIC allocator), EINVAL
    for an alignment the device cannot give."""
    length = rq.uint(m, "length", rq.U64, lo=1)
    log_align = rq.uint(m, "log_align_req", rq.U32, 0)
    if log_align > MAX_LOG_ALIGN:
        raise VerbsError(errno.EINVAL, f"log_align_req {log_align} above {MAX_LOG_ALIGN}")
    if len(fds) != 1:
        raise VerbsError(errno.EINVAL, "alloc_dm needs the memory fd")
    dev = c.device
    used = pool_used(dev)
    if length > MAX_DM_SIZE - used:
        raise VerbsError(errno.ENOMEM, f"{length} bytes of device memory: {dev.name} has"
                                       f" {MAX_DM_SIZE - used} of {MAX_DM_SIZE} free")
    try:
        region = SharedRegion.map_fd(fds[0], length)
    except ValueError as e:
        raise VerbsError(errno.EINVAL, f"bad DM memory: {e}") from None
    dm = DeviceMemory(dev, length, region, os.dup(fds[0]))
    _pool_used[dev] = used + length
    return {"dm": c.add("dm", dm)}, []


def cmd_free_dm(daemon, c, m, fds):
    dm = c.get(m.get("dm"), "dm")
    if dm.mrs:                                  # uverbs: the DM's usecnt
        raise VerbsError(errno.EBUSY, f"{dm.mrs} MRs are registered on the device memory")
    free_dm(daemon, c, dm)
    del c.objects[m["dm"]]
    return {}, []


def free_dm(daemon, c, dm) -> None:
    if dm.region is None:
        return
    dm.region.close()
    dm.region = None
    if dm.fd >= 0:
        os.close(dm.fd)
        dm.fd = -1
    _pool_used[dm.device] = pool_used(dm.device) - dm.length


def cmd_query_dm(daemon, c, m, fds):
    """ibv_import_dm's query (mlx5's DM query): the DM's length and its
    memory, the memfd, which the importing context maps -- a copy to or
    from the DM through either context is on the same memory."""
    dm = c.get(m.get("dm"), "dm")
    if dm.fd < 0:
        raise VerbsError(errno.EINVAL, "the DM is freed")
    return {"length": dm.length}, [os.dup(dm.fd)]           # (the reply's fds are closed once sent)
