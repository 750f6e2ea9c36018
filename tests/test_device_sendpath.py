"""The same-daemon SEND / WRITE path (device.sendpath) against the object path.

Two RC QPs of one in-process ``Device`` with real shared-memory rings: the
library's side is played with the library's own ring ends
(``WorkQueueProducer`` + ``abi.encode_*``, ``CompletionQueueConsumer``), the
daemon's with ``Device.poll_rings`` / ``route`` / ``tick``.  Every scenario
runs twice, once as it is and once with the slot-to-slot path switched off
(``device.core.send_burst`` returning 0: every slot through ``SendWQE`` /
``RecvWQE``, ``QP.post_send``, ``transport.loopback``), and the two runs
must give the same CQEs (every field, the solicited bit, the order on each
CQ), the same bytes in the receive buffers, the same QP and port counters,
PSNs and MSN, the same completion-channel events, the same ring indices.
The fast path must have carried the messages it is for, and none of the
others (RNR, a too-small receive buffer, multi-SGE, inline, fence, SRQ).
"""

from __future__ import annotations

import ipaddress
import socket

import pytest

from softrdma.device import core, sendpath
from softrdma.device.core import DevChannel, DevCQ, Device, DevQP, DevSRQ
from softrdma.enums import (
    IBV_MTU_1024, IBV_QPT_RC, IBV_SEND_FENCE, IBV_SEND_INLINE, IBV_SEND_SIGNALED, IBV_SEND_SOLICITED,
    IBV_WC_LOC_LEN_ERR, IBV_WC_RDMA_WRITE, IBV_WC_RECV, IBV_WC_REM_ACCESS_ERR, IBV_WC_SEND, IBV_WC_SUCCESS,
    IBV_WC_WITH_IMM, IBV_WR_RDMA_WRITE,
    IBV_WR_SEND, IBV_WR_SEND_WITH_IMM,
)
from softrdma.sim import connect_qps
from softrdma.transport.counters import Counter
from softrdma.transport.qp import QP, SRQ, QPCap
from softrdma.transport.wr import AddressVector
from softrdma.uapi import abi
from softrdma.uapi.queues import CompletionQueueConsumer, CompletionQueueProducer, ExtCompletionQueueProducer
from softrdma.uapi.queues import WorkQueueProducer
from softrdma.uapi.shm import Ring

T0 = 1000.0


class _Owner:
    """What DevQP / DevCQ ask of their session: the device, events, AHs."""

    def __init__(self, dev):
        self.device = dev
        self.events = []

    def event(self, ev, **kw):
        self.events.append((int(ev), kw))

    def ah_lookup(self, h):
        raise ValueError("no AH")


class _End:
    def __init__(self, dev):
        self.dev = dev

    def av_to(self, other):
        return AddressVector(dgid=bytes(10) + b"\xff\xff" + ipaddress.ip_address(other.dev.addresses[0]).packed)


class Rig:
    """Two connected RC QPs (a sends, b receives) on one device, their
    rings, CQs (``shared_cq``: one CQ for everything), MRs."""

    def __init__(self, *, shared_cq=False, srq=False, sq_sig_all=False, cqe=256, max_recv_sge=4,
                 ext_cq=False, sq_wr=128, rq_wr=128):
        self.dev = dev = Device("rxe0", "lo", ["10.9.0.1"], bind=False)
        self.owner = _Owner(dev)
        self.by_ip = {"10.9.0.1": dev}
        self.now = T0
        self.cqs, self.cq_ends, self.channels = [], [], []
        ca_s = self._cq(cqe, ext_cq)
        ca_r = ca_s if shared_cq else self._cq(cqe, ext_cq)
        cb_s = ca_s if shared_cq else self._cq(cqe, ext_cq)
        cb_r = ca_s if shared_cq else self._cq(cqe, ext_cq)
        self.srq = None
        if srq:
            s = SRQ(max_wr=rq_wr, max_sge=4, events=dev.events)
            ring = Ring.create(rq_wr, abi.recv_slot_size(4))
            self.srq = DevSRQ(1, s, ring, -1, self.owner)
            dev.srqs.append(self.srq)
            self.srq_prod = WorkQueueProducer(ring, None, rq_wr)
        self.a, self.a_sq, self.a_rq = self._qp(ca_s, ca_r, sq_sig_all, sq_wr, rq_wr, max_recv_sge, None)
        self.b, self.b_sq, self.b_rq = self._qp(cb_s, cb_r, sq_sig_all, sq_wr, rq_wr, max_recv_sge,
                                               self.srq)
        connect_qps(self.a, self.b, _End(dev), _End(dev), path_mtu=IBV_MTU_1024, psn_a=0xFFFFF0, psn_b=77,
                    min_rnr_timer=1, rnr_retry=7)
        self.ma = dev.memory.reg_mr(dev, 1 << 16, 0xF)
        self.mb = dev.memory.reg_mr(dev, 1 << 16, 0xF)
        self.ma.view[:] = bytes(i * 7 & 0xFF for i in range(1 << 16))

    def _cq(self, cqe, ext):
        ring = Ring.create(cqe, abi.CQE_BYTES)
        ch = DevChannel(len(self.cqs) + 1)
        cq = DevCQ(len(self.cqs) + 1, ring, ch, self.owner)
        if ext:
            cq.producer = ExtCompletionQueueProducer(ring, lambda: 12345)
        self.cqs.append(cq)
        self.cq_ends.append(CompletionQueueConsumer(ring))
        self.channels.append(ch)
        return cq

    def _qp(self, scq, rcq, sig_all, sq_wr, rq_wr, max_recv_sge, dsrq):
        dev = self.dev
        cap = QPCap(max_send_wr=sq_wr, max_recv_wr=rq_wr, max_send_sge=4, max_recv_sge=max_recv_sge,
                    max_inline_data=64)
        q = QP(IBV_QPT_RC, dev.alloc_qpn(), pd=dev, memory=dev.memory, send_cq=scq, recv_cq=rcq, cap=cap,
               sq_sig_all=sig_all, caps=dev.caps, tx=dev.tx, events=dev.events,
               srq=dsrq.srq if dsrq is not None else None)
        sq = Ring.create(sq_wr, abi.send_slot_size(4, 64))
        rq = Ring.create(rq_wr, abi.recv_slot_size(max_recv_sge)) if dsrq is None else None
        dev.add_qp(DevQP(len(dev.qps) + 1, q, sq, rq, -1, self.owner, srq=dsrq))
        return (q, WorkQueueProducer(sq, None, sq_wr),
                WorkQueueProducer(rq, None, rq_wr) if rq is not None else None)

    # -- the application's side
    def send(self, wr_id, length=64, *, off=0, opcode=IBV_WR_SEND, flags=IBV_SEND_SIGNALED, imm=0, sges=None,
             inline=None, qp="a", remote_off=0, rkey=None):
        prod = self.a_sq if qp == "a" else self.b_sq
        mr = self.ma if qp == "a" else self.mb
        slot = prod.next_slot()
        assert slot is not None
        if inline is not None:
            abi.encode_send_wqe(slot, wr_id, opcode, flags | IBV_SEND_INLINE, inline=inline, imm_data=imm)
        else:
            sg = sges if sges is not None else [(mr.addr + off, length, mr.lkey)]
            abi.encode_send_wqe(slot, wr_id, opcode, flags, sg, imm_data=imm, remote_addr=self.mb.addr + remote_off,
                                rkey=self.mb.rkey if rkey is None else rkey)
        prod.commit()

    def recv(self, wr_id, length=64, *, off=0, sges=None):
        prod = self.srq_prod if self.srq is not None else self.b_rq
        slot = prod.next_slot()
        assert slot is not None
        abi.encode_recv_wqe(slot, wr_id, sges if sges is not None else [(self.mb.addr + off, length, self.mb.lkey)])
        prod.commit()

    # -- the daemon's loop
    def step(self, dt=0.0):
        self.now += dt
        dev = self.dev
        dev.poll_rings(self.now)
        dev.tick(self.now, self.by_ip)
        for _ in range(50):
            if not dev.route(self.by_ip, self.now):
                break

    def run(self, steps=3, dt=0.0):
        for _ in range(steps):
            self.step(dt)

    def resolve_route(self):
        """The first message goes as packets (the route is unknown until
        then), in both runs alike."""
        self.recv(999_000)
        self.send(999_000, 8)
        self.run()
        assert self.dev.local_peer_dqp(self.a) is not None

    # -- what the application can see, and the daemon's state
    def cqes(self):
        out = []
        for end in self.cq_ends:
            got = []
            while True:
                slot = end.peek(0)
                if slot is None:
                    break
                got.append(bytes(slot[:abi.CQE_OWNER]))
                end.consume(1)
            out.append(got)
        return out

    def events(self):
        out = []
        for ch in self.channels:
            got = []
            while True:
                try:
                    got.append(ch.theirs.recv(16, socket.MSG_DONTWAIT))
                except BlockingIOError:
                    break
            out.append(got)
        return out

    def state(self):
        a, b = self.a, self.b
        rings = [(p.ring.producer, p.ring.consumer) for p in (self.a_sq, self.b_sq, self.a_rq, self.b_rq)
                 if p is not None]
        if self.srq is not None:
            rings.append((self.srq_prod.ring.producer, self.srq_prod.ring.consumer))
        return {
            "a.cnt": list(a.cnt), "b.cnt": list(b.cnt), "port": list(self.dev.cnt),
            "psn": (a.req_psn, a.comp_psn, a.sent_end, b.resp_psn, b.msn, b.req_psn, a.resp_psn, a.msn),
            "states": (a.state, b.state), "rings": rings, "sq": (len(a.sq), len(b.sq)),
            "rq": (len(b.rq), len(self.srq.srq.rq) if self.srq is not None else 0),
            "buf": bytes(self.mb.view), "owner_events": list(self.owner.events),
            "cq_overrun": [c.overrun_reported for c in self.cqs],
        }

    def close(self):
        for ch in self.channels:
            ch.close()


def both(monkeypatch, scenario, **rig):
    """``scenario(rig)`` with the fast path, then without; both outcomes and
    how many messages the fast path carried in the first run."""
    carried = []
    real = sendpath.send_burst

    def counting(*a):
        n = real(*a)
        carried.append(n)
        return n
    monkeypatch.setattr(core, "send_burst", counting)
    r1 = Rig(**rig)
    try:
        scenario(r1)
        fast = (r1.cqes(), r1.events(), r1.state())
    finally:
        r1.close()
    monkeypatch.setattr(core, "send_burst", lambda *a: 0)
    r2 = Rig(**rig)
    try:
        scenario(r2)
        slow = (r2.cqes(), r2.events(), r2.state())
    finally:
        r2.close()
    return fast, slow, sum(carried)


def _wcs(cqe_bytes):
    return [abi.read_cqe(b + bytes(64 - len(b))) for b in cqe_bytes]


# --------------------------------------------------------------------------- the path's own messages
@pytest.mark.parametrize("rig", [{}, {"shared_cq": True}, {"sq_sig_all": True}, {"ext_cq": True}])
def test_small_sends_same_cqes_bytes_counters(monkeypatch, rig):
    def scenario(r):
        r.resolve_route()
        for i in range(40):
            r.recv(100 + i, 128, off=i * 128)
        for i in range(40):
            flags = (IBV_SEND_SIGNALED if i % 3 else 0) | (IBV_SEND_SOLICITED if i % 5 == 0 else 0)
            if i % 4 == 1:
                r.send(i, 64 + i, off=i * 7, opcode=IBV_WR_SEND_WITH_IMM, flags=flags, imm=0xA0B0C000 + i)
            else:
                r.send(i, i * 2, off=i, flags=flags)           # (i = 0: a zero-length SEND)
            if i % 16 == 15:
                r.step()
        r.run()
    fast, slow, carried = both(monkeypatch, scenario, **rig)
    assert fast == slow
    assert carried == 40
    wcs = [w for cq in fast[0] for w in _wcs(cq)]
    recvs = [w for w in wcs if w.opcode == IBV_WC_RECV and w.wr_id >= 100 and w.wr_id < 999_000]
    assert [w.wr_id for w in recvs] == list(range(100, 140))
    assert all(w.status == IBV_WC_SUCCESS for w in wcs)
    imm = [w for w in recvs if w.wc_flags & IBV_WC_WITH_IMM]
    assert [(w.wr_id, w.imm_data, w.byte_len) for w in imm] == [(100 + i, 0xA0B0C000 + i, 64 + i)
                                                              for i in range(1, 40, 4)]
    sends = [w.wr_id for w in wcs if w.opcode == IBV_WC_SEND and w.wr_id < 999_000]
    want = list(range(40)) if rig.get("sq_sig_all") else [i for i in range(40) if i % 3]
    assert sends == want
    # the bytes: message i at receive buffer i
    buf = fast[2]["buf"]
    src = bytes(i * 7 & 0xFF for i in range(1 << 16))
    for i in range(40):
        n, o = (64 + i, i * 7) if i % 4 == 1 else (i * 2, i)
        assert buf[i * 128:i * 128 + n] == src[o:o + n]


def test_solicited_event_only_for_a_solicited_send(monkeypatch):
    def scenario(r):
        r.resolve_route()
        r.cqes()
        r.events()
        r.cq_ends[3].req_notify(solicited_only=True)          # b's receive CQ
        for i in range(3):
            r.recv(i)
        r.send(0, flags=0)
        r.send(1, flags=0)
        r.run()
        assert r.events()[3] == []                            # (drained: the state compares what is left)
        r.send(2, flags=IBV_SEND_SOLICITED)
        r.run()
    fast, slow, carried = both(monkeypatch, scenario)
    assert fast == slow
    assert carried == 3
    assert len(fast[1][3]) == 1                               # the solicited SEND fired the channel once
    solicited = [w for w in _wcs(fast[0][3])]
    assert [w.wr_id for w in solicited] == [0, 1, 2]
    assert [b[38] for b in fast[0][3]] == [0, 0, 1]           # the CQE's solicited byte


def test_cq_overrun_same_as_object_path(monkeypatch):
    def scenario(r):
        r.resolve_route()
        r.cqes()
        for i in range(12):
            r.recv(i)
        for i in range(12):
            r.send(i)
        r.run()
    fast, slow, carried = both(monkeypatch, scenario, cqe=8)
    assert fast == slow
    assert carried == 12
    assert fast[2]["cq_overrun"] == [True, False, False, True] and len(fast[0][3]) == len(fast[0][0]) == 8


# --------------------------------------------------------------------------- the object path's cases
def test_rnr_without_a_receive_then_completes(monkeypatch):
    def scenario(r):
        r.resolve_route()
        r.send(1)                                             # no receive posted: RNR NAK, back-off
        r.run()
        assert r.a.sq and r.a.rnr_at is not None              # backing off
        r.recv(1)
        r.send(2)                                             # behind the RNR'd one: waits for it
        r.recv(2)
        r.run(steps=6, dt=0.05)
    fast, slow, carried = both(monkeypatch, scenario)
    assert fast == slow
    wcs = [(w.wr_id, w.opcode, w.status) for w in _wcs(fast[0][0])]
    assert wcs[-2:] == [(1, IBV_WC_SEND, IBV_WC_SUCCESS), (2, IBV_WC_SEND, IBV_WC_SUCCESS)]
    assert fast[2]["b.cnt"][Counter.send_rnr_err] >= 1 and fast[2]["a.cnt"][Counter.rcvd_rnr_err] >= 1
    assert carried == 0                                       # (the second was behind the first)


def test_receive_buffer_too_small_is_loc_len_err(monkeypatch):
    def scenario(r):
        r.resolve_route()
        r.recv(1, 32)
        r.send(1, 64)
        r.run(steps=4, dt=0.01)
    fast, slow, carried = both(monkeypatch, scenario)
    assert fast == slow
    assert carried == 0
    recv = [(w.wr_id, w.status) for w in _wcs(fast[0][3]) if w.wr_id != 999_000]
    assert recv == [(1, IBV_WC_LOC_LEN_ERR)]


def test_multi_sge_inline_fence_write_mixed_in_order(monkeypatch):
    def scenario(r):
        r.resolve_route()
        a0 = r.ma.addr
        for i in range(7):
            r.recv(i, 200, off=i * 200)
        r.recv(7, sges=[(r.mb.addr + 1600, 10, r.mb.lkey), (r.mb.addr + 1700, 90, r.mb.lkey)])
        r.send(0, 64)                                          # fast
        r.send(1, sges=[(a0, 30, r.ma.lkey), (a0 + 500, 34, r.ma.lkey)])   # two SGEs: objects
        r.send(2, 64, off=3)                                   # fast again (once the SQ is empty)
        r.send(3, inline=b"inline bytes")                      # inline: objects
        r.send(4, 64, flags=IBV_SEND_SIGNALED | IBV_SEND_FENCE)   # fence: objects
        r.send(5, 100, opcode=IBV_WR_RDMA_WRITE)               # a WRITE: slot to slot too
        r.send(6, 64, off=9)
        r.send(7, 64, off=11)
        r.send(8, 100, off=40)                                 # into the two-SGE receive: objects
        r.run(steps=4)
    fast, slow, carried = both(monkeypatch, scenario)
    assert fast == slow
    assert 1 <= carried <= 5
    assert [w.wr_id for w in _wcs(fast[0][0]) if w.wr_id != 999_000] == list(range(9))
    assert [(w.wr_id, w.status) for w in _wcs(fast[0][3]) if w.wr_id != 999_000] == [
        (i, IBV_WC_SUCCESS) for i in range(8)]          # (the WRITE takes no receive)


def test_srq_receive_takes_the_object_path(monkeypatch):
    def scenario(r):
        r.resolve_route()
        for i in range(6):
            r.recv(i, 80, off=i * 80)
        for i in range(6):
            r.send(i, 70, off=i)
        r.run()
    fast, slow, carried = both(monkeypatch, scenario, srq=True)
    assert fast == slow
    assert carried == 0
    assert [(w.wr_id, w.status, w.byte_len) for w in _wcs(fast[0][3]) if w.wr_id != 999_000] == [
        (i, IBV_WC_SUCCESS, 70) for i in range(6)]


def test_bad_lkey_and_receives_already_read(monkeypatch):
    """A bad send lkey completes as the object path does (LOC_PROT_ERR,
    QP to ERR, the rest flushed); receives the daemon had already read
    into ``RecvWQE`` objects are taken first, in order."""
    def scenario(r):
        r.resolve_route()
        for i in range(4):
            r.recv(i, 64, off=i * 64)
        r.run()                                               # the receives are read (RecvWQE)
        for i in range(4, 8):
            r.recv(i, 64, off=i * 64)
        for i in range(6):
            r.send(i, 64, off=i)
        r.run()
        r.send(6, 64, sges=[(r.ma.addr, 64, r.ma.lkey ^ 0x5500)])
        r.send(7, 64)
        r.run(steps=3)
    fast, slow, carried = both(monkeypatch, scenario)
    assert fast == slow
    assert carried == 6
    assert [(w.wr_id, w.status) for w in _wcs(fast[0][3]) if w.wr_id != 999_000][:6] == [
        (i, IBV_WC_SUCCESS) for i in range(6)]
    a_wcs = [(w.wr_id, w.status) for w in _wcs(fast[0][0]) if w.wr_id != 999_000]
    assert a_wcs[:6] == [(i, IBV_WC_SUCCESS) for i in range(6)] and a_wcs[6][1] != IBV_WC_SUCCESS


# --------------------------------------------------------------------------- the CQE batch
@pytest.mark.parametrize("ext", [False, True])
def test_push_cqes_writes_what_push_writes(ext):
    rings = [Ring.create(8, abi.CQE_BYTES) for _ in range(2)]
    make = (lambda r: ExtCompletionQueueProducer(r, lambda: 99)) if ext else CompletionQueueProducer
    one, batch = make(rings[0]), make(rings[1])
    rings[0].arm(True)
    rings[1].arm(True)
    fields = [(7 + i, 64, i, 0x11, 0x12, 0, 0, 0, 0, IBV_WC_RECV, 0, 0, 0, i == 3) for i in range(10)]
    got = []
    for f in fields:
        got.append(one.push(abi.WC(f[0], f[8], f[9], f[3], f[1], f[2], f[4], f[10]), bool(f[13])))
    stored, notify = batch.push_cqes([f[:13] + (int(f[13]),) for f in fields])
    assert stored == sum(1 for s, _ in got if s) == 8
    assert notify and any(n for _, n in got)
    assert one.overrun and batch.overrun
    assert bytes(rings[0].buf) == bytes(rings[1].buf)


def test_writes_same_cqes_bytes_counters(monkeypatch):
    """RDMA WRITEs of every size (none, one packet, several), signaled or
    not, mixed with SENDs: slot to slot, the same as the object path."""
    def scenario(r):
        r.resolve_route()
        for i in range(30):
            size = (0, 8, 1024, 1025, 5000)[i % 5]
            r.send(i, size, off=i * 11, opcode=IBV_WR_RDMA_WRITE, flags=IBV_SEND_SIGNALED if i % 3 else 0,
                   remote_off=i * 997)
            if i % 7 == 6:
                r.step()
        r.recv(500, 128)
        r.send(500, 100)
        r.run()
    fast, slow, carried = both(monkeypatch, scenario)
    assert fast == slow
    assert carried == 31
    wcs = [w for w in _wcs(fast[0][0]) if w.wr_id != 999_000]
    assert [(w.wr_id, w.opcode, w.byte_len) for w in wcs] == [
        (i, IBV_WC_RDMA_WRITE, (0, 8, 1024, 1025, 5000)[i % 5]) for i in range(30) if i % 3] + [(500, IBV_WC_SEND, 100)]


@pytest.mark.parametrize("case", ["bad_rkey", "out_of_bounds"])
def test_a_write_the_peer_refuses_takes_the_object_path(monkeypatch, case):
    """A WRITE the responder would NAK (an rkey it does not know, a range
    outside the MR) is left to the packets: the same error completion."""
    def scenario(r):
        r.resolve_route()
        r.send(1, 64, opcode=IBV_WR_RDMA_WRITE)
        if case == "bad_rkey":
            r.send(2, 64, opcode=IBV_WR_RDMA_WRITE, rkey=r.mb.rkey ^ 0x100)
        else:
            r.send(2, 64, opcode=IBV_WR_RDMA_WRITE, remote_off=(1 << 16) - 32)
        r.run(steps=6, dt=0.01)
    fast, slow, carried = both(monkeypatch, scenario)
    assert fast == slow
    assert carried == 1
    assert [(w.wr_id, w.status) for w in _wcs(fast[0][0]) if w.wr_id != 999_000] == [
        (1, IBV_WC_SUCCESS), (2, IBV_WC_REM_ACCESS_ERR)]
