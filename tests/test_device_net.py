"""RoCEv2 over real UDP sockets on loopback: ICRC out, ICRC checked in, and
the transport running over it (two QPs, two sockets, one process)."""

from __future__ import annotations

import os
import select
import socket
import time

import pytest

from softrdma import wire
from softrdma.device.net import RoceSocket, gid_to_ip
from softrdma.enums import IBV_MTU_1024, IBV_WC_SUCCESS, IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE, IBV_WR_SEND
from softrdma.sim import Simulator, connect_qps
from softrdma.transport.wr import RecvWQE, SendWQE
from softrdma.wire.icrc import ICRC, Verdict, icrc, ipv4_header, udp_header, verify


def _pair():
    a = RoceSocket("127.0.0.1", port=0)
    b = RoceSocket("127.0.0.2", port=0)
    return a, b


def _recv_some(sock, want=1, timeout=60.0):
    got = []
    end = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < end:
        select.select([sock], [], [], 0.05)
        got += [(bytes(p), s, sp) for p, s, sp in sock.recv()]
    return got


def test_gid_to_ip():
    assert gid_to_ip(bytes(10) + b"\xff\xff" + bytes([10, 77, 0, 2])) == "10.77.0.2"
    assert gid_to_ip(bytes.fromhex("fe80000000000000505400fffe770002")) == "fe80::5054:ff:fe77:2"


def test_send_carries_the_icrc_of_the_header_the_kernel_emits():
    a, b = _pair()
    # a raw receiver on b's side would see the IPv4 header; rebuild it as the
    # kernel emits it for an unconnected DF socket (ID 0) and check the ICRC FULLy
    pkt = wire.build(wire.Opcode.RC_SEND_ONLY, 0x11, 7, b"hello, rxe", ackreq=True)
    assert a.send(pkt, "127.0.0.2", b.port)
    got = _recv_some(b)
    assert [(p, s, sp) for p, s, sp in got] == [(bytes(pkt), socket.inet_aton("127.0.0.1"), a.port)]
    n = len(pkt) + 4
    ip = ipv4_header(socket.inet_aton("127.0.0.1"), socket.inet_aton("127.0.0.2"), n, ident=0, df=True)
    crc = icrc(ip, udp_header(a.port, b.port, n), pkt)
    assert verify(bytes(pkt) + ICRC.pack(crc), ip_hdr=ip, sport=a.port, dport=b.port)[0] is Verdict.FULL
    assert b.stats["rx_packets"] == 1 and b.stats["rx_id_recovered"] == 1
    a.close(), b.close()


def test_bad_icrc_and_short_datagrams_are_dropped_and_counted():
    b = RoceSocket("127.0.0.2", port=0)
    raw = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    raw.bind(("127.0.0.1", 0))
    pkt = wire.build(wire.Opcode.RC_SEND_ONLY, 0x11, 7, b"x" * 32)
    raw.sendto(bytes(pkt) + b"\x00\x00\x00\x00", ("127.0.0.2", b.port))       # wrong ICRC
    raw.sendto(b"\x04\x00", ("127.0.0.2", b.port))                             # short
    for _ in range(200):                                                       # random junk
        raw.sendto(os.urandom(1 + os.urandom(1)[0] * 4), ("127.0.0.2", b.port))
    deadline = time.monotonic() + 60
    while b.stats["rx_icrc_errors"] + b.stats["rx_short"] < 202 and time.monotonic() < deadline:
        select.select([b], [], [], 0.05)
        assert b.recv() == []
    assert b.stats["rx_packets"] == 0
    assert b.stats["rx_icrc_errors"] + b.stats["rx_short"] == 202
    raw.close(), b.close()


def _pump(nodes, socks, peers, until):
    """A minimal engine: transport tx -> socket, socket -> transport, timers."""
    end = time.monotonic() + 60
    while not until() and time.monotonic() < end:
        for node, sock in zip(nodes, socks):
            for qp, pkt, av in node.tx:
                sock.send(pkt, "127.0.0.1" if sock is socks[1] else "127.0.0.2", peers[sock])
            node.tx.clear()
        select.select(socks, [], [], 0.01)
        now = time.monotonic()
        for node, sock in zip(nodes, socks):
            pkts = sock.recv()
            by_qp = {}
            for pkt, _, _ in pkts:
                wire.check(pkt)
                dqpn = int.from_bytes(pkt[5:8], "big")
                by_qp.setdefault(dqpn, []).append(pkt)
            for qpn, batch in by_qp.items():
                node.qps[qpn].receive_batch(batch, now)
            for qp in node.qps.values():
                d = qp.deadline
                if d is not None and now >= d:
                    qp.tick(now)
    assert until(), "transfer did not finish"


@pytest.mark.parametrize("mtu", [IBV_MTU_1024])
def test_rc_transfer_over_real_udp_byte_exact(mtu):
    sim = Simulator()                       # only builds the nodes' QPs and memory
    na, nb = sim.add_node("a", "127.0.0.1"), sim.add_node("b", "127.0.0.2")
    qa, qb = na.create_qp(), nb.create_qp()
    connect_qps(qa, qb, na, nb, path_mtu=mtu, timeout=10, psn_a=0xFFFF00)
    sa, sb = _pair()
    peers = {sa: sb.port, sb: sa.port}
    size = 1 << 20
    ma, mb = na.reg_mr(3 * size, 0xF), nb.reg_mr(3 * size, 0xF)
    data = os.urandom(size)
    ma.write(data)
    mb.write(data[::-1], 2 * size)
    qb.post_recv(RecvWQE(1, [(mb.addr, size, mb.lkey)]))
    qa.post_send(SendWQE(1, IBV_WR_SEND, [(ma.addr, size, ma.lkey)]))
    qa.post_send(SendWQE(2, IBV_WR_RDMA_WRITE, [(ma.addr, size, ma.lkey)], remote_addr=mb.addr + size,
                         rkey=mb.rkey))
    qa.post_send(SendWQE(3, IBV_WR_RDMA_READ, [(ma.addr + size, size, ma.lkey)], remote_addr=mb.addr + 2 * size,
                         rkey=mb.rkey))
    _pump([na, nb], [sa, sb], peers, lambda: len(qa.send_cq) >= 3)
    assert [(w.wr_id, w.status) for w in qa.send_cq.poll(3)] == [(i, IBV_WC_SUCCESS) for i in (1, 2, 3)]
    assert mb.read(size) == data and mb.read(size, size) == data and ma.read(size, size) == data[::-1]
    assert sa.stats["rx_icrc_errors"] == sb.stats["rx_icrc_errors"] == 0
    assert sb.stats["rx_packets"] >= 2 * size // 1024
    sa.close(), sb.close()


def _need_root():
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("CI runs as root: this test must run")
        pytest.skip("needs root (raw socket)")


def test_kernel_emits_df_and_id_zero_so_the_icrc_verifies_fully_on_the_real_header():
    _need_root()
    raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP)
    raw.bind(("127.0.0.2", 0))
    raw.settimeout(2)
    a, b = _pair()
    try:
        for size in (0, 1, 100, 1024):
            pkt = wire.build(wire.Opcode.RC_SEND_ONLY, 0x11, size, os.urandom(size), ackreq=True)
            assert a.send(pkt, "127.0.0.2", b.port)
            while True:
                dgram = raw.recv(65535)
                ihl = (dgram[0] & 0xF) * 4
                if int.from_bytes(dgram[ihl + 2:ihl + 4], "big") == b.port:
                    break
            ip_hdr = dgram[:ihl]
            assert ip_hdr[6] & 0x40 and ip_hdr[4:6] == b"\x00\x00"            # DF set, ID 0
            assert verify(dgram[ihl + 8:], ip_hdr=ip_hdr, sport=a.port, dport=b.port)[0] is Verdict.FULL
    finally:
        raw.close(), a.close(), b.close()


def test_send_burst_uses_gso_and_the_segments_carry_the_icrc_of_their_ip_ids():
    """A burst of equal-sized packets goes out as one UDP GSO send; the kernel
    cuts it into datagrams with IP IDs 0, 1, 2 ... (DF) -- each datagram's
    ICRC must be right for the IPv4 header it ends up with (a FULL check,
    as rxe makes it), and a GRO receiver gets them back as one buffer."""
    a, b = _pair()
    plain = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)    # no GRO: sees the segments
    plain.bind(("127.0.0.3", 0))
    plain.settimeout(2)
    pkts = [wire.build(wire.Opcode.RC_RDMA_WRITE_MIDDLE, 0x11, i, os.urandom(1024)) for i in range(10)]
    pkts.append(wire.build(wire.Opcode.RC_RDMA_WRITE_LAST, 0x11, 10, os.urandom(100)))
    assert a.send_burst(pkts, "127.0.0.3", plain.getsockname()[1]) == 11
    assert a.stats["tx_gso_sends"] == 1
    for i, pkt in enumerate(pkts):
        dgram, _ = plain.recvfrom(65536)
        assert dgram[:-4] == bytes(pkt)
        ip = ipv4_header(a.ip_bytes, socket.inet_aton("127.0.0.3"), len(dgram), ident=i, df=True)
        verdict, _ = verify(dgram, ip_hdr=ip, sport=a.port, dport=plain.getsockname()[1])
        assert verdict is Verdict.FULL, i
    # and to a GRO-enabled RoceSocket: one buffer, cut back into the packets
    assert a.send_burst(pkts, "127.0.0.2", b.port) == 11
    got = _recv_some(b, want=11)
    assert [p for p, _, _ in got] == [bytes(p) for p in pkts]
    assert b.stats["rx_gro_buffers"] >= 1 and b.stats["rx_icrc_errors"] == 0
    plain.close(), a.close(), b.close()
