"""CQ clean on a QP's move to RESET (mlx5_cq_clean): the ring-level sweep
(uapi.queues.CompletionQueueConsumer.clean) and, through a softrdmad, a QP
whose flush completions are gone after RESET while another QP's stay."""

from __future__ import annotations

import pytest

from daemon_helpers import context_on, daemon_in_shm
from softrdma.pyverbs import enums as e
from softrdma.pyverbs.cq import CQ
from softrdma.pyverbs.pd import PD
from softrdma.pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from softrdma.pyverbs.wr import SGE, RecvWR
from softrdma.pyverbs.mr import MR
from softrdma.uapi.abi import WC
from softrdma.uapi.queues import CompletionQueueConsumer, CompletionQueueProducer
from softrdma.uapi.shm import Ring


def _ring(nslots=8):
    ring = Ring.create(nslots, 64)
    return ring, CompletionQueueProducer(ring), CompletionQueueConsumer(ring)


def _push(prod, qpn, wr_id):
    assert prod.push(WC(wr_id, 0, 0, qpn))[0]


@pytest.mark.parametrize("skip", [0, 3, 6, 7])
def test_clean_keeps_the_others_in_order_across_the_wrap(skip):
    ring, prod, cons = _ring(8)
    for i in range(skip):                           # move the indices so the CQEs wrap
        _push(prod, 9, i)
    assert len(cons.poll(skip)) == skip
    pattern = [1, 2, 1, 1, 2, 3, 1, 2]
    for i, q in enumerate(pattern):
        _push(prod, q, 100 + i)
    assert cons.clean(1) == 4
    got = cons.poll(16)
    assert [(w.qp_num, w.wr_id) for w in got] == [(q, 100 + i) for i, q in enumerate(pattern) if q != 1]
    # the freed slots take new CQEs, valid in their phase
    for i in range(8):
        _push(prod, 4, 200 + i)
    assert [w.wr_id for w in cons.poll(16)] == list(range(200, 208))
    ring.close()


def test_clean_of_nothing_and_of_everything():
    ring, prod, cons = _ring(4)
    assert cons.clean(1) == 0
    for i in range(4):
        _push(prod, 1, i)
    assert not prod.push(WC(9, 0, 0, 1))[0]         # full
    assert cons.clean(1) == 4
    assert cons.poll(4) == []
    _push(prod, 2, 7)
    assert [w.wr_id for w in cons.poll(4)] == [7]
    ring.close()


@pytest.fixture(scope="module")
def run_dir():
    with daemon_in_shm("cqclean") as d:
        yield d.run_dir


@pytest.fixture
def ctx(run_dir, monkeypatch):
    with context_on(run_dir, monkeypatch) as c:
        yield c


def _rc_qp(pd, cq):
    qp = QP(pd, QPInitAttr(e.IBV_QPT_RC, None, cq, cq, None, QPCap(4, 4, 1, 1)))
    a = QPAttr()
    a.qp_access_flags = e.IBV_ACCESS_LOCAL_WRITE
    qp.to_init(a)
    return qp


def test_reset_removes_the_qps_flush_completions(ctx):
    with PD(ctx) as pd, CQ(ctx, 16) as cq:
        mr = MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE)
        a, b = _rc_qp(pd, cq), _rc_qp(pd, cq)
        for qp, base in ((a, 0), (b, 10), (a, 20)):
            for i in range(2):
                qp.post_recv(RecvWR(base + i, 1, [SGE(mr.buf, 64, mr.lkey)]))
        err = QPAttr(qp_state=e.IBV_QPS_ERR)
        a.modify(err, e.IBV_QP_STATE)               # a's four receives are flushed
        b.modify(err, e.IBV_QP_STATE)               # then b's two
        a.modify(QPAttr(qp_state=e.IBV_QPS_RESET), e.IBV_QP_STATE)
        n, wcs = cq.poll(16)
        assert [(w.qp_num, w.wr_id, w.status) for w in wcs] == \
            [(b.qp_num, 10, e.IBV_WC_WR_FLUSH_ERR), (b.qp_num, 11, e.IBV_WC_WR_FLUSH_ERR)]
        b.modify(QPAttr(qp_state=e.IBV_QPS_RESET), e.IBV_QP_STATE)
        assert cq.poll(16) == (0, [])
        a.close(), b.close(), mr.close()
