"""IBA 1.5's ATOMIC WRITE and FLUSH through a real softrdmad, as rdma-core's
test_qpex.py drives them (v44 test_qp_ex_rc_atomic_write; v64 test_qp_ex_rc_flush
and _flush_type_violate): QPEx builders ``wr_atomic_write`` / ``wr_flush``,
the IBV_ACCESS_FLUSH_* flags on QPs and MRs, the device's capability bits,
and the completions; the requests cross the daemon's packet path."""

from __future__ import annotations

import ctypes
import mmap

import errno
import time

import pytest

from daemon_helpers import context_on_own_daemon
from softrdma.enums import IB_UVERBS_DEVICE_ATOMIC_WRITE, IB_UVERBS_DEVICE_FLUSH_GLOBAL, IB_UVERBS_DEVICE_FLUSH_PERSISTENT
from softrdma.pyverbs import enums as e
from softrdma.pyverbs.addr import AHAttr, GlobalRoute
from softrdma.pyverbs.cq import CQ
from softrdma.pyverbs.mr import MR
from softrdma.pyverbs.pd import PD
from softrdma.pyverbs.pyverbs_error import PyverbsRDMAError
from softrdma.pyverbs.qp import QPAttr, QPCap, QPEx, QPInitAttrEx

IPV4_GID = 1                      # on lo: ::ffff:127.0.0.1
QP_ACC = (e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_REMOTE_ATOMIC
          | e.IBV_ACCESS_FLUSH_GLOBAL | e.IBV_ACCESS_FLUSH_PERSISTENT)      # rdma-core v64's create_qp_ex
MR_ACC = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_FLUSH_GLOBAL
OPS = e.IBV_QP_EX_WITH_ATOMIC_WRITE | e.IBV_QP_EX_WITH_FLUSH | e.IBV_QP_EX_WITH_RDMA_WRITE


@pytest.fixture(scope="module")
def ctx():
    with context_on_own_daemon("flaw") as c:
        yield c


class Pair:
    def __init__(self, ctx, ops=OPS, qp_types=(e.IBV_QPT_RC, e.IBV_QPT_RC)):
        self.pd = PD(ctx)
        self.cqa, self.cqb = CQ(ctx, 32), CQ(ctx, 32)
        cap = QPCap(max_send_wr=16, max_recv_wr=16, max_send_sge=1, max_recv_sge=1)
        mask = e.IBV_QP_INIT_ATTR_PD | e.IBV_QP_INIT_ATTR_SEND_OPS_FLAGS
        self.a, self.b = (QPEx(ctx, QPInitAttrEx(qp_type=t, scq=c, rcq=c, pd=self.pd, cap=cap, comp_mask=mask,
                                                 send_ops_flags=ops))
                          for t, c in zip(qp_types, (self.cqa, self.cqb)))
        self.ma, self.mb = MR(self.pd, 4096, MR_ACC), MR(self.pd, 4096, MR_ACC)
        gid = ctx.query_gid(1, IPV4_GID)
        for q, peer in ((self.a, self.b), (self.b, self.a)):
            attr = QPAttr()
            attr.qp_access_flags = QP_ACC
            attr.dest_qp_num = peer.qp_num
            attr.max_dest_rd_atomic = attr.max_rd_atomic = 4
            attr.min_rnr_timer, attr.timeout, attr.retry_cnt, attr.rnr_retry = 12, 14, 7, 7
            attr.ah_attr = AHAttr(gr=GlobalRoute(dgid=gid, sgid_index=IPV4_GID), is_global=1, port_num=1)
            q.to_rts(attr)

    def post(self, build) -> None:
        self.a.wr_start()
        self.a.wr_id = 0x123
        self.a.wr_flags = e.IBV_SEND_SIGNALED
        build(self.a)
        self.a.wr_complete()

    def wc(self, timeout=10.0):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            n, wcs = self.cqa.poll()
            if n:
                return wcs[0]
        raise AssertionError("no completion")


def test_device_reports_flush_and_atomic_write_as_rxe(ctx):
    flags = ctx.query_device_ex().device_cap_flags_ex
    want = IB_UVERBS_DEVICE_FLUSH_GLOBAL | IB_UVERBS_DEVICE_FLUSH_PERSISTENT | IB_UVERBS_DEVICE_ATOMIC_WRITE
    assert flags & want == want


def test_atomic_write_end_to_end(ctx):
    p = Pair(ctx)
    p.mb.write(b"s" * 24, 24)            # pyverbs: write(data, length, offset=0)
    p.post(lambda q: q.wr_atomic_write(p.mb.rkey, p.mb.buf + 8, b"cccccccc"))
    wc = p.wc()
    assert (wc.status, wc.opcode, wc.wr_id, wc.byte_len) == (e.IBV_WC_SUCCESS, e.IBV_WC_ATOMIC_WRITE, 0x123, 8)
    assert p.mb.read(24, 0) == b"s" * 8 + b"cccccccc" + b"s" * 8


def test_atomic_write_and_flush_on_odp_memory(ctx):
    """The responder's MR on demand-paged memory (the pages the daemon faults
    in from this process): ATOMIC WRITE lands, FLUSH of the range and of the
    whole MR completes, as rxe_odp.c's."""
    p = Pair(ctx)
    mem = mmap.mmap(-1, 8192)
    base = ctypes.addressof(ctypes.c_char.from_buffer(mem))
    odp = MR(p.pd, 8192, MR_ACC | e.IBV_ACCESS_ON_DEMAND, address=base)
    try:
        mem[0:24] = b"o" * 24
        p.post(lambda q: q.wr_atomic_write(odp.rkey, base + 8, b"ODPODPOD"))
        wc = p.wc()
        assert (wc.status, wc.opcode) == (e.IBV_WC_SUCCESS, e.IBV_WC_ATOMIC_WRITE)
        assert mem[0:24] == b"o" * 8 + b"ODPODPOD" + b"o" * 8
        for level, length in ((e.IBV_FLUSH_RANGE, 64), (e.IBV_FLUSH_MR, 0)):
            p.post(lambda q: q.wr_flush(odp.rkey, base, length, e.IBV_FLUSH_GLOBAL, level))
            wc = p.wc()
            assert (wc.status, wc.opcode) == (e.IBV_WC_SUCCESS, e.IBV_WC_FLUSH)
    finally:
        odp.close()


def test_flush_range_and_mr_after_a_write(ctx):
    p = Pair(ctx)
    p.ma.write(b"w" * 64, 64, 64)
    p.post(lambda q: (q.wr_rdma_write(p.mb.rkey, p.mb.buf), q.wr_set_sge(_sge(p.ma, 64))))
    assert p.wc().status == e.IBV_WC_SUCCESS
    for level, length in ((e.IBV_FLUSH_RANGE, 64), (e.IBV_FLUSH_MR, 0), (e.IBV_FLUSH_MR, 12345678)):
        p.post(lambda q: q.wr_flush(p.mb.rkey, p.mb.buf, length, e.IBV_FLUSH_GLOBAL, level))
        wc = p.wc()
        assert (wc.status, wc.opcode, wc.byte_len) == (e.IBV_WC_SUCCESS, e.IBV_WC_FLUSH, length)
    assert p.mb.read(64, 0) == b"w" * 64


def test_flush_placement_type_violation_is_rem_access_err(ctx):
    p = Pair(ctx)
    p.post(lambda q: q.wr_flush(p.mb.rkey, p.mb.buf, 8, e.IBV_FLUSH_PERSISTENT, e.IBV_FLUSH_RANGE))
    assert p.wc().status == e.IBV_WC_REM_ACCESS_ERR


def test_persistent_mr_is_einval_as_rxe_on_memory_that_is_not_pmem(ctx):
    pd = PD(ctx)
    with pytest.raises(PyverbsRDMAError) as ex:
        MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_FLUSH_PERSISTENT)
    assert ex.value.error_code == errno.EINVAL     # rdma-core's tests skip on this errno


def test_builders_need_their_send_ops_flag_and_rc(ctx):
    p = Pair(ctx, ops=e.IBV_QP_EX_WITH_RDMA_WRITE)
    p.a.wr_start()
    with pytest.raises(PyverbsRDMAError) as ex:
        p.a.wr_atomic_write(p.mb.rkey, p.mb.buf, b"12345678")
    assert ex.value.error_code == errno.EINVAL
    p.a.wr_abort()
    pd = PD(ctx)
    cq = CQ(ctx, 4)
    for qpt in (e.IBV_QPT_UC, e.IBV_QPT_UD):
        for flag in (e.IBV_QP_EX_WITH_ATOMIC_WRITE, e.IBV_QP_EX_WITH_FLUSH):
            with pytest.raises(PyverbsRDMAError) as ex:
                QPEx(ctx, QPInitAttrEx(qp_type=qpt, scq=cq, rcq=cq, pd=pd, send_ops_flags=flag,
                                       comp_mask=e.IBV_QP_INIT_ATTR_PD | e.IBV_QP_INIT_ATTR_SEND_OPS_FLAGS))
            assert ex.value.error_code == errno.EOPNOTSUPP


def _sge(mr, length):
    from softrdma.pyverbs.wr import SGE
    return SGE(mr.buf + 64, length, mr.lkey)
