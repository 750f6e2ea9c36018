"""ECN and DCQCN, sans-IO: the reaction point's rate machine on a virtual
clock against the paper's equations (Zhu et al., SIGCOMM 2015) and mlx5's
knobs, the notification point's CNP spacing, the CNP on the wire, the
requester held to the limiter's rate, the knobs' checks."""

from __future__ import annotations

import pytest

from softrdma.enums import ibv_wr_opcode
from softrdma.errors import VerbsError
from softrdma.transport import dcqcn
from softrdma.transport.counters import Counter
from softrdma.transport.dcqcn import CongestionControl, ReactionPoint
from softrdma.transport.wr import SendWQE
from softrdma.wire.opcodes import Opcode
from softrdma.wire.packet import parse

from transport_helpers import PEER_QPN, Pair, Solo

US = 1e-6


def _cc(**rp) -> CongestionControl:
    cc = CongestionControl()
    for k, v in rp.items():
        cc.set("rp", k, v)
    return cc


# ------------------------------------------------------------- the rate machine
def test_cut_follows_the_papers_equations():
    cc = _cc(rate_to_set_on_first_cnp=1000)
    rp = ReactionPoint(cc, 0.0)
    rp.cnp(0.0, 0, first=True)
    a0 = 1023 / 1024
    g = (1024 - 1019) / 1024
    # Rt = Rc; Rc = Rc (1 - alpha/2); alpha = (1 - g) alpha + g
    assert rp.rt == 1000
    assert rp.rc == pytest.approx(max(1000 * (1 - a0 / 2), 1000 * 0.5))
    assert rp.alpha == pytest.approx((1 - g) * a0 + g)
    # a second CNP inside rate_reduce_monitor_period (4 us): alpha rises, no cut
    rc, alpha = rp.rc, rp.alpha
    rp.cnp(2 * US, 0, first=False)
    assert rp.rc == rc and rp.alpha == pytest.approx((1 - g) * alpha + g)


def test_cut_is_bounded_by_min_dec_fac_and_min_rate():
    cc = _cc(rate_to_set_on_first_cnp=1000, rpg_min_dec_fac=80, rpg_min_rate=900)
    rp = ReactionPoint(cc, 0.0)
    rp.cnp(0.0, 0, first=True)
    assert rp.rc == pytest.approx(900)            # 1000 * 0.8 = 800 < rpg_min_rate
    cc = _cc(rate_to_set_on_first_cnp=1000, rpg_min_dec_fac=100)
    rp = ReactionPoint(cc, 0.0)
    rp.cnp(0.0, 0, first=True)
    assert rp.rc == 1000                         # 100 %: no cuts at all
    cc = _cc(rate_to_set_on_first_cnp=1000, rpg_gd=10)
    rp = ReactionPoint(cc, 0.0)
    rp.cnp(0.0, 0, first=True)
    assert rp.rc == pytest.approx(500)           # alpha * 1024 / 2**10 ~ 1: bounded at 50 %


def test_alpha_decays_by_one_minus_g_per_dce_tcp_rtt():
    cc = _cc(rate_to_set_on_first_cnp=1000, dce_tcp_rtt=55)
    rp = ReactionPoint(cc, 0.0)
    rp.cnp(0.0, 0, first=True)
    a = rp.alpha
    g = (1024 - 1019) / 1024
    rp.advance(55 * US * 3 + 1 * US)
    assert rp.alpha == pytest.approx(a * (1 - g) ** 3)


def test_increase_stages_fast_recovery_additive_hyper():
    # F = 3: three fast recovery steps by the timer, then additive increase;
    # hyper increase once both the timer and the byte counter passed F
    cc = _cc(rate_to_set_on_first_cnp=1000, rpg_threshold=3, rpg_time_reset=100, rpg_byte_reset=10000,
             rpg_ai_rate=5, rpg_hai_rate=50)
    rp = ReactionPoint(cc, 0.0)
    rp.cnp(0.0, 0, first=True)
    rt, rc = rp.rt, rp.rc
    for i in range(1, 3):                         # T = 1, 2 < F: Rc = (Rt + Rc) / 2, Rt stays
        rp.advance(i * 100 * US)
        rc = (rt + rc) / 2
        assert rp.T == i and rp.rt == rt and rp.rc == pytest.approx(rc)
    rp.advance(3 * 100 * US)                      # T = 3 = F: additive
    rt += 5
    rc = (rt + rc) / 2
    assert rp.rt == pytest.approx(rt) and rp.rc == pytest.approx(rc)
    for _ in range(4):                            # BC = 4 > F, T = 3: still additive (min(T, BC) = F)
        rp.consume(10000)
        rt += 5
        rc = (rt + rc) / 2
    assert rp.BC == 4 and rp.rt == pytest.approx(rt) and rp.rc == pytest.approx(rc)
    rp.advance(4 * 100 * US)                      # T = 4, BC = 4: hyper, i = min(T, BC) - F = 1
    rt += 1 * 50
    rc = (rt + rc) / 2
    assert rp.rt == pytest.approx(rt) and rp.rc == pytest.approx(rc)


def test_target_clamps_as_mlx5s_knobs_say():
    # clamp_tgt_rate 0, clamp_tgt_rate_after_time_inc 1: Rt follows Rc at a
    # CNP only when the timer raised the rate since the last one
    cc = _cc(rate_to_set_on_first_cnp=1000, rpg_byte_reset=1000, rpg_time_reset=1000, rpg_threshold=1)
    rp = ReactionPoint(cc, 0.0)
    rp.cnp(0.0, 0, first=True)
    rp.consume(1000)                             # a byte-counter increase only
    rt = rp.rt
    rp.cnp(10 * US, 0, first=False)
    assert rp.rt == rt                           # not clamped
    rp.advance(1010 * US)                        # a timer increase
    rc = rp.rc
    rp.cnp(1020 * US, 0, first=False)
    assert rp.rt == pytest.approx(rc)            # clamped to the rate before the cut
    cc.set("rp", "clamp_tgt_rate", 1)
    rp.consume(1000)
    rc = rp.rc
    rp.cnp(1040 * US, 0, first=False)
    assert rp.rt == pytest.approx(rc)


def test_first_cut_starts_from_the_measured_rate():
    cc = _cc()
    rp = ReactionPoint(cc, 0.0, sent_bytes=0)
    rp.cnp(0.0, 0, first=True)                   # 2500 Mb/s line rate: the cut does not bite yet
    assert rp.rt == dcqcn.PORT_RATE_MBPS
    # 1 ms later, 12,500 bytes were sent: 100 Mb/s
    rp.cnp(0.001, 12_500, first=False)
    assert rp.rt == pytest.approx(100) and rp.rc < 100


def test_token_bucket_paces_at_the_current_rate():
    cc = _cc(rate_to_set_on_first_cnp=80, rpg_byte_reset=0, rpg_time_reset=131071)
    rp = ReactionPoint(cc, 0.0)
    rp.cnp(0.0, 0, first=True)
    rate = rp.rc * 125_000                       # bytes/s
    rp.tokens = 0.0
    rp.consume(100_000)
    t = rp.ready_at()
    assert t == pytest.approx(100_000 / rate, rel=1e-3)
    rp.advance(t)
    assert rp.tokens > 0


# ------------------------------------------------------------------ the QP side
def _write(s: Solo, length: int, wr_id: int = 1) -> None:
    s.qp.post_send(SendWQE(wr_id=wr_id, opcode=ibv_wr_opcode.IBV_WR_RDMA_WRITE, sg_list=[(s.mr.addr, length,
                                                                                          s.mr.lkey)],
                           remote_addr=0x1000, rkey=0x55))


def test_ce_marks_get_a_cnp_at_most_once_per_min_time_between_cnps():
    s = Solo()
    q = s.qp
    dcqcn.ce_marked(q, 5, 1.0)
    dcqcn.ce_marked(q, 1, 1.0 + 3 * US)            # within 4 us: counted, no CNP
    dcqcn.ce_marked(q, 2, 1.0 + 5 * US)
    assert q.cnt[Counter.np_ecn_marked_roce_packets] == 8
    assert q.cnt[Counter.np_cnp_sent] == 2
    cnps = [(parse(bytes(p)), av) for _, p, av in q.tx]
    assert len(cnps) == 2
    p, av = cnps[0]
    assert p.opcode == Opcode.CNP and p.becn and p.dqpn == PEER_QPN and p.psn == 0
    assert len(p.payload) == 0 and av.traffic_class == dcqcn.CNP_TCLASS
    q.cc.set("np", "min_time_between_cnps", 0)
    dcqcn.ce_marked(q, 1, 1.0 + 6 * US)
    assert q.cnt[Counter.np_cnp_sent] == 3


def test_np_and_rp_disabled_by_priority():
    s = Solo()
    q = s.qp
    q.cc.set("np", "enable", 0, prio=0)
    dcqcn.ce_marked(q, 3, 1.0)
    assert q.cnt[Counter.np_ecn_marked_roce_packets] == 3 and q.cnt[Counter.np_cnp_sent] == 0
    q.cc.set("rp", "enable", 0, prio=0)
    s.rx(Opcode.CNP, 0, becn=True)
    assert q.cnt[Counter.rp_cnp_ignored] == 1 and q.rp is None
    q.cc.set("rp", "enable", 1, prio=0)
    s.rx(Opcode.CNP, 0, becn=True)
    assert q.cnt[Counter.rp_cnp_handled] == 1 and q.rp is not None


def test_tos_carries_dscp_and_ect_where_the_rp_is_on():
    cc = CongestionControl()
    assert cc.tos(0) == dcqcn.ECT0
    assert cc.tos(96 << 0) == 96 | dcqcn.ECT0      # DSCP 24: priority 3
    cc.set("rp", "enable", 0, prio=3)
    assert cc.tos(96) == 96 and cc.priority(96) == 3
    cc.set_tclass(104)
    assert cc.tos(0) == 104                        # priority 3, off
    assert cc.cnp_tos() == 48 << 2


def test_knobs_refuse_unknown_names_and_values_out_of_range():
    cc = CongestionControl()
    for args in (("rp", "rpg_gd", 16), ("rp", "nope", 1), ("np", "cnp_dscp", 64), ("xx", "rpg_gd", 1),
                 ("rp", "enable", 2, 0), ("rp", "enable", 1, 8), ("np", "min_time_between_cnps", "x")):
        with pytest.raises(VerbsError):
            cc.set(*args)
    d = cc.as_dict()
    assert d["roce_rp"]["rpg_time_reset"] == 300 and d["roce_np"]["cnp_dscp"] == 48
    assert d["roce_rp"]["enable"] == [1] * 8


def test_the_requester_is_held_to_the_limiters_rate():
    """Two RC QPs over the simulator: with a limiter at 8 Mb/s (1 MB/s)
    a 256 KiB WRITE takes ~0.25 s of virtual time, and the QP's deadline
    is what wakes the requester up."""
    p = Pair()
    qa = p.qa
    qa.cc.set("rp", "rate_to_set_on_first_cnp", 8)
    qa.cc.set("rp", "rpg_min_dec_fac", 100)          # stays at 8 Mb/s
    qa.cc.set("rp", "rpg_time_reset", 131071)
    qa.cc.set("rp", "rpg_byte_reset", 0)
    dcqcn.receive_cnp(qa, None, None, 0.0)
    assert qa.rp is not None and qa.rp.rc == 8
    qa.post_send(SendWQE(wr_id=7, opcode=ibv_wr_opcode.IBV_WR_RDMA_WRITE,
                         sg_list=[(p.ma.addr, 256 << 10, p.ma.lkey)], remote_addr=p.mb.addr, rkey=p.mb.rkey))
    qa.run(0.0)
    t = p.run_until_cqe(qa.send_cq, 1, until=5.0)
    assert len(qa.send_cq) == 1
    expect = (256 << 10) / 1e6
    assert expect * 0.8 < t < expect * 1.3, t
    assert qa.rp.rc < 12                            # two timer increases (131 ms each) at most
