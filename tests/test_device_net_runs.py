"""SegmentRuns and GRO buffers through real UDP sockets (``device.net``) and
the port's routing (``transport.port``): a run leaves as GSO sends whose
segments carry their IP IDs, the receiver takes a peer's buffer whole once
the peer is known to send segment IDs, and every path that needs packets
one by one (a capture, fault injection, IPv6, GSO off) gets them, the same
bytes."""

from __future__ import annotations

import os
import socket
import time

import pytest

from softrdma.device.net import RoceSocket
from softrdma.wire.fastpath import SegmentRun, Segments
from softrdma.wire.icrc import COMBO_DF, Verdict, verify

MTU = 1024


def bth(opcode: int, psn: int = 0, dqpn: int = 0x42) -> bytes:
    return bytes([opcode, 0, 0xFF, 0xFF, 0, dqpn >> 16, (dqpn >> 8) & 0xFF, dqpn & 0xFF, 0,
                  psn >> 16, (psn >> 8) & 0xFF, psn & 0xFF])


@pytest.fixture
def pair():
    a, b = RoceSocket("127.0.0.1", 0), RoceSocket("127.0.0.1", 0)
    yield a, b
    a.close()
    b.close()


def recv_all(sock: RoceSocket, want: int, segments: bool = True) -> list:
    """Everything ``want`` packets' worth: (item, src, sport) as recv gives them."""
    out, got, end = [], 0, time.monotonic() + 10
    while got < want and time.monotonic() < end:
        for item in sock.recv(segments=segments):
            out.append(item)
            got += item[0].count if item[0].__class__ is Segments else 1
    assert got == want
    return out


def flatten(items) -> list[bytes]:
    return [bytes(p) for it in items for p in (it[0].packets() if it[0].__class__ is Segments else [it[0]])]


def make_run(count: int, psn0: int, ackreq: bool = True) -> SegmentRun:
    return SegmentRun(bth(0x07), psn0, count, MTU, memoryview(os.urandom(count * MTU)), ackreq)


def test_a_run_crosses_as_gso_and_arrives_as_one_checked_buffer(pair):
    a, b = pair
    # an unknown peer is checked packet by packet until it has shown ID 0 + DF four times
    first = [bth(0x06, i) + bytes(16) + bytes(MTU) for i in range(4)]
    assert a.send_burst([memoryview(p) for p in first[:1]] * 1, "127.0.0.1", b.port) == 1
    for p in first[1:]:
        a.send(p, "127.0.0.1", b.port)
    items = recv_all(b, 4)
    assert all(it[0].__class__ is not Segments for it in items)
    run = make_run(20, 0xFFFFF8)
    last = bth(0x08, (0xFFFFF8 + 20) & 0xFFFFFF) + os.urandom(100)
    gso0 = a.stats["tx_gso_sends"]
    assert a.send_burst([run, last], "127.0.0.1", b.port) == 21
    items = recv_all(b, 21)
    assert any(it[0].__class__ is Segments for it in items)            # taken whole
    assert flatten(items) == [bytes(p) for p in run.packets()] + [last]
    assert all(it[0].dqpn == 0x42 for it in items if it[0].__class__ is Segments)
    stats = a.stats
    assert stats["tx_gso_sends"] - gso0 == 1 and stats["tx_packets"] == 25     # the LAST joined the run's send
    assert b.stats["rx_packets"] == 25 and b.stats["rx_icrc_errors"] == 0


def test_a_run_on_the_wire_is_what_a_packet_capture_checks(pair):
    """The raw datagrams (no GRO on the reading socket): each verifies with
    the IP ID of its place in its GSO send."""
    a, _ = pair
    raw = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    raw.bind(("127.0.0.1", 0))
    port = raw.getsockname()[1]
    try:
        run = make_run(17, 5)
        a.send_burst([run], "127.0.0.1", port)
        got = [raw.recv(65536) for _ in range(17)]
    finally:
        raw.close()
    per = 65000 // (MTU + 16)
    for i, (dgram, pkt) in enumerate(zip(got, run.packets())):
        assert dgram[:-4] == bytes(pkt)
        assert verify(dgram, src=a.ip_bytes, dst=a.ip_bytes, sport=a.port, dport=port,
                      expect=COMBO_DF | (i % per)) == (Verdict.ID_RECOVERED, COMBO_DF | (i % per))


def test_without_gso_a_run_goes_packet_by_packet(pair):
    a, b = pair
    a.gso = False
    run = make_run(5, 0)
    assert a.send_burst([run], "127.0.0.1", b.port) == 5
    assert flatten(recv_all(b, 5)) == [bytes(p) for p in run.packets()]
    assert a.stats["tx_gso_sends"] == 0


def test_a_damaged_buffer_goes_the_checked_way(pair):
    """A strict peer's buffer that verify_segments refuses is checked packet
    by packet: the good packets pass, the bad one is counted and dropped."""
    a, b = pair
    for i in range(4):
        a.send(bth(0x06, i) + bytes(16) + bytes(8), "127.0.0.1", b.port)
    recv_all(b, 4)
    run = make_run(6, 0)
    pkts = run.packets()
    pkts[3][20] ^= 1                       # damage after the ICRC is computed: as a bad link would
    from softrdma.wire.icrc import ICRC, Ipv4Flow
    flow = Ipv4Flow(a.ip_bytes, b.ip_bytes, a.port, b.port)
    good = run.packets()
    buf = b"".join(bytes(p) + ICRC.pack(flow.icrc(g, k)) for k, (p, g) in enumerate(zip(pkts, good)))
    a.sock.sendmsg([buf], [(17, 103, (MTU + 16).to_bytes(2, "little"))], 0, ("127.0.0.1", b.port))
    out, end = [], time.monotonic() + 10
    while len(out) < 5 and time.monotonic() < end:
        out += b.recv(segments=True)
    assert all(it[0].__class__ is not Segments for it in out)
    assert [bytes(it[0]) for it in out] == [bytes(p) for i, p in enumerate(good) if i != 3]
    assert b.stats["rx_icrc_errors"] == 1


def test_a_full_send_then_the_packet_after_it(pair):
    """A run that fills its GSO send exactly, ending with its message's
    LAST, and the next message's first packet (as long) after it: the
    LAST keeps its opcode and AckReq, the next packet goes in a send of its
    own -- the same packets as one by one."""
    a, b = pair
    for i in range(4):
        a.send(bth(0x06, i) + bytes(16) + bytes(8), "127.0.0.1", b.port)
    recv_all(b, 4)
    per = 65000 // (MTU + 16)
    run = SegmentRun(bth(0x01), 7, per, MTU, memoryview(os.urandom(per * MTU)), True, bth(0x02))
    nxt = bth(0x00, 7 + per) + os.urandom(MTU)                  # the next SEND's FIRST: as long as a MIDDLE
    assert a.send_burst([run, nxt], "127.0.0.1", b.port) == per + 1
    got = flatten(recv_all(b, per + 1))
    assert got == [bytes(p) for p in run.packets()] + [nxt]
    assert got[per - 1][0] == 0x02 and got[per - 1][8] == 0x80


def test_consecutive_runs_share_their_gso_sends(pair):
    """Two SENDs, each a run from its FIRST to its LAST, go in one GSO send
    (the second starts where the first ends), and arrive as the same packets."""
    a, b = pair
    for i in range(4):
        a.send(bth(0x06, i) + bytes(16) + bytes(8), "127.0.0.1", b.port)
    recv_all(b, 4)
    runs = [SegmentRun(bth(0x01), 100 + 16 * m, 16, MTU, memoryview(os.urandom(16 * MTU)), True, bth(0x02), bth(0x00))
            for m in range(2)]
    gso0 = a.stats["tx_gso_sends"]
    assert a.send_burst(runs, "127.0.0.1", b.port) == 32
    assert a.stats["tx_gso_sends"] - gso0 == 1
    got = flatten(recv_all(b, 32))
    assert got == [bytes(p) for r in runs for p in r.packets()]
    assert [p[0] for p in got] == ([0x00] + [0x01] * 14 + [0x02]) * 2
