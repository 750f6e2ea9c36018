"""Static rate (ibv_ah_attr.static_rate): an RC path whose rate is below
the link's is paced to it by a token bucket the requester obeys
(``transport.static_rate``), as an HCA's inter-packet delay does.  In
virtual time (the simulator: no CPU in the way) a WRITE with
IBV_RATE_2_5_GBPS cannot go faster than 2.5 Gb/s and arrives byte-exact;
an IB port gives the limiter to a QP whose path asks for a rate below the
link's and to no other."""

from __future__ import annotations

import os
import types

from ib_helpers import control, daemon, fake  # noqa: F401 (fixtures)
from softrdma.device.ib import IbPort
from softrdma.enums import ibv_wr_opcode
from softrdma.transport.static_rate import StaticRate, limiter_for
from softrdma.transport.wr import AddressVector, SendWQE

from transport_helpers import Pair

IBV_RATE_MAX, IBV_RATE_2_5_GBPS, IBV_RATE_10_GBPS, IBV_RATE_40_GBPS = 0, 2, 3, 7


def test_a_write_is_held_to_the_static_rate_in_virtual_time():
    n = 4 << 20
    p = Pair(mr_size=n)
    qa = p.qa
    data = os.urandom(n)
    p.ma.write(data)
    qa.rp = limiter_for(IBV_RATE_2_5_GBPS, 10_000, 0.0)
    assert isinstance(qa.rp, StaticRate)
    qa.post_send(SendWQE(wr_id=1, opcode=ibv_wr_opcode.IBV_WR_RDMA_WRITE, sg_list=[(p.ma.addr, n, p.ma.lkey)],
                         remote_addr=p.mb.addr, rkey=p.mb.rkey))
    qa.run(0.0)
    t = p.run_until_cqe(qa.send_cq, 1, until=5.0)
    assert len(qa.send_cq) == 1
    # no faster than 2.5 Gb/s (the bucket's first burst aside)
    assert n - qa.rp.burst <= t * 2.5e9 / 8, t
    assert p.mb.read(n) == data


def test_limiter_for_a_rate_below_the_link_only():
    assert limiter_for(IBV_RATE_MAX, 10_000, 0.0) is None
    assert limiter_for(IBV_RATE_10_GBPS, 10_000, 0.0) is None           # the link's own rate
    assert limiter_for(IBV_RATE_40_GBPS, 10_000, 0.0) is None
    assert limiter_for(99, 10_000, 0.0) is None
    assert limiter_for(IBV_RATE_2_5_GBPS, 10_000, 0.0).mbps == 2500


def test_the_ib_port_paces_a_path_below_its_link_rate():
    """A 4X SDR port (10 Gb/s): a path at 2.5 Gb/s is paced, one at the
    port's rate or above is not."""
    port = types.SimpleNamespace(lid=5, lmc_mask=0, rate=("SDR", 4), gid=lambda i: None)
    for rate, pace in ((IBV_RATE_2_5_GBPS, 2500), (IBV_RATE_10_GBPS, 0), (IBV_RATE_MAX, 0)):
        av = AddressVector(dlid=7, static_rate=rate)
        assert IbPort._ib_route(port, av).pace == pace, rate


def test_an_ib_device_paces_an_rc_path_below_its_link(daemon, fake):
    """On a 4X QDR port (the stand-in fabric's), an RC QP whose path asks
    for 2.5 Gb/s gets the limiter at its first packet (``rdma -dd resource
    show qp`` shows it); its peer, at the port's rate, does not; the data
    arrives byte-exact."""
    from test_ib_device import _verbs, connect, two, wait
    from softrdma.enums import IBV_QPT_RC, IBV_WC_SUCCESS, IBV_WR_SEND
    _, _, _, _, qp_m, addr_m, wr_m = _verbs()
    with two(daemon) as (a, b):
        qa, qb = a.qp(IBV_QPT_RC), b.qp(IBV_QPT_RC)
        connect(qp_m, addr_m, qa, qb.qp_num, b.lid, static_rate=IBV_RATE_2_5_GBPS)
        connect(qp_m, addr_m, qb, qa.qp_num, a.lid, static_rate=IBV_RATE_40_GBPS)
        data = os.urandom(200_000)
        a.mr.write(data, len(data))
        qb.post_recv(wr_m.RecvWR(1, 1, [wr_m.SGE(b.mr.buf, len(data), b.mr.lkey)]))
        qa.post_send(wr_m.SendWR(10, IBV_WR_SEND, 1, sg=[wr_m.SGE(a.mr.buf, len(data), a.mr.lkey)]))
        assert [(w.wr_id, w.status) for w in wait(a.cq, 1)] == [(10, IBV_WC_SUCCESS)]
        assert [(w.status, w.byte_len) for w in wait(b.cq, 1)] == [(IBV_WC_SUCCESS, len(data))]
        assert b.mr.read(len(data)) == data
        qps = {(r["dev"], r["lqpn"]): r for r in control(daemon.run_dir, "resources")["resources"]
               if r.get("kind") == "qp"}
        assert qps["mlx5_0", qa.qp_num].get("driver") == {"static_rate_mbps": 2500}, qps
        assert "driver" not in qps["mlx5_1", qb.qp_num], qps
