"""The IB data path's bulk loops against the packet-by-packet path.

``lrh.build_run`` (a SegmentRun's packets as PACKETS entries) and
``lrh.verify_packets`` (a PACKETS message checked whole) exist compiled
and as references built on ``encap`` / ``decap``: both give the same bytes
and verdicts, and every damage (a bit of a CRC, a length, a DLID, a second
QP, a GRH, a multicast DLID) sends the message to the checked path.  An RC
transfer through ``IbPort.route`` and whole PACKETS messages (``Segments``
with the IB framing around each packet) ends exactly as one that moves
every packet on its own: same memory, completions, counters, QP state."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings, strategies as st

from softrdma.device import ib
from softrdma.enums import IBV_MTU_256, IBV_MTU_1024, IBV_MTU_2048, IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE, IBV_WR_SEND
from softrdma.transport.wr import RecvWQE, SendWQE
from softrdma.wire import fabriclink as fl
from softrdma.wire import fastpath, lrh
from softrdma.wire.fastpath import SegmentRun

from test_transport_segments import PATTERN, Side, wcs

C = fastpath._C
needs_c = pytest.mark.skipif(C is None and os.environ.get("CI") != "true", reason="the compiled loops are not built")


def bth(opcode=0x07, dqpn=0x1234, pkey=0xFFFF) -> bytes:
    return bytes([opcode, 0, pkey >> 8, pkey & 0xFF, 0, dqpn >> 16, (dqpn >> 8) & 0xFF, dqpn & 0xFF, 0, 0, 0, 0])


def message(entries: bytes, n: int) -> bytes:
    return fl.HDR.pack(fl.MsgType.PACKETS, fl.VERSION, n) + entries


GRH = lrh.pack_grh(sgid=bytes(range(16)), dgid=bytes(range(16, 32)), pay_len=0)


@needs_c
@settings(max_examples=60, deadline=None)
@given(mtu=st.sampled_from((256, 1024, 2048, 4096)), count=st.integers(1, 40), data=st.data(),
       psn0=st.sampled_from((0, 0xFFFFF0, 0xFFFFFF, 77)), ackreq=st.booleans(), last=st.booleans(),
       first=st.booleans(), grh=st.booleans())
def test_build_run_c_equals_encap_packet_by_packet(mtu, count, data, psn0, ackreq, last, first, grh):
    start = data.draw(st.integers(0, count - 1))
    k = data.draw(st.integers(1, count - start))
    payload = os.urandom(count * mtu)
    lh = lrh.run_lrh(dlid=7, slid=3, sl=5, mtu=mtu, grh=grh)
    g = lrh.pack_grh(sgid=GRH[8:24], dgid=GRH[24:40], pay_len=12 + mtu + 4) if grh else b""
    args = (bth(), payload, mtu, count, start, k, psn0, ackreq, bth(0x08) if last else b"", bth(0x06) if first else b"",
            lh, g)
    got = C.ib_build_run(*args)
    assert got == lrh.py_build_run(*args)
    pkts = SegmentRun(bth(), psn0, count, mtu, memoryview(payload), ackreq, bth(0x08) if last else b"",
                      bth(0x06) if first else b"").packets()[start:start + k]
    for (ln, f), p in zip(_entries(got), pkts):
        hdr, grh_got, body = lrh.decap(f)
        assert bytes(body) == bytes(p) and (grh_got is not None) == grh and (hdr.dlid, hdr.slid, hdr.sl) == (7, 3, 5)


def _entries(buf: bytes):
    o = 0
    while o < len(buf):
        ln = buf[o] << 8 | buf[o + 1]
        yield ln, buf[o + 2:o + 2 + ln]
        o += 2 + ln


def test_build_run_refuses_what_it_cannot_build():
    lh = lrh.run_lrh(dlid=7, slid=3, sl=0, mtu=256, grh=False)
    for impl in filter(None, (getattr(C, "ib_build_run", None), lrh.py_build_run)):
        with pytest.raises(ValueError):
            impl(bth(), bytes(256), 256, 1, 1, 1, 0, False, b"", b"", lh, b"")      # past the run


def clean_message(mtu=1024, count=5, dqpn=0x1234, acks=1) -> bytes:
    """A run's packets and a shorter one (an ACK) for one QP, as route lays them out."""
    lh = lrh.run_lrh(dlid=9, slid=4, sl=0, mtu=mtu, grh=False)
    run = lrh.py_build_run(bth(dqpn=dqpn), os.urandom(count * mtu), mtu, count, 0, count, 5, True, b"", b"", lh, b"")
    tail = b""
    for _ in range(acks):
        f = lrh.encap(bth(0x11, dqpn) + bytes(4), dlid=9, slid=4)
        tail += len(f).to_bytes(2, "big") + f
    return message(run + tail, count + acks)


def both_verify(msg, lid=9, mask=0):
    py = lrh.py_verify_packets(msg, lid, mask)
    if C is not None:
        assert C.ib_verify_packets(msg, lid, mask) == py
    return py


def test_verify_packets_names_the_qp_and_the_runs_of_one_length():
    msg = clean_message()
    entry = 2 + 8 + 12 + 1024 + 4 + 2
    assert both_verify(msg) == (0x1234, ((4, entry, 5), (4 + 5 * entry, 2 + 8 + 16 + 4 + 2, 1)))
    assert both_verify(msg, lid=8, mask=1) is not None          # within the LMC
    assert both_verify(msg, lid=8) is None                      # another port's DLID
    segs = ib.message_segments(msg, 0x1234, both_verify(msg)[1])
    assert [bytes(p) for s in segs for p in s.packets()] == \
        [bytes(lrh.decap(f)[2]) for f in fl.iter_packets(msg)]
    assert sum(s.nbytes for s in segs) == sum(len(f) - 8 - 2 for f in fl.iter_packets(msg))


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_verify_packets_refuses_any_damage(data):
    msg = bytearray(clean_message(mtu=256, count=3))
    i = data.draw(st.integers(2, len(msg) - 1))
    bit = data.draw(st.integers(0, 7))
    msg[i] ^= 1 << bit
    got = both_verify(bytes(msg))
    if got is not None:                      # only a flip the packets do not carry: the VL's bits, VCRC-covered
        pytest.fail(f"byte {i} bit {bit}: still passes")


def test_verify_packets_leaves_the_rest_to_the_checked_path():
    lh = lrh.run_lrh(dlid=9, slid=4, sl=0, mtu=256, grh=False)

    def one(pkt=bth(), **kw):
        f = lrh.encap(pkt + bytes(256), **{"dlid": 9, "slid": 4, **kw})
        return len(f).to_bytes(2, "big") + f

    assert both_verify(message(one() + one(), 2)) is not None
    assert both_verify(message(one() + one(bth(dqpn=0x99)), 2)) is None              # two QPs
    assert both_verify(message(one() + one(bth(pkey=0x7FFF)), 2)) is None            # two P_Keys
    assert both_verify(message(one() + one(slid=5), 2)) is None                      # two sources
    assert both_verify(message(one(grh=lrh.pack_grh(sgid=bytes(16), dgid=bytes(16), pay_len=12 + 256 + 4)), 1)) is None
    assert both_verify(message(one(dlid=0xC001), 1), lid=0xC001) is None              # multicast
    assert both_verify(message(one() + one(), 3)) is None                             # count past the end
    assert both_verify(message(one(), 1) + b"\0", 1) is None                          # bytes after
    assert both_verify(message(b"", 0)) is None
    assert lh                                                                          # (the LRH a run would share)


@needs_c
@settings(max_examples=40, deadline=None)
@given(mtu=st.sampled_from((256, 1024)), count=st.integers(1, 8), data=st.data())
def test_place_middles_with_the_ib_framing_c_equals_reference(mtu, count, data):
    lh = lrh.run_lrh(dlid=9, slid=4, sl=0, mtu=mtu, grh=False)
    buf = lrh.py_build_run(bth(), os.urandom(count * mtu), mtu, count, 0, count, 10, data.draw(st.booleans()),
                           b"", b"", lh, b"")
    stride = len(buf) // count
    room = data.draw(st.integers(0, count * mtu))
    args = (buf, 2 + 8, len(buf), stride, 0x07, 10, 0xFFFF, mtu)
    d1, d2 = bytearray(count * mtu), bytearray(count * mtu)
    assert C.place_middles(*args, d1, 0, room, 14) == fastpath.py_place_middles(*args, d2, 0, room, 14)
    assert d1 == d2
    assert C.place_middles(*args, d1, 0, room, 13) == (0, -1, 0)         # a stride that is not the framing's


class FakeSock:
    def __init__(self):
        self.sent = []

    def send(self, msg):
        self.sent.append(bytes(msg))
        return len(msg)

    def sendmsg(self, buffers):
        msg = b"".join(buffers)
        self.sent.append(msg)
        return len(msg)

    def close(self):
        pass


def ib_port(lid: int) -> ib.IbPort:
    port = ib.IbPort("test-fabric", "h", 1, "mlx5_t", "/nonexistent")
    port.state, port.lid = ib.ACTIVE, lid
    port.link.sock = FakeSock()
    return port


def transfer(fast: bool, mtu_enum: int, msgs: list) -> dict:
    a = Side(mtu_enum, 0xFFFFF0, 7)
    b = Side(mtu_enum, 7, 0xFFFFF0)
    a.qp.av.dlid, a.qp.av.is_global = 3, False
    b.qp.av.dlid, b.qp.av.is_global = 2, False
    ports = {id(a): ib_port(2), id(b): ib_port(3)}
    a.qp.tx_runs = b.qp.tx_runs = fast or None           # (None: route never turns runs on)
    for i in range(len(msgs)):
        b.qp.post_recv(RecvWQE(100 + i, [(b.mr.addr + (1 << 18) + i * 16384, 16384, b.mr.lkey)]))
    a.mr.buf[:len(PATTERN)] = PATTERN
    b.mr.buf[:len(PATTERN)] = PATTERN[::-1]
    off = 0
    for i, (op, n) in enumerate(msgs):
        a.qp.post_send(SendWQE(i, op, [(a.mr.addr + off, n, a.mr.lkey)], remote_addr=b.mr.addr + off,
                               rkey=b.mr.rkey, imm_data=0x1000 + i), 0.0)
        off += n
    fast_msgs = 0
    for _ in range(10000):
        moved = False
        for src, dst, dlid in ((a, b, 3), (b, a, 2)):
            items = src.qp.tx[:]
            src.qp.tx.clear()
            if not items:
                continue
            moved = True
            port = ports[id(src)]
            port.tx.extend(items)
            assert port.route(None, 0.0)
            sent, port.link.sock.sent = port.link.sock.sent, []
            for msg in sent:
                if not fast:                 # the checked path: each packet decapsulated, one batch a message
                    dst.qp.receive_batch([lrh.decap(f)[2] for f in fl.iter_packets(msg)], 0.0)
                    continue
                got = lrh.verify_packets(msg, dlid, 0)
                assert got is not None                 # one QP, clean: the whole-message path
                fast_msgs += 1
                dst.qp.receive_batch(ib.message_segments(msg, *got), 0.0)
        if not moved:
            break
    return dict(mem=bytes(b.mr.buf), mem_a=bytes(a.mr.buf), scq=wcs(a.qp.send_cq), rcq=wcs(b.qp.recv_cq),
                cnt_a=list(a.qp.cnt), cnt_b=list(b.qp.cnt), fast_msgs=fast_msgs,
                state=(a.qp.state, b.qp.state, a.qp.req_psn, b.qp.resp_psn, b.qp.msn))


@settings(max_examples=12, deadline=None)
@given(mtu=st.sampled_from((IBV_MTU_256, IBV_MTU_1024, IBV_MTU_2048)),
       msgs=st.lists(st.tuples(st.sampled_from((IBV_WR_SEND, IBV_WR_RDMA_WRITE, IBV_WR_RDMA_READ)),
                               st.integers(0, 16384)), min_size=1, max_size=5))
def test_route_and_whole_messages_change_nothing(mtu, msgs):
    slow = transfer(False, mtu, msgs)
    fast = transfer(True, mtu, msgs)
    assert fast.pop("fast_msgs") > 0
    slow.pop("fast_msgs")
    for k in slow:
        assert fast[k] == slow[k], k


def test_route_counts_a_run_as_its_packets():
    a = Side(IBV_MTU_1024, 0, 7)
    a.qp.av.dlid, a.qp.av.is_global = 3, False
    a.qp.tx_runs = True
    port = ib_port(2)
    a.qp.post_send(SendWQE(1, IBV_WR_RDMA_WRITE, [(a.mr.addr, 65536, a.mr.lkey)], remote_addr=0, rkey=1), 0.0)
    assert any(p.__class__ is SegmentRun for _, p, _ in a.qp.tx)
    port.tx.extend(a.qp.tx)
    port.route(None, 0.0)
    pkts = [f for m in port.link.sock.sent for f in fl.iter_packets(m)]
    assert len(pkts) == 64 and all(len(m) <= fl.MAX_MESSAGE for m in port.link.sock.sent)
    assert port.ib_counters["xmit_packets"] == 64
    assert port.ib_counters["xmit_bytes"] == sum(len(f) - 8 - 2 for f in pkts)


def test_a_message_of_pieces_leaves_whole_and_a_full_outbox_drops_by_packets():
    """``route``'s messages are lists of pieces: sent as one message
    (``sendmsg``), queued while the socket is full, and past the outbox's
    bound dropped and counted by the packets in their header."""
    from softrdma.device import fabric_link

    class FullSock(FakeSock):
        full = True

        def sendmsg(self, buffers):
            if self.full:
                raise BlockingIOError
            return FakeSock.sendmsg(self, buffers)

    port = ib_port(2)
    port.link.sock = FullSock()
    pkts = [lrh.encap(bytes(40), dlid=3, slid=2) for _ in range(3)]
    msg = fl.pack_packets(pkts)
    pieces = [msg[:4], msg[4:30], msg[30:]]
    n = fabric_link.MAX_OUTBOX // len(msg)
    assert port.link.send_messages([list(pieces)] * (n + 2)) == 2 * 3
    assert port.link.outbox_bytes == n * len(msg)
    port.link.sock.full = False
    assert port.link.flush() and port.link.outbox_bytes == 0
    assert port.link.sock.sent == [msg] * n


_HEAP_CYCLES = """
import resource, sys
if sys.argv[1] == "keep":
    from softrdma.device.fabric_link import keep_heap
    assert keep_heap()
def cycle():                                  # four messages' buffers alive, then freed
    bufs = [bytearray(fl_max + 4096) for _ in range(4)]
    for b in bufs:
        b[::4096] = bytes(len(b[::4096]))
fl_max = 128 * 1024
for _ in range(20):
    cycle()
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(200):
    cycle()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
"""


def test_a_fabric_link_keeps_the_heap_for_the_next_messages():
    """Buffers of a PACKETS message's size, several alive at once and freed
    (what the daemon's receives and runs do): with ``keep_heap`` (every
    FabricLink asks for it) their pages stay, without it glibc gives them
    back and each cycle faults them in again."""
    import subprocess
    import sys
    assert fl.MAX_MESSAGE == 128 * 1024
    faults = {how: int(subprocess.run([sys.executable, "-c", _HEAP_CYCLES, how], capture_output=True, text=True,
                                      check=True).stdout) for how in ("keep", "default")}
    assert faults["keep"] < 50
    assert faults["default"] > 200 * 10
