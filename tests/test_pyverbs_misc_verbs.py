"""Verbs rdma-core's suite needs, end to end through a softrdmad: a dropped
QP is destroyed (pyverbs' __dealloc__) so its PD can be deallocated,
ibv_query_rt_values_ex on the device's free-running clock (uapi.clock),
hca_core_clock in query_device_ex, and ibv_query_qp_data_in_order."""

from __future__ import annotations

import gc

import pytest

from daemon_helpers import context_on, daemon_in_shm, resources
from softrdma.pyverbs import enums as e
from softrdma.pyverbs.cq import CQ
from softrdma.pyverbs.device import Context
from softrdma.pyverbs.mr import MR
from softrdma.pyverbs.pd import PD
from softrdma.pyverbs.pyverbs_error import PyverbsRDMAError
from softrdma.pyverbs.qp import QP, QPCap, QPInitAttr, QPInitAttrEx
from softrdma.uapi import clock


@pytest.fixture(scope="module")
def run_dir():
    with daemon_in_shm("pvmisc") as d:
        yield d.run_dir


@pytest.fixture
def ctx(run_dir, monkeypatch):
    with context_on(run_dir, monkeypatch) as c:
        yield c


def _kinds(run_dir):
    out = {}
    for r in resources(run_dir):
        out[r["kind"]] = out.get(r["kind"], 0) + 1
    return out


def test_rebound_qp_variable_frees_the_pd(ctx, run_dir):
    """test_qp's query tests: ``qp`` is rebound from a legacy QP to an
    extended one, then the PD is closed: the first QP went with its last
    reference, so dealloc_pd is not refused with EBUSY."""
    before = _kinds(run_dir).get("qp", 0)
    with PD(ctx) as pd:
        with CQ(ctx, 100) as cq:
            qp = QP(pd, QPInitAttr(e.IBV_QPT_RC, None, cq, cq, None, QPCap(4, 4, 1, 1)))
            first = qp.qp_num
            qp = QP(ctx, QPInitAttrEx(e.IBV_QPT_RC, None, cq, cq, None, QPCap(4, 4, 1, 1),
                                      comp_mask=e.IBV_QP_INIT_ATTR_PD, pd=pd))
            assert qp.qp_num != first
            qp.query(e.IBV_QP_STATE)                # the next request destroys the dropped QP first
            assert _kinds(run_dir).get("qp", 0) == before + 1
    assert _kinds(run_dir).get("qp", 0) == before
    assert _kinds(run_dir).get("pd", 0) == 0


def test_dropped_objects_of_a_cycle_go_in_any_order(ctx, run_dir):
    """Garbage of one cycle is finalized in no set order: a PD queued
    before its QP is retried after it (no object left behind)."""
    pd = PD(ctx)
    cq = CQ(ctx, 8)
    qp = QP(pd, QPInitAttr(e.IBV_QPT_UD, None, cq, cq, None, QPCap(4, 4, 1, 1)))
    mr = MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE)
    assert {"pd": 1, "qp": 1, "mr": 1}.items() <= _kinds(run_dir).items()
    box = [pd, qp, mr]
    box.append(box)                                 # one cycle holds them all
    pd.loop = box
    del pd, qp, mr, box
    gc.collect()
    ctx.query_port(1)                               # any request sends the queued destroys
    kinds = _kinds(run_dir)
    assert kinds.get("pd", 0) == 0 and kinds.get("qp", 0) == 0 and kinds.get("mr", 0) == 0
    cq.close()


def test_closed_objects_are_not_destroyed_twice(ctx, run_dir):
    pd = PD(ctx)
    pd.close()
    del pd
    gc.collect()
    ctx.query_port(1)                               # no stray destroy: the reply would be ours otherwise
    assert ctx.query_port(1).state == e.IBV_PORT_ACTIVE


def test_query_rt_values_ex_is_the_free_running_clock(ctx):
    before = clock.read_free_running()
    sec, cycles = ctx.query_rt_values_ex()
    after = clock.read_free_running()
    assert sec == 0 and before <= cycles <= after
    assert ctx.query_rt_values_ex(e.IBV_VALUES_MASK_RAW_CLOCK)[1] >= cycles


def test_query_rt_values_ex_with_an_unknown_mask(ctx):
    with pytest.raises(PyverbsRDMAError, match="Failed to query real time values with requested comp_mask"):
        ctx.query_rt_values_ex(e.IBV_VALUES_MASK_RAW_CLOCK | 2)


def test_query_device_ex_hca_core_clock(ctx):
    assert ctx.query_device_ex().hca_core_clock == clock.hca_core_clock_khz() == 156250


@pytest.mark.parametrize("qpt", [e.IBV_QPT_RC, e.IBV_QPT_UC, e.IBV_QPT_UD])
def test_query_data_in_order(ctx, qpt):
    with PD(ctx) as pd, CQ(ctx, 8) as cq:
        qp = QP(pd, QPInitAttr(qpt, None, cq, cq, None, QPCap(4, 4, 1, 1)))
        for op in (e.IBV_WR_SEND, e.IBV_WR_RDMA_WRITE, e.IBV_WR_RDMA_READ):
            assert qp.query_data_in_order(op) == 0
            assert qp.query_data_in_order(op, e.IBV_QUERY_QP_DATA_IN_ORDER_RETURN_CAPS) == 0
            assert qp.query_data_in_order(op, e.IBV_QUERY_QP_DATA_IN_ORDER_DEVICE_ONLY) == 0
            assert qp.query_data_in_order(op, 1 << 5) == 0


def test_query_data_in_order_caps_follow_libibverbs(monkeypatch, ctx):
    """libibverbs' rules on the device's caps: WHOLE_MSG implies
    ALIGNED_128_BYTES; without RETURN_CAPS the answer is 0/1 for WHOLE_MSG;
    an unknown flag answers 0."""
    from softrdma.verbs import qp as qp_mod
    with PD(ctx) as pd, CQ(ctx, 8) as cq:
        qp = QP(pd, QPInitAttr(e.IBV_QPT_RC, None, cq, cq, None, QPCap(4, 4, 1, 1)))
        monkeypatch.setattr(qp_mod, "DATA_IN_ORDER_CAPS", int(e.IBV_QUERY_QP_DATA_IN_ORDER_WHOLE_MSG))
        assert qp.query_data_in_order(e.IBV_WR_SEND) == 1
        assert qp.query_data_in_order(e.IBV_WR_SEND, e.IBV_QUERY_QP_DATA_IN_ORDER_RETURN_CAPS) == 3
        assert qp.query_data_in_order(e.IBV_WR_SEND, 4) == 0
        monkeypatch.setattr(qp_mod, "DATA_IN_ORDER_CAPS", int(e.IBV_QUERY_QP_DATA_IN_ORDER_ALIGNED_128_BYTES))
        assert qp.query_data_in_order(e.IBV_WR_SEND) == 0
        assert qp.query_data_in_order(e.IBV_WR_SEND, e.IBV_QUERY_QP_DATA_IN_ORDER_RETURN_CAPS) == 2


def test_context_close_frees_its_objects_before_it_returns(run_dir, monkeypatch):
    """As the kernel's close of a uverbs file: once Context.close returns,
    what the context held (here the whole device-memory pool) is free for
    another context at once."""
    from softrdma.pyverbs.device import DM, AllocDmAttr
    monkeypatch.setenv("SOFTRDMA_RUN", run_dir)
    monkeypatch.setenv("SOFTRDMA_AUTOSTART", "0")
    with Context(name="rxe0") as other:
        whole = other.query_device_ex().max_dm_size
        for _ in range(20):
            ctx = Context(name="rxe0")
            DM(ctx, AllocDmAttr(length=whole))
            PD(ctx)
            ctx.close()
            DM(other, AllocDmAttr(length=whole)).close()


def test_mlx5_timestamp_conversion_is_mlx5s_only(ctx):
    """rdma-core's test_query_rt_values converts the raw clock with
    Mlx5Context.device_timestamp_to_ns, which a non-mlx5 context refuses
    with EOPNOTSUPP (mlx5dv_get_clock_info): the test then skips."""
    import errno
    from softrdma.pyverbs.providers.mlx5.mlx5dv import Mlx5Context
    _, cycles = ctx.query_rt_values_ex()
    with pytest.raises(PyverbsRDMAError, match="Failed to get the clock info") as ex:
        Mlx5Context.device_timestamp_to_ns(ctx, cycles)
    assert ex.value.error_code == errno.EOPNOTSUPP


def test_query_gid_type_is_the_sysfs_enum(ctx):
    """ibv_query_gid_type answers enum ibv_gid_type_sysfs: rdma-core's
    RDMATestCase(gid_type=IBV_GID_TYPE_SYSFS_ROCE_V2) picks GIDs by it."""
    n = ctx.query_port(1).gid_tbl_len
    found = []
    for i in range(n):
        try:
            found.append(ctx.query_gid_type(1, i))
        except PyverbsRDMAError:
            continue                                # an empty slot
    assert found and set(found) == {e.IBV_GID_TYPE_SYSFS_ROCE_V2}
    assert e.IBV_GID_TYPE_SYSFS_ROCE_V2 == 1
    # query_gid_ex reports the same entry with ibv_gid_type's value
    first = next(i for i in range(n) if ctx.query_gid(1, i).gid != "0000:0000:0000:0000:0000:0000:0000:0000")
    assert ctx.query_gid_ex(1, first).gid_type == e.IBV_GID_TYPE_ROCE_V2
