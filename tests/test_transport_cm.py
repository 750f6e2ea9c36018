"""The sans-IO IB CM state machine: two agents wired back to back."""

import random

import pytest

from softrdma.mgmt.cm.agent import CmAgent
from softrdma.mgmt.cm.ids import CmEventType as E
from softrdma.mgmt.cm.ids import CmState as S
from softrdma.mgmt.cm.request import AcceptParams, ConnectParams
from softrdma.mgmt.cm.timers import cm_convert_to_ms
from softrdma.wire.cm import AprStatus, RejReason, decode, encode_mad

GID_A = bytes.fromhex("fe800000000000000000000000000001")
GID_B = bytes.fromhex("fe800000000000000000000000000002")
SID = 0x0106000000004E20   # RDMA_PS_TCP, port 20000
REQ, MRA, REJ, REP, RTU, DREQ, DREP = range(7)


class Wire:
    """Agents a (GID_A) and b (GID_B); ``run`` moves MADs both ways."""

    def __init__(self, seed=1):
        self.a = CmAgent(0xA, GID_A, rng=random.Random(seed), hi_tid=1)
        self.b = CmAgent(0xB, GID_B, rng=random.Random(seed + 1), hi_tid=2)
        self.now = 0.0
        self.drop = lambda src, mad: False
        self.dup = lambda src, mad: False
        self.log = []

    def peer(self, agent):
        return self.b if agent is self.a else self.a

    def run(self, steps=100):
        for _ in range(steps):
            moved = False
            for src in (self.a, self.b):
                out, src.mads = src.mads, []
                for m in out:
                    dst = self.peer(src)
                    assert m.dest_gid == dst.gid
                    self.log.append((src, m.attr))
                    moved = True
                    if self.drop(src, m):
                        continue
                    for _ in range(2 if self.dup(src, m) else 1):
                        dst.receive(m.data, src.gid, self.now)
            if not moved:
                return

    def advance_to_deadline(self):
        ds = [d for d in (self.a.deadline, self.b.deadline) if d is not None]
        self.now = min(ds)
        self.a.tick(self.now)
        self.b.tick(self.now)

    @staticmethod
    def events(agent):
        ev, agent.events = agent.events, []
        return ev


def params(**kw):
    kw.setdefault("service_id", SID)
    kw.setdefault("dest_gid", GID_B)
    kw.setdefault("qp_num", 0x11)
    kw.setdefault("starting_psn", 0x1234)
    kw.setdefault("packet_life_time", 16)        # the timings below are worked out for 16
    return ConnectParams(**kw)


def establish(w, accept=None, **kw):
    listen = w.b.listen(SID)
    a_id = w.a.connect(params(private_data=b"hello", **kw), now=w.now)
    w.run()
    (ev,) = w.events(w.b)
    assert ev.type == E.REQ_RECEIVED and ev.listen_id is listen
    assert ev.private_data[:5] == b"hello"
    b_id = ev.cm_id
    assert b_id.state == S.REQ_RCVD
    w.b.accept(b_id, AcceptParams(qp_num=0x22, starting_psn=0x5678, private_data=b"yes",
                                  **(accept or {})))
    w.run()
    (ev,) = w.events(w.a)
    assert ev.type == E.REP_RECEIVED and ev.private_data[:3] == b"yes"
    assert a_id.state == S.REP_RCVD
    w.a.send_rtu(a_id)
    w.run()
    (ev,) = w.events(w.b)
    assert ev.type == E.RTU_RECEIVED
    return a_id, b_id


def test_convert_to_ms():
    assert cm_convert_to_ms(0) == 1
    assert cm_convert_to_ms(8) == 1
    assert cm_convert_to_ms(20) == 4096
    assert cm_convert_to_ms(16) == 256


def test_establish_qp_attrs_match():
    w = Wire()
    a_id, b_id = establish(w, responder_resources=4, initiator_depth=2, retry_count=5,
                           rnr_retry_count=6, path_mtu=5,
                           accept={"responder_resources": 2, "initiator_depth": 3})
    assert a_id.state == b_id.state == S.ESTABLISHED
    assert a_id.remote_id == b_id.local_id and b_id.remote_id == a_id.local_id
    assert a_id.local_id and b_id.local_id
    ar, br = w.a.qp_attrs(a_id, "RTR"), w.b.qp_attrs(b_id, "RTR")
    at, bt = w.a.qp_attrs(a_id, "RTS"), w.b.qp_attrs(b_id, "RTS")
    assert ar["dest_qp_num"] == 0x22 and br["dest_qp_num"] == 0x11
    # a CM message's starting PSN is the one its receiver sends with
    # (cm_req_handler / cm_rep_handler: sq_psn = the message's starting PSN)
    assert ar["rq_psn"] == bt["sq_psn"] == 0x1234
    assert br["rq_psn"] == at["sq_psn"] == 0x5678
    assert ar["path_mtu"] == br["path_mtu"] == 5
    assert ar["ah_attr"]["dgid"] == GID_B and br["ah_attr"]["dgid"] == GID_A
    # the REP's values are final (ib_send_cm_rep / cm_rep_handler): each side's
    # initiator depth is the other's responder resources
    assert br["max_dest_rd_atomic"] == 2 and at["max_rd_atomic"] == 2
    assert bt["max_rd_atomic"] == 3 and ar["max_dest_rd_atomic"] == 3
    assert ar["min_rnr_timer"] == br["min_rnr_timer"] == 0
    assert bt["retry_cnt"] == at["retry_cnt"] == 5
    assert bt["rnr_retry"] == 6 and at["rnr_retry"] == 7   # active: the REP's rnr_retry_count
    assert at["timeout"] >= 17 and bt["timeout"] == 17      # cm_ack_timeout(15, life time 16)
    assert w.a.cm_tx_msgs[REQ] == w.b.cm_rx_msgs[REQ] == 1
    assert w.b.cm_tx_msgs[REP] == w.a.cm_rx_msgs[REP] == 1
    assert w.a.cm_tx_msgs[RTU] == w.b.cm_rx_msgs[RTU] == 1
    assert w.a.deadline is None and w.b.deadline is None
    assert sum(w.a.cm_rx_duplicates) == sum(w.b.cm_rx_duplicates) == 0


def test_tids():
    w = Wire()
    w.b.listen(SID)
    a_id = w.a.connect(params())
    req = decode(w.a.mads[0].data)
    assert req["tid"] == (1 << 32) | a_id.local_id
    w.run()
    (ev,) = w.events(w.b)
    w.b.accept(ev.cm_id, AcceptParams(qp_num=2))
    assert decode(w.b.mads[0].data)["tid"] == req["tid"]


def test_reject_with_private_data():
    w = Wire()
    w.b.listen(SID)
    a_id = w.a.connect(params())
    w.run()
    (ev,) = w.events(w.b)
    w.b.reject(ev.cm_id, RejReason.CONSUMER_DEFINED, b"go away")
    assert ev.cm_id.state == S.IDLE
    w.run()
    (ev,) = w.events(w.a)
    assert ev.type == E.REJ_RECEIVED and ev.cm_id is a_id
    assert ev.msg["reason"] == RejReason.CONSUMER_DEFINED
    assert ev.private_data[:7] == b"go away"
    assert ev.msg["local_comm_id"] == 0    # cm_format_rej in REQ_RCVD
    assert a_id.state == S.IDLE and w.a.deadline is None


def test_no_listener_invalid_service_id():
    w = Wire()
    w.b.listen(SID + 1)
    a_id = w.a.connect(params())
    w.run()
    assert w.events(w.b) == []
    (ev,) = w.events(w.a)
    assert ev.type == E.REJ_RECEIVED
    assert ev.msg["reason"] == RejReason.INVALID_SERVICE_ID
    assert a_id.state == S.IDLE


def test_listen_mask():
    w = Wire()
    w.b.listen(0x0106000000000000, 0xFFFFFFFFFFFF0000)
    w.a.connect(params())
    w.run()
    assert [e.type for e in w.events(w.b)] == [E.REQ_RECEIVED]
    with pytest.raises(ValueError):
        w.b.listen(SID)


def test_req_lost_retried_then_req_error():
    w = Wire()
    w.b.listen(SID)
    w.drop = lambda src, m: m.attr == "REQ"
    a_id = w.a.connect(params(max_cm_retries=3, packet_life_time=16,
                              remote_cm_response_timeout=20))
    w.run()
    expect = (2 * cm_convert_to_ms(16) + cm_convert_to_ms(20)) / 1000
    assert w.a.deadline == pytest.approx(expect)
    times = []
    for _ in range(4):
        w.advance_to_deadline()
        times.append(w.now)
        w.run()
    assert times == pytest.approx([expect * i for i in range(1, 5)])
    assert w.a.cm_tx_retries[REQ] == 3 and w.a.cm_tx_msgs[REQ] == 1
    (ev,) = w.events(w.a)
    assert ev.type == E.REQ_ERROR and a_id.state == S.IDLE
    assert w.a.deadline is None


def test_req_lost_once_then_connects():
    w = Wire()
    w.b.listen(SID)
    lost = []
    w.drop = lambda src, m: m.attr == "REQ" and not lost and not lost.append(1)
    w.a.connect(params())
    w.run()
    assert w.events(w.b) == []
    w.advance_to_deadline()
    w.run()
    (ev,) = w.events(w.b)
    assert ev.type == E.REQ_RECEIVED
    assert w.a.cm_tx_retries[REQ] == 1


def test_duplicate_req_counted_rep_by_retry():
    """cm_dup_req_handler: in REP_SENT a duplicate REQ is counted and dropped;
    a lost REP is answered by the REP's own retry."""
    w = Wire()
    w.b.listen(SID)
    w.dup = lambda src, m: m.attr == "REQ"
    w.a.connect(params())
    w.run()
    (ev,) = w.events(w.b)
    assert w.b.cm_rx_duplicates[REQ] == 1 and w.b.cm_rx_msgs[REQ] == 2
    b_id = ev.cm_id
    lost = []
    w.drop = lambda src, m: m.attr == "REP" and not lost and not lost.append(1)
    w.b.accept(b_id, AcceptParams(qp_num=2))
    w.run()
    assert w.events(w.a) == []
    w.advance_to_deadline()
    assert w.now == pytest.approx(cm_convert_to_ms(20) / 1000)
    w.run()
    assert w.b.cm_tx_retries[REP] == 1
    (ev,) = w.events(w.a)
    assert ev.type == E.REP_RECEIVED


def test_duplicate_req_in_mra_req_sent_resends_mra():
    w = Wire()
    w.b.listen(SID)
    a_id = w.a.connect(params())
    w.run()
    (ev,) = w.events(w.b)
    w.b.send_mra(ev.cm_id, service_timeout=22)
    w.run()
    (mev,) = w.events(w.a)
    assert mev.type == E.MRA_RECEIVED and a_id.state == S.MRA_REQ_RCVD
    assert w.a.deadline == pytest.approx((cm_convert_to_ms(22) + cm_convert_to_ms(17)) / 1000)
    # a REQ retry now reaches b in MRA_REQ_SENT: the stored MRA goes out again
    w.b.receive(a_id.msg, GID_A, w.now)   # a's stored REQ, as its retry would carry it
    assert w.b.cm_rx_duplicates[REQ] == 1
    assert [m.attr for m in w.b.mads] == ["MRA"]
    w.run()
    assert w.a.cm_rx_duplicates[MRA] == 1


def test_duplicate_rep_resends_rtu():
    """cm_dup_rep_handler: dropped in REP_RCVD, answered by the RTU in ESTABLISHED."""
    w = Wire()
    w.b.listen(SID)
    w.dup = lambda src, m: m.attr == "REP"
    a_id = w.a.connect(params())
    w.run()
    (ev,) = w.events(w.b)
    w.b.accept(ev.cm_id, AcceptParams(qp_num=3))
    w.run()
    (ev,) = w.events(w.a)
    assert ev.type == E.REP_RECEIVED
    assert w.a.cm_rx_duplicates[REP] == 1          # REP_RCVD: dropped
    w.a.send_rtu(a_id)
    w.run()
    sent = w.a.cm_tx_msgs[RTU]
    rep = encode_mad("REP", **{k: v for k, v in ev.msg.items() if k != "message"})
    w.a.receive(rep, GID_B, w.now)
    assert w.a.cm_rx_duplicates[REP] == 2
    assert [m.attr for m in w.a.mads] == ["RTU"] and w.a.cm_tx_msgs[RTU] == sent + 1
    w.run()
    assert w.b.cm_rx_duplicates[RTU] == 1


def test_disconnect_timewait():
    w = Wire()
    a_id, b_id = establish(w)
    w.a.disconnect(a_id, b"bye")
    assert a_id.state == S.DREQ_SENT
    w.run()
    (ev,) = w.events(w.b)
    assert ev.type == E.DREQ_RECEIVED and ev.private_data[:3] == b"bye"
    assert b_id.state == S.DREQ_RCVD
    w.b.send_drep(b_id, b"ok")
    assert b_id.state == S.TIMEWAIT
    w.run()
    (ev,) = w.events(w.a)
    assert ev.type == E.DREP_RECEIVED and ev.private_data[:2] == b"ok"
    assert a_id.state == S.TIMEWAIT
    # duplicate DREQ in TIMEWAIT: DREP again
    w.b.receive(encode_mad("DREQ", local_comm_id=a_id.local_id, remote_comm_id=b_id.local_id,
                           remote_qpn_eecn=b_id.local_qpn), GID_A, w.now)
    assert w.b.cm_rx_duplicates[DREQ] == 1 and [m.attr for m in w.b.mads] == ["DREP"]
    w.run()
    assert b_id.deadline == pytest.approx(cm_convert_to_ms(17) / 1000)
    while w.a.deadline is not None or w.b.deadline is not None:
        w.advance_to_deadline()
    assert [e.type for e in w.events(w.a)] == [E.TIMEWAIT_EXIT]
    assert [e.type for e in w.events(w.b)] == [E.TIMEWAIT_EXIT]
    assert a_id.state == b_id.state == S.IDLE
    assert w.a.deadline is None and w.b.deadline is None
    # timewait over: the same remote QP may connect again
    w.a.destroy(a_id)
    w.b.destroy(b_id)
    w.a.connect(params())
    w.run()
    assert [e.type for e in w.events(w.b)] == [E.REQ_RECEIVED]


def test_dreq_lost_dreq_error():
    w = Wire()
    a_id, _ = establish(w, max_cm_retries=2)
    w.drop = lambda src, m: m.attr == "DREQ"
    w.a.disconnect(a_id)
    w.run()
    for _ in range(3):
        w.advance_to_deadline()
        w.run()
    (ev,) = w.events(w.a)
    assert ev.type == E.DREQ_ERROR and a_id.state == S.TIMEWAIT
    assert w.a.cm_tx_retries[DREQ] == 2


def test_dreq_for_unknown_connection_answered():
    w = Wire()
    w.b.receive(encode_mad("DREQ", local_comm_id=5, remote_comm_id=6, tid=9), GID_A, 0.0)
    (m,) = w.b.mads
    d = decode(m.data)
    assert d["message"] == "DREP" and d["remote_comm_id"] == 5 and d["tid"] == 9


def test_rep_lost_rep_error():
    w = Wire()
    w.b.listen(SID)
    w.a.connect(params(max_cm_retries=1))
    w.run()
    (ev,) = w.events(w.b)
    w.drop = lambda src, m: m.attr == "REP"
    w.b.accept(ev.cm_id, AcceptParams(qp_num=2))
    w.run()
    while not w.b.events:
        w.advance_to_deadline()
        w.run()
    (e2,) = w.events(w.b)
    assert e2.type == E.REP_ERROR and ev.cm_id.state == S.IDLE
    assert w.now == pytest.approx(2 * cm_convert_to_ms(20) / 1000)
    assert w.b.cm_tx_retries[REP] == 1
    assert w.b.cm_rx_duplicates[REQ] == 1   # a's REQ retry crossed the lost REP


def test_destroy_req_sent_rej_timeout():
    w = Wire()
    w.b.listen(SID)
    a_id = w.a.connect(params())
    w.run()
    (ev,) = w.events(w.b)
    w.a.destroy(a_id)
    w.run()
    (rev,) = w.events(w.b)
    assert rev.type == E.REJ_RECEIVED and rev.msg["reason"] == RejReason.TIMEOUT
    assert ev.cm_id.state == S.IDLE


def test_stale_conn_same_remote_qp():
    w = Wire()
    w.b.listen(SID)
    w.a.connect(params(qp_num=7))
    w.run()
    w.events(w.b)
    a2 = w.a.connect(params(qp_num=7))
    w.run()
    (ev,) = w.events(w.a)
    assert ev.cm_id is a2 and ev.msg["reason"] == RejReason.STALE_CONN


def test_lap_dropped_on_roce():
    w = Wire()
    a_id, b_id = establish(w)
    w.b.receive(encode_mad("LAP", local_comm_id=a_id.local_id, remote_comm_id=b_id.local_id),
                GID_A, w.now)
    assert w.b.mads == [] and w.b.cm_rx_msgs[9] == 1 and b_id.state == S.ESTABLISHED


def test_lap_answered_apr_unsupported():
    w = Wire()
    w.b.answer_lap = True
    a_id, b_id = establish(w)
    w.b.receive(encode_mad("LAP", local_comm_id=a_id.local_id, remote_comm_id=b_id.local_id),
                GID_A, w.now)
    (m,) = w.b.mads
    d = decode(m.data)
    assert d["message"] == "APR" and d["ar_status"] == AprStatus.UNSUPPORTED


def test_hundred_connections():
    w = Wire()
    w.b.listen(SID)
    a_ids = [w.a.connect(params(qp_num=100 + i, starting_psn=i)) for i in range(100)]
    w.run()
    evs = w.events(w.b)
    assert len(evs) == 100 and all(e.type == E.REQ_RECEIVED for e in evs)
    for e in evs:
        w.b.accept(e.cm_id, AcceptParams(qp_num=1000 + e.cm_id.remote_qpn,
                                         starting_psn=e.cm_id.sq_psn + 1))
    w.run()
    evs = w.events(w.a)
    assert len(evs) == 100
    for e in evs:
        w.a.send_rtu(e.cm_id)
    w.run()
    assert len(w.events(w.b)) == 100
    assert len({a.local_id for a in a_ids}) == 100
    for a_id in a_ids:
        assert a_id.state == S.ESTABLISHED
        b_id = w.b.ids[a_id.remote_id]
        assert b_id.state == S.ESTABLISHED and b_id.remote_id == a_id.local_id
        assert w.a.qp_attrs(a_id, "RTR")["dest_qp_num"] == 1000 + a_id.local_qpn
        assert w.a.qp_attrs(a_id, "RTS")["sq_psn"] == w.a.qp_attrs(a_id, "RTR")["rq_psn"] + 1
        assert w.b.qp_attrs(b_id, "RTR")["dest_qp_num"] == a_id.local_qpn
    for a_id in a_ids:
        w.a.disconnect(a_id)
    w.run()
    for e in w.events(w.b):
        assert e.type == E.DREQ_RECEIVED
        w.b.send_drep(e.cm_id)
    w.run()
    assert len(w.events(w.a)) == 100
    w.advance_to_deadline()
    assert len(w.events(w.a)) == 100 and len(w.events(w.b)) == 100


def test_random_loss_and_duplication_still_converges():
    rnd = random.Random(7)
    w = Wire(seed=3)
    w.drop = lambda src, m: rnd.random() < 0.2
    w.dup = lambda src, m: rnd.random() < 0.2
    w.b.listen(SID)
    a_ids = [w.a.connect(params(qp_num=i + 1)) for i in range(20)]
    for _ in range(200):
        w.run()
        for e in w.events(w.b):
            if e.type == E.REQ_RECEIVED:
                w.b.accept(e.cm_id, AcceptParams(qp_num=500 + e.cm_id.remote_qpn))
        for e in w.events(w.a):
            if e.type == E.REP_RECEIVED:
                w.a.send_rtu(e.cm_id)
        if w.a.deadline is None and w.b.deadline is None:
            break
        w.advance_to_deadline()
    # every connection ended up established or reported an error on one side
    for a_id in a_ids:
        assert a_id.state in (S.ESTABLISHED, S.IDLE)
        if a_id.state == S.ESTABLISHED:
            assert w.a.qp_attrs(a_id, "RTR")["dest_qp_num"] == 500 + a_id.local_qpn


def test_garbage_dropped_and_counted():
    w = Wire()
    a_id, b_id = establish(w)
    rnd = random.Random(11)
    n_bad = 0
    for i in range(3000):
        kind = i % 3
        if kind == 0:
            mad = bytes(rnd.getrandbits(8) for _ in range(rnd.choice((0, 10, 255, 256, 300))))
        else:
            # a valid CM header with a random body: must never raise
            attr = rnd.choice((0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1A))
            body = bytearray(rnd.getrandbits(8) for _ in range(232))
            if kind == 2:   # aim at the live connection's IDs
                body[0:4] = a_id.local_id.to_bytes(4, "big")
                body[4:8] = b_id.local_id.to_bytes(4, "big")
            mad = bytes([1, 7, 2, 3, 0, 0, 0, 0]) + bytes(8) + attr.to_bytes(2, "big") + bytes(6) + body
        before = w.b.rx_drops + sum(w.b.cm_rx_msgs)
        w.b.receive(mad, GID_A, w.now)
        assert w.b.rx_drops + sum(w.b.cm_rx_msgs) == before + 1
        if kind == 0:
            n_bad += 1
        w.b.mads.clear()
        w.b.events.clear()
    assert w.b.rx_drops >= n_bad


def test_sidr():
    from softrdma.wire.cm import SidrStatus
    w = Wire()
    w.b.listen(SID)
    w.dup = lambda src, m: m.attr == "SIDR_REQ"
    a_id = w.a.sidr_request(SID, GID_B, private_data=b"ud?")
    assert a_id.state == S.SIDR_REQ_SENT
    w.run()
    (ev,) = w.events(w.b)
    assert ev.type == E.SIDR_REQ_RECEIVED and ev.private_data[:3] == b"ud?"
    assert ev.cm_id.state == S.SIDR_REQ_RCVD
    assert w.b.cm_rx_duplicates[7] == 1
    w.b.sidr_reply(ev.cm_id, qp_num=0x99, qkey=0x11111111, private_data=b"here")
    assert ev.cm_id.state == S.IDLE
    w.run()
    (rev,) = w.events(w.a)
    assert rev.type == E.SIDR_REP_RECEIVED and rev.msg["status"] == SidrStatus.SUCCESS
    assert a_id.remote_qpn == 0x99 and a_id.remote_qkey == 0x11111111
    assert a_id.state == S.IDLE and w.a.deadline is None
    # no listener: UNSUPPORTED
    w.a.sidr_request(SID + 5, GID_B)
    w.run()
    (rev,) = w.events(w.a)
    assert rev.msg["status"] == SidrStatus.UNSUPPORTED
    # lost: retried, then SIDR_REQ_ERROR
    w.drop = lambda src, m: True
    s_id = w.a.sidr_request(SID, GID_B, timeout_ms=100, max_cm_retries=2)
    while not w.a.events:
        w.advance_to_deadline()
        w.run()
    (rev,) = w.events(w.a)
    assert rev.type == E.SIDR_REQ_ERROR and rev.cm_id is s_id and w.now == pytest.approx(0.3)
    assert w.a.cm_tx_retries[7] == 2


def test_rtu_lost_comm_est_then_late_rtu_duplicate():
    w = Wire()
    w.b.listen(SID)
    a_id = w.a.connect(params())
    w.run()
    (ev,) = w.events(w.b)
    b_id = ev.cm_id
    w.b.accept(b_id, AcceptParams(qp_num=2))
    w.run()
    w.events(w.a)
    w.drop = lambda src, m: m.attr == "RTU"
    w.a.send_rtu(a_id)
    w.run()
    assert b_id.state == S.REP_SENT
    w.b.established(b_id)        # first data packet on the QP
    assert [e.type for e in w.events(w.b)] == [E.USER_ESTABLISHED]
    assert b_id.state == S.ESTABLISHED and w.b.deadline is None


def test_qp_attrs_bring_transport_qps_to_rts():
    """The CM's attributes are accepted by the transport's QP.modify as they are."""
    from transport_helpers import new_qp

    from softrdma.enums import ibv_qp_state as QPS
    from softrdma.transport.qp import QPAttr
    from softrdma.transport.wr import AddressVector
    from softrdma.uapi.qp_attr import mask_of as qp_attr_mask

    def to_qp_attr(attrs: dict):
        """``qp_attrs``' dict -> (transport QPAttr, ibv_qp_attr_mask) for ``QP.modify``."""
        kw = dict(attrs)
        if "ah_attr" in kw:
            kw["ah_attr"] = AddressVector(**kw["ah_attr"])
        return QPAttr(**kw), qp_attr_mask(attrs)

    w = Wire()
    a_id, b_id = establish(w, path_mtu=5)
    for agent, cm_id in ((w.a, a_id), (w.b, b_id)):
        qp = new_qp()
        for st in ("INIT", "RTR", "RTS"):
            qp.modify(*to_qp_attr(agent.qp_attrs(cm_id, st)))
        assert qp.attr.qp_state == QPS.IBV_QPS_RTS
        assert qp.attr.dest_qp_num == cm_id.remote_qpn
        assert qp.attr.ah_attr.dgid == cm_id.remote_gid
        assert qp.attr.rq_psn == cm_id.rq_psn and qp.attr.sq_psn == cm_id.sq_psn
