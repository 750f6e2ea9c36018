"""A daemon that was not scheduled for a while (a busy host) must not charge
its own stall to the peer: the ACKs that arrived meanwhile are read before
an ACK timer may fire (``Device.tick`` reads the sockets empty first), and
the ACK timers stop for the time the process was descheduled
(``QP.stalled``, driven by ``Daemon.step``).

Deterministic: two devices on loopback addresses with real UDP sockets, the
clock passed in by hand, so the "stall" is a ``now`` far past the deadline.
The end-to-end run under CPU load is tests/test_device_netns.py's
``test_100mb_rc_byte_exact_under_loss_on_a_busy_host``."""

from __future__ import annotations

import select
import shutil
import socket

import pytest

from softrdma.enums import IBV_QPT_RC, IBV_SEND_SIGNALED, IBV_WC_SUCCESS, IBV_WR_RDMA_WRITE
from softrdma.enums import ibv_qp_attr_mask as M
from softrdma.enums import ibv_qp_state as S
from softrdma.transport.counters import Counter as C
from softrdma.transport.cq import CompletionQueue
from softrdma.transport.qp import QP, QPAttr, timeout_seconds
from softrdma.transport.wr import AddressVector, SendWQE

from softrdma.device.core import Device
from softrdma.device.net import RX_BUDGET, gid_to_ip
from shm_helpers import shm_mkdtemp

ACCESS = 0xF
TIMEOUT = 14                     # 67 ms, perftest's default


class _Slot:
    """What ``Device`` needs of a DevQP on the packet and timer paths."""

    def __init__(self, qp: QP):
        self.qp = qp
        self.peer_av = self.peer = None     # the peer-address check's cache, as DevQP's (worked out on use)


def _free_port() -> int:
    # one port both loopback addresses can bind (the devices send to their own port)
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as a:
            a.bind(("127.0.0.1", 0))
            port = a.getsockname()[1]
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as b:
                try:
                    b.bind(("127.0.0.2", port))
                except OSError:
                    continue
                return port
    raise RuntimeError("no free UDP port on 127.0.0.1 and 127.0.0.2")


def _gid_index(dev: Device, ip: str) -> int:
    return next(i for i, g in enumerate(dev.gids) if g != bytes(16) and gid_to_ip(g) == ip)


class Link:
    """Device A (127.0.0.1) with an RC QP writing to device B's (127.0.0.2)."""

    def __init__(self):
        port = _free_port()
        self.a = Device("rxeA", "lo", ["127.0.0.1"], port=port)
        self.b = Device("rxeB", "lo", ["127.0.0.2"], port=port)
        pd = object()
        self.qa, self.qb = (self._qp(d, pd, qpn) for d, qpn in ((self.a, 0x11), (self.b, 0x12)))
        self.mra = self.a.memory.reg_mr(pd, 4096, ACCESS)
        self.mrb = self.b.memory.reg_mr(pd, 4096, ACCESS)
        for me, dev, peer, ip in ((self.qa, self.a, self.qb, "127.0.0.2"), (self.qb, self.b, self.qa, "127.0.0.1")):
            me.modify(QPAttr(qp_state=S.IBV_QPS_INIT, pkey_index=0, port_num=1, qp_access_flags=ACCESS),
                      M.IBV_QP_STATE | M.IBV_QP_PKEY_INDEX | M.IBV_QP_PORT | M.IBV_QP_ACCESS_FLAGS)
            other = self.b if dev is self.a else self.a
            av = AddressVector(dgid=other.gids[_gid_index(other, ip)],
                               sgid_index=_gid_index(dev, "127.0.0.1" if dev is self.a else "127.0.0.2"))
            me.modify(QPAttr(qp_state=S.IBV_QPS_RTR, path_mtu=3, dest_qp_num=peer.qp_num, rq_psn=0, ah_attr=av,
                             max_dest_rd_atomic=4, min_rnr_timer=12),
                      M.IBV_QP_STATE | M.IBV_QP_AV | M.IBV_QP_PATH_MTU | M.IBV_QP_DEST_QPN | M.IBV_QP_RQ_PSN
                      | M.IBV_QP_MAX_DEST_RD_ATOMIC | M.IBV_QP_MIN_RNR_TIMER)
            me.modify(QPAttr(qp_state=S.IBV_QPS_RTS, sq_psn=0, timeout=TIMEOUT, retry_cnt=7, rnr_retry=7,
                             max_rd_atomic=4),
                      M.IBV_QP_STATE | M.IBV_QP_SQ_PSN | M.IBV_QP_TIMEOUT | M.IBV_QP_RETRY_CNT
                      | M.IBV_QP_RNR_RETRY | M.IBV_QP_MAX_QP_RD_ATOMIC)

    @staticmethod
    def _qp(dev: Device, pd, qpn: int) -> QP:
        cq = CompletionQueue()
        qp = QP(IBV_QPT_RC, qpn, pd=pd, memory=dev.memory, send_cq=cq, recv_cq=cq, caps=dev.caps, tx=dev.tx,
                events=dev.events)
        dev.qps[qpn] = _Slot(qp)
        return qp

    def write(self, wr_id: int, now: float) -> None:
        self.mra.buf[:512] = bytes([wr_id]) * 512
        self.qa.post_send(SendWQE(wr_id, IBV_WR_RDMA_WRITE, [(self.mra.addr, 512, self.mra.lkey)],
                                  send_flags=IBV_SEND_SIGNALED, remote_addr=self.mrb.addr, rkey=self.mrb.rkey), now)
        assert self.a.route({}, now)              # over the sockets, not the same-daemon shortcut

    def answer(self, now: float) -> None:
        """B receives the WRITE and sends its ACK; returns once the ACK waits
        in A's socket (readiness, no sleep)."""
        sock_b, sock_a = self.b.sockets[0], self.a.sockets[0]
        assert select.select([sock_b.sock], [], [], 10)[0], "the WRITE never reached B"
        self.b.receive(sock_b, now)
        assert self.b.tx, "B did not acknowledge"
        self.b.route({}, now)
        assert select.select([sock_a.sock], [], [], 10)[0], "the ACK never reached A's socket"

    def close(self) -> None:
        self.a.close()
        self.b.close()


@pytest.fixture
def link():
    lk = Link()
    yield lk
    lk.close()


def test_an_ack_waiting_in_the_socket_beats_a_timer_that_ran_out_during_a_stall(link):
    link.write(1, 0.0)
    deadline = link.qa.deadline
    assert deadline == pytest.approx(timeout_seconds(TIMEOUT))
    link.answer(0.001)
    sent = link.a.sockets[0].stats["tx_packets"]
    # the daemon was descheduled for ten seconds: the ACK came long ago and
    # waits in the socket; the timer is far past its deadline
    link.a.tick(10.0)
    assert link.qa.cnt[C.local_ack_timeout_err] == 0, "a timeout was declared over a received ACK"
    assert link.qa.cnt[C.completer_retry_err] == 0
    wcs = link.qa.send_cq.poll(4)
    assert [(w.wr_id, w.status) for w in wcs] == [(1, IBV_WC_SUCCESS)]
    assert link.qa.deadline is None                      # nothing outstanding, no timer
    assert not link.a.tx and link.a.sockets[0].stats["tx_packets"] == sent     # nothing retransmitted
    assert bytes(link.mrb.buf[:512]) == bytes([1]) * 512


def test_a_lost_ack_still_times_out_after_the_drain(link):
    """Reading the sockets first never hides a real loss: with nothing in
    the socket the timer fires as before (and the go-back resends)."""
    link.write(2, 0.0)
    sock_b = link.b.sockets[0]
    assert select.select([sock_b.sock], [], [], 10)[0]
    sock_b.recv()                                        # the WRITE is lost on the way
    link.a.tick(10.0)
    assert link.qa.cnt[C.local_ack_timeout_err] == 1
    assert link.a.tx                                     # the go-back's retransmission


def test_the_drain_reads_past_one_receive_budget(link):
    """More than one receive pass (net.RX_BUDGET datagrams) waits in the
    socket ahead of the ACK: the drain reads on until the socket is empty."""
    link.write(3, 0.0)
    sock_b, sock_a = link.b.sockets[0], link.a.sockets[0]
    assert select.select([sock_b.sock], [], [], 10)[0]
    link.b.receive(sock_b, 0.001)
    assert link.b.tx
    junk = 3 * RX_BUDGET
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _ in range(junk):                            # runts: dropped and counted, never a packet
            s.sendto(b"x", ("127.0.0.1", sock_a.port))
    link.b.route({}, 0.001)                              # the ACK queues behind them
    assert select.select([sock_a.sock], [], [], 10)[0]
    link.a.tick(10.0)
    assert sock_a.stats["rx_short"] == junk
    assert link.qa.cnt[C.local_ack_timeout_err] == 0, "the timer fired with the ACK still in the socket"
    assert [(w.wr_id, w.status) for w in link.qa.send_cq.poll(4)] == [(3, IBV_WC_SUCCESS)]


def test_the_ack_timer_stops_while_the_host_does_not_run():
    """``QP.stalled``: the clock stops for the time the host did not run."""
    lk = Link()
    try:
        qa = lk.qa
        lk.write(1, 0.0)
        t = qa.timer_at
        # a stall that ended before the deadline: the deadline moves by its length
        qa.stalled(0.01, 0.03)
        assert qa.timer_at == pytest.approx(t + 0.02)
        t = qa.timer_at
        # the deadline passed during a 100 ms stall: moved on by the stall
        qa.stalled(t - 0.05, t + 0.05)
        assert qa.timer_at == pytest.approx(t + 0.1)
        qa.tick(t + 0.05)
        assert qa.cnt[C.local_ack_timeout_err] == 0
        # a deadline that passed before the stall began had its chance: it stays and fires
        t = qa.timer_at
        qa.stalled(t + 0.001, t + 0.5)
        assert qa.timer_at == t
        qa.tick(t + 0.5)
        assert qa.cnt[C.local_ack_timeout_err] == 1          # a silent peer still times out
    finally:
        lk.close()


def test_device_stalled_reaches_every_qp_with_a_timer(link):
    link.write(1, 0.0)
    t = link.qa.timer_at
    link.a.stalled(t - 0.001, t + 0.2)
    assert link.qa.timer_at == pytest.approx(t + 0.201)
    link.a.tick(t + 0.2)                 # the ACK is not there yet (B has not answered): no timeout either
    assert link.qa.cnt[C.local_ack_timeout_err] == 0


# ---------------------------------------------------------------- the loop
class _Queue:
    """The ring consumer calls ``Daemon.step`` makes on a QP's queues (no
    WQE ever posted: the QP below is driven directly)."""

    class ring:
        nslots = 1

    def take(self):
        return None

    def sleep(self) -> bool:
        return True

    def wake(self) -> None:
        pass

    def publish(self, n: int) -> None:
        pass


class _LoopSlot(_Slot):
    def __init__(self, qp: QP):
        super().__init__(qp)
        self.sq, self.rq = _Queue(), None

    def publish(self) -> None:
        pass


class _Clock:
    """``time`` for the daemon module: monotonic() is what the test says."""

    def __init__(self, t: float):
        self.t = t

    def monotonic(self) -> float:
        return self.t


def _loop(monkeypatch):
    """A daemon hosting device A of a fresh ``Link``, on a clock the test sets."""
    from softrdma.device import daemon as daemon_mod
    lk = Link()
    lk.a.qps[lk.qa.qp_num] = _LoopSlot(lk.qa)
    lk.b.qps[lk.qb.qp_num] = _LoopSlot(lk.qb)
    clock = _Clock(1000.0)
    monkeypatch.setattr(daemon_mod, "time", clock)
    run = shm_mkdtemp("softrdma-busy-")   # the sysfs tree: memory, as the daemon's own
    try:
        d = daemon_mod.Daemon(run, [lk.a])
    except BaseException:
        lk.close()
        shutil.rmtree(run, ignore_errors=True)
        raise

    def close():
        d.shutdown()
        lk.close()
        shutil.rmtree(run, ignore_errors=True)
    return lk, clock, d, close


def test_the_loop_gives_a_stalled_timer_its_time_back(monkeypatch):
    """``Daemon.step`` after the process was off the CPU for a second: the
    ACK timer that ran out meanwhile does not fire (no ACK could have been
    seen); once the loop runs on time again, the silent peer times out."""
    from softrdma.device.daemon import STALL_S
    lk, clock, d, close = _loop(monkeypatch)
    try:
        d.step(0.0)
        lk.write(1, clock.t)                         # the WRITE leaves; B never answers (a silent peer)
        t = lk.qa.timer_at
        d.step(0.0)                                  # the loop looks at the timers before the deadline
        clock.t = t + 1.0                            # ... and next runs a second later
        d.step(0.0)
        assert lk.qa.cnt[C.local_ack_timeout_err] == 0, "the daemon's own stall was charged to the peer"
        assert lk.qa.timer_at > clock.t
        while lk.qa.cnt[C.local_ack_timeout_err] == 0:      # passes closer than STALL_S: on time
            assert clock.t < t + 10, "the timer never fired"
            clock.t += STALL_S / 2
            d.step(0.0)
        assert lk.qa.cnt[C.local_ack_timeout_err] == 1
    finally:
        close()


def test_a_daemon_late_on_every_pass_still_times_out_a_silent_peer(monkeypatch):
    """Every pass 50 ms late: the timer advances STALL_S a pass, so the
    67 ms timeout fires after about 67/4 passes -- never "never"."""
    from softrdma.device.daemon import STALL_S
    lk, clock, d, close = _loop(monkeypatch)
    try:
        d.step(0.0)
        lk.write(1, clock.t)
        passes = 0
        while lk.qa.cnt[C.local_ack_timeout_err] == 0:
            passes += 1
            assert passes < 1000, "a silent peer was never timed out"
            clock.t += 0.05
            d.step(0.0)
        assert passes == pytest.approx(timeout_seconds(TIMEOUT) / STALL_S, abs=2)
    finally:
        close()


def test_an_internal_error_fails_the_qp_not_the_daemon(monkeypatch, caplog):
    """A bug in the transport (here: A's QP raising on the ACK it receives)
    must not end the daemon: the QP goes to ERR with IBV_EVENT_QP_FATAL
    and its WQE is flushed, the port counts it, the log has the traceback,
    and the loop goes on (B's QP and the device keep working)."""
    from softrdma.enums import ibv_event_type, ibv_wc_status
    from softrdma.transport.counters import PortCounter
    lk, clock, d, close = _loop(monkeypatch)
    try:
        d.step(0.0)
        lk.write(1, clock.t)

        def broken(*a, **kw):
            raise KeyError("a bug")
        monkeypatch.setattr(lk.qa, "receive_batch", broken)
        events = []
        monkeypatch.setattr(d, "_dispatch_events", lambda dev: (events.extend(dev.events), dev.events.clear()))
        lk.answer(clock.t)                              # the ACK waits in A's socket
        with caplog.at_level("ERROR", logger="softrdmad"):
            d.step(0.0)                                 # the loop reads it: the QP fails, the loop does not
        assert lk.a.cnt[PortCounter.qp_internal_errors] == 1
        assert lk.qa.state == S.IBV_QPS_ERR
        assert (ibv_event_type.IBV_EVENT_QP_FATAL, lk.qa) in events
        assert [w.status for w in lk.qa.send_cq.poll(16)] == [ibv_wc_status.IBV_WC_WR_FLUSH_ERR]
        assert "moved to ERR by an internal error" in caplog.text and "KeyError: 'a bug'" in caplog.text
        d.step(0.0)                                     # and the loop carries on
        assert not lk.a.failures
    finally:
        close()
