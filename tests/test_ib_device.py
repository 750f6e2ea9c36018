"""InfiniBand devices: a daemon's device attached to a CA port of a fabric.

The first part runs against a stand-in data socket (``ib_helpers.FakeFabric``:
the fabric link protocol, LIDs, forwarding by DLID); the end-to-end part
against ``softrdma fabric serve`` and an SM (``test_ib_fabric_*``)."""

from __future__ import annotations

import contextlib
import errno
import os
import time

import pytest

from daemon_helpers import softrdma_run
from ib_helpers import FakeFabric, add_ib, control, daemon, fake, link  # noqa: F401 (fixtures)
from softrdma.enums import (IBV_EVENT_LID_CHANGE, IBV_EVENT_PKEY_CHANGE, IBV_EVENT_PORT_ACTIVE, IBV_EVENT_PORT_ERR,
                            IBV_EVENT_SM_CHANGE, IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_READ,
                            IBV_ACCESS_REMOTE_WRITE, IBV_MTU_1024, IBV_QPS_RTS, IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD,
                            IBV_WC_GRH, IBV_WC_RETRY_EXC_ERR, IBV_WC_SUCCESS, IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE,
                            IBV_WR_SEND)
from wait_helpers import wait_for

ACC = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ
QKEY = 0x11111111


def _verbs():
    from softrdma.verbs import addr, cq, device, mr, pd, qp, wr
    return device, pd, mr, cq, qp, addr, wr


def wait(cq, n, timeout=30.0):
    got = []
    end = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < end:
        got += cq.poll(16)[1]
    return got


def connect(qp_m, addr_m, q, peer_qpn, dlid, *, retry_cnt=7, timeout=14, sl=0, static_rate=0):
    a = qp_m.QPAttr()
    a.qp_access_flags = ACC
    a.path_mtu = IBV_MTU_1024
    a.dest_qp_num = peer_qpn
    a.max_dest_rd_atomic = a.max_rd_atomic = 4
    a.min_rnr_timer, a.timeout, a.retry_cnt, a.rnr_retry = 12, timeout, retry_cnt, 7
    a.ah_attr = addr_m.AHAttr(port_num=1, dlid=dlid, sl=sl, static_rate=static_rate)
    q.to_rts(a)


class Host:
    """One IB device's context with a PD, an MR, a CQ."""

    def __init__(self, name, size=1 << 20):
        device, pd_m, mr_m, cq_m, qp_m, addr_m, wr_m = _verbs()
        self.ctx = device.Context(name=name)
        self.pd = pd_m.PD(self.ctx)
        self.mr = mr_m.MR(self.pd, size, ACC)
        self.cq = cq_m.CQ(self.ctx, 256)
        self.lid = self.ctx.query_port(1).lid

    def qp(self, qpt, pkey_index=0):
        """A QP; a UD one in RTS with Q_Key QKEY."""
        _, _, _, _, qp_m, _, _ = _verbs()
        cap = qp_m.QPCap(max_send_wr=64, max_recv_wr=64, max_send_sge=1, max_recv_sge=1)
        init = qp_m.QPInitAttr(qpt, scq=self.cq, rcq=self.cq, cap=cap)
        if qpt != IBV_QPT_UD:
            return qp_m.QP(self.pd, init)
        attr = qp_m.QPAttr()
        attr.qkey = QKEY
        attr.pkey_index = pkey_index
        return qp_m.QP(self.pd, init, attr)

    def close(self):
        self.ctx.close()


def test_link_add_mirrors_the_fabric_port(daemon, fake):
    assert add_ib(daemon.run_dir, "mlx5_0", "fab", "h1")["errno"] == 0
    d = link(daemon.run_dir, "mlx5_0")
    pa = d["port_attr"]
    assert (pa["link_layer"], pa["state"], pa["phys_state"], pa["lid"], pa["sm_lid"], pa["lmc"]) == (1, 4, 5, 3, 1, 0)
    assert (pa["active_width"], pa["active_speed"], pa["active_mtu"]) == (2, 4, 5)     # 4X QDR, 4096
    guid = fake.guid("h1")
    assert d["node_guid"] == "0002:c903:0000:0003"
    assert d["gids"] == ["fe80000000000000" + f"{guid:016x}"]
    assert d["ib"]["subnet_prefix"] == "fe80000000000000" and d["ib"]["pkeys"] == [0xFFFF]
    assert fake.attaches == [(1, "h1", "mlx5_0")]
    sys_port = os.path.join(daemon.run_dir, "sys", "class", "infiniband", "mlx5_0", "ports", "1")
    read = lambda f: open(os.path.join(sys_port, f)).read().strip()     # noqa: E731
    assert (read("lid"), read("sm_lid"), read("state"), read("phys_state"), read("link_layer")) == \
        ("0x3", "0x1", "4: ACTIVE", "5: LinkUp", "InfiniBand")
    assert read("rate") == "40 Gb/sec (4X QDR)" and read("gids/0") == "fe80:0000:0000:0000:0002:c903:0000:0003"
    assert read("pkeys/0") == "0xffff" and read("cap_mask") == "0x02510868"
    # the RoCE device beside it is as it was
    r = link(daemon.run_dir, "rxe0")
    assert r["port_attr"]["link_layer"] == 2 and "ib" not in r
    # refusals: the fabric's errno, and no device left behind
    assert add_ib(daemon.run_dir, "mlx5_1", "fab", "nosuch")["errno"] == errno.ENOENT
    assert add_ib(daemon.run_dir, "mlx5_1", "fab", "h1")["errno"] == errno.EEXIST
    assert add_ib(daemon.run_dir, "mlx5_1", "nofabric", "h2")["errno"] == errno.ENOENT
    assert [x["ifname"] for x in control(daemon.run_dir, "links")["links"]] == ["rxe0", "mlx5_0"]
    assert control(daemon.run_dir, "link_delete", name="mlx5_0")["errno"] == 0
    wait_for(lambda: "h1" not in fake.conns, 10, "the fabric to see the port detach")
    assert add_ib(daemon.run_dir, "mlx5_0", "fab", "h1")["errno"] == 0


def test_port_events_follow_the_fabric_and_a_lost_fabric_comes_back(daemon, fake, shm_path):
    from softrdma.verbs import device
    assert add_ib(daemon.run_dir, "mlx5_0", "fab", "h1")["errno"] == 0
    ctx = device.Context(name="mlx5_0")
    events = []

    def next_event():
        ev = ctx.get_async_event(timeout=20)["event"]
        events.append(ev)
        return ev

    fake.set("h1", state=2, phys=5)                         # the SM's sweep: Initialize
    assert next_event() == IBV_EVENT_PORT_ERR
    assert ctx.query_port(1).state == 2
    fake.set("h1", state=4, lid=9)
    assert {next_event(), next_event()} == {IBV_EVENT_PORT_ACTIVE, IBV_EVENT_LID_CHANGE}
    assert ctx.query_port(1).lid == 9
    fake.set("h1", sm_lid=7)
    assert next_event() == IBV_EVENT_SM_CHANGE
    fake.set("h1", pkeys=(0xFFFF, 0x8001))
    assert next_event() == IBV_EVENT_PKEY_CHANGE
    assert [ctx.query_pkey(1, i) for i in range(2)] == [0xFFFF, 0x8001]
    with pytest.raises(Exception) as e:
        ctx.query_pkey(1, 2)
    assert e.value.error_code == errno.EINVAL
    # the fabric server goes away: the port goes down; back: the device attaches again
    fdir = os.environ["SOFTRDMA_FABRIC_DIR"]
    fake.close()
    assert next_event() == IBV_EVENT_PORT_ERR
    pa = ctx.query_port(1)
    assert (pa.state, pa.phys_state) == (1, 2)
    again = FakeFabric(fdir, "fab", {"h1": 3})
    try:
        assert next_event() == IBV_EVENT_PORT_ACTIVE
        assert ctx.query_port(1).lid == 3
        assert again.attaches == [(1, "h1", "mlx5_0")]
    finally:
        ctx.close()
        again.close()


@contextlib.contextmanager
def two(daemon):
    """mlx5_0 on h1 and mlx5_1 on h2 of the stand-in fabric, a ``Host`` each."""
    assert add_ib(daemon.run_dir, "mlx5_0", "fab", "h1")["errno"] == 0
    assert add_ib(daemon.run_dir, "mlx5_1", "fab", "h2")["errno"] == 0
    a, b = Host("mlx5_0"), Host("mlx5_1")
    try:
        yield a, b
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("qpt", [IBV_QPT_RC, IBV_QPT_UC])
def test_connected_traffic_by_lid_is_byte_exact(daemon, fake, qpt):
    _, _, _, _, qp_m, addr_m, wr_m = _verbs()
    with two(daemon) as (a, b):
        qa, qb = a.qp(qpt), b.qp(qpt)
        connect(qp_m, addr_m, qa, qb.qp_num, b.lid)
        connect(qp_m, addr_m, qb, qa.qp_num, a.lid)
        assert qa.qp_state == IBV_QPS_RTS
        data = os.urandom(300_000)
        a.mr.write(data, len(data))
        qb.post_recv(wr_m.RecvWR(1, 1, [wr_m.SGE(b.mr.buf, 300_000, b.mr.lkey)]))
        qa.post_send(wr_m.SendWR(10, IBV_WR_SEND, 1, sg=[wr_m.SGE(a.mr.buf, 300_000, a.mr.lkey)]))
        assert [(w.wr_id, w.status) for w in wait(a.cq, 1)] == [(10, IBV_WC_SUCCESS)]
        assert [(w.wr_id, w.status, w.byte_len) for w in wait(b.cq, 1)] == [(1, IBV_WC_SUCCESS, 300_000)]
        assert b.mr.read(300_000) == data
        w = wr_m.SendWR(11, IBV_WR_RDMA_WRITE, 1, sg=[wr_m.SGE(a.mr.buf, 70_000, a.mr.lkey)])
        w.set_wr_rdma(b.mr.rkey, b.mr.buf + 400_000)
        qa.post_send(w)
        assert [x.status for x in wait(a.cq, 1)] == [IBV_WC_SUCCESS]
        if qpt == IBV_QPT_RC:
            r = wr_m.SendWR(12, IBV_WR_RDMA_READ, 1, sg=[wr_m.SGE(a.mr.buf + 500_000, 70_000, a.mr.lkey)])
            r.set_wr_rdma(b.mr.rkey, b.mr.buf + 400_000)
            qa.post_send(r)
            assert [x.status for x in wait(a.cq, 1)] == [IBV_WC_SUCCESS]
            assert a.mr.read(70_000, 500_000) == data[:70_000]
        else:
            wait_for(lambda: b.mr.read(70_000, 400_000) == data[:70_000], 10, "the UC write")
        assert b.mr.read(70_000, 400_000) == data[:70_000]
        assert fake.forwarded > 300_000 // 1024


def test_ud_by_lid_and_with_grh(daemon, fake):
    _, _, _, _, qp_m, addr_m, wr_m = _verbs()
    with two(daemon) as (a, b):
        qa, qb = a.qp(IBV_QPT_UD), b.qp(IBV_QPT_UD)
        ah = addr_m.AH(a.pd, attr=addr_m.AHAttr(port_num=1, dlid=b.lid, sl=3))
        gid_b = b.ctx.query_gid(1, 0)
        ah_g = addr_m.AH(a.pd, attr=addr_m.AHAttr(gr=addr_m.GlobalRoute(dgid=gid_b, sgid_index=0), port_num=1,
                                                  dlid=b.lid))
        a.mr.write(b"x" * 100 + b"y" * 100, 200)
        for i, (h, off) in enumerate(((ah, 0), (ah_g, 100))):
            qb.post_recv(wr_m.RecvWR(i, 1, [wr_m.SGE(b.mr.buf + 4096 * i, 2048, b.mr.lkey)]))
            s = wr_m.SendWR(20 + i, IBV_WR_SEND, 1, sg=[wr_m.SGE(a.mr.buf + off, 100, a.mr.lkey)])
            s.set_wr_ud(h, qb.qp_num, QKEY)
            qa.post_send(s)
            assert [x.status for x in wait(a.cq, 1)] == [IBV_WC_SUCCESS]
        r0, r1 = wait(b.cq, 2)
        assert (r0.status, r0.byte_len, r0.slid, r0.sl, r0.src_qp, r0.wc_flags & IBV_WC_GRH) == \
            (IBV_WC_SUCCESS, 140, a.lid, 3, qa.qp_num, 0)
        assert (r1.status, r1.slid, r1.wc_flags & IBV_WC_GRH) == (IBV_WC_SUCCESS, a.lid, IBV_WC_GRH)
        assert b.mr.read(100, 40) == b"x" * 100 and b.mr.read(100, 4096 + 40) == b"y" * 100
        grh = b.mr.read(40, 4096)
        assert grh[8:24] == a.ctx.query_gid(1, 0).raw and grh[24:40] == gid_b.raw
        # a LID-only AH on the RoCE device is still refused
        device = _verbs()[0]
        from softrdma.verbs import pd as pd_m
        with device.Context(name="rxe0") as rctx:
            with pytest.raises(Exception) as e:
                addr_m.AH(pd_m.PD(rctx), attr=addr_m.AHAttr(port_num=1, dlid=4))
            assert e.value.error_code == errno.EINVAL


def test_lmc_path_bits_on_both_ends(daemon, fake):
    """LMC 2 on both ports: the SLID is the base LID with the AV's source
    path bits, a DLID within the receiver's LMC reaches it, and the UD
    completion gives the DLID's path bits."""
    _, _, _, _, qp_m, addr_m, wr_m = _verbs()
    fake.set("h1", lmc=2, lid=8)                           # (before the devices attach: their first PortInfo)
    fake.set("h2", lmc=2, lid=12)
    with two(daemon) as (a, b):
        assert (a.lid, b.lid) == (8, 12)
        qa, qb = a.qp(IBV_QPT_UD), b.qp(IBV_QPT_UD)
        ah = addr_m.AH(a.pd, attr=addr_m.AHAttr(port_num=1, dlid=b.lid + 3, src_path_bits=2, sl=5))
        qb.post_recv(wr_m.RecvWR(1, 1, [wr_m.SGE(b.mr.buf, 2048, b.mr.lkey)]))
        s = wr_m.SendWR(1, IBV_WR_SEND, 1, sg=[wr_m.SGE(a.mr.buf, 10, a.mr.lkey)])
        s.set_wr_ud(ah, qb.qp_num, QKEY)
        qa.post_send(s)
        (rx,) = wait(b.cq, 1)
        assert (rx.status, rx.slid, rx.sl, rx.dlid_path_bits) == (IBV_WC_SUCCESS, 8 + 2, 5, 3)
        # an AH from the completion goes back to the sender's LID with those bits
        from softrdma.verbs.addr import ah_attr_from_wc
        back = ah_attr_from_wc(b.ctx, 1, rx, bytes(40))
        assert (back.dlid, back.sl, back.src_path_bits, back.is_global) == (10, 5, 3, 0)


def test_a_pkey_the_port_lacks_is_a_violation(daemon, fake):
    _, _, _, _, qp_m, addr_m, wr_m = _verbs()
    with two(daemon) as (a, b):
        fake.set("h1", pkeys=(0xFFFF, 0x8005))
        wait_for(lambda: a.ctx.query_port(1).pkey_tbl_len == 2, 10, "the new P_Key table")
        qa, qb = a.qp(IBV_QPT_UD, pkey_index=1), b.qp(IBV_QPT_UD)
        ah = addr_m.AH(a.pd, attr=addr_m.AHAttr(port_num=1, dlid=b.lid))
        qb.post_recv(wr_m.RecvWR(1, 1, [wr_m.SGE(b.mr.buf, 2048, b.mr.lkey)]))
        s = wr_m.SendWR(1, IBV_WR_SEND, 1, sg=[wr_m.SGE(a.mr.buf, 10, a.mr.lkey)])
        s.set_wr_ud(ah, qb.qp_num, QKEY)
        qa.post_send(s)
        assert [x.status for x in wait(a.cq, 1)] == [IBV_WC_SUCCESS]
        wait_for(lambda: link(daemon.run_dir, "mlx5_1")["ib"]["counters"]["pkey_violations"] == 1, 10,
                 "the P_Key violation counted")
        assert link(daemon.run_dir, "mlx5_1")["port_attr"]["bad_pkey_cntr"] == 1
        assert wait(b.cq, 1, timeout=0.5) == []


def test_rc_retries_then_retry_exc_err_when_the_port_goes_down(daemon, fake):
    _, _, _, _, qp_m, addr_m, wr_m = _verbs()
    with two(daemon) as (a, b):
        qa, qb = a.qp(IBV_QPT_RC), b.qp(IBV_QPT_RC)
        connect(qp_m, addr_m, qa, qb.qp_num, b.lid, retry_cnt=2, timeout=10)
        connect(qp_m, addr_m, qb, qa.qp_num, a.lid)
        fake.set("h2", state=1, phys=2)                    # the link to h2 goes down: packets to it dropped
        w = wr_m.SendWR(1, IBV_WR_RDMA_WRITE, 1, sg=[wr_m.SGE(a.mr.buf, 4096, a.mr.lkey)])
        w.set_wr_rdma(b.mr.rkey, b.mr.buf)
        dropped = fake.dropped
        qa.post_send(w)
        (wc,) = wait(a.cq, 1)
        assert wc.status == IBV_WC_RETRY_EXC_ERR
        assert fake.dropped - dropped >= 3 * 4                # the first pass and two retries, 4 packets each


# --- end to end: `softrdma fabric serve`, an SM, four daemons with an IB device each ---------

import subprocess  # noqa: E402

from ib_helpers import NET_2SW_DUAL, IbFabric, IbHosts  # noqa: E402
from ibfabric_helpers import NET_2SW  # noqa: E402
from sm_helpers import have_ibsim  # noqa: E402

HOSTS = ("h1", "h2", "h3", "h4")


class Cluster(IbHosts):
    """``IbHosts`` on h1 .. h4, and pyverbs contexts on their devices."""

    def __init__(self, tmp, shm, net, sm):
        super().__init__(tmp, shm, net, HOSTS, sm)

    @contextlib.contextmanager
    def host(self, h):
        """``Host`` on h's mlx5_0 (its daemon's run directory for the context's connection)."""
        with softrdma_run(self.run_dir(h)):
            x = Host("mlx5_0")
        try:
            yield x
        finally:
            x.close()


@pytest.fixture(scope="module", params=["softrdma", "opensm"])
def live(tmp_path_factory, shm_path_module, request):
    if not have_ibsim():
        pytest.fail("opensm/ibsim-utils/infiniband-diags missing")
    c = Cluster(tmp_path_factory.mktemp("ibdev"), shm_path_module / request.param, NET_2SW, request.param)
    yield c
    c.close()


@pytest.mark.slow
def test_e2e_the_sm_makes_every_port_active_with_its_lid(live):
    assert sorted(live.lid.values()) == sorted(set(live.lid.values())) and 0 not in live.lid.values()
    sm_lids = set()
    for h in HOSTS:
        d = link(live.run_dir(h), "mlx5_0")
        pa = d["port_attr"]
        assert (pa["state"], pa["phys_state"], pa["link_layer"]) == (4, 5, 1)
        sm_lids.add(pa["sm_lid"])
        guid = d["ib"]["port_guid"].replace(":", "")
        assert d["gids"][0] == d["ib"]["subnet_prefix"] + guid and d["ib"]["subnet_prefix"] == "fe80000000000000"
    assert len(sm_lids) == 1 and 0 not in sm_lids


@pytest.mark.slow
@pytest.mark.parametrize("pair", [("h1", "h2"), ("h1", "h4"), ("h4", "h3")])
def test_e2e_rc_uc_ud_byte_exact_between_hosts(live, pair):
    """Same switch (h1-h2), across the switch hop (h1-h4)."""
    _, _, _, _, qp_m, addr_m, wr_m = _verbs()
    with live.host(pair[0]) as a, live.host(pair[1]) as b:
        assert (a.lid, b.lid) == (live.lid[pair[0]], live.lid[pair[1]])
        for qpt in (IBV_QPT_RC, IBV_QPT_UC):
            qa, qb = a.qp(qpt), b.qp(qpt)
            connect(qp_m, addr_m, qa, qb.qp_num, b.lid)
            connect(qp_m, addr_m, qb, qa.qp_num, a.lid)
            data = os.urandom(150_000)
            a.mr.write(data, len(data))
            qb.post_recv(wr_m.RecvWR(1, 1, [wr_m.SGE(b.mr.buf, 150_000, b.mr.lkey)]))
            qa.post_send(wr_m.SendWR(2, IBV_WR_SEND, 1, sg=[wr_m.SGE(a.mr.buf, 150_000, a.mr.lkey)]))
            assert [(w.status, w.byte_len) for w in wait(b.cq, 1)] == [(IBV_WC_SUCCESS, 150_000)], qpt
            assert [w.status for w in wait(a.cq, 1)] == [IBV_WC_SUCCESS]
            assert b.mr.read(150_000) == data
        qa, qb = a.qp(IBV_QPT_UD), b.qp(IBV_QPT_UD)
        ah = addr_m.AH(a.pd, attr=addr_m.AHAttr(port_num=1, dlid=b.lid))
        msg = os.urandom(1000)
        a.mr.write(msg, len(msg))
        qb.post_recv(wr_m.RecvWR(3, 1, [wr_m.SGE(b.mr.buf + 200_000, 2048, b.mr.lkey)]))
        s = wr_m.SendWR(4, IBV_WR_SEND, 1, sg=[wr_m.SGE(a.mr.buf, 1000, a.mr.lkey)])
        s.set_wr_ud(ah, qb.qp_num, QKEY)
        qa.post_send(s)
        (rx,) = wait(b.cq, 1)
        assert (rx.status, rx.byte_len, rx.slid, rx.src_qp) == (IBV_WC_SUCCESS, 1040, a.lid, qa.qp_num)
        assert b.mr.read(1000, 200_040) == msg
        wait(a.cq, 1)


@pytest.mark.slow
def test_e2e_a_link_down_mid_transfer_with_no_other_path_is_retry_exc_err(live):
    """The one link between the switches goes down under RC writes h1 -> h4:
    the requester retries, then completes with RETRY_EXC_ERR; the link up
    again, the SM's sweep brings the path back."""
    _, _, _, _, qp_m, addr_m, wr_m = _verbs()
    with live.host("h1") as a, live.host("h4") as b:
        qa, qb = a.qp(IBV_QPT_RC), b.qp(IBV_QPT_RC)
        connect(qp_m, addr_m, qa, qb.qp_num, b.lid, retry_cnt=3, timeout=12)
        connect(qp_m, addr_m, qb, qa.qp_num, a.lid)
        for i in range(20):
            w = wr_m.SendWR(i, IBV_WR_RDMA_WRITE, 1, sg=[wr_m.SGE(a.mr.buf, 65536, a.mr.lkey)])
            w.set_wr_rdma(b.mr.rkey, b.mr.buf)
            qa.post_send(w)
            if i == 2:
                r = live.fabric.fabric("link", "down", "sw1", "3")
                assert r.returncode == 0, r.stderr
        wcs = wait(a.cq, 20, timeout=60)
        statuses = [w.status for w in wcs]
        assert IBV_WC_RETRY_EXC_ERR in statuses, statuses
        first_err = statuses.index(IBV_WC_RETRY_EXC_ERR)
        assert all(s == IBV_WC_SUCCESS for s in statuses[:first_err])
        assert link(live.run_dir("h1"), "mlx5_0")["port_attr"]["state"] == 4      # h1's own port stays up
    r = live.fabric.fabric("link", "up", "sw1", "3")
    assert r.returncode == 0, r.stderr
    with live.host("h1") as a, live.host("h4") as b:
        qa, qb = a.qp(IBV_QPT_RC), b.qp(IBV_QPT_RC)
        connect(qp_m, addr_m, qa, qb.qp_num, b.lid, retry_cnt=7, timeout=14)
        connect(qp_m, addr_m, qb, qa.qp_num, a.lid)
        w = wr_m.SendWR(1, IBV_WR_RDMA_WRITE, 1, sg=[wr_m.SGE(a.mr.buf, 4096, a.mr.lkey)])
        w.set_wr_rdma(b.mr.rkey, b.mr.buf)

        def goes():
            qa.post_send(w)
            (wc,) = wait(a.cq, 1)
            return wc.status == IBV_WC_SUCCESS
        wait_for(goes, 60, "the path h1 -> h4 back after the link came up")


@pytest.fixture(scope="module")
def dual(tmp_path_factory, shm_path_module):
    """Two links between the switches: a redundant path."""
    if not have_ibsim():
        pytest.fail("opensm/ibsim-utils/infiniband-diags missing")
    c = Cluster(tmp_path_factory.mktemp("ibdual"), shm_path_module / "dual", NET_2SW_DUAL, "softrdma")
    yield c
    c.close()


def _lft_port(cluster, switch: str, lid: int) -> int:
    """The output port of ``switch``'s LFT for ``lid`` (the real ibroute)."""
    from sm_helpers import SIMSO
    fab = cluster.fabric
    out = subprocess.run(["ibswitches"], cwd=fab.tmp, env=fab.env(LD_PRELOAD=SIMSO, SIM_HOST="h2"),
                         capture_output=True, text=True, timeout=60).stdout
    sw_lid = int(next(ln for ln in out.splitlines() if f'"{switch}"' in ln).split(" lid ")[1].split()[0])
    out = subprocess.run(["ibroute", str(sw_lid)], cwd=fab.tmp, env=fab.env(LD_PRELOAD=SIMSO, SIM_HOST="h2"),
                         capture_output=True, text=True, timeout=60).stdout
    row = next(ln for ln in out.splitlines() if ln.startswith(f"0x{lid:04x} "))
    return int(row.split()[1])


@pytest.mark.slow
def test_e2e_a_link_down_mid_transfer_is_rerouted_by_the_sm_and_completes(dual):
    """RC writes h1 -> h4 while the inter-switch link their route takes goes
    down: the SM's sweep (the switch's trap) moves the route to the other
    link, the requester's retries find it, every write completes."""
    _, _, _, _, qp_m, addr_m, wr_m = _verbs()
    port = _lft_port(dual, "sw1", dual.lid["h4"])
    assert port in (3, 4)
    with dual.host("h1") as a, dual.host("h4") as b:
        qa, qb = a.qp(IBV_QPT_RC), b.qp(IBV_QPT_RC)
        connect(qp_m, addr_m, qa, qb.qp_num, b.lid, retry_cnt=7, timeout=17)      # 0.5 s a try
        connect(qp_m, addr_m, qb, qa.qp_num, a.lid)
        data = os.urandom(40 * 16384)
        a.mr.write(data, len(data))
        for i in range(40):
            w = wr_m.SendWR(i, IBV_WR_RDMA_WRITE, 1, sg=[wr_m.SGE(a.mr.buf + i * 16384, 16384, a.mr.lkey)])
            w.set_wr_rdma(b.mr.rkey, b.mr.buf + i * 16384)
            qa.post_send(w)
            if i == 5:
                r = dual.fabric.fabric("link", "down", "sw1", str(port))
                assert r.returncode == 0, r.stderr
        wcs = wait(a.cq, 40, timeout=60)
        assert [(w.wr_id, w.status) for w in wcs] == [(i, IBV_WC_SUCCESS) for i in range(40)]
        assert b.mr.read(len(data)) == data
        wait_for(lambda: _lft_port(dual, "sw1", dual.lid["h4"]) == 7 - port, 30, "the new route")
    r = dual.fabric.fabric("link", "up", "sw1", str(port))
    assert r.returncode == 0, r.stderr


@pytest.mark.slow
def test_e2e_roce_and_ib_side_by_side_in_one_daemon(tmp_path):
    """Two hosts in network namespaces, each daemon with rxe0 on its veth and
    mlx5_0 on a CA of a fabric (reached through the data socket's file):
    RoCE between the namespaces and IB through the switches, both at once
    in the same daemons."""
    from netns_helpers import TwoHosts, need_root
    need_root()
    if not have_ibsim():
        pytest.fail("opensm/ibsim-utils/infiniband-diags missing")
    fab = IbFabric(tmp_path, NET_2SW)
    h = None
    try:
        h = TwoHosts()
        h.start_daemons()                      # (they inherit SOFTRDMA_FABRIC_DIR)
        fab.attach(h.run_dirs[0], "h1")
        fab.attach(h.run_dirs[1], "h4")
        fab.sweep("softrdma")
        lids = [fab.wait_active(rd) for rd in h.run_dirs]
        assert link(h.run_dirs[0], "rxe0")["port_attr"]["link_layer"] == 2
        cout, sout = h.pingpong(["-d", "rxe0", "-g", "1", "-n", "50", "-c"])
        assert "GID ::ffff:10.201." in cout and "50 iters in" in cout
        cout, sout = h.pingpong(["-d", "mlx5_0", "-n", "50", "-c"])
        assert f"  local address:  LID 0x{lids[0]:04x}," in cout and f"remote address: LID 0x{lids[1]:04x}," in cout
        assert "50 iters in" in cout and "50 iters in" in sout
        for rd in h.run_dirs:
            ib = link(rd, "mlx5_0")
            assert ib["ib"]["counters"]["xmit_packets"] >= 50 and ib["port_attr"]["state"] == 4
            assert link(rd, "rxe0")["hw_counters"]["sent_pkts"] >= 50
    finally:
        if h is not None:
            h.close()
        fab.close()


def _join(cluster, h: str, mgid: int, tid: int) -> int:
    """An SA Set of MCMemberRecord (full member) for h's port, sent from its
    device's QP1 (a umad file, as a tool does); the group's MLID."""
    from ibfabric_helpers import sa_get
    from softrdma.tools.ibdiag.rpc import MadPort
    from softrdma.wire import mad as madw
    from softrdma.wire.sa import MCMEMBER_RECORD, MCR_COMP, SA_DATA_OFFSET, SaAttr
    d = link(cluster.run_dir(h), "mlx5_0")
    port_gid = int(d["gids"][0], 16)
    rec = MCMEMBER_RECORD.encode(MGID=mgid, PortGID=port_gid, QKey=QKEY, PKey=0xFFFF, JoinState=1, SL=0, TClass=0,
                                 FlowLabel=0)
    mask = sum(MCR_COMP[k] for k in ("MGID", "PortGID", "QKey", "PKey", "JoinState", "SL", "TClass", "FlowLabel"))
    q = sa_get(SaAttr.MCMEMBER_RECORD, rec, mask, tid, method=madw.Method.SET)
    with softrdma_run(cluster.run_dir(h)), MadPort(device="mlx5_0") as mp:
        (ans,) = mp.rpc_many([((d["port_attr"]["sm_lid"], 1, 1), q)])
    assert ans is not None and int.from_bytes(ans[4:6], "big") == 0, h
    return MCMEMBER_RECORD.decode(ans[SA_DATA_OFFSET:SA_DATA_OFFSET + 52])["MLID"]


@pytest.mark.slow
def test_e2e_ud_multicast_through_the_mfts_after_a_join(live):
    """h1, h3, h4 join a group through the SA from their devices' QP1; h3's
    and h4's UD QPs attach to it; h1 sends to the MLID with a GRH to the
    MGID: both members get it (across the switch hop), byte-exact; h2, not
    attached, nothing."""
    _, _, _, _, qp_m, addr_m, wr_m = _verbs()
    from softrdma.verbs.addr import GID
    mgid = 0xFF15A01BFFFF0000000000000000AB01
    mlids = {_join(live, h, mgid, 900 + i) for i, h in enumerate(("h1", "h3", "h4"))}
    (mlid,) = mlids
    assert mlid >= 0xC000
    gid = GID(mgid.to_bytes(16, "big"))
    with live.host("h1") as a, live.host("h2") as x, live.host("h3") as b, live.host("h4") as c:
        qa, qx, qb, qc = (h.qp(IBV_QPT_UD) for h in (a, x, b, c))
        for h, q in ((b, qb), (c, qc)):
            q.attach_mcast(gid, mlid)
            for i in range(64):             # (room for every resend wait_for may need)
                q.post_recv(wr_m.RecvWR(i, 1, [wr_m.SGE(h.mr.buf + 4096 * i, 2048, h.mr.lkey)]))
        qx.post_recv(wr_m.RecvWR(0, 1, [wr_m.SGE(x.mr.buf, 2048, x.mr.lkey)]))
        ah = addr_m.AH(a.pd, attr=addr_m.AHAttr(gr=addr_m.GlobalRoute(dgid=gid, sgid_index=0), port_num=1,
                                                dlid=mlid))
        msg = os.urandom(500)
        a.mr.write(msg, len(msg))

        got = {}

        def got_both():
            # a send until each member has had one (the SM programs the MFTs after the
            # joins; on a busy host one member may see a send the other waits past)
            s = wr_m.SendWR(1, IBV_WR_SEND, 1, sg=[wr_m.SGE(a.mr.buf, 500, a.mr.lkey)])
            s.set_wr_ud(ah, 0xFFFFFF, QKEY)
            qa.post_send(s)
            wait(a.cq, 1)
            for h in (b, c):
                if h not in got and wait(h.cq, 1, timeout=1):
                    got[h] = True
            return len(got) == 2
        wait_for(got_both, 30, "the multicast through the MFTs")      # (the SM programs them after the joins)
        for h in (b, c):
            assert h.mr.read(500, 40) == msg
            assert h.mr.read(16, 24) == mgid.to_bytes(16, "big")                 # the GRH's DGID
        assert wait(x.cq, 1, timeout=0.5) == []
