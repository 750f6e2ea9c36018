"""An RDMA operation the responder QP's access flags do not enable, end to
end through a real softrdmad: the requester completes with
IBV_WC_REM_ACCESS_ERR (NAK remote access error, as the IBA spec and mlx5
have it -- rxe says IBV_WC_REM_INV_REQ_ERR), the responder QP is in ERR and
its owner gets IBV_EVENT_QP_ACCESS_ERR; the memory is untouched."""

from __future__ import annotations


import pytest

from daemon_helpers import default_daemon_in_shm, poll_wcs as wait
from rc_pair import rc_attr
from softrdma.enums import (
    IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_ATOMIC, IBV_ACCESS_REMOTE_READ, IBV_ACCESS_REMOTE_WRITE,
    IBV_EVENT_QP_ACCESS_ERR, IBV_QPS_ERR, IBV_QPS_RTS, IBV_QPT_RC, IBV_WC_REM_ACCESS_ERR,
    IBV_WC_SUCCESS, IBV_WC_WR_FLUSH_ERR, IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE,
    IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_SEND,
)
from softrdma.verbs import cq as cq_m, device, mr as mr_m, pd as pd_m, qp as qp_m, wr as wr_m

IPV4_GID = 1
LW, RW, RR, RA = IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_WRITE, IBV_ACCESS_REMOTE_READ, IBV_ACCESS_REMOTE_ATOMIC
ALL = LW | RW | RR | RA


@pytest.fixture(scope="module")
def daemon():
    with default_daemon_in_shm("qpacc") as d:
        yield d


class Side:
    def __init__(self, ctx):
        self.pd = pd_m.PD(ctx)
        self.mr = mr_m.MR(self.pd, 1 << 16, ALL)       # the MR allows everything: the QP decides
        self.cq = cq_m.CQ(ctx, 64)
        self.qp = qp_m.QP(self.pd, qp_m.QPInitAttr(IBV_QPT_RC, scq=self.cq, rcq=self.cq,
                                                   cap=qp_m.QPCap(16, 16, 1, 1)))


def connected(ctx, b_access):
    a, b = Side(ctx), Side(ctx)
    gid = ctx.query_gid(1, IPV4_GID)
    for x, y, acc in ((a, b, ALL), (b, a, b_access)):
        x.qp.to_rts(rc_attr(y.qp.qp_num, gid, IPV4_GID, timeout=14, min_rnr_timer=12, access=acc))
    return a, b


def post(a, b, wr_id, opcode, length=8):
    w = wr_m.SendWR(wr_id, opcode, 1, sg=[wr_m.SGE(a.mr.buf, length, a.mr.lkey)])
    if opcode == IBV_WR_ATOMIC_FETCH_AND_ADD:
        w.set_wr_atomic(b.mr.rkey, b.mr.buf, 1)
    elif opcode != IBV_WR_SEND:
        w.set_wr_rdma(b.mr.rkey, b.mr.buf)
        if opcode == IBV_WR_RDMA_WRITE_WITH_IMM:
            w.imm_data = 5
    a.qp.post_send(w)


CASES = {
    "write": (IBV_WR_RDMA_WRITE, ALL & ~RW),
    "write_with_imm": (IBV_WR_RDMA_WRITE_WITH_IMM, ALL & ~RW),
    "read": (IBV_WR_RDMA_READ, ALL & ~RR),
    "atomic": (IBV_WR_ATOMIC_FETCH_AND_ADD, ALL & ~RA),
}


@pytest.mark.parametrize("case", list(CASES))
def test_op_not_enabled_on_the_responder_qp_is_a_remote_access_error(daemon, case):
    opcode, b_access = CASES[case]
    with device.Context(name="rxe0") as ctx:
        a, b = connected(ctx, b_access)
        b.mr.write(bytes(range(8)), 8, 0)
        a.mr.write(b"ABCDEFGH", 8, 0)
        b.qp.post_recv(wr_m.RecvWR(9, 1, [wr_m.SGE(b.mr.buf + 4096, 64, b.mr.lkey)]))
        # what the QP enables still works before
        if b_access & RW:
            post(a, b, 1, IBV_WR_RDMA_WRITE)
            assert [(w.wr_id, w.status) for w in wait(a.cq, 1)] == [(1, IBV_WC_SUCCESS)]
            b.mr.write(bytes(range(8)), 8, 0)
        post(a, b, 2, opcode)
        post(a, b, 3, IBV_WR_SEND)
        wcs = wait(a.cq, 2)
        assert [(w.wr_id, w.status) for w in wcs] == [(2, IBV_WC_REM_ACCESS_ERR), (3, IBV_WC_WR_FLUSH_ERR)]
        assert a.qp.query()[0].qp_state == IBV_QPS_ERR
        assert b.qp.query()[0].qp_state == IBV_QPS_ERR
        assert b.mr.read(8, 0) == bytes(range(8))                    # not written, not added to
        if opcode == IBV_WR_RDMA_READ:
            assert a.mr.read(8, 0) == b"ABCDEFGH"                   # nothing read back
        # the responder's receive was never consumed: flushed
        assert [(w.wr_id, w.status) for w in wait(b.cq, 1)] == [(9, IBV_WC_WR_FLUSH_ERR)]
        ev = ctx.get_async_event(timeout=10)
        assert (ev["event"], ev.get("qp")) == (IBV_EVENT_QP_ACCESS_ERR, b.qp.handle)


def test_the_same_qp_with_the_flag_set_succeeds(daemon):
    with device.Context(name="rxe0") as ctx:
        a, b = connected(ctx, ALL)
        for i, op in enumerate((IBV_WR_RDMA_WRITE, IBV_WR_RDMA_READ, IBV_WR_ATOMIC_FETCH_AND_ADD)):
            post(a, b, i, op)
        assert [(w.wr_id, w.status) for w in wait(a.cq, 3)] == [(i, IBV_WC_SUCCESS) for i in range(3)]
        assert b.qp.query()[0].qp_state == IBV_QPS_RTS
