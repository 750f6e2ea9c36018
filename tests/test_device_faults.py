"""Fault injection on a device's link: off by default, and when on, RC still
delivers every byte exactly once while packets are lost, duplicated,
reordered, delayed and corrupted."""

from __future__ import annotations

import errno
import os
import time

import pytest

from daemon_helpers import daemon_in_shm
from softrdma.enums import IBV_MTU_1024, IBV_QPT_RC, IBV_WC_SUCCESS, IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE, IBV_WR_SEND
from softrdma.verbs import addr, cq, device, mr, pd, qp, wr
from softrdma.verbs.errors import PyverbsRDMAError

ACC = 15


@pytest.fixture
def daemon(monkeypatch):
    with daemon_in_shm("faults") as d:
        monkeypatch.setenv("SOFTRDMA_RUN", d.run_dir)
        yield d


def _pair(ctx):
    p = pd.PD(ctx)
    ma, mb = mr.MR(p, 4 << 20, ACC), mr.MR(p, 4 << 20, ACC)
    ca, cb = cq.CQ(ctx, 256), cq.CQ(ctx, 256)
    cap = qp.QPCap(max_send_wr=64, max_recv_wr=64)
    qa = qp.QP(p, qp.QPInitAttr(IBV_QPT_RC, scq=ca, rcq=ca, cap=cap))
    qb = qp.QP(p, qp.QPInitAttr(IBV_QPT_RC, scq=cb, rcq=cb, cap=cap))
    for q, peer in ((qa, qb), (qb, qa)):
        a = qp.QPAttr()
        a.qp_access_flags, a.path_mtu, a.dest_qp_num = ACC, IBV_MTU_1024, peer.qp_num
        a.max_dest_rd_atomic = a.max_rd_atomic = 4
        # a 33.6 ms ACK timeout: 1 ms ran out of retries when the CPUs were busy with other
        # work, and 16.8 ms once in a full test run on a loaded two-core machine
        a.min_rnr_timer, a.timeout, a.retry_cnt, a.rnr_retry = 12, 13, 7, 7
        a.ah_attr = addr.AHAttr(gr=addr.GlobalRoute(dgid=ctx.query_gid(1, 1), sgid_index=1), is_global=1)
        q.to_rts(a)
    return ma, mb, ca, cb, qa, qb


def test_faults_are_off_by_default_and_validated(daemon):
    m = device.management()
    link = m.call("links")[0]["links"][0]
    assert link["ifname"] == "rxe0"
    assert m.call("link_set", name="rxe0")[0]["faults"] is None
    with pytest.raises(PyverbsRDMAError) as e:
        m.call("link_set", name="rxe0", faults={"loss": 1.5})
    assert e.value.error_code == errno.EINVAL
    with pytest.raises(PyverbsRDMAError) as e:
        m.call("link_set", name="nope", faults={"loss": 0.1})
    assert e.value.error_code == errno.ENODEV


@pytest.mark.slow                   # a soak under injected faults
def test_rc_is_exact_under_loss_dup_reorder_delay_corruption(daemon):
    m = device.management()
    m.call("link_set", name="rxe0", seed=7,
           faults={"loss": 0.10, "dup": 0.02, "reorder": 0.05, "delay": 50e-6, "corrupt": 0.01})
    with device.Context(name="rxe0") as ctx:
        ma, mb, ca, cb, qa, qb = _pair(ctx)
        data = os.urandom(4 << 20)
        ma.write(data, len(data))
        chunk = 256 << 10
        for i in range(8):
            qb.post_recv(wr.RecvWR(i, 1, [wr.SGE(mb.buf + i * chunk, chunk, mb.lkey)]))
        for i in range(8):
            qa.post_send(wr.SendWR(i, IBV_WR_SEND, 1, sg=[wr.SGE(ma.buf + i * chunk, chunk, ma.lkey)]))
        w = wr.SendWR(100, IBV_WR_RDMA_WRITE, 1, sg=[wr.SGE(ma.buf + (2 << 20), 2 << 20, ma.lkey)])
        w.set_wr_rdma(mb.rkey, mb.buf + (2 << 20))
        qa.post_send(w)
        got, rx = [], []
        end = time.monotonic() + 120
        while (len(got) < 9 or len(rx) < 8) and time.monotonic() < end:
            got += ca.poll(16)[1]
            rx += cb.poll(16)[1]
        assert [(x.wr_id, x.status) for x in got] == [(i, IBV_WC_SUCCESS) for i in list(range(8)) + [100]]
        assert [(x.wr_id, x.status) for x in rx] == [(i, IBV_WC_SUCCESS) for i in range(8)]
        assert mb.read(4 << 20) == data
        r = wr.SendWR(101, IBV_WR_RDMA_READ, 1, sg=[wr.SGE(ma.buf, 2 << 20, ma.lkey)])
        r.set_wr_rdma(mb.rkey, mb.buf + (2 << 20))
        ma.write(bytes(2 << 20), 2 << 20)
        qa.post_send(r)
        end = time.monotonic() + 120
        done = []
        while not done and time.monotonic() < end:
            done = ca.poll(1)[1]
        assert [(x.wr_id, x.status) for x in done] == [(101, IBV_WC_SUCCESS)]
        assert ma.read(2 << 20) == data[2 << 20:]
    counters = m.call("link_set", name="rxe0")[0]["fault_counters"]
    assert all(counters[k] > 0 for k in ("lost", "duplicated", "reordered", "delayed", "corrupted")), counters
    assert m.call("link_set", name="rxe0", faults={})[0]["faults"] is None       # off again


def test_rdma_link_set_faults_cli(daemon):
    import subprocess
    import sys
    env = {**os.environ, "SOFTRDMA_RUN": daemon.run_dir}
    r = subprocess.run([sys.executable, "-m", "softrdma", "rdma", "link", "set", "rxe0", "faults", "loss", "10%",
                        "dup", "1%", "reorder", "5%", "delay", "1ms", "corrupt", "0.1%"], env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    f = device.management().call("link_set", name="rxe0")[0]["faults"]
    assert (f["loss"], f["dup"], f["reorder"], f["delay"], f["corrupt"]) == pytest.approx((0.1, 0.01, 0.05, 0.001,
                                                                                           0.001))
    bad = subprocess.run([sys.executable, "-m", "softrdma", "rdma", "link", "set", "rxe0", "faults", "loss", "200%"],
                         env=env, capture_output=True, text=True)
    assert bad.returncode != 0 and "rate" in bad.stderr and "Traceback" not in bad.stderr
    off = subprocess.run([sys.executable, "-m", "softrdma", "rdma", "link", "set", "rxe0", "faults", "off"],
                         env=env, capture_output=True, text=True)
    assert off.returncode == 0 and device.management().call("link_set", name="rxe0")[0]["faults"] is None
