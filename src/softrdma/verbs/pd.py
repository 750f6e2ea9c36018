"""Protection domains (pyverbs.pd): PD with ibv_advise_mr on its MRs, and
parent domains with their allocators (ibv_alloc_parent_domain: ParentDomainContext,
ParentDomainInitAttr, ParentDomain).

A parent domain is a library object over a PD, as in mlx5's provider (the
kernel never sees it): the daemon knows only the PD under it, whose handle
the parent domain's QPs, SRQs, MRs and AHs use, and a QP/CQ/SRQ made on it
gets its queue memory from the parent domain's allocator.

Where the allocator's memory goes.  softrdma's queues are rings in a sealed
memfd the daemon maps too (uapi.shm); memory a user allocator hands out is
in the process's own heap or mapping, which the daemon cannot map.  So the
ring stays a memfd, and the allocator's buffer is made *its pages*: the
library asks for a whole number of pages at page alignment (the ring's
size rounded up, resource type ``RES_TYPE_*``), and maps the ring's memfd
over exactly that buffer (MAP_FIXED|MAP_SHARED).  The caller's buffer then
is the queue -- the WQEs and CQEs the library and the daemon write are
read and written there -- and the heap around it is untouched: only pages
the allocator gave out whole are remapped, never a page it still uses for
anything else (an earlier MR rereg that moved an MR onto part-owned pages
corrupted the heap).  An address that is not page aligned breaks the
contract asked for and fails the create with EINVAL (after the free
callback took it back).  When the queue is destroyed, ordinary private
anonymous memory is mapped back over the buffer first, then the free
callback gets it: the allocator gets back a buffer of the kind it gave
(its contents are not kept, as after a device's use of it).

An allocator's buffer in huge pages (hugetlb: a MAP_HUGETLB mapping or a
hugetlbfs file) cannot have small pages mapped over part of a huge page
(EINVAL).  Such a ring lives in a hugetlb memfd instead (``_HugeBacking``)
mapped shared over the *whole* huge pages the buffer is in, their contents
copied into it first -- the rest of those pages is still the allocator's
(another queue's ring, say: a bump allocator hands out several rings
from one huge page, and they then share the backing, each ring at its
offset in it, ``Ring.create_at``).  The backing goes when its last ring
does: private hugetlb memory with the same contents is moved back over
the pages (mremap), then the free callback gets the buffer.  The backing
needs free huge pages of the buffer's size while it is made (ENOMEM with
a one-line reason when the system has none left); if none are free to
restore private ones, the shared backing stays mapped there -- the same
huge pages and bytes, only no longer private.

IBV_ALLOCATOR_USE_DEFAULT from the alloc callback (or no allocators) is the
default: the ring alone, and the free callback is not called for it, as
mlx5_alloc_buf_custom's fallback.  NULL (0/None) fails the create with
ENOMEM.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import itertools
import mmap
import os
import weakref

from ..enums import (
    IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS, IBV_PARENT_DOMAIN_INIT_ATTR_ALLOW_CC_UNPROTECTED_ALLOC,
    IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT, _IBV_ALLOCATOR_USE_DEFAULT,
)
from ..uapi.commands import CMD
from ..uapi.shm import Ring
from .base import VerbsObject
from .errors import PyverbsRDMAError

#: rdma_driver_id's RDMA_DRIVER_RXE: the vendor part of a resource type, as
#: mlx5dv's MLX5DV_RES_TYPE_* are RDMA_DRIVER_MLX5 << 32 | n
RDMA_DRIVER_RXE = 14
#: the resource types the allocators are called with: one per ring (a QP
#: has a send and a receive ring; mlx5 has one buffer for both)
RES_TYPE_SQ = RDMA_DRIVER_RXE << 32 | 1
RES_TYPE_RQ = RDMA_DRIVER_RXE << 32 | 2
RES_TYPE_SRQ = RDMA_DRIVER_RXE << 32 | 3
RES_TYPE_CQ = RDMA_DRIVER_RXE << 32 | 4


class PD(VerbsObject):
    destroy_cmd = CMD.dealloc_pd

    ctx_close_rank = 2                  # a Context closes its PDs after its CQs

    def __init__(self, ctx, **kwargs):
        self.ctx = ctx
        handle = kwargs.get("handle")
        if handle is not None:
            # ibv_import_pd: the PD of a context sharing this one's connection
            # (Context(cmd_fd=...)); the original deallocates it, not this one
            try:
                ctx.conn.call(CMD.query_pd, pd=handle)
            except PyverbsRDMAError as e:
                raise PyverbsRDMAError("Failed to import PD", e.error_code) from None
            self.destroy_cmd = None
            self.handle = handle
        else:
            self.handle = ctx.conn.call(CMD.alloc_pd)[0]["pd"]
        self.closed = False
        self._refs = weakref.WeakSet()
        ctx.add_ref(self)

    def unimport(self) -> None:
        """ibv_unimport_pd: forget an imported PD (and what was made on it
        through this object); the PD itself stays its original's."""
        self.close()

    def add_ref(self, obj) -> None:
        """Objects the PD closes first when it is closed (as pyverbs'
        close_weakrefs): every MR, MW, QP, SRQ and AH made on it holds the
        PD busy (ibv_dealloc_pd's EBUSY) until then."""
        self._refs.add(obj)

    def advise_mr(self, advise: int, flags: int, sg_list) -> int:
        """ibv_advise_mr: prefetch the SGEs' pages of ODP MRs (advice
        PREFETCH, PREFETCH_WRITE, PREFETCH_NO_FAULT; IBV_ADVISE_MR_FLAG_FLUSH
        waits for it).  The errno is the device's (EOPNOTSUPP when it has
        no ODP for this process)."""
        sges = [[int(s.addr), int(s.length), int(s.lkey)] for s in sg_list]
        try:
            self.ctx.conn.call(CMD.advise_mr, pd=self.handle, advice=int(advise), flags=int(flags), sg_list=sges)
        except PyverbsRDMAError as e:
            raise PyverbsRDMAError("Failed to advise MR", e.error_code) from None
        return 0

    def _close_children(self) -> None:
        for obj in sorted(list(self._refs), key=lambda o: o.close_rank):     # pyverbs' close_weakrefs order
            obj.close()


class ParentDomainContext:
    """The pd_context of a parent domain: the PD and the Python alloc/free
    callbacks, ``alloc(pd, pd_context, size, alignment, resource_type)``
    (an address, 0 for failure, or e._IBV_ALLOCATOR_USE_DEFAULT) and
    ``free(pd, pd_context, ptr, resource_type)``; ``pd`` is this object's
    PD, as pyverbs' pd_alloc/pd_free wrappers pass it."""

    def __init__(self, pd, alloc_func, free_func, user_data=None):
        self.pd = pd
        self.p_alloc = alloc_func
        self.p_free = free_func
        self.user_data = user_data


#: the comp_mask bits a parent domain may carry (as mlx5's provider)
_PD_INIT_ATTR_SUPPORTED = int(IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT
                              | IBV_PARENT_DOMAIN_INIT_ATTR_ALLOW_CC_UNPROTECTED_ALLOC)


class ParentDomainInitAttr:
    """ibv_parent_domain_init_attr: the PD, and the allocators when
    pd_context is given (comp_mask IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS
    | _PD_CONTEXT, as pyverbs sets them)."""

    def __init__(self, pd, pd_context=None, comp_mask: int = 0):
        """``comp_mask`` (rdma-core 64): more bits, such as
        IBV_PARENT_DOMAIN_INIT_ATTR_ALLOW_CC_UNPROTECTED_ALLOC."""
        if not isinstance(pd, PD):
            raise TypeError("ParentDomainInitAttr needs a PD")
        self.pd = pd
        self.pd_context = pd_context
        self.comp_mask = int(comp_mask)
        if pd_context is not None:
            self.comp_mask |= int(IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT)


class ParentDomain(PD):
    """ibv_alloc_parent_domain: a PD for QPs, SRQs, MRs, AHs and extended
    CQs (IBV_CQ_INIT_ATTR_MASK_PD) whose queues come from its allocators.
    Its protection domain holds it (closed before it, as pyverbs' PD closes
    its parent domains first); it closes its QPs, SRQs, CQs... first."""

    close_rank = 0                      # a PD closes its parent domains first

    def __init__(self, context, attr: ParentDomainInitAttr):
        if context is None or not isinstance(attr, ParentDomainInitAttr):
            raise TypeError("ParentDomain needs a Context and a ParentDomainInitAttr")
        pd = attr.pd
        if pd.closed or pd.ctx is not context or isinstance(pd, ParentDomain):
            # ibv_alloc_parent_domain: the PD must be a live plain PD of this context
            raise PyverbsRDMAError("Failed to allocate Parent Domain", errno.EINVAL)
        ctx_ = attr.pd_context
        if ctx_ is not None and not (callable(ctx_.p_alloc) and callable(ctx_.p_free)):
            raise PyverbsRDMAError("Failed to allocate Parent Domain", errno.EINVAL)
        if attr.comp_mask & ~_PD_INIT_ATTR_SUPPORTED:
            # mlx5_alloc_parent_domain's check_comp_mask
            raise PyverbsRDMAError("Failed to allocate Parent Domain", errno.EINVAL)
        # ALLOW_CC_UNPROTECTED_ALLOC: a Confidential Computing guest's opt-in
        # to shared buffers, which matters only on a device that reports
        # IBV_DEVICE_CC_DMA_BOUNCE; this one does not, so the provider keeps
        # using plain memory, as ibv_alloc_parent_domain(3) allows
        self.ctx = context
        self.protection_domain = pd
        self.pd_context = ctx_
        self.handle = pd.handle
        self.closed = False
        self._refs = weakref.WeakSet()
        pd.add_ref(self)
        context.add_ref(self)

    def _destroy(self) -> None:
        pass                            # the daemon has only the PD under it: nothing to destroy

    # --------------------------------------------------------------- buffers
    def alloc_ring(self, nslots: int, slot_size: int, name: str, res_type: int) -> Ring:
        """A ring for a queue of this parent domain: in the allocator's
        buffer (see the module's docstring), or the default one."""
        ring = Ring.create(nslots, slot_size, name)
        c = self.pd_context
        if c is None:
            return ring
        page = mmap.PAGESIZE
        length = -(-ring.region.size // page) * page
        try:
            ptr = c.p_alloc(c.pd, c, length, page, res_type)
        except BaseException:
            ring.close()
            raise
        if ptr == _IBV_ALLOCATOR_USE_DEFAULT:
            return ring
        if not ptr:
            ring.close()
            raise PyverbsRDMAError("the parent domain's allocator returned NULL", errno.ENOMEM)
        ptr = int(ptr)
        err = backing = None
        vma = None if ptr % page else _vma_of(ptr)
        if ptr % page:
            err = PyverbsRDMAError(f"the parent domain's allocator returned 0x{ptr:x}, not aligned to the"
                                   f" {page} bytes asked", errno.EINVAL)
        elif vma is not None and vma[2] > page:
            try:
                backing = _HugeBacking.over(ptr, length, vma)
                ctypes.memset(ptr, 0, length)            # (fresh memory, as a new memfd's over small pages)
                huge_ring = backing.ring(ptr, ring.nslots, ring.slot_size)
            except PyverbsRDMAError as e:
                err = e
            else:
                ring.close()
                ring = huge_ring
        elif not _map_at(ptr, length, ring.region.fd):
            err = PyverbsRDMAError(f"cannot map the queue over the allocator's buffer at 0x{ptr:x}",
                                   ctypes.get_errno() or errno.EINVAL)
        if err is not None:
            if backing is not None:
                backing.release()
            ring.close()
            c.p_free(c.pd, c, ptr, res_type)
            raise err
        _EXTERNAL[ring] = (self, ptr, length, res_type, backing)
        return ring


def alloc_ring(pd, nslots: int, slot_size: int, name: str, res_type: int) -> Ring:
    """The ring of a queue made on ``pd``: from its allocators if it is a
    parent domain, else a plain one (``Ring.create``)."""
    if isinstance(pd, ParentDomain):
        return pd.alloc_ring(nslots, slot_size, name, res_type)
    return Ring.create(nslots, slot_size, name)


def free_ring(ring: Ring) -> None:
    """Close a ring from ``alloc_ring``; an allocator's buffer gets ordinary
    memory back over it and goes to the free callback."""
    ext = _EXTERNAL.pop(ring, None)
    ring.close()
    if ext is not None:
        pdom, ptr, length, res_type, backing = ext
        if backing is not None:
            backing.release()
        else:
            _map_anonymous_at(ptr, length)
        c = pdom.pd_context
        c.p_free(c.pd, c, ptr, res_type)


def ring_user_buffer(ring: Ring) -> int | None:
    """The address of the allocator's buffer a ring lives in (None: the
    ring has only its own mapping)."""
    ext = _EXTERNAL.get(ring)
    return None if ext is None else ext[1]


# ring -> (parent domain, address, length, resource type, _HugeBacking or None)
_EXTERNAL: "weakref.WeakKeyDictionary[Ring, tuple]" = weakref.WeakKeyDictionary()

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.mremap.restype = ctypes.c_void_p
_libc.mremap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_MAP_FIXED = 0x10
_MAP_HUGETLB = 0x40000
_MAP_HUGE_SHIFT = 26                 # (MFD_HUGE_SHIFT too): log2 of the huge page size
_MREMAP_MAYMOVE, _MREMAP_FIXED = 1, 2
_MAP_FAILED = ctypes.c_void_p(-1).value


def _vma_of(addr: int) -> tuple[int, int, int, bool] | None:
    """(start, end, page size, shared) of the mapping holding ``addr``,
    from /proc/self/smaps (KernelPageSize: a hugetlb mapping's huge page
    size), or None when it cannot be told."""
    try:
        with open("/proc/self/smaps") as f:
            found = None
            for line in f:
                if found is None:
                    head = line.split(None, 1)[0]
                    if "-" in head and not head.endswith(":"):
                        lo, _, hi = head.partition("-")
                        try:
                            start, end = int(lo, 16), int(hi, 16)
                        except ValueError:
                            continue
                        if start <= addr < end:
                            found = (start, end, line.split()[1].endswith("s"))
                elif line.startswith("KernelPageSize:"):
                    return found[0], found[1], int(line.split()[1]) * 1024, found[2]
    except OSError:
        pass
    return None


class _HugeBacking:
    """A hugetlb memfd mapped shared over whole huge pages of an
    allocator's buffer, for the rings in them (see the module's
    docstring); ``users`` rings hold it."""

    _names = itertools.count(1)
    live: "list[_HugeBacking]" = []

    def __init__(self, base: int, length: int, page_size: int):
        self.base, self.length, self.page_size = base, length, page_size
        self.name = f"softrdma-hugering-{next(self._names)}"
        self.users = 0
        shift = page_size.bit_length() - 1
        kb = page_size // 1024
        try:
            fd = os.memfd_create(self.name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING | os.MFD_HUGETLB
                                 | shift << _MAP_HUGE_SHIFT)
        except OSError as e:
            raise PyverbsRDMAError(f"cannot make a hugetlb memfd of {kb} kB pages for the queue: {e.strerror}",
                                   e.errno) from None
        try:
            os.ftruncate(fd, length)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
            try:                                 # (a shared hugetlb mapping reserves its pages now)
                tmp = mmap.mmap(fd, length, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            except OSError as e:
                if e.errno != errno.ENOMEM:
                    raise
                raise PyverbsRDMAError(f"no free huge pages of {kb} kB for the queue at 0x{base:x}: it needs"
                                       f" {length // page_size} (HugePages_Free in /proc/meminfo; reserve more"
                                       f" in /proc/sys/vm/nr_hugepages)", errno.ENOMEM) from None
            try:
                anchor = ctypes.c_char.from_buffer(tmp)
                ctypes.memmove(ctypes.addressof(anchor), base, length)   # what the pages held
                del anchor
            finally:
                tmp.close()
            if not _map_at(base, length, fd):
                raise PyverbsRDMAError(f"cannot map the queue's huge pages over the allocator's buffer at"
                                       f" 0x{base:x}", ctypes.get_errno() or errno.EINVAL)
        except PyverbsRDMAError:
            os.close(fd)
            raise
        except OSError as e:
            os.close(fd)
            raise PyverbsRDMAError(f"cannot make the queue's hugetlb memfd: {e.strerror}", e.errno) from None
        self.fd = fd
        self.live.append(self)

    @classmethod
    def over(cls, ptr: int, length: int, vma: tuple[int, int, int, bool]) -> "_HugeBacking":
        """The backing for a ring at [ptr, ptr + length) of hugetlb mapping
        ``vma``: the one already over those huge pages, or a new one over
        the whole huge pages the range is in -- of a private mapping only:
        a copy would part a shared one from its file or its other users."""
        start, end, page_size, shared = vma
        base = ptr - (ptr - start) % page_size
        top = ptr + length + (-(ptr + length - start)) % page_size
        for b in cls.live:
            if b.base <= ptr and ptr + length <= b.base + b.length:
                b.users += 1
                return b
            if b.base < top and base < b.base + b.length:
                raise PyverbsRDMAError(f"the allocator's buffer at 0x{ptr:x} (+{length}) straddles huge pages"
                                       f" another queue's ring uses and huge pages it does not", errno.EINVAL)
        if ptr + length > end:
            raise PyverbsRDMAError(f"the allocator's buffer at 0x{ptr:x} (+{length}) runs past the end of its"
                                   f" huge page mapping (0x{end:x})", errno.EINVAL)
        if shared:
            raise PyverbsRDMAError(f"the allocator's buffer at 0x{ptr:x} is in a shared huge page mapping; a queue"
                                   f" can take only private huge pages (MAP_PRIVATE)", errno.EINVAL)
        b = cls(base, top - base, page_size)
        b.users = 1
        return b

    def ring(self, ptr: int, nslots: int, slot_size: int) -> Ring:
        """A new ring at ``ptr`` in the backing: an open file description
        of its own, at its offset (``Ring.create_at``)."""
        fd = os.open(f"/proc/self/fd/{self.fd}", os.O_RDWR | os.O_CLOEXEC)
        try:
            return Ring.create_at(fd, ptr - self.base, nslots, slot_size)
        except BaseException:
            os.close(fd)
            raise

    def release(self) -> None:
        """A ring gone; the last one puts private huge pages with the same
        contents back over the buffer (when the pages are still this
        backing's and the system has huge pages for it)."""
        self.users -= 1
        if self.users:
            return
        self.live.remove(self)
        os.close(self.fd)
        if not self._still_mapped():
            return                                       # (the caller unmapped the buffer meanwhile)
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_HUGETLB \
            | (self.page_size.bit_length() - 1) << _MAP_HUGE_SHIFT
        tmp = _libc.mmap(None, self.length, mmap.PROT_READ | mmap.PROT_WRITE, flags, -1, 0)
        if tmp == _MAP_FAILED or tmp is None:
            return                                       # no huge pages free: the shared ones stay
        ctypes.memmove(tmp, self.base, self.length)
        if _libc.mremap(tmp, self.length, self.length, _MREMAP_MAYMOVE | _MREMAP_FIXED, self.base) != self.base:
            _libc.munmap(tmp, self.length)

    def _still_mapped(self) -> bool:
        """The backing's memfd is still what is mapped over its pages."""
        try:
            with open("/proc/self/maps") as f:
                for line in f:
                    if line.rstrip().endswith(f"/memfd:{self.name} (deleted)"):
                        lo, _, hi = line.split(None, 1)[0].partition("-")
                        if int(lo, 16) <= self.base and self.base + self.length <= int(hi, 16):
                            return True
        except OSError:
            pass
        return False


def _map_at(addr: int, length: int, fd: int) -> bool:
    """The memfd's first ``length`` bytes mapped shared at ``addr`` (pages
    the allocator gave out whole)."""
    got = _libc.mmap(addr, length, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED | _MAP_FIXED, fd, 0)
    return got == addr


def _map_anonymous_at(addr: int, length: int) -> None:
    """Private anonymous memory back at ``addr``, as the allocator's buffer
    was before (zero filled)."""
    got = _libc.mmap(addr, length, mmap.PROT_READ | mmap.PROT_WRITE,
                     mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_FIXED, -1, 0)
    if got != addr:                                  # (never leave the memfd aliased in the caller's heap)
        raise OSError(ctypes.get_errno(), "cannot give the parent domain's buffer back")
