"""transport.port (the receive demux and transmit routing of one port) and
transport.faults (the one fault injector), as pure layers: fake QPs, a
fake link, no sockets."""
from __future__ import annotations

import pytest

from softrdma.device import capture
from softrdma.transport.counters import Counter, FaultCounter, PortCounter
from softrdma.transport.faults import Faults, FaultSettings
from softrdma.transport.port import RX, TX, Port, PortQP, Route
from softrdma.wire import WireError, bth_dqpn, build, check, rx_check
from softrdma.wire.fastpath import SegmentRun
from softrdma.wire.opcodes import Opcode

SEND_ONLY = Opcode.RC_SEND_ONLY
UD_SEND_ONLY = Opcode.UD_SEND_ONLY
A, B = b"\x0a\x00\x00\x01", b"\x0a\x00\x00\x02"


class FakeQP:
    def __init__(self, qpn: int, qp_type: int = 2, av=None, tx=None, reply=None):
        self.qp_num = qpn
        self.qp_type = qp_type
        self.av = av
        self.cnt = [0] * len(Counter)
        self.got = []
        self.tx = tx
        self.reply = reply        # (packet, av) this QP emits for each packet it takes

    def receive(self, pkt, now, grh=None):
        self.got.append((bytes(pkt), grh))
        if self.reply is not None and self.tx is not None:
            self.tx.append((self, *self.reply))

    def enable_runs(self):
        self.tx_runs = True

    def receive_batch(self, pkts, now, grhs=None):
        for i, p in enumerate(pkts):
            self.receive(p, now, grhs[i] if grhs else None)


class AV:
    def __init__(self, dgid: bytes, sgid_index: int = 0):
        self.dgid = dgid
        self.sgid_index = sgid_index
        self.traffic_class = 0


class FakePort(Port):
    """A link where every address vector leads to ``peer`` (or out of a
    fake socket, recorded) and the check pair is ``pair``."""

    def __init__(self, addr: bytes, pair=None):
        super().__init__()
        self.addr = addr
        self.pair = pair
        self.resolved = 0
        self.sent = []

    def _resolve(self, av, peers):
        self.resolved += 1
        peer = peers.get(av.dgid)
        if peer is not None:
            return Route(peer, None, None, av.dgid, self.addr, peer.addr, 4791, 4791)
        return Route(None, None, "sock", av.dgid, self.addr, av.dgid, 1, 4791)

    def _peer(self, e):
        e.peer_av, e.peer = e.qp.av, self.pair
        return self.pair

    def _grh(self, src, dst, n):
        return b"G" * 40

    def _send(self, r, pkt, bit):
        self.sent.append((r.dst_ip, bytes(pkt), bit))
        return True

    def _send_burst(self, sock, dst_ip, pkts, tos=0):
        for p in pkts:
            self.sent.append((dst_ip, bytes(p), None))
        return len(pkts), sum(len(p) + 4 for p in pkts)


def _pkt(dqpn: int, op=SEND_ONLY, payload=b"abcd"):
    if op == UD_SEND_ONLY:
        return bytes(build(op, dqpn, 0, payload, deth=(0x11111111, 5)))
    return bytes(build(op, dqpn, 0, payload))


def test_rx_check_is_check_with_the_dest_qp():
    pkt = _pkt(0x123456)
    assert rx_check(pkt) == bth_dqpn(pkt) == 0x123456
    assert check(pkt)[1] == 4
    for bad in (b"", bytes(11), b"\xff" + bytes(11)):
        with pytest.raises(WireError):
            rx_check(bad)


def test_capture_directions_are_the_capture_records():
    assert (RX, TX) == (capture.RX, capture.TX)


def test_route_is_a_slotted_record():
    r = Route(None, None, "s", "10.0.0.2", A, B, 1, 2)
    assert not hasattr(r, "__dict__") and r.burst == ("s", "10.0.0.2", 0) and r.tos == 0


def test_demux_counts_and_hands_to_the_qp():
    port = FakePort(B)
    qp = FakeQP(0x11)
    port.qps[0x11] = PortQP(qp)
    port.receive_batch([(_pkt(0x11), A, 4791), (_pkt(0x99), A, 4791), (b"\xff" * 12, A, 4791)], B, 4791, 0.0)
    assert [g[0] for g in qp.got] == [_pkt(0x11)] and qp.got[0][1] is None      # RC: no GRH
    c = port.cnt
    assert c[PortCounter.rx_packets] == 1 and c[PortCounter.rx_bytes] == len(_pkt(0x11)) + 4
    assert c[PortCounter.rx_dropped_unknown_qpn] == 1 and c[PortCounter.rx_dropped_wire] == 1


def test_qp1_goes_to_the_gsi_and_ud_gets_the_grh():
    port = FakePort(B)
    got = []

    class Gsi:
        def receive(self, pkt, src, dst, now):
            got.append((bytes(pkt), src, dst))
    port.gsi = Gsi()
    ud = FakeQP(0x12, qp_type=4)
    port.qps[0x12] = PortQP(ud)
    port.deliver(_pkt(1, UD_SEND_ONLY), A, B, 0.0)
    port.deliver(_pkt(0x12, UD_SEND_ONLY), A, B, 0.0)
    assert got == [(_pkt(1, UD_SEND_ONLY), A, B)]
    assert ud.got == [(_pkt(0x12, UD_SEND_ONLY), b"G" * 40)]


def test_address_check_drops_a_stranger():
    port = FakePort(B, pair=(A, B))
    qp = FakeQP(0x11, av=object())
    port.qps[0x11] = PortQP(qp)
    port.deliver(_pkt(0x11), b"\x0a\x00\x00\x09", B, 0.0)
    port.receive_batch([(_pkt(0x11), b"\x0a\x00\x00\x09", 4791)], B, 4791, 0.0)
    assert qp.got == [] and qp.cnt[Counter.dropped_bad_addr] == 2
    port.deliver(_pkt(0x11), A, B, 0.0)
    assert len(qp.got) == 1


def test_route_resolves_once_and_drains_a_same_daemon_exchange():
    """A sends to B; each packet B takes makes it answer A, whose QP
    answers nothing: one route() call leaves both ports empty."""
    a, b = FakePort(A), FakePort(B)
    peers = {A: a, B: b}
    qa = FakeQP(0x11, tx=a.tx)
    qb = FakeQP(0x22, tx=b.tx, reply=(_pkt(0x11), AV(A)))
    a.qps[0x11], b.qps[0x22] = PortQP(qa), PortQP(qb)
    for _ in range(3):
        a.tx.append((qa, _pkt(0x22), AV(B)))
    assert a.route(peers, 0.0)
    assert not a.tx and not b.tx and not a.routing and not b.routing
    assert len(qb.got) == 3 and len(qa.got) == 3
    assert a.resolved == 1 and b.resolved == 1
    assert a.cnt[PortCounter.tx_packets] == 3 and b.cnt[PortCounter.rx_packets] == 3
    assert b.cnt[PortCounter.tx_packets] == 3 and a.cnt[PortCounter.rx_packets] == 3
    assert not a.route(peers, 0.0)                       # nothing left


def test_route_bursts_to_the_link_and_faults_hold_back():
    a = FakePort(A)
    qa = FakeQP(0x11, tx=a.tx)
    a.tx.extend([(qa, _pkt(0x22), AV(B)), (qa, _pkt(0x23), AV(B))])
    a.route({}, 0.0)
    assert [s[1] for s in a.sent] == [_pkt(0x22), _pkt(0x23)] and a.cnt[PortCounter.tx_packets] == 2
    a.sent.clear()
    a.set_faults(FaultSettings(delay=0.5), seed=1)
    a.tx.append((qa, _pkt(0x24), AV(B)))
    a.route({}, 1.0)
    assert a.sent == [] and a.faults.next_due() == 1.5
    assert not a.flush_held(1.2) and a.flush_held(1.5)
    assert [s[1] for s in a.sent] == [_pkt(0x24)]
    assert a.faults.counters() == {"lost": 0, "duplicated": 0, "reordered": 0, "delayed": 1, "corrupted": 0}


def test_switching_faults_off_sends_what_was_held():
    a = FakePort(A)
    qa = FakeQP(0x11, tx=a.tx)
    a.set_faults(FaultSettings(delay=5.0))
    a.tx.append((qa, _pkt(0x22), AV(B)))
    a.route({}, 0.0)
    assert a.sent == []
    a.set_faults(None)
    assert a.faults is None and [s[1] for s in a.sent] == [_pkt(0x22)]


def test_fault_injector_fates():
    s = FaultSettings(loss=1.0)
    f = Faults(s, seed=1)
    assert f.fate(0.0, 100) == [] and f.cnt[FaultCounter.lost] == 1 and f.cnt[FaultCounter.sent] == 1
    f = Faults(FaultSettings(dup=1.0), seed=1)
    fates = f.fate(0.0, 100)
    assert len(fates) == 2 and f.cnt[FaultCounter.duplicated] == 1 and f.cnt[FaultCounter.delivered] == 2
    f = Faults(FaultSettings(corrupt=1.0), seed=1)
    for _ in range(100):
        ((t, bit),) = f.fate(0.0, 20)
        assert t == 0.0 and 0 <= bit < 160
    assert f.cnt[FaultCounter.corrupted] == 100
    # the same seed, the same fates; a change of settings is seen on the next packet
    s1, s2 = FaultSettings(loss=0.3, dup=0.2, reorder=0.2, corrupt=0.1), FaultSettings(loss=0.3, dup=0.2,
                                                                                       reorder=0.2, corrupt=0.1)
    f1, f2 = Faults(s1, seed=9), Faults(s2, seed=9)
    assert [f1.fate(i, 64) for i in range(200)] == [f2.fate(i, 64) for i in range(200)]
    s1.loss = 1.0
    assert f1.fate(300.0, 64) == []


def test_delay_alone_keeps_order():
    class S:
        loss = dup = reorder = corrupt = 0.0
        delay, jitter, reorder_delay = 1.0, 0.5, 0.0
    f = Faults(S(), seed=3)
    times = [f.fate(i * 0.01, 10)[0][0] for i in range(100)]
    assert times == sorted(times)


class RunSock:
    takes_runs = True


class RunPort(FakePort):
    """A link whose socket takes SegmentRuns whole (an IPv4 RoCE socket)."""

    def _resolve(self, av, peers):
        peer = peers.get(av.dgid)
        if peer is not None:
            return Route(peer, None, None, av.dgid, self.addr, peer.addr, 4791, 4791)
        return Route(None, None, RunSock(), av.dgid, self.addr, av.dgid, 1, 4791)

    def _send_burst(self, sock, dst_ip, pkts, tos=0):
        for p in pkts:
            self.sent.append((dst_ip, ("run", p.count) if isinstance(p, SegmentRun) else bytes(p), None))
        return sum(p.count if isinstance(p, SegmentRun) else 1 for p in pkts), 0


def _run(count=3, psn0=1):
    hdr = bytes(build(Opcode.RC_RDMA_WRITE_MIDDLE, 0x22, 0, b""))[:12]
    return SegmentRun(hdr, psn0, count, 256, memoryview(bytes(range(256)) * count), False)


def test_a_socket_route_asks_for_runs_and_takes_them_whole():
    a = RunPort(A)
    qa = FakeQP(0x11, tx=a.tx)
    qa.tx_runs = False
    a.tx.append((qa, _pkt(0x22), AV(B)))
    a.route({}, 0.0)
    assert qa.tx_runs                      # a plain packet out of such a socket: runs welcome
    run = _run()
    a.tx.extend([(qa, _pkt(0x22, payload=b"1234"), AV(B)), (qa, run, AV(B)), (qa, _pkt(0x22, payload=b"5678"), AV(B))])
    a.route({}, 0.0)
    assert [s[1] for s in a.sent[1:]] == [_pkt(0x22, payload=b"1234"), ("run", 3), _pkt(0x22, payload=b"5678")]


@pytest.mark.parametrize("why", ["tap", "faults", "same_daemon"])
def test_where_packets_are_needed_one_by_one_a_run_is_built_out_in_place(why):
    a = RunPort(A)
    b = RunPort(B)
    qa = FakeQP(0x11, tx=a.tx)
    qa.tx_runs = True
    taps = []
    if why == "tap":
        class Tap:
            def packet(self, *args):
                taps.append(bytes(args[-1]))
        a.tap = Tap()
    elif why == "faults":
        a.set_faults(FaultSettings(delay=0.5), seed=1)      # every packet held back 0.5 s, in order
    peers = {}
    if why == "same_daemon":
        qb = FakeQP(0x22)
        b.qps[0x22] = PortQP(qb)
        peers = {B: b}
    run = _run(3, 0xFFFFFF)
    first, last = _pkt(0x22, payload=b"1234"), _pkt(0x22, payload=b"5678")
    a.tx.extend([(qa, first, AV(B)), (qa, run, AV(B)), (qa, last, AV(B))])
    a.route(peers, 0.0)
    if why == "faults":
        assert a.sent == [] and a.flush_held(0.5)
    want = [first] + [bytes(p) for p in run.packets()] + [last]
    if why == "same_daemon":
        assert [g[0] for g in qb.got] == want
    else:
        assert [s[1] for s in a.sent] == want
    if why == "tap":
        assert taps == want
    assert not qa.tx_runs                  # no more runs until the way out takes them again


def test_qp1s_sender_goes_out_of_a_run_taking_socket():
    """The device's GSI (QP1) is a sender in the port's tx beside the
    transport QPs: routing its MADs out of a socket that takes runs must
    work (it once raised, which took the daemon down on the first REQ)."""
    from softrdma.device.gsi import Gsi
    a = RunPort(A)
    gsi = Gsi.__new__(Gsi)                 # the sender as the port sees it: no device needed
    a.tx.append((gsi, _pkt(1, UD_SEND_ONLY), AV(B)))
    a.route({}, 0.0)
    assert [s[1] for s in a.sent] == [_pkt(1, UD_SEND_ONLY)]
