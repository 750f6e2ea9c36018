"""RoCE over IPv6 as the kernel's rxe sends it: UDP checksum 0.

rxe's IPv6 tunnel socket leaves the UDP checksum at 0 (the ICRC covers the
packet).  Linux drops a zero-checksum UDPv6 datagram on an ordinary socket
(Udp6InCsumErrors); the daemon's IPv6 sockets set UDP_NO_CHECK6_RX as rxe's
does.  Here a raw socket sends such a datagram -- a valid RoCEv2 packet
with its ICRC, checksum 0 -- to the daemon's IPv6 address, and the daemon
counts it as received (then drops it for its unknown destination QP).
"""

from __future__ import annotations

import os
import socket
import struct
import time

import pytest

from daemon_helpers import daemon_in_shm
from softrdma.uapi.control import recv_msg, send_msg
from softrdma.wire.icrc import ICRC, icrc, ipv6_header, udp_header

UNKNOWN_QPN = 0xABCDE


def _links(run_dir: str) -> list[dict]:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(os.path.join(run_dir, "softrdmad.sock"))
    try:
        send_msg(s, {"op": "links", "seq": 1})
        msg, _ = recv_msg(s)
    finally:
        s.close()
    return msg["links"]


def _ipv6_socket(run_dir: str) -> tuple[int, int]:
    """(index in the link's socket list, UDP port) of the daemon's ::1 socket."""
    for i, (ip, port) in enumerate(_links(run_dir)[0]["udp"]):
        if ip == "::1":
            return i, port
    pytest.fail(f"the daemon has no ::1 socket: {_links(run_dir)[0]['udp']}")


def _roce_ud_send(src: bytes, dst: bytes, sport: int, dport: int) -> bytes:
    """A UD SEND_ONLY to UNKNOWN_QPN with its ICRC over the IPv6 header the
    receiver will see: the UDP payload."""
    bth = struct.pack(">BBHII", 0x64, 0, 0xFFFF, UNKNOWN_QPN, 7)
    deth = struct.pack(">II", 0x11111111, 0x22)
    pkt = bth + deth + b"zero-checksum v6"
    n = len(pkt) + 4
    return pkt + ICRC.pack(icrc(ipv6_header(src, dst, n), udp_header(sport, dport, n), pkt))


def test_zero_checksum_udp6_reaches_the_daemon():
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("CI runs as root: this test must run")
        pytest.skip("a raw socket needs root")
    with daemon_in_shm("ipv6csum") as d:
        idx, dport = _ipv6_socket(d.run_dir)
        raw = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_UDP)
        try:
            sport = 4791
            lo = socket.inet_pton(socket.AF_INET6, "::1")
            payload = _roce_ud_send(lo, lo, sport, dport)
            # the UDP header by hand, checksum 0; an IPPROTO_UDP raw socket adds only the IPv6 header
            dgram = struct.pack(">HHHH", sport, dport, 8 + len(payload), 0) + payload
            before = _links(d.run_dir)[0]
            for _ in range(3):
                raw.sendto(dgram, ("::1", 0))
            end = time.monotonic() + 10
            while time.monotonic() < end:
                link = _links(d.run_dir)[0]
                if link["rx_dropped"]["unknown_qpn"] - before["rx_dropped"]["unknown_qpn"] >= 3:
                    break
                time.sleep(0.02)
        finally:
            raw.close()
        net = link["net"][idx]
        assert net["rx_packets"] - before["net"][idx]["rx_packets"] == 3, (before, link)
        assert net["rx_icrc_errors"] == 0, net
        assert link["rx_dropped"]["unknown_qpn"] - before["rx_dropped"]["unknown_qpn"] == 3, link
        assert d.proc.poll() is None
