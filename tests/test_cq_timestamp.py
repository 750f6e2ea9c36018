"""Completion timestamps: the extended CQE words (uapi.abi), the producer
that stamps them as the device writes a CQE (uapi.queues), and the extended
CQ's read_timestamp / read_completion_wallclock_ns through a real daemon."""

from __future__ import annotations

import errno
import time

import pytest

from daemon_helpers import context_on_own_daemon
from softrdma.pyverbs import enums as e
from softrdma.pyverbs.addr import AHAttr, GlobalRoute
from softrdma.pyverbs.cq import CQEX, CqInitAttrEx, PollCqAttr
from softrdma.pyverbs.mr import MR
from softrdma.pyverbs.pd import PD
from softrdma.pyverbs.pyverbs_error import PyverbsRDMAError
from softrdma.pyverbs.providers.mlx5.mlx5dv import Mlx5Context
from softrdma.pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from softrdma.pyverbs.wr import SGE, RecvWR, SendWR
from softrdma.uapi import abi, clock
from softrdma.uapi.abi import WC, TmWC
from softrdma.uapi.queues import CompletionQueueProducer, ExtCompletionQueueProducer
from softrdma.uapi.shm import Ring

FREE_RUNNING = e.IBV_WC_EX_WITH_COMPLETION_TIMESTAMP
REAL_TIME = e.IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK


# --------------------------------------------------------------------- the CQE words
def test_plain_producer_leaves_the_extended_words_alone_and_ext_writes_them():
    ring = Ring.create(4, abi.CQE_BYTES, "t-cq")
    try:
        for i in range(4):
            ring.slot(i)[abi.CQE_EX_AT:abi.CQE_OWNER] = b"\xaa" * (abi.CQE_OWNER - abi.CQE_EX_AT)
        CompletionQueueProducer(ring).push(WC(1, 0, e.IBV_WC_SEND, 7))
        assert bytes(ring.slot(0)[abi.CQE_EX_AT:abi.CQE_OWNER]) == b"\xaa" * (abi.CQE_OWNER - abi.CQE_EX_AT)
        prod = ExtCompletionQueueProducer(ring, lambda: 0x123456789ABCDEF)
        prod.head = 1
        assert prod.push(WC(2, 0, e.IBV_WC_RECV, 7)) == (True, False)
        assert abi.CQE_EX.unpack_from(ring.slot(1), abi.CQE_EX_AT) == (0x123456789ABCDEF, 0, 0)
        prod.push(TmWC(3, 0, e.IBV_WC_TM_RECV, 7, 100, e.IBV_WC_TM_MATCH, tm_tag=0xFEDCBA9876543210, tm_priv=99))
        assert abi.CQE_EX.unpack_from(ring.slot(2), abi.CQE_EX_AT) == (0x123456789ABCDEF, 0xFEDCBA9876543210, 99)
        assert abi.read_cqe(ring.slot(2)).wc_flags == e.IBV_WC_TM_MATCH
        assert ring.slot(2)[abi.CQE_OWNER] == ring.phase(2)
        ExtCompletionQueueProducer(ring, None).push(WC(4, 0, e.IBV_WC_SEND, 7))   # head from the ring: 3
        assert abi.CQE_EX.unpack_from(ring.slot(3), abi.CQE_EX_AT) == (0, 0, 0)
    finally:
        ring.close()


def test_clock_ticks_convert_back_to_the_monotonic_raw_time_line():
    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC_RAW)
    ticks = clock.read_free_running()
    after = time.clock_gettime_ns(time.CLOCK_MONOTONIC_RAW)
    ns = clock.free_running_to_ns(ticks)
    tick_ns = 1_000_000 // clock.hca_core_clock_khz() + 1
    assert before - tick_ns <= ns <= after + tick_ns


# --------------------------------------------------------------------- through the daemon
@pytest.fixture(scope="module")
def ctx():
    with context_on_own_daemon("cqts") as c:
        yield c


def rc_pair(ctx, pd, scq, rcq):
    cap = QPCap(max_send_wr=8, max_recv_wr=8, max_send_sge=1, max_recv_sge=1)
    a = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=scq, rcq=scq, cap=cap))
    b = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=rcq, rcq=rcq, cap=cap))
    gid = ctx.query_gid(1, 1)
    for q, peer in ((a, b), (b, a)):
        attr = QPAttr()
        attr.qp_access_flags = e.IBV_ACCESS_LOCAL_WRITE
        attr.dest_qp_num = peer.qp_num
        attr.max_dest_rd_atomic = attr.max_rd_atomic = 1
        attr.min_rnr_timer, attr.timeout, attr.retry_cnt, attr.rnr_retry = 12, 14, 7, 7
        attr.ah_attr = AHAttr(gr=GlobalRoute(dgid=gid, sgid_index=1), is_global=1, port_num=1)
        q.to_rts(attr)
    return a, b


def poll_one(cq: CQEX, reader):
    end = time.monotonic() + 10
    while cq.start_poll(PollCqAttr()) == errno.ENOENT:
        assert time.monotonic() < end, "no completion"
    try:
        assert cq.status == e.IBV_WC_SUCCESS
        return cq.read_opcode(), reader(cq)
    finally:
        cq.end_poll()


@pytest.mark.parametrize("flags", [FREE_RUNNING, REAL_TIME, FREE_RUNNING | REAL_TIME])
def test_rc_send_completions_carry_the_time_the_daemon_wrote_them(ctx, flags):
    pd = PD(ctx)
    scq = CQEX(ctx, CqInitAttrEx(cqe=8, wc_flags=e.IBV_WC_STANDARD_FLAGS | flags))
    rcq = CQEX(ctx, CqInitAttrEx(cqe=8, wc_flags=e.IBV_WC_STANDARD_FLAGS | flags))
    a, b = rc_pair(ctx, pd, scq, rcq)
    mra, mrb = MR(pd, 64, e.IBV_ACCESS_LOCAL_WRITE), MR(pd, 64, e.IBV_ACCESS_LOCAL_WRITE)
    b.post_recv(RecvWR(1, 1, [SGE(mrb.buf, 64, mrb.lkey)]))
    t0_ticks, t0_wall = clock.read_free_running(), time.time_ns()
    a.post_send(SendWR(2, opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(mra.buf, 64, mra.lkey)]))

    def reader(cq):
        return (cq.read_timestamp() if flags & FREE_RUNNING else None,
                cq.read_completion_wallclock_ns() if flags & REAL_TIME else None)

    (sop, (s_ticks, s_wall)), (rop, (r_ticks, r_wall)) = poll_one(scq, reader), poll_one(rcq, reader)
    t1_ticks, t1_wall = clock.read_free_running(), time.time_ns()
    assert (sop, rop) == (e.IBV_WC_SEND, e.IBV_WC_RECV)
    if flags & FREE_RUNNING:
        assert t0_ticks <= r_ticks <= t1_ticks and t0_ticks <= s_ticks <= t1_ticks
    if flags & REAL_TIME:
        slack = 2_000_000 if flags & FREE_RUNNING else 0     # converted from the counter: clock offsets drift
        assert t0_wall - slack <= r_wall <= t1_wall + slack and t0_wall - slack <= s_wall <= t1_wall + slack
    for o in (a, b, scq, rcq, mra, mrb, pd):
        o.close()


def test_unsupported_wc_flags_and_the_mlx5_conversion_fail_as_a_real_provider(ctx):
    for flag in (e.IBV_WC_EX_WITH_CVLAN, e.IBV_WC_EX_WITH_FLOW_TAG):
        with pytest.raises(PyverbsRDMAError) as ex:
            CQEX(ctx, CqInitAttrEx(wc_flags=flag))
        assert ex.value.error_code == errno.EOPNOTSUPP
    with pytest.raises(PyverbsRDMAError) as ex:    # rdma-core's timestamp tests skip on this
        Mlx5Context.device_timestamp_to_ns(ctx, 1)
    assert ex.value.error_code == errno.EOPNOTSUPP


def test_the_daemon_refuses_wc_flags_it_cannot_write(ctx):
    from softrdma.uapi.commands import CMD
    ring = Ring.create(8, abi.CQE_BYTES, "t-cq")
    try:
        with pytest.raises(PyverbsRDMAError) as ex:      # past the library's own check: the daemon's
            ctx.conn.call(CMD.create_cq, fds=[ring.fd], cqe=4, channel=None, wc_flags=e.IBV_WC_EX_WITH_CVLAN)
        assert ex.value.error_code == errno.EOPNOTSUPP
    finally:
        ring.close()

