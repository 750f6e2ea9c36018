"""Posting checks the QP's state as libibverbs and rxe do (IBA 10.3.1): a
receive queue in RESET refuses work requests at once (C10-97.2.1), a send
queue in RESET, INIT or RTR too -- EINVAL, for post_recv, post_send and an
extended QP's wr_complete -- while from RTS on (and in ERR, where they
are flushed) work requests are taken.  The state is the one this process
set last, through ibv_modify_qp or rdma_cm."""

from __future__ import annotations

import errno

import pytest

from daemon_helpers import context_on, daemon_in_shm
from softrdma.pyverbs import enums as e
from softrdma.pyverbs.cq import CQ
from softrdma.pyverbs.mr import MR
from softrdma.pyverbs.pd import PD
from softrdma.pyverbs.pyverbs_error import PyverbsRDMAError
from softrdma.pyverbs.qp import QP, QPAttr, QPCap, QPEx, QPInitAttr, QPInitAttrEx
from softrdma.pyverbs.wr import SGE, RecvWR, SendWR


@pytest.fixture(scope="module")
def run_dir():
    with daemon_in_shm("pvpost") as d:
        yield d.run_dir


@pytest.fixture
def res(run_dir, monkeypatch):
    with context_on(run_dir, monkeypatch) as ctx:
        pd = PD(ctx)
        cq = CQ(ctx, 16)
        mr = MR(pd, 64, e.IBV_ACCESS_LOCAL_WRITE)
        yield ctx, pd, cq, mr


def _to(qp, state):
    """Move ``qp`` (UD) one step at a time up to ``state``."""
    steps = [(e.IBV_QPS_INIT, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_QKEY),
             (e.IBV_QPS_RTR, e.IBV_QP_STATE),
             (e.IBV_QPS_RTS, e.IBV_QP_STATE | e.IBV_QP_SQ_PSN)]
    for s, mask in steps:
        if s > state:
            break
        attr = QPAttr(qp_state=s)
        attr.qkey = 0x11111111
        qp.modify(attr, mask)


def _send(qp, mr):
    qp.post_send(SendWR(wr_id=1, opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(mr.buf, 8, mr.lkey)]))


def _recv(qp, mr):
    qp.post_recv(RecvWR(wr_id=2, num_sge=1, sg=[SGE(mr.buf, 64, mr.lkey)]))


@pytest.mark.parametrize("state", [e.IBV_QPS_RESET, e.IBV_QPS_INIT, e.IBV_QPS_RTR])
def test_send_before_rts_is_einval(res, state):
    ctx, pd, cq, mr = res
    qp = QP(pd, QPInitAttr(e.IBV_QPT_UD, None, cq, cq, None, QPCap(4, 4, 1, 1)))
    _to(qp, state)
    with pytest.raises(PyverbsRDMAError) as ex:
        _send(qp, mr)
    assert ex.value.error_code == errno.EINVAL
    if state != e.IBV_QPS_RESET:
        _recv(qp, mr)                           # the receive queue takes them from INIT on
    qp.close()


def test_recv_in_reset_is_einval_and_a_reset_after_rts_counts(res):
    ctx, pd, cq, mr = res
    qp = QP(pd, QPInitAttr(e.IBV_QPT_UD, None, cq, cq, None, QPCap(4, 4, 1, 1)))
    with pytest.raises(PyverbsRDMAError) as ex:
        _recv(qp, mr)
    assert ex.value.error_code == errno.EINVAL
    _to(qp, e.IBV_QPS_RTS)
    _recv(qp, mr)
    qp.modify(QPAttr(qp_state=e.IBV_QPS_RESET), e.IBV_QP_STATE)       # as rdma-core's bad-flow tests
    with pytest.raises(PyverbsRDMAError) as ex:
        _recv(qp, mr)
    assert ex.value.error_code == errno.EINVAL
    qp.close()


def test_error_state_takes_sends_and_flushes_them(res):
    ctx, pd, cq, mr = res
    qp = QP(pd, QPInitAttr(e.IBV_QPT_RC, None, cq, cq, None, QPCap(4, 4, 1, 1)))
    init = QPAttr(qp_state=e.IBV_QPS_INIT)
    qp.modify(init, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS)
    qp.modify(QPAttr(qp_state=e.IBV_QPS_ERR), e.IBV_QP_STATE)
    qp.post_send(SendWR(wr_id=7, opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(mr.buf, 8, mr.lkey)]))
    for _ in range(2000):
        n, wcs = cq.poll()
        if n:
            break
    else:
        pytest.fail("no flush completion")
    assert wcs[0].wr_id == 7 and wcs[0].status == e.IBV_WC_WR_FLUSH_ERR
    qp.close()


def test_extended_qp_wr_complete_in_reset_is_einval(res):
    ctx, pd, cq, mr = res
    qp = QPEx(ctx, QPInitAttrEx(qp_type=e.IBV_QPT_UD, scq=cq, rcq=cq, pd=pd, cap=QPCap(4, 4, 1, 1),
                                comp_mask=e.IBV_QP_INIT_ATTR_PD | e.IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
                                send_ops_flags=e.IBV_QP_EX_WITH_SEND))
    qp.wr_start()
    qp.wr_send()
    qp.wr_set_sge(SGE(mr.buf, 8, mr.lkey))
    with pytest.raises(PyverbsRDMAError) as ex:
        qp.wr_complete()
    assert ex.value.error_code == errno.EINVAL
    qp.close()
