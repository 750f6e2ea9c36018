"""Resource verbs rdma-core's suite uses, end to end through a softrdmad:
closing a Context/PD/CQ/SRQ/channel with dependants closes them first
(pyverbs' close_weakrefs order, no EBUSY), ``CQ.resize`` (ibv_resize_cq:
the CQEs not yet polled move to the new ring in order; EINVAL below their
count or above max_cqe), ``SRQ.query``/``SRQ.modify``, and
``Context.query_gid_table``/``query_gid_ex`` (GIDEntry)."""

from __future__ import annotations

import errno

import pytest

from daemon_helpers import context_on, daemon_in_shm
from softrdma.pyverbs import enums as e
from softrdma.pyverbs.addr import AH, AHAttr, GlobalRoute
from softrdma.pyverbs.cq import CQ, CompChannel
from softrdma.pyverbs.device import Context, GIDEntry
from softrdma.pyverbs.mr import MR
from softrdma.pyverbs.pd import PD
from softrdma.pyverbs.pyverbs_error import PyverbsRDMAError
from softrdma.pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from softrdma.pyverbs.srq import SRQ, SrqAttr, SrqInitAttr
from softrdma.pyverbs.wr import SGE, RecvWR, SendWR


@pytest.fixture(scope="module")
def run_dir():
    with daemon_in_shm("pvres") as d:
        yield d.run_dir


@pytest.fixture
def ctx(run_dir, monkeypatch):
    with context_on(run_dir, monkeypatch) as c:
        yield c


def _qp(pd, cq, srq=None, recv_wr=16):
    return QP(pd, QPInitAttr(e.IBV_QPT_RC, None, cq, cq, srq, QPCap(4, recv_wr, 1, 1)))


def test_pd_close_closes_its_qp_and_mr_first(ctx):
    pd = PD(ctx)
    cq = CQ(ctx, 8)
    qp, mr = _qp(pd, cq), MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE)
    pd.close()                                      # the daemon alone would say EBUSY
    assert pd.closed and qp.closed and mr.closed
    assert not cq.closed
    cq.close()


def test_cq_close_closes_the_qps_using_it(ctx):
    pd = PD(ctx)
    cq, other = CQ(ctx, 8), CQ(ctx, 8)
    qp = _qp(pd, cq)
    keep = _qp(pd, other)
    cq.close()
    assert cq.closed and qp.closed and not keep.closed
    other.close()
    assert keep.closed
    pd.close()


def test_srq_and_channel_close_their_users(ctx):
    pd = PD(ctx)
    cc = CompChannel(ctx)
    cq = CQ(ctx, 8, None, cc, 0)
    srq = SRQ(pd, SrqInitAttr(SrqAttr(16, 1)))
    qp = _qp(pd, cq, srq)
    srq.close()
    assert srq.closed and qp.closed
    cc.close()
    assert cc.closed and cq.closed
    pd.close()


def test_context_close_closes_everything_in_order(run_dir, monkeypatch):
    monkeypatch.setenv("SOFTRDMA_RUN", run_dir)
    monkeypatch.setenv("SOFTRDMA_AUTOSTART", "0")
    ctx = Context(name="rxe0")
    pd = PD(ctx)
    cc = CompChannel(ctx)
    cq = CQ(ctx, 8, None, cc, 0)
    srq = SRQ(pd, SrqInitAttr(SrqAttr(16, 1)))
    objs = [pd, cc, cq, srq, _qp(pd, cq), _qp(pd, cq, srq), MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE)]
    order = []
    for o in objs:                                  # record the order the library closes them in
        real = o._destroy

        def spy(o=o, real=real):
            real()                                  # (the daemon's objects go with the connection)
            order.append(type(o).__name__)
        o._destroy = spy
    ctx.close()
    assert all(o.closed for o in objs) and ctx.closed
    assert order.index("QP") < order.index("CQ") < order.index("PD")
    assert order.index("MR") < order.index("SRQ") < order.index("PD")
    assert sorted(order) == sorted(["QP", "QP", "CompChannel", "CQ", "MR", "SRQ", "PD"])


def _flush(ctx, cq, n):
    """n receive completions (IBV_WC_WR_FLUSH_ERR) in ``cq``, wr_ids 0..n-1."""
    pd = PD(ctx)
    mr = MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE)
    qp = _qp(pd, cq, recv_wr=n)
    qp.to_init(QPAttr())
    for i in range(n):
        qp.post_recv(RecvWR(i, 1, [SGE(mr.buf, 64, mr.lkey)]))
    a = QPAttr()
    a.qp_state = e.IBV_QPS_ERR
    qp.modify(a, e.IBV_QP_STATE)
    return pd, qp, mr                               # (the caller keeps them alive)


def _poll_all(cq, n):
    got = []
    for _ in range(20000):
        k, wcs = cq.poll(n - len(got))
        got += wcs
        if len(got) == n:
            return got
    raise AssertionError(f"{len(got)} of {n} completions")


def test_cq_resize_moves_unpolled_cqes_in_order(ctx):
    cq = CQ(ctx, 3)
    cq.resize(1)
    assert cq.cqe >= 1
    cq.resize(7)
    assert cq.cqe >= 7
    depth = cq.cqe
    pd, *_ = keep = _flush(ctx, cq, 5)
    wcs = _poll_all(cq, 1)                          # one polled, four left in the ring
    assert wcs[0].wr_id == 0
    with pytest.raises(PyverbsRDMAError) as ex:
        cq.resize(3)                                # below the four still queued (rxe_cq_chk_attr)
    assert ex.value.error_code == errno.EINVAL
    assert str(ex.value).startswith("Failed to resize CQ")
    assert cq.cqe == depth
    cq.resize(31)
    assert cq.cqe >= 31
    rest = _poll_all(cq, 4)
    assert [w.wr_id for w in rest] == [1, 2, 3, 4]
    assert all(w.status == e.IBV_WC_WR_FLUSH_ERR for w in rest)
    cq.resize(4)                                    # empty again: shrinking is fine
    assert 4 <= cq.cqe < 31
    pd.close()
    assert all(o.closed for o in keep)
    cq.close()


def test_cq_resize_counts_what_was_posted_before(ctx):
    """The suite's test_resize_cq: sends posted (not polled) just before
    the resize make CQEs that count, and stay in order.  (The daemon runs
    the posted work before it counts, as rxe's post_send runs the requester
    in the posting call; whether its loop had got there first is timing,
    so this test holds the outcome, not that step.)"""
    pd = PD(ctx)
    mr = MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE)
    cq = CQ(ctx, 7)
    qp = QP(pd, QPInitAttr(e.IBV_QPT_UD, None, cq, cq, None, QPCap(10, 10, 1, 1)))
    a = QPAttr()
    a.qkey = 0x11111111
    qp.to_rts(a)
    ah = AH(pd, attr=AHAttr(gr=GlobalRoute(dgid=ctx.query_gid(1, 0), sgid_index=0), is_global=1, port_num=1))
    for i in range(cq.cqe - 1):
        wr = SendWR(wr_id=i, num_sge=1, sg=[SGE(mr.buf, 8, mr.lkey)])
        wr.set_wr_ud(ah, 0xFFFFFF, 0x11111111)      # to no QP: only the send completes
        qp.post_send(wr)
    with pytest.raises(PyverbsRDMAError) as ex:
        cq.resize(1)
    assert ex.value.error_code == errno.EINVAL
    assert [w.wr_id for w in _poll_all(cq, cq.cqe - 1)] == list(range(cq.cqe - 1))
    pd.close()
    cq.close()


def test_cq_resize_above_max_cqe(ctx):
    max_cqe = ctx.query_device().max_cqe
    with CQ(ctx, 8) as cq:
        for bad in (0, max_cqe + 1):
            with pytest.raises(PyverbsRDMAError) as ex:
                cq.resize(bad)
            assert ex.value.error_code == errno.EINVAL
        # the daemon's own check: a request past the library's
        with pytest.raises(PyverbsRDMAError) as ex:
            ctx.conn.call("resize_cq", cq=cq.handle, cqe=max_cqe + 1, fds=[cq.ring.fd])
        assert ex.value.error_code == errno.EINVAL


def test_srq_query_and_modify(ctx):
    pd = PD(ctx)
    srq = SRQ(pd, SrqInitAttr(SrqAttr(32, 2, 0)))
    a = srq.query()
    assert (a.max_wr, a.max_sge, a.srq_limit) == (32, 2, 0)
    srq.modify(SrqAttr(srq_limit=5), e.IBV_SRQ_LIMIT)
    assert srq.query().srq_limit == 5
    with pytest.raises(PyverbsRDMAError) as ex:     # at or above max_wr: rxe_srq_chk_attr
        srq.modify(SrqAttr(srq_limit=33), e.IBV_SRQ_LIMIT)
    assert ex.value.error_code == errno.EINVAL and str(ex.value).startswith("Failed to modify SRQ")
    assert srq.query().srq_limit == 5
    pd.close()
    assert srq.closed


def _fill_srq(srq, mr, first, n):
    for i in range(first, first + n):
        srq.post_recv(RecvWR(i, 1, [SGE(mr.buf, 64, mr.lkey)]))


def test_srq_resize_keeps_the_posted_wqes(ctx):
    pd = PD(ctx)
    mr = MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE)
    cq = CQ(ctx, 64)
    srq = SRQ(pd, SrqInitAttr(SrqAttr(8, 1, 0)))
    _fill_srq(srq, mr, 0, 8)
    with pytest.raises(PyverbsRDMAError) as ex:     # full: the ring refuses a ninth
        _fill_srq(srq, mr, 8, 1)
    assert ex.value.error_code == errno.ENOMEM
    with pytest.raises(PyverbsRDMAError) as ex:     # eight posted do not fit in four (rxe_queue_resize)
        srq.modify(SrqAttr(max_wr=4), e.IBV_SRQ_MAX_WR)
    assert ex.value.error_code == errno.EINVAL and str(ex.value).startswith("Failed to modify SRQ")
    assert srq.query().max_wr == 8
    srq.modify(SrqAttr(max_wr=20, srq_limit=3), e.IBV_SRQ_MAX_WR | e.IBV_SRQ_LIMIT)
    a = srq.query()
    assert (a.max_wr, a.srq_limit) == (20, 3)
    _fill_srq(srq, mr, 8, 12)                       # twelve more fit, not thirteen
    with pytest.raises(PyverbsRDMAError):
        _fill_srq(srq, mr, 20, 1)
    with pytest.raises(PyverbsRDMAError) as ex:     # below the armed limit
        srq.modify(SrqAttr(max_wr=2), e.IBV_SRQ_MAX_WR)
    assert ex.value.error_code == errno.EINVAL
    with pytest.raises(PyverbsRDMAError) as ex:
        srq.modify(SrqAttr(max_wr=ctx.query_device().max_srq_wr + 1), e.IBV_SRQ_MAX_WR)
    assert ex.value.error_code == errno.EINVAL
    # every WQE is still there, in order: a QP connected to itself sends
    # twenty messages, each takes the next WQE of the SRQ
    qp = _qp(pd, cq, srq)
    v4 = "0000:0000:0000:0000:0000:ffff"            # an IPv4-mapped GID (the daemon's address on lo)
    gid_index = next(g.gid_index for g in ctx.query_gid_table(1024) if g.gid_str().startswith(v4))
    a = QPAttr()
    a.qp_access_flags = e.IBV_ACCESS_LOCAL_WRITE
    a.dest_qp_num = qp.qp_num
    a.max_dest_rd_atomic = a.max_rd_atomic = 1
    a.min_rnr_timer, a.timeout, a.retry_cnt, a.rnr_retry = 12, 14, 7, 7
    a.ah_attr = AHAttr(gr=GlobalRoute(dgid=ctx.query_gid(1, gid_index), sgid_index=gid_index), is_global=1,
                       port_num=1)
    qp.to_rts(a)
    recv = []
    for i in range(20):
        qp.post_send(SendWR(wr_id=100 + i, num_sge=1, sg=[SGE(mr.buf + 64, 8, mr.lkey)]))
        wcs = _poll_all(cq, 2)
        assert all(w.status == e.IBV_WC_SUCCESS for w in wcs)
        recv += [w.wr_id for w in wcs if w.opcode & e.IBV_WC_RECV]
    assert recv == list(range(20))
    pd.close()
    cq.close()


def test_query_gid_table_and_gid_ex(ctx):
    tbl_len = ctx.query_port(1).gid_tbl_len
    entries = ctx.query_gid_table(tbl_len)
    assert entries and all(isinstance(g, GIDEntry) for g in entries)
    for g in entries:
        assert g.port_num == 1 and g.gid_type == e.IBV_GID_TYPE_ROCE_V2
        assert g.gid_str() == str(ctx.query_gid(1, g.gid_index))
        one = ctx.query_gid_ex(port_num=1, gid_index=g.gid_index)
        assert (one.gid_str(), one.gid_index, one.ndev_ifindex) == (g.gid_str(), g.gid_index, g.ndev_ifindex)
    with pytest.raises(PyverbsRDMAError) as ex:     # the suite's bad flow: a negative errno, as pyverbs passes it
        ctx.query_gid_table(0)
    assert ex.value.error_code == -errno.EINVAL
    empty = sorted(set(range(tbl_len)) - {g.gid_index for g in entries})[0]
    with pytest.raises(PyverbsRDMAError) as ex:
        ctx.query_gid_ex(port_num=1, gid_index=empty)
    assert ex.value.error_code == errno.ENODATA
    with pytest.raises(PyverbsRDMAError) as ex:
        ctx.query_gid_ex(port_num=1, gid_index=tbl_len)
    assert ex.value.error_code == errno.EINVAL


def test_qp_init_attr_cap_fields_reach_the_qp(ctx):
    """pyverbs' QPInitAttr.max_send_wr & co. are the cap's fields: the
    suite's illegal-caps tests set them there and expect the create to fail
    (before, the attribute was ignored, and only a CQ close's EBUSY made
    those tests look right)."""
    pd = PD(ctx)
    cq = CQ(ctx, 8)
    qia = QPInitAttr(e.IBV_QPT_UD, None, cq, cq, None, QPCap(4, 4, 1, 1))
    qia.max_send_wr = 0xFFFFFFFF
    assert qia.cap.max_send_wr == 0xFFFFFFFF
    with pytest.raises(PyverbsRDMAError) as ex:
        QP(pd, qia)
    assert ex.value.error_code == errno.EINVAL
    qia.max_send_wr = 4
    qia.max_recv_sge = 2
    qp = QP(pd, qia)
    assert qp.cap.max_recv_sge == 2
    pd.close()
    cq.close()
