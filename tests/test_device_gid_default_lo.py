"""RC and UD over lo's default GID (index 0: fe80::200:ff:fe00:0, the
EUI-64 link-local of lo's zero MAC), an address lo does not have -- the GID
rdma-core's suite picks by default.  As on rxe, the same-daemon path sends
from the source GID's own address, so the peer's check_addr (source = its
dgid, destination = its sgid) holds for RC as it does for UD."""

from __future__ import annotations

import pytest

from daemon_helpers import daemon_in_shm
from rc_pair import ACC, RcPair, rc_attr
from softrdma.enums import IBV_QPT_UD, IBV_WC_SUCCESS, IBV_WR_SEND
from softrdma.verbs import addr, cq, device, mr, pd, qp, wr

DEFAULT_LO_GID = "fe80:0000:0000:0000:0200:00ff:fe00:0000"


@pytest.fixture
def ctx(monkeypatch):
    with daemon_in_shm("gid0lo") as d:
        monkeypatch.setenv("SOFTRDMA_RUN", d.run_dir)
        monkeypatch.setenv("SOFTRDMA_AUTOSTART", "0")
        c = device.Context(name="rxe0")
        try:
            yield c
        finally:
            c.close()


def test_gid_0_of_lo_is_the_default_gid_of_the_zero_mac(ctx):
    assert str(ctx.query_gid(1, 0)) == DEFAULT_LO_GID


def test_rc_send_write_read_over_gid_0_on_lo(ctx):
    p = RcPair(ctx, connect=False)
    gid = ctx.query_gid(1, 0)
    p.a.to_rts(rc_attr(p.b.qp_num, gid, 0, retry_cnt=1, timeout=10))
    p.b.to_rts(rc_attr(p.a.qp_num, gid, 0, retry_cnt=1, timeout=10))
    p.ma.write(b"x" * 4096, 4096)
    p.send(8, 4096)
    assert p.mb.read(4096, 0) == b"x" * 4096
    p.write(4, 1024)
    p.read(4, 1024)


def test_ud_over_gid_0_on_lo_reports_the_gid_as_source(ctx):
    d = pd.PD(ctx)
    c = cq.CQ(ctx, 8)
    cap = qp.QPCap(max_send_wr=4, max_recv_wr=4, max_send_sge=1, max_recv_sge=1)
    a = qp.QP(d, qp.QPInitAttr(IBV_QPT_UD, scq=c, rcq=c, cap=cap))
    b = qp.QP(d, qp.QPInitAttr(IBV_QPT_UD, scq=c, rcq=c, cap=cap))
    for q in (a, b):
        at = qp.QPAttr()
        at.qkey = 0x11
        q.to_rts(at)
    m = mr.MR(d, 4096, ACC)
    m.write(b"y" * 64, 64)
    b.post_recv(wr.RecvWR(1, 1, [wr.SGE(m.buf + 1024, 40 + 64, m.lkey)]))
    ah = addr.AH(d, addr.AHAttr(gr=addr.GlobalRoute(dgid=ctx.query_gid(1, 0), sgid_index=0), is_global=1))
    w = wr.SendWR(2, IBV_WR_SEND, 1, sg=[wr.SGE(m.buf, 64, m.lkey)])
    w.set_wr_ud(ah, b.qp_num, 0x11)
    a.post_send(w)
    got = RcPair.wait(c, 2)
    assert all(x.status == IBV_WC_SUCCESS for x in got), [(x.wr_id, x.status) for x in got]
    grh = m.read(40, 1024)
    assert grh[8:24] == ctx.query_gid(1, 0).raw        # the GRH's source: the GID itself
