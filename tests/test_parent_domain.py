"""Parent domains (ibv_alloc_parent_domain) with allocators, end to end
through a softrdmad: the allocators are called per queue with its size,
alignment and resource type, the queue's ring lives in the buffer they
return (its bytes are the WQEs/CQEs), IBV_ALLOCATOR_USE_DEFAULT and NULL
behave as in mlx5's provider, the free callback gets the buffer back on
destroy as ordinary memory, the heap around it is untouched, and RC
traffic with a QP, an extended CQ and an SRQ made on one works."""

from __future__ import annotations

import ctypes
import errno
import mmap

import pytest

from daemon_helpers import context_on, daemon_in_shm
from hugepage_helpers import HUGE, NR_HUGEPAGES, huge_pages  # noqa: F401 (a fixture)
from rc_pair import ACC, ipv4_gid_index, rc_attr
from softrdma.pyverbs import enums as e
from softrdma.pyverbs import mem_alloc as mem
from softrdma.pyverbs.cq import CQ, CQEX, CqInitAttrEx
from softrdma.pyverbs.mr import MR
from softrdma.pyverbs.pd import PD, ParentDomain, ParentDomainContext, ParentDomainInitAttr
from softrdma.pyverbs.pyverbs_error import PyverbsRDMAError
from softrdma.pyverbs.qp import QP, QPCap, QPInitAttr, QPInitAttrEx
from softrdma.pyverbs.srq import SRQ, SrqAttr, SrqInitAttr
from softrdma.pyverbs.wr import SGE, RecvWR, SendWR
from softrdma.uapi.shm import MAGIC
from softrdma.verbs import pd as vpd

PAGE = mmap.PAGESIZE


@pytest.fixture(scope="module")
def run_dir():
    with daemon_in_shm("pdom") as d:
        yield d.run_dir


@pytest.fixture
def ctx(run_dir, monkeypatch):
    with context_on(run_dir, monkeypatch) as c:
        yield c


class Recorder:
    """posix_memalign allocators that log every call."""

    def __init__(self, result=None):
        self.allocs, self.frees, self.result = [], [], result

    def alloc(self, pd, context, size, alignment, resource_type):
        if self.result is not None:
            ptr = self.result
        else:
            ptr = mem.posix_memalign(size, alignment)
        self.allocs.append((pd, context, size, alignment, resource_type, ptr))
        return ptr

    def free(self, pd, context, ptr, resource_type):
        self.frees.append((pd, context, ptr, resource_type))
        mem.free(ptr)


def _pdom(ctx, rec=None):
    pd = PD(ctx)
    pctx = ParentDomainContext(pd, rec.alloc, rec.free, "data") if rec else None
    return pd, ParentDomain(ctx, attr=ParentDomainInitAttr(pd=pd, pd_context=pctx)), pctx


def test_allocators_get_each_queue_and_its_ring_lives_there(ctx):
    rec = Recorder()
    pd, pdom, pctx = _pdom(ctx, rec)
    cq = CQEX(ctx, CqInitAttrEx(cqe=64, parent_domain=pdom,
                                comp_mask=e.IBV_CQ_INIT_ATTR_MASK_FLAGS | e.IBV_CQ_INIT_ATTR_MASK_PD))
    srq = SRQ(pdom, SrqInitAttr(SrqAttr(max_wr=16)))
    qp = QP(pdom, QPInitAttr(e.IBV_QPT_RC, None, cq, cq, None, QPCap(8, 8, 1, 1)))
    qp2 = QP(pdom, QPInitAttr(e.IBV_QPT_RC, None, cq, cq, srq, QPCap(8, 8, 1, 1)))
    types = [a[4] for a in rec.allocs]
    assert types == [vpd.RES_TYPE_CQ, vpd.RES_TYPE_SRQ, vpd.RES_TYPE_SQ, vpd.RES_TYPE_RQ, vpd.RES_TYPE_SQ]
    assert all(a[0] is pd and a[1] is pctx and a[3] == PAGE and a[2] % PAGE == 0 for a in rec.allocs)
    assert all(a[4] >> 32 == vpd.RDMA_DRIVER_RXE for a in rec.allocs)
    # the user's buffer is the ring: its header, and what the library writes
    for ring in (cq.ring, srq.ring, qp.sq, qp.rq, qp2.sq):
        addr = vpd.ring_user_buffer(ring)
        assert addr in [a[5] for a in rec.allocs]
        assert ctypes.c_uint32.from_address(addr).value == MAGIC
        ring.region.view[60] = 0x5A                 # (a header byte nobody uses)
        assert ctypes.c_uint8.from_address(addr + 60).value == 0x5A
        ring.region.view[60] = 0
    assert qp2.rq is None
    qp.close(), qp2.close(), srq.close(), cq.close()
    assert sorted(f[2] for f in rec.frees) == sorted(a[5] for a in rec.allocs)
    assert [f[3] for f in rec.frees] == [vpd.RES_TYPE_SQ, vpd.RES_TYPE_RQ, vpd.RES_TYPE_SQ, vpd.RES_TYPE_SRQ,
                                         vpd.RES_TYPE_CQ]
    pdom.close(), pd.close()


def test_freed_buffer_is_ordinary_memory_and_the_heap_is_untouched(ctx):
    """Bytes next to the buffer (same allocation, other pages) keep their
    values; after destroy the buffer no longer aliases the ring."""
    kept = {}

    def alloc(pd, context, size, alignment, resource_type):
        raw = ctypes.create_string_buffer(size + 3 * alignment)
        addr = -(-ctypes.addressof(raw) // alignment) * alignment + alignment
        ctypes.memset(ctypes.addressof(raw), 0xA5, size + 3 * alignment)
        kept[addr] = (raw, size)
        return addr

    freed = []

    def free(pd, context, ptr, resource_type):
        raw, size = kept[ptr]
        # ordinary memory again: writable, zero filled, not the ring
        assert ctypes.string_at(ptr, size) == bytes(size)
        ctypes.memset(ptr, 0x11, size)
        freed.append(ptr)

    pd = PD(ctx)
    pdom = ParentDomain(ctx, ParentDomainInitAttr(pd, ParentDomainContext(pd, alloc, free)))
    cq = CQ(ctx, 8)
    qp = QP(pdom, QPInitAttr(e.IBV_QPT_UD, None, cq, cq, None, QPCap(4, 4, 1, 1)))
    qp.close()
    assert sorted(freed) == sorted(kept)
    for addr, (raw, size) in kept.items():
        base = ctypes.addressof(raw)
        before = ctypes.string_at(base, addr - base)
        after = ctypes.string_at(addr + size, base + len(raw) - addr - size)
        assert before == b"\xa5" * len(before) and after == b"\xa5" * len(after)
        assert ctypes.string_at(addr, size) == b"\x11" * size
    cq.close(), pdom.close(), pd.close()


def test_use_default_and_no_allocators(ctx):
    calls = []

    def alloc(pd, context, size, alignment, resource_type):
        calls.append(resource_type)
        return e._IBV_ALLOCATOR_USE_DEFAULT

    def free(pd, context, ptr, resource_type):
        calls.append("free")

    pd = PD(ctx)
    for pctx in (ParentDomainContext(pd, alloc, free), None):
        attr = ParentDomainInitAttr(pd=pd, pd_context=pctx)
        assert attr.comp_mask == (0 if pctx is None else
                                  e.IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | e.IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT)
        pdom = ParentDomain(ctx, attr=attr)
        cq = CQ(ctx, 8)
        qp = QP(pdom, QPInitAttr(e.IBV_QPT_RC, None, cq, cq, None, QPCap(4, 4, 1, 1)))
        assert vpd.ring_user_buffer(qp.sq) is None
        qp.close(), cq.close(), pdom.close()
    assert calls == [vpd.RES_TYPE_SQ, vpd.RES_TYPE_RQ]      # the default's buffers are never freed by the user
    pd.close()


def test_null_and_misaligned_buffers_fail_the_create(ctx):
    rec = Recorder(result=0)
    pd, pdom, _ = _pdom(ctx, rec)
    cq = CQ(ctx, 8)
    with pytest.raises(PyverbsRDMAError) as ex:
        QP(pdom, QPInitAttr(e.IBV_QPT_RC, None, cq, cq, None, QPCap(4, 4, 1, 1)))
    assert ex.value.error_code == errno.ENOMEM and rec.frees == []
    keep = ctypes.create_string_buffer(4 * PAGE)
    rec.result = -(-ctypes.addressof(keep) // PAGE) * PAGE + 8
    with pytest.raises(PyverbsRDMAError) as ex:
        CQEX(ctx, CqInitAttrEx(parent_domain=pdom, comp_mask=e.IBV_CQ_INIT_ATTR_MASK_PD))
    assert ex.value.error_code == errno.EINVAL and [f[2] for f in rec.frees] == [rec.result]
    cq.close(), pdom.close(), pd.close()


def test_parent_domain_checks(ctx):
    pd = PD(ctx)
    with pytest.raises(PyverbsRDMAError) as ex:      # an extended CQ's parent_domain must be one
        CQEX(ctx, CqInitAttrEx(parent_domain=pd, comp_mask=e.IBV_CQ_INIT_ATTR_MASK_PD))
    assert ex.value.error_code == errno.EINVAL
    pdom = ParentDomain(ctx, ParentDomainInitAttr(pd))
    with pytest.raises(PyverbsRDMAError) as ex:      # a parent domain over a parent domain
        ParentDomain(ctx, ParentDomainInitAttr(pdom))
    assert ex.value.error_code == errno.EINVAL
    with pytest.raises(TypeError):
        ParentDomainInitAttr(None)
    # rdma-core 64's comp_mask: the Confidential Computing opt-in is accepted (the device
    # reports no IBV_DEVICE_CC_DMA_BOUNCE, so plain memory stays), unknown bits are EINVAL
    cc = ParentDomain(ctx, ParentDomainInitAttr(pd, comp_mask=e.IBV_PARENT_DOMAIN_INIT_ATTR_ALLOW_CC_UNPROTECTED_ALLOC))
    assert cc.handle == pd.handle
    cc.close()
    with pytest.raises(PyverbsRDMAError) as ex:
        ParentDomain(ctx, ParentDomainInitAttr(pd, comp_mask=1 << 3))
    assert ex.value.error_code == errno.EINVAL
    # closing the PD closes its parent domain and what was made on it first
    cq = CQ(ctx, 8)
    qp = QP(pdom, QPInitAttr(e.IBV_QPT_RC, None, cq, cq, None, QPCap(4, 4, 1, 1)))
    mr = MR(pdom, 4096, e.IBV_ACCESS_LOCAL_WRITE)
    pd.close()
    assert pdom.closed and qp.closed and mr.closed and pd.closed
    cq.close()


def test_rc_traffic_with_qp_cqex_srq_from_allocators(ctx):
    rec = Recorder()
    pd, pdom, _ = _pdom(ctx, rec)
    cqs = [CQEX(ctx, CqInitAttrEx(cqe=64, parent_domain=pdom, wc_flags=e.IBV_WC_STANDARD_FLAGS,
                                  comp_mask=e.IBV_CQ_INIT_ATTR_MASK_FLAGS | e.IBV_CQ_INIT_ATTR_MASK_PD))
           for _ in range(2)]
    srq = SRQ(pdom, SrqInitAttr(SrqAttr(max_wr=16)))
    mrs = [MR(pdom, 4096, ACC) for _ in range(2)]
    a = QP(ctx, QPInitAttrEx(e.IBV_QPT_RC, None, cqs[0], cqs[0], None, QPCap(8, 8, 1, 1),
                             comp_mask=e.IBV_QP_INIT_ATTR_PD, pd=pdom))
    b = QP(pdom, QPInitAttr(e.IBV_QPT_RC, None, cqs[1], cqs[1], srq, QPCap(8, 8, 1, 1)))
    gi = ipv4_gid_index(ctx)
    gid = ctx.query_gid(1, gi)
    a.to_rts(rc_attr(b.qp_num, gid, gi))
    b.to_rts(rc_attr(a.qp_num, gid, gi))
    for i in range(5):
        srq.post_recv(RecvWR(100 + i, 1, [SGE(mrs[1].buf + 64 * i, 64, mrs[1].lkey)]))
    for i in range(5):
        mrs[0].write(bytes([i + 1]) * 64, 64, 64 * i)
        a.post_send(SendWR(i, e.IBV_WR_SEND, 1, sg=[SGE(mrs[0].buf + 64 * i, 64, mrs[0].lkey)]))

    def drain(cq, n):
        got = []
        while len(got) < n:
            if cq.start_poll() == 0:
                got.append((cq.wr_id, cq.status))
                while cq.poll_next() == 0:
                    got.append((cq.wr_id, cq.status))
                cq.end_poll()
        return got

    assert drain(cqs[0], 5) == [(i, e.IBV_WC_SUCCESS) for i in range(5)]
    assert drain(cqs[1], 5) == [(100 + i, e.IBV_WC_SUCCESS) for i in range(5)]
    assert mrs[1].read(320, 0) == b"".join(bytes([i + 1]) * 64 for i in range(5))
    n = len(rec.allocs)
    pdom.close()                                     # its QPs, CQs, SRQ and MRs first
    assert a.closed and b.closed and srq.closed and all(c.closed for c in cqs) and all(m.closed for m in mrs)
    assert len(rec.frees) == n == 6
    pd.close()


# -------------------------------------------------------------- huge pages


def _huge_map(n=1):
    addr = mem.mmap(length=n * HUGE, flags=mem.MAP_ANONYMOUS_ | mem.MAP_PRIVATE_ | mem.MAP_HUGETLB_)
    return addr


def _page_size_at(addr):
    vma = vpd._vma_of(addr)
    return vma[2]


class BumpAllocator:
    """rdma-core's huge_page_alloc: queues carved one after the other out
    of one huge page, whose bytes around them are the caller's."""

    def __init__(self, base):
        self.next = base
        self.allocs, self.frees = [], []

    def alloc(self, pd, context, size, alignment, resource_type):
        ptr = -(-self.next // alignment) * alignment
        self.next = ptr + size
        self.allocs.append((ptr, size, resource_type))
        return ptr

    def free(self, pd, context, ptr, resource_type):
        self.frees.append((ptr, _page_size_at(ptr)))


def test_rings_over_an_allocators_huge_page_and_rc_traffic(ctx, huge_pages):
    base = _huge_map()
    assert _page_size_at(base) == HUGE
    ctypes.memset(base, 0x5A, HUGE)                   # the caller's bytes around the queues
    bump = BumpAllocator(base)
    pd = PD(ctx)
    pdom = ParentDomain(ctx, ParentDomainInitAttr(pd, ParentDomainContext(pd, bump.alloc, bump.free)))
    cqs = [CQ(ctx, 16) for _ in range(2)]
    mrs = [MR(pdom, 4096, ACC) for _ in range(2)]
    a = QP(pdom, QPInitAttr(e.IBV_QPT_RC, None, cqs[0], cqs[0], None, QPCap(8, 8, 1, 1)))
    b = QP(pdom, QPInitAttr(e.IBV_QPT_RC, None, cqs[1], cqs[1], None, QPCap(8, 8, 1, 1)))
    assert len(bump.allocs) == 4 and bump.next - base < HUGE
    for ptr, size, _ in bump.allocs:                  # each ring is its buffer, still in huge pages
        assert ctypes.string_at(ptr, 4) == MAGIC.to_bytes(4, "little") and _page_size_at(ptr) == HUGE
    assert vpd.ring_user_buffer(a.sq) == bump.allocs[0][0] and vpd.ring_user_buffer(b.rq) == bump.allocs[3][0]
    assert ctypes.string_at(bump.next, HUGE - (bump.next - base)) == b"\x5a" * (HUGE - (bump.next - base))
    gi = ipv4_gid_index(ctx)
    gid = ctx.query_gid(1, gi)
    a.to_rts(rc_attr(b.qp_num, gid, gi))
    b.to_rts(rc_attr(a.qp_num, gid, gi))
    for i in range(5):
        b.post_recv(RecvWR(100 + i, 1, [SGE(mrs[1].buf + 64 * i, 64, mrs[1].lkey)]))
        mrs[0].write(bytes([i + 1]) * 64, 64, 64 * i)
        a.post_send(SendWR(i, e.IBV_WR_SEND, 1, sg=[SGE(mrs[0].buf + 64 * i, 64, mrs[0].lkey)]))
    for cq, first in ((cqs[0], 0), (cqs[1], 100)):
        got = []
        while len(got) < 5:
            n, wcs = cq.poll(5)
            got += [(w.wr_id, w.status) for w in wcs[:n]]
        assert got == [(first + i, e.IBV_WC_SUCCESS) for i in range(5)]
    assert mrs[1].read(320, 0) == b"".join(bytes([i + 1]) * 64 for i in range(5))
    a.close()
    assert bump.frees == [(bump.allocs[0][0], HUGE), (bump.allocs[1][0], HUGE)]
    b.close()
    # the last ring gone: private huge pages again, the caller's bytes kept
    assert [f[1] for f in bump.frees] == [HUGE] * 4
    assert ctypes.string_at(bump.next, HUGE - (bump.next - base)) == b"\x5a" * (HUGE - (bump.next - base))
    assert not any(f"softrdma-hugering" in line and int(line.split("-")[0], 16) == base
                   for line in open("/proc/self/maps"))
    ctypes.memset(base, 1, HUGE)
    mem.munmap(base, HUGE)
    for o in (*mrs, *cqs, pdom, pd):
        o.close()


def test_no_free_huge_pages_fails_the_create_with_a_reason(ctx, huge_pages):
    """The backing needs free huge pages: with none left, ENOMEM and a
    one-line reason, the free callback gets the buffer back untouched."""
    base = _huge_map()
    ctypes.memset(base, 0x5A, HUGE)                   # in use now (faulted in)
    bump = BumpAllocator(base)
    pd = PD(ctx)
    pdom = ParentDomain(ctx, ParentDomainInitAttr(pd, ParentDomainContext(pd, bump.alloc, bump.free)))
    cq = CQ(ctx, 8)
    with open(NR_HUGEPAGES) as f:
        pool = f.read()
    try:
        with open(NR_HUGEPAGES, "w") as f:            # the pool shrinks to the pages in use
            f.write("0")
        with pytest.raises(PyverbsRDMAError) as ex:
            QP(pdom, QPInitAttr(e.IBV_QPT_RC, None, cq, cq, None, QPCap(4, 4, 1, 1)))
    finally:
        with open(NR_HUGEPAGES, "w") as f:
            f.write(pool)
    assert ex.value.error_code == errno.ENOMEM
    assert "no free huge pages of 2048 kB" in str(ex.value) and "\n" not in str(ex.value)
    assert bump.frees == [(bump.allocs[0][0], HUGE)]
    assert ctypes.string_at(base, HUGE) == b"\x5a" * HUGE
    assert not vpd._HugeBacking.live
    # with pages again, the same buffer takes the queue
    qp = QP(pdom, QPInitAttr(e.IBV_QPT_RC, None, cq, cq, None, QPCap(4, 4, 1, 1)))
    qp.close()
    mem.munmap(base, HUGE)
    cq.close(), pdom.close(), pd.close()


def test_ring_straddling_a_backing_past_the_mapping_or_shared(ctx, huge_pages):
    """A buffer that runs past its huge page mapping, that spans the huge
    pages another queue's backing covers and one it does not, or that is
    in a shared huge page mapping, is EINVAL; the free callback gets it
    back."""
    base = _huge_map(2)
    bump = BumpAllocator(base)
    pd = PD(ctx)
    pdom = ParentDomain(ctx, ParentDomainInitAttr(pd, ParentDomainContext(pd, bump.alloc, bump.free)))
    cq = CQ(ctx, 8)
    cq_ = CQEX(ctx, CqInitAttrEx(cqe=8, parent_domain=pdom, comp_mask=e.IBV_CQ_INIT_ATTR_MASK_PD))
    bump.next = base + HUGE - PAGE                    # the next CQ's ring crosses into the second page
    with pytest.raises(PyverbsRDMAError) as ex:
        CQEX(ctx, CqInitAttrEx(cqe=512, parent_domain=pdom, comp_mask=e.IBV_CQ_INIT_ATTR_MASK_PD))
    assert ex.value.error_code == errno.EINVAL and "straddles" in str(ex.value)
    bump.next = base + 2 * HUGE - PAGE                # past the end of the mapping
    with pytest.raises(PyverbsRDMAError) as ex:
        CQEX(ctx, CqInitAttrEx(cqe=512, parent_domain=pdom, comp_mask=e.IBV_CQ_INIT_ATTR_MASK_PD))
    assert ex.value.error_code == errno.EINVAL and "runs past" in str(ex.value)
    assert [f[0] for f in bump.frees] == [base + HUGE - PAGE, base + 2 * HUGE - PAGE]
    cq_.close()
    assert not vpd._HugeBacking.live
    mem.munmap(base, 2 * HUGE)
    # a shared huge page mapping (a copy would part it from its other users)
    shared = mem.mmap(length=HUGE, flags=mem.MAP_ANONYMOUS_ | mem.MAP_SHARED_ | mem.MAP_HUGETLB_)
    bump.next = shared
    with pytest.raises(PyverbsRDMAError) as ex:
        CQEX(ctx, CqInitAttrEx(cqe=8, parent_domain=pdom, comp_mask=e.IBV_CQ_INIT_ATTR_MASK_PD))
    assert ex.value.error_code == errno.EINVAL and "shared huge page mapping" in str(ex.value)
    assert bump.frees[-1] == (shared, HUGE) and not vpd._HugeBacking.live
    mem.munmap(shared, HUGE)
    cq.close(), pdom.close(), pd.close()
