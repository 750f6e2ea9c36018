"""Memory windows end to end: the verbs library (MW, QP.bind_mw, SendWR
set_bind_wr), the daemon's alloc_mw/dealloc_mw, binds executed by the
transport, remote READ/WRITE/ATOMIC through a window, and invalidation --
through a real softrdmad, as pyverbs' tests/test_mr.py MWTest does it."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from daemon_helpers import default_daemon_in_shm, poll_wcs as wait
from rc_pair import rc_attr
from softrdma.enums import (
    IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_MW_BIND, IBV_ACCESS_REMOTE_ATOMIC, IBV_ACCESS_REMOTE_READ,
    IBV_ACCESS_REMOTE_WRITE, IBV_ACCESS_ZERO_BASED, IBV_MTU_1024, IBV_MW_TYPE_1, IBV_MW_TYPE_2, IBV_QPT_RC,
    IBV_QPT_UD, IBV_SEND_SIGNALED, IBV_WC_BIND_MW, IBV_WC_LOCAL_INV, IBV_WC_MW_BIND_ERR, IBV_WC_REM_ACCESS_ERR,
    IBV_WC_SUCCESS, IBV_WC_WITH_INV, IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_BIND_MW, IBV_WR_LOCAL_INV,
    IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE, IBV_WR_SEND_WITH_INV,
)
from softrdma.pyverbs.mr import MR, MW, MWBind, MWBindInfo
from softrdma.verbs import addr, cq as cq_m, device, pd as pd_m, qp as qp_m, wr as wr_m
from softrdma.verbs.errors import PyverbsRDMAError

IPV4_GID = 1
RW, RR, RA = IBV_ACCESS_REMOTE_WRITE, IBV_ACCESS_REMOTE_READ, IBV_ACCESS_REMOTE_ATOMIC
QP_ACC = IBV_ACCESS_LOCAL_WRITE | RW | RR | RA
MR_ACC = QP_ACC | IBV_ACCESS_MW_BIND


@pytest.fixture(scope="module")
def daemon():
    with default_daemon_in_shm("mw") as d:
        yield d


class Side:
    """A PD, an MR (with MW_BIND), a CQ and an RC QP."""

    def __init__(self, ctx, pd=None, mr_access=MR_ACC):
        self.pd = pd or pd_m.PD(ctx)
        self.mr = MR(self.pd, 1 << 16, mr_access)
        self.cq = cq_m.CQ(ctx, 64)
        self.qp = qp_m.QP(self.pd, qp_m.QPInitAttr(IBV_QPT_RC, scq=self.cq, rcq=self.cq,
                                                   cap=qp_m.QPCap(16, 16, 1, 1)))


def connected(ctx, **kw):
    """Two connected sides on one device (loopback through the daemon)."""
    a, b = Side(ctx, **kw), Side(ctx, **kw)
    gid = ctx.query_gid(1, IPV4_GID)
    for x, y in ((a, b), (b, a)):
        x.qp.to_rts(rc_attr(y.qp.qp_num, gid, IPV4_GID, timeout=14, min_rnr_timer=12, access=QP_ACC))
    return a, b


def rdma(side, wr_id, opcode, rkey, raddr, length=8, offset=0, add=0):
    w = wr_m.SendWR(wr_id, opcode, 1, sg=[wr_m.SGE(side.mr.buf + offset, length, side.mr.lkey)])
    if opcode == IBV_WR_ATOMIC_FETCH_AND_ADD:
        w.set_wr_atomic(rkey, raddr, add)
    else:
        w.set_wr_rdma(rkey, raddr)
    side.qp.post_send(w)
    (wc,) = wait(side.cq, 1)
    return wc.status


def bind_type2(side, mw, addr_, length, access, wr_id=1):
    w = wr_m.SendWR(wr_id, IBV_WR_BIND_MW)
    w.set_bind_wr(mw, MWBindInfo(side.mr, addr_, length, access))
    side.qp.post_send(w)
    (wc,) = wait(side.cq, 1)
    return wc, w.rkey


def test_type_1_window_write_read_atomic_and_out_of_window(daemon):
    with device.Context(name="rxe0") as ctx:
        a, b = connected(ctx)
        mw = MW(b.pd, IBV_MW_TYPE_1)
        first = mw.rkey
        win = b.mr.buf + 4096
        b.qp.bind_mw(mw, MWBind(MWBindInfo(b.mr, win, 4096, RW | RR | RA), IBV_SEND_SIGNALED, wr_id=77))
        assert mw.rkey == (first & ~0xFF) | ((first + 1) & 0xFF)
        (wc,) = wait(b.cq, 1)
        assert (wc.wr_id, wc.status, wc.opcode) == (77, IBV_WC_SUCCESS, IBV_WC_BIND_MW)
        a.mr.write(b"through a window", 16)
        assert rdma(a, 1, IBV_WR_RDMA_WRITE, mw.rkey, win + 100, 16) == IBV_WC_SUCCESS
        assert b.mr.read(16, 4096 + 100) == b"through a window"
        assert rdma(a, 2, IBV_WR_RDMA_READ, mw.rkey, win + 100, 16, offset=1024) == IBV_WC_SUCCESS
        assert a.mr.read(16, 1024) == b"through a window"
        b.mr.write((41).to_bytes(8, "little"), 8, 4096 + 512)
        assert rdma(a, 3, IBV_WR_ATOMIC_FETCH_AND_ADD, mw.rkey, win + 512, offset=2048, add=1) == IBV_WC_SUCCESS
        assert a.mr.read(8, 2048) == (41).to_bytes(8, "little") and b.mr.read(8, 4096 + 512)[0] == 42
        assert rdma(a, 4, IBV_WR_RDMA_WRITE, mw.rkey, win + 4096 - 4, 8) == IBV_WC_REM_ACCESS_ERR


def test_type_2_window_bind_send_with_invalidate_then_access_fails(daemon):
    with device.Context(name="rxe0") as ctx:
        a, b = connected(ctx)
        mw = MW(b.pd, IBV_MW_TYPE_2)
        wc, rkey = bind_type2(b, mw, b.mr.buf, 256, RW | RR)
        assert (wc.status, wc.opcode) == (IBV_WC_SUCCESS, IBV_WC_BIND_MW)
        assert rkey == (mw.rkey & ~0xFF) | ((mw.rkey + 1) & 0xFF)
        a.mr.write(b"type2", 5)
        assert rdma(a, 1, IBV_WR_RDMA_WRITE, rkey, b.mr.buf + 10, 5) == IBV_WC_SUCCESS
        assert b.mr.read(5, 10) == b"type2"
        # SEND_WITH_INV, as pyverbs' tests write it: the rkey in imm_data
        b.qp.post_recv(wr_m.RecvWR(9, 1, [wr_m.SGE(b.mr.buf + 8192, 64, b.mr.lkey)]))
        inv = wr_m.SendWR(2, IBV_WR_SEND_WITH_INV, 1, sg=[wr_m.SGE(a.mr.buf, 5, a.mr.lkey)])
        inv.imm_data = rkey
        a.qp.post_send(inv)
        (swc,) = wait(a.cq, 1)
        (rwc,) = wait(b.cq, 1)
        assert swc.status == IBV_WC_SUCCESS
        assert (rwc.status, rwc.wc_flags & IBV_WC_WITH_INV, rwc.imm_data) == (IBV_WC_SUCCESS, IBV_WC_WITH_INV,
                                                                             rkey)
        assert rdma(a, 3, IBV_WR_RDMA_WRITE, rkey, b.mr.buf + 10, 5) == IBV_WC_REM_ACCESS_ERR


def test_type_2_local_invalidate_zero_based_and_wrong_right(daemon):
    with device.Context(name="rxe0") as ctx:
        a, b = connected(ctx)
        mw = MW(b.pd, IBV_MW_TYPE_2)
        wc, rkey = bind_type2(b, mw, b.mr.buf + 1000, 100, RR | IBV_ACCESS_ZERO_BASED)
        assert wc.status == IBV_WC_SUCCESS
        b.mr.write(b"zero-based", 10, 1000 + 20)
        assert rdma(a, 1, IBV_WR_RDMA_READ, rkey, 20, 10) == IBV_WC_SUCCESS         # va = offset in window
        assert a.mr.read(10) == b"zero-based"
        inv = wr_m.SendWR(5, IBV_WR_LOCAL_INV)
        inv.imm_data = rkey
        b.qp.post_send(inv)
        (iwc,) = wait(b.cq, 1)
        assert (iwc.wr_id, iwc.status, iwc.opcode) == (5, IBV_WC_SUCCESS, IBV_WC_LOCAL_INV)
        assert rdma(a, 2, IBV_WR_RDMA_READ, rkey, 20, 10) == IBV_WC_REM_ACCESS_ERR
    with device.Context(name="rxe0") as ctx:
        a, b = connected(ctx)
        mw = MW(b.pd, IBV_MW_TYPE_2)
        _, rkey = bind_type2(b, mw, b.mr.buf, 100, RR)
        assert rdma(a, 1, IBV_WR_RDMA_WRITE, rkey, b.mr.buf, 8) == IBV_WC_REM_ACCESS_ERR   # read-only window


def test_bind_errors_come_back_as_mw_bind_err(daemon):
    with device.Context(name="rxe0") as ctx:
        a, b = connected(ctx, mr_access=QP_ACC)              # the MR lacks IBV_ACCESS_MW_BIND
        mw = MW(b.pd, IBV_MW_TYPE_1)
        b.qp.bind_mw(mw, MWBind(MWBindInfo(b.mr, b.mr.buf, 64, RW), IBV_SEND_SIGNALED, wr_id=3))
        (wc,) = wait(b.cq, 1)
        assert (wc.wr_id, wc.status, wc.opcode) == (3, IBV_WC_MW_BIND_ERR, IBV_WC_BIND_MW)
    with device.Context(name="rxe0") as ctx:
        a, b = connected(ctx)
        mw = MW(b.pd, IBV_MW_TYPE_2)
        wc, _ = bind_type2(b, mw, b.mr.buf + (1 << 16) - 8, 64, RW)     # past the MR's end
        assert wc.status == IBV_WC_MW_BIND_ERR


def test_library_checks_and_lifetime_errnos(daemon):
    with device.Context(name="rxe0") as ctx:
        a = Side(ctx)
        other_pd = pd_m.PD(ctx)
        other_mr = MR(other_pd, 4096, MR_ACC)
        mw1, mw2 = MW(a.pd, IBV_MW_TYPE_1), MW(a.pd, IBV_MW_TYPE_2)
        with pytest.raises(PyverbsRDMAError) as e:              # ibv_bind_mw is for type 1 windows
            a.qp.bind_mw(mw2, MWBind(MWBindInfo(a.mr, a.mr.buf, 8, RW), IBV_SEND_SIGNALED))
        assert e.value.error_code == errno.EINVAL
        with pytest.raises(PyverbsRDMAError) as e:              # the MR of another PD
            a.qp.bind_mw(mw1, MWBind(MWBindInfo(other_mr, other_mr.buf, 8, RW), IBV_SEND_SIGNALED))
        assert e.value.error_code == errno.EPERM
        with pytest.raises(PyverbsRDMAError) as e:              # zero-based type 1
            a.qp.bind_mw(mw1, MWBind(MWBindInfo(a.mr, a.mr.buf, 8, RW | IBV_ACCESS_ZERO_BASED), 0))
        assert e.value.error_code == errno.EINVAL
        with pytest.raises(PyverbsRDMAError) as e:
            MW(a.pd, 3)
        assert e.value.error_code == errno.EINVAL
        ud_cq = cq_m.CQ(ctx, 4)
        ud = qp_m.QP(a.pd, qp_m.QPInitAttr(IBV_QPT_UD, scq=ud_cq, rcq=ud_cq))
        w = wr_m.SendWR(1, IBV_WR_BIND_MW)
        w.set_bind_wr(mw2, MWBindInfo(a.mr, a.mr.buf, 8, RW))
        with pytest.raises(PyverbsRDMAError) as e:              # not on a UD QP
            ud.post_send(w)
        assert e.value.error_code == errno.EINVAL
        # a PD with windows is busy; an MR with a bound window cannot go
        with pytest.raises(PyverbsRDMAError) as e:
            ctx.conn.call("dealloc_pd", pd=a.pd.handle)
        assert e.value.error_code == errno.EBUSY
        b_cq = cq_m.CQ(ctx, 4)
        rc = qp_m.QP(a.pd, qp_m.QPInitAttr(IBV_QPT_RC, scq=b_cq, rcq=b_cq, cap=qp_m.QPCap(4, 4, 1, 1)))
        _self_connect(ctx, rc)
        rc.bind_mw(mw1, MWBind(MWBindInfo(a.mr, a.mr.buf, 64, RW), IBV_SEND_SIGNALED))
        assert [x.status for x in wait(b_cq, 1)] == [IBV_WC_SUCCESS]
        with pytest.raises(PyverbsRDMAError) as e:
            a.mr.close()
        assert e.value.error_code == errno.EINVAL
        mw1.close()
        a.mr.closed = False
        a.mr.close()                                            # unbound now: goes
        for q in (ud, rc, a.qp):
            q.close()
        a.pd.close()                                            # closes mw2 first, as pyverbs does
        assert mw2.closed


def _self_connect(ctx, q):
    at = qp_m.QPAttr()
    at.qp_access_flags = QP_ACC
    at.path_mtu = IBV_MTU_1024
    at.dest_qp_num = q.qp_num
    at.max_dest_rd_atomic = at.max_rd_atomic = 1
    at.min_rnr_timer, at.timeout, at.retry_cnt, at.rnr_retry = 12, 14, 7, 7
    at.ah_attr = addr.AHAttr(gr=addr.GlobalRoute(dgid=ctx.query_gid(1, IPV4_GID), sgid_index=IPV4_GID),
                             is_global=1)
    q.to_rts(at)


CHILD = textwrap.dedent("""
    import json, sys, time
    from softrdma.pyverbs.mr import MR, MW, MWBind, MWBindInfo
    from softrdma.verbs import device, pd, cq, qp, addr
    from softrdma.enums import *
    ctx = device.Context(name="rxe0")
    p = pd.PD(ctx)
    m = MR(p, 4096, 31)
    c = cq.CQ(ctx, 8)
    q = qp.QP(p, qp.QPInitAttr(IBV_QPT_RC, scq=c, rcq=c, cap=qp.QPCap(4, 4, 1, 1)))
    a = qp.QPAttr(); a.qp_access_flags = 15; a.path_mtu = IBV_MTU_1024; a.dest_qp_num = q.qp_num
    a.max_dest_rd_atomic = a.max_rd_atomic = 1; a.min_rnr_timer = 12; a.timeout = 14; a.retry_cnt = 7
    a.rnr_retry = 7
    a.ah_attr = addr.AHAttr(gr=addr.GlobalRoute(dgid=ctx.query_gid(1, 1), sgid_index=1), is_global=1)
    q.to_rts(a)
    w1, w2 = MW(p, IBV_MW_TYPE_1), MW(p, IBV_MW_TYPE_2)
    q.bind_mw(w1, MWBind(MWBindInfo(m, m.buf, 4096, IBV_ACCESS_REMOTE_WRITE), IBV_SEND_SIGNALED))
    while not c.poll(1)[0]:
        pass
    print(json.dumps({"rkey": w1.rkey, "addr": m.buf}), flush=True)
    time.sleep(60)
""")


def test_client_death_deallocates_its_windows(daemon):
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "SOFTRDMA_RUN": daemon.run_dir})
    try:
        assert json.loads(child.stdout.readline())["rkey"]
        kinds = sorted(r["kind"] for r in daemon.resources() if r["pid"] == child.pid)
        assert kinds.count("mw") == 2 and "mr" in kinds
        pd_row = next(r for r in daemon.resources() if r["pid"] == child.pid and r["kind"] == "pd")
        assert pd_row["users"] == 4                   # MR, QP and the two windows hold the PD
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(5)
    end = time.monotonic() + 60
    while any(r["pid"] == child.pid for r in daemon.resources()) and time.monotonic() < end:
        time.sleep(0.02)
    assert not any(r["pid"] == child.pid for r in daemon.resources())
