"""MRs on the process's own memory, ibv_rereg_mr, and ibv_advise_mr.

``reg_user_mr`` is ibv_reg_mr on an address of the application (not the
shared memory the library allocates for ``reg_mr``): the MR's view is a
``transport.odp.PagedSpace`` over the process's pages
(``device.odp.ProcessPages``, which the connection has when the daemon may
reach them).  With IBV_ACCESS_ON_DEMAND it is an ODP MR: nothing is
pinned or charged to RLIMIT_MEMLOCK, the pages need not be mapped yet, and
each access faults its range in (rxe_odp_mr_init_user takes a snapshot and
never fails on a missing page); address 0 with length SIZE_MAX is an
implicit ODP MR, the whole address space.  Without it, the registration
has ib_umem_get's pinned semantics as far as they can be had from outside
the process: every page must be mapped (writable, if the MR is) when it is
registered -- else EFAULT -- and the pages are charged to RLIMIT_MEMLOCK.
What the daemon cannot do is hold the physical pages: a process that
unmaps memory under a registered MR makes accesses to it fail, where a
pinned MR would keep the old pages.

``rereg_mr`` is ibv_rereg_mr (here because its new translation is such
memory): the PD and the access of any MR change in place, and a new
translation moves the MR, keys kept, onto pages of the process as
``reg_user_mr`` registers them.

``advise_mr`` is ibv_advise_mr with rxe_ib_advise_mr's checks and errnos.
"""

from __future__ import annotations

import errno

from ...enums import (IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_MW_BIND, IBV_ACCESS_ON_DEMAND, IBV_ACCESS_REMOTE_ATOMIC,
                      IBV_ACCESS_REMOTE_WRITE, IBV_REREG_MR_CHANGE_ACCESS, IBV_REREG_MR_CHANGE_PD,
                      IBV_REREG_MR_CHANGE_TRANSLATION, _IBV_ADVISE_MR_ADVICE_PREFETCH, _IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT,
                      _IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, _IBV_ADVISE_MR_FLAG_FLUSH)
from ...errors import VerbsError
from ...transport.memory import MR
from ...transport.odp import PagedSpace
from ...uapi import request as rq
from ..session import room_for
from .mr import _charge, _check_access, _check_size, _check_wrap, _pages

#: ib_access_writable: an MR whose pages the device may write
_WRITABLE = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND
_ADVICE = (_IBV_ADVISE_MR_ADVICE_PREFETCH, _IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
           _IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT)


def _no_access(c) -> VerbsError:
    return VerbsError(errno.EOPNOTSUPP, f"softrdmad may not reach the memory of pid {c.pid} (another user without"
                                        " CAP_SYS_PTRACE, or Yama's ptrace_scope): no ODP or MRs on its own memory")


def cmd_reg_user_mr(daemon, c, m, fds):
    pd = c.get(m.get("pd"), "pd")
    length = rq.uint(m, "length", rq.U64, lo=1)
    addr = rq.uint(m, "addr", rq.U64)
    access = rq.uint(m, "access", rq.U32)
    if fds:
        raise VerbsError(errno.EINVAL, "reg_user_mr carries no memory fd")
    odp = access & IBV_ACCESS_ON_DEMAND
    if odp and c.pages is None:                 # ib_check_mr_access: no IBK_ON_DEMAND_PAGING
        raise _no_access(c)
    implicit = odp and addr == 0 and length == rq.U64
    if not implicit:
        _check_wrap(addr, length)
    _check_access(access)
    if not implicit:
        _check_size(c, length)
    if c.pages is None:
        raise _no_access(c)
    room_for(c, "mr")
    view, pages = user_view(daemon, c, addr, length, access)
    mr = c.device.memory.register(pd, addr, length, access, view=view)
    entry = [mr, None, None]
    h = c.add("mr", entry)
    _charge(daemon, c, entry, pages)
    return {"mr": h, "lkey": mr.lkey, "rkey": mr.rkey}, []


def user_view(daemon, c, addr: int, length: int, access: int) -> tuple[PagedSpace, int]:
    """The view of an MR on ``[addr, addr + length)`` of the process, and
    the pages to charge to RLIMIT_MEMLOCK: none on demand; else
    ib_umem_get's pinning, every page mapped now (writable, if the MR may
    write them) -- EFAULT if not -- and all of them charged.  (Also a new
    translation of ``rereg_mr``, which checks ``c.pages`` first.)"""
    pages = 0
    if not access & IBV_ACCESS_ON_DEMAND:
        pages = _pages(daemon, c, addr, length)
        if not c.pages.fault(addr, length, bool(access & _WRITABLE)):
            raise VerbsError(errno.EFAULT, f"pages of [0x{addr:x}, 0x{addr + length:x}) are not mapped"
                                           + (" writable" if access & _WRITABLE else ""))
    return PagedSpace(c.pages, addr, length), pages


def cmd_rereg_mr(daemon, c, m, fds):
    """ibv_rereg_mr with ib_uverbs_rereg_mr's checks and errnos: the PD and
    the access change in place (rxe_rereg_user_mr); a new translation moves
    the MR onto ``[addr, addr + length)`` of the process, as mlx5 does
    re-registering it in place (its keys stay): what ``reg_user_mr`` would
    make of that range with the new access -- on demand if the access has
    IBV_ACCESS_ON_DEMAND, else every page mapped now and the MR's memlock
    charge moved to the new pages.  Every check runs before anything
    changes: a refused rereg leaves the MR as it was."""
    entry = c.get(m.get("mr"), "mr")
    flags = rq.uint(m, "flags", rq.U32)
    mr, _, dm = entry
    if not flags:
        raise VerbsError(errno.EINVAL, "rereg flags 0")
    if flags & ~(IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS):
        raise VerbsError(errno.EOPNOTSUPP, f"rereg flags 0x{flags:x}")     # (uverbs: IB_MR_REREG_SUPPORTED)
    if fds:
        raise VerbsError(errno.EINVAL, "rereg_mr carries no memory fd")
    if dm is not None:                              # (uverbs: mr->dm)
        raise VerbsError(errno.EINVAL, "an MR on device memory cannot be re-registered")
    if mr.mws:                                     # a window bound to it holds its PD and translation
        raise VerbsError(errno.EBUSY, "memory windows are bound to the MR")
    access = mr.access
    if flags & IBV_REREG_MR_CHANGE_ACCESS:
        access = rq.uint(m, "access", rq.U32)
        _check_access(access)
        if access & IBV_ACCESS_ON_DEMAND and c.pages is None:     # ib_check_mr_access: no ODP cap
            raise VerbsError(errno.EOPNOTSUPP, "the device has no on-demand paging for this process")
    pd = mr.pd
    if flags & IBV_REREG_MR_CHANGE_PD:
        pd = c.get(m.get("pd"), "pd")
    if flags & IBV_REREG_MR_CHANGE_TRANSLATION:
        _translate(daemon, c, entry, rq.uint(m, "addr", rq.U64, lo=1), rq.uint(m, "length", rq.U64, lo=1),
                   access)
    mr.pd = pd
    mr.access = access
    return {"lkey": mr.lkey, "rkey": mr.rkey}, []


def _translate(daemon, c, entry, addr: int, length: int, access: int) -> None:
    """Move ``entry``'s MR onto the process's own pages (last of the
    rereg's checks: nothing changes if it fails).  The old memory is let
    go after the new is had, as ib_umem_get before ib_umem_release: the
    memlock check counts both."""
    _check_wrap(addr, length)
    _check_size(c, length)
    if c.pages is None:
        raise _no_access(c)
    view, pages = user_view(daemon, c, addr, length, access)
    mr, old_region = entry[0], entry[1]
    mr.addr, mr.length, mr.buf, mr.view = addr, length, None, view
    entry[1] = None
    if old_region is not None:
        old_region.close()
    daemon.locked_pages[c.uid] -= c.pinned.pop(id(entry), 0)
    _charge(daemon, c, entry, pages)


def _prefetch_mr(c, pd, sge, advice: int) -> tuple[MR, int, int]:
    """rxe_ib_prefetch_sg_list's lookup of one SGE: the ODP MR its lkey
    names on ``pd`` (EINVAL else), with write permission for
    PREFETCH_WRITE (EPERM), and the range inside it (EFAULT)."""
    if type(sge) not in (list, tuple) or len(sge) != 3:
        raise VerbsError(errno.EINVAL, f"bad SGE {sge!r}: [addr, length, lkey]")
    addr = rq.uint({"addr": sge[0]}, "addr", rq.U64)
    length = rq.uint({"length": sge[1]}, "length", rq.U32)
    lkey = rq.uint({"lkey": sge[2]}, "lkey", rq.U32)
    mr = c.device.memory.lookup(lkey)
    # lookup_mr(pd, IB_ACCESS_LOCAL_WRITE, lkey, RXE_LOOKUP_LOCAL)
    if (type(mr) is not MR or mr.lkey != lkey or mr.pd is not pd or not mr.valid
            or not mr.access & IBV_ACCESS_LOCAL_WRITE or not mr.access & IBV_ACCESS_ON_DEMAND
            or type(mr.view) is not PagedSpace):           # (umem->is_odp: registered on demand)
        raise VerbsError(errno.EINVAL, f"no ODP MR with lkey 0x{lkey:x} and local write on this PD")
    if advice == _IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE and not mr.access & _WRITABLE:
        raise VerbsError(errno.EPERM, f"MR 0x{lkey:x} is not writable: no PREFETCH_WRITE")
    if addr < mr.addr or addr + length > mr.addr + mr.length:     # ib_umem_odp_map_dma_and_lock
        raise VerbsError(errno.EFAULT, f"[0x{addr:x}, +{length}) is outside MR 0x{lkey:x}")
    return mr, addr, length


def cmd_advise_mr(daemon, c, m, fds):
    """ibv_advise_mr: fault the SGEs' pages in now.  Synchronous with
    IBV_ADVISE_MR_FLAG_FLUSH (the first failure is the reply); else the
    lookups are checked and the faulting is best effort, its failures
    ignored, as the kernel's deferred work.  (The daemon has no worker to
    defer it to: it is done before the reply, which the caller cannot
    tell from a worker that ran at once.)"""
    pd = c.get(m.get("pd"), "pd")
    advice = rq.uint(m, "advice", rq.U32)
    flags = rq.uint(m, "flags", rq.U32)
    if c.pages is None:                          # no ODP: no advise_mr op (libibverbs' EOPNOTSUPP)
        raise _no_access(c)
    if flags & ~_IBV_ADVISE_MR_FLAG_FLUSH:       # uverbs_get_flags32
        raise VerbsError(errno.EINVAL, f"advise_mr flags 0x{flags:x}")
    sg_list = m.get("sg_list")
    if type(sg_list) is not list or not sg_list:       # UVERBS_ATTR_MIN_SIZE: one SGE at least
        raise VerbsError(errno.EINVAL, "advise_mr needs an SGE list")
    if advice not in _ADVICE:
        raise VerbsError(errno.EOPNOTSUPP, f"advice {advice}")
    ranges = [_prefetch_mr(c, pd, sge, advice) for sge in sg_list]
    write = advice == _IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE
    fault = advice != _IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT
    for mr, addr, length in ranges:
        err = c.pages.prefetch(addr, length, write, fault)
        if err and flags & _IBV_ADVISE_MR_FLAG_FLUSH:
            raise VerbsError(err, f"cannot fault in [0x{addr:x}, +{length}) of pid {c.pid}")
    return {}, []
