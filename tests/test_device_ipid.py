"""The IPv4 ID check that backs up ID-recovered ICRCs (device.ipid): a
damaged packet that the 15 remaining CRC bits let through is still caught
when its recovered ID is one its sender would not use."""

from __future__ import annotations

import random
import select
import socket
import time

from softrdma import wire
from softrdma.device.ipid import LENIENT_AFTER, SEGMENT_IDS, STRICT_AFTER, PeerIds
from softrdma.device.net import RoceSocket
from softrdma.wire.icrc import ICRC, Ipv4Flow, Verdict, verify

SRC, DST = socket.inet_aton("10.0.0.1"), socket.inet_aton("10.0.0.2")
DF = 1 << 16


def _flips_that_verify(pkt: bytes, crc: int):
    """(byte, recovered ID combo) of every single-bit flip that ICRC recovery lets through."""
    out = []
    for bit in range(len(pkt) * 8):
        p = bytearray(pkt)
        p[bit >> 3] ^= 1 << (bit & 7)
        v, combo = verify(bytes(p) + ICRC.pack(crc), src=SRC, dst=DST, sport=4791, dport=4791)
        if v is not Verdict.BAD:
            out.append((bit >> 3, combo))
    return out


def test_a_single_bit_flip_that_recovery_lets_through_is_caught_by_the_id_check():
    rng = random.Random(1)
    pkt = bytes([0x0A]) + rng.randbytes(1051)               # a 1 KiB WRITE-sized packet
    crc = Ipv4Flow(SRC, DST, 4791, 4791).icrc(pkt)
    through = _flips_that_verify(pkt, crc)
    # byte 4 (FECN/BECN/resv6) is outside the ICRC by the spec; some payload bit also passes
    payload = [(b, c) for b, c in through if b != 4]
    assert payload, "the weakness this module exists for"
    peers = PeerIds()
    for _ in range(STRICT_AFTER):
        assert peers.accept(SRC, DF)                         # a softrdma sender: ID 0, DF
    assert all(not peers.accept(SRC, c) for _, c in payload)
    assert peers.accept(SRC, DF) and peers.accept(SRC, DF | 5)   # its good packets (GSO IDs too) still pass


def test_counter_ids_stay_lenient_even_through_zero():
    peers = PeerIds()
    for i in range(3 * 65536 + 10, 4 * 65536 + 300):        # an rxe-like counter wrapping through 0
        assert peers.accept(SRC, DF | (i & 0xFFFF))
    assert not peers.peers[SRC][1]


def test_strict_peer_replaced_by_a_counter_sender_becomes_lenient():
    peers = PeerIds()
    for _ in range(STRICT_AFTER):
        peers.accept(SRC, DF)
    results = [peers.accept(SRC, DF | (1000 + i)) for i in range(LENIENT_AFTER + 5)]
    assert results[:LENIENT_AFTER - 1] == [False] * (LENIENT_AFTER - 1)
    assert all(results[LENIENT_AFTER:])
    assert peers.accept(SRC, DF | SEGMENT_IDS)               # lenient again


def test_socket_rejects_a_damaged_packet_from_a_softrdma_peer():
    a = RoceSocket("127.0.0.1", port=0)
    b = RoceSocket("127.0.0.2", port=0)
    try:
        pkt = wire.build(wire.Opcode.RC_RDMA_WRITE_MIDDLE, 0x11, 3, random.Random(2).randbytes(1024))
        crc = Ipv4Flow(a.ip_bytes, b.ip_bytes, a.port, b.port).icrc(pkt)
        bad = None
        for bit in range(32 * 8, len(pkt) * 8):               # a payload bit that ID recovery lets through
            p = bytearray(pkt)
            p[bit >> 3] ^= 1 << (bit & 7)
            v, combo = verify(bytes(p) + ICRC.pack(crc), src=a.ip_bytes, dst=b.ip_bytes, sport=a.port,
                              dport=b.port)
            if v is Verdict.ID_RECOVERED and combo != DF:
                bad = bytes(p)
                break
        assert bad is not None
        for _ in range(STRICT_AFTER):
            assert a.send(pkt, "127.0.0.2", b.port)
        a.sock.sendto(bad + ICRC.pack(crc), ("127.0.0.2", b.port))     # as if damaged on the way
        assert a.send(pkt, "127.0.0.2", b.port)
        got = []
        end = time.monotonic() + 60
        while len(got) < STRICT_AFTER + 1 and time.monotonic() < end:
            select.select([b], [], [], 0.05)
            got += [bytes(p) for p, _, _ in b.recv()]
        assert got == [bytes(pkt)] * (STRICT_AFTER + 1)
        assert b.stats["rx_id_implausible"] == 1 and b.stats["rx_icrc_errors"] == 1
    finally:
        a.close()
        b.close()
