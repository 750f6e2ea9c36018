"""Resource profiles (irdma's HMC profiles on a ConnectX-like card): the
card's pool of RDMA objects divided among the PF, its VFs and SFs by the
NV configuration's RDMA_RESOURCE_PROFILE, in force from the next firmware
reset; each function's share is its ibv_query_device max_*; past its
share a function's allocation fails with ENOMEM while the others still
allocate.  The pool is lowered (``--limit max_qp=12``) so that a share can
be exhausted; the VFs need root (macvlans, in the SR-IOV tests'
namespace)."""

from __future__ import annotations

import errno
import re

import pytest

from test_sriov import NUMVFS, running_host

from softrdma.device.resprofile import EQUAL, PF_HEAVY, shares
from softrdma.enums import IBV_QPT_RC
from softrdma.verbs import cq, pd, qp
from softrdma.verbs.device import Context
from softrdma.verbs.errors import PyverbsRDMAError

POOL_QP = 12


def test_shares():
    pool = {"max_qp": 12, "max_pd": 7}
    assert shares(PF_HEAVY, pool, 0) == (pool, {"max_qp": 0, "max_pd": 0})
    assert shares(PF_HEAVY, pool, 3) == ({"max_qp": 6, "max_pd": 4}, {"max_qp": 2, "max_pd": 1})
    assert shares(EQUAL, pool, 3) == ({"max_qp": 3, "max_pd": 1}, {"max_qp": 3, "max_pd": 1})


@pytest.fixture(scope="module")
def host():
    with running_host(("--limit", f"max_qp={POOL_QP}")) as h:
        yield h


def max_qp(name: str) -> int:
    with Context(name=name) as ctx:
        return ctx.query_device().max_qp


class Qps:
    """A context with a PD and a CQ, and the RC QPs made on it."""

    def __init__(self, name: str):
        self.ctx = Context(name=name)
        self.pd = pd.PD(self.ctx)
        self.cq = cq.CQ(self.ctx, 16)
        self.qps = []

    def create(self):
        cap = qp.QPCap(max_send_wr=4, max_recv_wr=4, max_send_sge=1, max_recv_sge=1)
        q = qp.QP(self.pd, qp.QPInitAttr(IBV_QPT_RC, scq=self.cq, rcq=self.cq, cap=cap))
        self.qps.append(q)
        return q

    def close(self):
        for q in self.qps:
            q.close()
        self.cq.close()
        self.pd.close()
        self.ctx.close()


def test_the_profile_applies_at_the_next_reset(host):
    assert max_qp("mlx5_0") == POOL_QP                      # one function: the PF has the pool
    host.ok("mlxconfig", "-d", "mlx5_0", "-y", "set", "SRIOV_EN=1", "NUM_OF_VFS=2", "PF_TOTAL_SF=1")
    assert max_qp("mlx5_0") == POOL_QP
    host.ok("mlxfwreset", "-d", "mlx5_0", "-y", "reset")
    # PF_HEAVY (the default): the PF keeps half, the 2 VFs and the SF split the rest
    assert re.search(r"^\tmax_qp:\t+6$", host.ok("ibv_devinfo", "-v", "-d", "mlx5_0"), re.M)
    host.ok("sysfs-write", NUMVFS, "2")
    assert max_qp("mlx5_1") == max_qp("mlx5_2") == 2


def test_one_exhausted_function_leaves_the_others_room(host):
    vf0, vf1, pf = Qps("mlx5_1"), Qps("mlx5_2"), Qps("mlx5_0")
    try:
        vf0.create()
        vf0.create()
        with pytest.raises(PyverbsRDMAError) as e:
            vf0.create()
        assert e.value.error_code == errno.ENOMEM
        vf1.create()
        vf1.create()
        for _ in range(3):
            pf.create()
        summary = host.ok("rdma", "resource", "show")
        for name, n in (("mlx5_0", 3), ("mlx5_1", 2), ("mlx5_2", 2)):
            assert re.search(rf"^\d+: {name}: pd 1 cq 1 qp {n} ", summary, re.M), summary
        vf0.qps.pop().close()                             # room again for the VF
        vf0.create()
    finally:
        for q in (vf0, vf1, pf):
            q.close()


def test_the_equal_profile(host):
    host.ok("sysfs-write", NUMVFS, "0")
    host.ok("mlxconfig", "-d", "mlx5_0", "-y", "set", "RDMA_RESOURCE_PROFILE=EQUAL")
    host.ok("mlxfwreset", "-d", "mlx5_0", "-y", "reset")
    assert max_qp("mlx5_0") == POOL_QP // 4
    host.ok("sysfs-write", NUMVFS, "1")
    assert max_qp("mlx5_1") == POOL_QP // 4
    host.ok("sysfs-write", NUMVFS, "0")
