"""rdma-core 64's pyverbs additions through a real softrdmad: the Buf API
(Buf, BufMR, MREx on a Buf: the MR is the Buf's memory at its offset, as
RDMA traffic shows), MREx's other paths and libibverbs' errnos, DMAHandle
(EOPNOTSUPP as on rxe), the named enum classes (libibverbs_enums,
librdmacm_enums, mlx5_enums), madvise, FdArr, AsyncEvent, get_pkey_index,
query_port_speed (which rxe lacks), the rate-limit and dma-buf export
verbs rxe lacks."""

from __future__ import annotations

import ctypes
import errno
import mmap
import time

import pytest

from daemon_helpers import context_on_own_daemon
from softrdma.pyverbs import enums as e
from softrdma.pyverbs import mem_alloc
from softrdma.pyverbs.addr import AHAttr, GlobalRoute
from softrdma.pyverbs.cq import CQ
from softrdma.pyverbs.device import AsyncEvent, FdArr, speed_to_str
from softrdma.pyverbs.libibverbs_enums import (
    _IBV_DEVICE_CC_DMA_BOUNCE, ibv_access_flags, ibv_mr_init_attr_mask, ibv_placement_type, ibv_tph_mem_type,
    ibv_wr_opcode,
)
from softrdma.pyverbs.librdmacm_enums import rdma_cm_event_type, rdma_port_space
from softrdma.pyverbs.mr import MR, Buf, BufMR, DMAHandle, DmaHandleInitAttr, MREx
from softrdma.pyverbs.pd import PD
from softrdma.pyverbs.providers.mlx5 import mlx5_enums
from softrdma.pyverbs.pyverbs_error import PyverbsRDMAError
from softrdma.pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr, QPRateLimitAttr
from softrdma.pyverbs.wr import SGE, SendWR

IPV4_GID = 1
ACC = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ


@pytest.fixture(scope="module")
def ctx():
    with context_on_own_daemon("v64api") as c:
        yield c


def errno_of(fn, *a, **kw) -> int:
    with pytest.raises(PyverbsRDMAError) as ex:
        fn(*a, **kw)
    return ex.value.error_code


def rc_pair(ctx, pd):
    cq = CQ(ctx, 16)
    cap = QPCap(max_send_wr=8, max_recv_wr=8)
    a, b = (QP(pd, QPInitAttr(e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap)) for _ in range(2))
    gid = ctx.query_gid(1, IPV4_GID)
    for q, peer in ((a, b), (b, a)):
        attr = QPAttr()
        attr.qp_access_flags = ACC
        attr.dest_qp_num = peer.qp_num
        attr.max_dest_rd_atomic = attr.max_rd_atomic = 1
        attr.ah_attr = AHAttr(gr=GlobalRoute(dgid=gid, sgid_index=IPV4_GID), is_global=1, port_num=1)
        q.to_rts(attr)
    return cq, a, b


def wait_ok(cq, n=1):
    end = time.monotonic() + 10
    got = []
    while len(got) < n and time.monotonic() < end:
        got += cq.poll()[1]
    assert [w.status for w in got] == [0] * n, got


def test_buf_mrs_are_the_bufs_memory_at_their_offsets(ctx):
    pd = PD(ctx)
    buf = Buf(pd, 3 * mmap.PAGESIZE)
    assert buf.size == 3 * mmap.PAGESIZE and buf.addr % mmap.PAGESIZE == 0
    low = BufMR(pd, buf, 4096, ACC)                                   # ibv_reg_buf_mr
    high = MREx(pd, length=1000, access=ACC, buf=buf, address=buf.addr + 5000)   # IBV_REG_MR_MASK_BUF
    assert (low.buf, high.buf) == (buf.addr, buf.addr + 5000)
    src = MR(pd, 4096, ACC)
    src.write(b"x" * 1000, 1000)
    cq, a, _ = rc_pair(ctx, pd)
    for mr, data in ((high, b"x" * 1000), (low, b"x" * 1000)):
        w = SendWR(opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(src.buf, 1000, src.lkey)])
        w.set_wr_rdma(mr.rkey, mr.buf)
        a.post_send(w)
        wait_ok(cq)
    assert ctypes.string_at(buf.addr + 5000, 1000) == b"x" * 1000      # the Buf's bytes, where high is
    assert ctypes.string_at(buf.addr, 1000) == b"x" * 1000
    assert high.read(1000, 0) == b"x" * 1000
    # the range outside the MR stays: an RDMA WRITE past it is refused
    w = SendWR(opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(src.buf, 8, src.lkey)])
    w.set_wr_rdma(high.rkey, buf.addr + 6000)
    a.post_send(w)
    end, got = time.monotonic() + 10, []
    while not got and time.monotonic() < end:
        got = cq.poll()[1]
    assert got[0].status == e.IBV_WC_REM_ACCESS_ERR
    buf.close()                                                       # its MRs go first
    assert low.closed and high.closed
    pd.close()


def test_buf_registration_checks_as_libibverbs(ctx):
    pd, other = PD(ctx), PD(ctx)
    buf = Buf(pd, 8192)
    assert errno_of(BufMR, pd, buf, 8193, ACC) == errno.EINVAL           # longer than the Buf
    assert errno_of(BufMR, pd, buf, 4096, ACC, offset=4097) == errno.EINVAL
    assert errno_of(BufMR, other, buf, 64, ACC) == errno.EINVAL         # not the allocating PD
    assert errno_of(MREx, pd, 64, ACC, buf=buf, address=buf.addr - 64) == errno.EINVAL
    assert errno_of(Buf, pd, 0) == errno.EINVAL
    pd.close()
    assert buf.closed


def test_mrex_paths_and_errors(ctx):
    pd = PD(ctx)
    mr = MREx(pd, 4096, ACC)
    mr.write(b"abc", 3)
    assert mr.read(3, 0) == b"abc" and "MREx" in str(mr)
    with pytest.raises(PyverbsRDMAError, match="Failed to register MR using extended API") as ex:
        MREx(pd, 4096, ibv_access_flags.IBV_ACCESS_REMOTE_WRITE)            # without LOCAL_WRITE
    assert ex.value.error_code == errno.EINVAL
    at = MREx(pd, 4096, ACC, iova=0x10000)                                   # addressed by its IOVA
    assert at.buf != 0x10000
    assert errno_of(MREx, pd, 4096, ACC, fd=3) == errno.EOPNOTSUPP         # dma-buf: not here
    attr = DmaHandleInitAttr(comp_mask=e.IBV_DMAH_INIT_ATTR_MASK_TPH_MEM_TYPE,
                             tph_mem_type=ibv_tph_mem_type.IBV_TPH_MEM_TYPE_PM)
    assert errno_of(DMAHandle, ctx, attr) == errno.EOPNOTSUPP               # as rxe: no PCIe TPH
    assert errno_of(MREx, pd, 4096, ACC, dmah=object()) == errno.EOPNOTSUPP
    pd.close()


def test_v64_enums():
    assert ibv_mr_init_attr_mask.IBV_REG_MR_MASK_BUF == 1 << 5 and _IBV_DEVICE_CC_DMA_BOUNCE == 1 << 41
    assert (ibv_wr_opcode.IBV_WR_FLUSH, ibv_wr_opcode.IBV_WR_ATOMIC_WRITE) == (14, 15)
    assert ibv_access_flags.IBV_ACCESS_FLUSH_PERSISTENT == 1 << 9 and ibv_placement_type.IBV_FLUSH_GLOBAL == 1
    assert (rdma_port_space.RDMA_PS_TCP, rdma_port_space.RDMA_PS_UDP, rdma_port_space.RDMA_PS_IB) == \
        (0x106, 0x111, 0x13F)
    assert rdma_cm_event_type.RDMA_CM_EVENT_ADDRINFO_RESOLVED == 16
    m = mlx5_enums
    assert m.mlx5dv_context_attr_flags.MLX5DV_CONTEXT_FLAGS_DEVX == m.MLX5DV_CONTEXT_FLAGS_DEVX == 1
    assert m.mlx5dv_qp_create_flags.MLX5DV_QP_CREATE_SIG_PIPELINING == m.MLX5DV_QP_CREATE_SIG_PIPELINING == 1 << 6
    assert m.MLX5DV_FLOW_TABLE_TYPE_RDMA_TRANSPORT_TX_ == 6


def test_device_and_qp_additions(ctx):
    assert ctx.get_pkey_index(1, 0xFFFF) == 0
    with pytest.raises(PyverbsRDMAError, match="Failed to get pkey index"):
        ctx.get_pkey_index(1, 0x1234)
    pa = ctx.query_port(1)
    # the port's lanes times one lane's speed, in 100 Mb/s: 1X at 2.5 Gbps
    assert (pa.active_width, pa.active_speed) == (1, 1) and ctx.query_port_speed(1) == 25
    assert errno_of(ctx.query_port_speed, 2) == errno.EINVAL
    srq_resize = ctx.query_device().device_cap_flags & e.IBV_DEVICE_SRQ_RESIZE
    assert srq_resize and ctx.query_device().device_cap_flags & e.IBV_DEVICE_XRC
    assert pa.active_speed_ex == 0 and speed_to_str(pa.active_speed, pa.active_speed_ex) == "2.5 Gbps (1)"
    assert speed_to_str(0, 256) == "200.0 Gbps (256)"
    ev = AsyncEvent({"event": e.IBV_EVENT_SRQ_LIMIT_REACHED})
    ev.ack()
    assert ev.event_type == e.IBV_EVENT_SRQ_LIMIT_REACHED == ev["event"]
    pd = PD(ctx)
    cq, a, _ = rc_pair(ctx, pd)
    assert errno_of(a.modify_rate_limit, QPRateLimitAttr(rate_limit=0)) == errno.EOPNOTSUPP
    pd.close()
    cq.close()
    assert FdArr(arr=[5, 6, 7], count=2).arr == [5, 6]


def test_madvise():
    addr = mem_alloc.mmap(length=2 * mmap.PAGESIZE)
    ctypes.memmove(addr, b"z", 1)
    mem_alloc.madvise(addr, mmap.PAGESIZE)                   # MADV_DONTNEED: a private page is dropped
    assert ctypes.string_at(addr, 1) == b"\0"
    with pytest.raises(PyverbsRDMAError) as ex:
        mem_alloc.madvise(addr + 1, 10)                      # not page aligned
    assert ex.value.error_code == errno.EINVAL


def test_resolve_addrinfo_completes_with_an_event(ctx):
    from softrdma.pyverbs.cmid import CMID, CMEvent, CMEventChannel
    from softrdma.pyverbs.librdmacm_enums import RAI_PASSIVE
    ch = CMEventChannel()
    cmid = CMID(ch)
    assert errno_of(cmid.query_addrinfo) == errno.EINVAL
    cmid.resolve_addrinfo(node="127.0.0.1", service="7471", port_space=rdma_port_space.RDMA_PS_TCP)
    ev = CMEvent(ch, timeout=5)
    assert ev.event_type == rdma_cm_event_type.RDMA_CM_EVENT_ADDRINFO_RESOLVED and ev.status == 0
    assert cmid.query_addrinfo().dst_addr == ("127.0.0.1", 7471)
    cmid.resolve_addrinfo(node="127.0.0.1", service="7472", flags=RAI_PASSIVE)
    assert CMEvent(ch, timeout=5).event_type == rdma_cm_event_type.RDMA_CM_EVENT_ADDRINFO_RESOLVED
    assert cmid.query_addrinfo().src_addr == ("127.0.0.1", 7472)
    cmid.close()
    ch.close()
