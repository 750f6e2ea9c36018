"""``rdma link add NAME type rxe netdev DEV gso off``: the device sends one
datagram per sendmsg instead of UDP GSO super-packets.

A veth hands a GSO send to the other namespace unsplit: a capture there
(tcpdump, or a raw socket as here) sees several RoCE packets glued into one
IP datagram whose "ICRC" is the last packet's.  Receiving kernels segment
it again, so traffic is fine either way; with ``gso off`` the wire shows
what it carries: single RoCE packets, each with a valid ICRC over its own
IPv4 header.  This test captures the receiving veth end with gso on (and
sees glued datagrams) and with gso off (and sees none, every ICRC FULL).
"""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys

from netns_helpers import TwoHosts, need_root
from softrdma.wire.icrc import Verdict, verify

HERE = os.path.dirname(os.path.abspath(__file__))
CAPTURE = os.path.join(HERE, "programs", "wire_capture.py")
MTU = 1500


def _rdma(h: TwoHosts, i: int, *args: str) -> str:
    r = h.exec(h.ns[i], "env", f"SOFTRDMA_RUN={h.run_dirs[i]}", "SOFTRDMA_AUTOSTART=0", sys.executable, "-m",
               "softrdma", "rdma", *args, check=False)
    assert r.returncode == 0, (args, r.stdout, r.stderr)
    return r.stdout


def _pingpong(h: TwoHosts) -> None:
    """ibv_rc_pingpong, 16 KiB messages (16 packets each at path MTU 1024),
    client in namespace A, server in B."""
    h.pingpong(["-g", "1", "-s", "16384", "-n", "10", "-m", "1024"])


def _captured_from_a(h: TwoHosts, gso: str) -> list[bytes]:
    _rdma(h, 0, "link", "delete", "rxe0")
    _rdma(h, 0, "link", "add", "rxe0", "type", "rxe", "netdev", h.dev[0], "gso", gso)
    assert ("gso off" in _rdma(h, 0, "link", "show")) == (gso == "off")
    cap = h.popen(1, [sys.executable, CAPTURE, h.dev[1]], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                  text=True)
    try:
        assert cap.stdout.readline().strip() == "ready"
        _pingpong(h)
        out, _ = cap.communicate(input="", timeout=30)        # stdin closed: it prints the frames
    finally:
        if cap.poll() is None:
            cap.kill()
            cap.wait()
    src = socket.inet_aton(h.ip[0])
    return [ip for ip in (bytes.fromhex(json.loads(line)["ip"]) for line in out.splitlines()) if ip[12:16] == src]


def _check(ip: bytes) -> tuple[bool, bool]:
    """(glued: longer than the link MTU, ICRC FULL over its own header)."""
    ihl = (ip[0] & 0xF) * 4
    total = struct.unpack_from(">H", ip, 2)[0]
    sport, dport, ulen = struct.unpack_from(">HHH", ip, ihl)
    verdict, _ = verify(ip[ihl + 8:ihl + ulen], ip_hdr=ip[:ihl], sport=sport, dport=dport)
    return total > MTU, verdict is Verdict.FULL


def test_gso_off_puts_single_packets_on_the_wire():
    need_root()
    h = TwoHosts(mtu=MTU)
    try:
        h.start_daemons()
        on = [_check(ip) for ip in _captured_from_a(h, "on")]
        off = [_check(ip) for ip in _captured_from_a(h, "off")]
    finally:
        h.close()
    # gso on: the veth shows GSO sends whole, their "ICRC" wrong for the glued datagram
    assert any(glued and not full for glued, full in on), on
    # gso off: 10 x 16 packets and the ACKs, all single packets with a valid ICRC
    assert len(off) >= 160, len(off)
    assert not any(glued for glued, _ in off) and all(full for _, full in off), off
    print(f"gso on: {sum(g for g, _ in on)} of {len(on)} captured datagrams glued; gso off: {len(off)} single "
          f"packets, all ICRC FULL")
