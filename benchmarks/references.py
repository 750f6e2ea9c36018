"""The references perftest_bench.py measures softrdma against, in the same run.

* ``memcpy_rate``: a memoryview copy -- the ceiling of one daemon, which
  moves a same-daemon message as one copy between two applications' memory.
* ``udp_gso_blast``: what the kernel carries for a Python process across the
  same path as the two daemons (the veth between the namespaces): a Python
  sender with UDP GSO (UDP_SEGMENT: ~64 KiB sends cut into MTU-sized
  datagrams) and a Python receiver with UDP GRO (a run of datagrams per
  ``recv``); the receiver's rate is the reference.  The strongest a Python
  process gets from UDP sockets: the old plain blast (one ``sendto`` per
  1 KiB datagram) measured the per-call cost of Python, not the path.
* ``udp_pingpong``: one-way latency of a Python UDP ping-pong across the same
  path (round trip / 2), the floor of a cross-daemon ``ib_write_lat``.

Each side runs as its own process (``spawn(side, argv)``: side 0 sends, side
1 receives), in its namespace when there are two.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

IP_UDP_HDR = 20 + 8
UDP_MAX_PAYLOAD = 65507


def memcpy_rate(size: int, reps: int) -> float:
    """Bytes/s of ``dst[:] = src`` between two memoryviews, best of 3."""
    src, dst = memoryview(bytearray(os.urandom(size))), memoryview(bytearray(size))
    best = 0.0
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(reps):
            dst[:] = src
        best = max(best, size * reps / (time.perf_counter() - t))
    return best


_GSO = r"""
import socket, struct, sys, time
mode, host, port, seg, secs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
SOL_UDP, UDP_SEGMENT, UDP_GRO = 17, 103, 104
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
if mode == "rx":
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    try:
        s.setsockopt(SOL_UDP, UDP_GRO, 1)
        gro = 1
    except OSError:
        gro = 0
    s.bind((host, port)); s.settimeout(0.5)
    print("ready", flush=True)
    buf = bytearray(65536); got = calls = 0; t0 = t1 = None; give_up = time.perf_counter() + 30
    recv_into = s.recv_into
    while True:
        try:
            n = recv_into(buf)
        except socket.timeout:
            if t0 is not None or time.perf_counter() > give_up: break
            continue
        if t0 is None:
            t0 = time.perf_counter()
        else:
            got += n; calls += 1                      # the first one only starts the clock
        t1 = time.perf_counter()
    print(got / (t1 - t0) if t0 is not None and t1 > t0 else 0.0, calls, gro, flush=True)
else:
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
    size = (65507 // seg) * seg
    payload = bytes(size); sent = calls = 0
    cm = [(SOL_UDP, UDP_SEGMENT, struct.pack("=H", seg))]
    sendmsg, addr = s.sendmsg, (host, port)
    end = time.perf_counter() + secs; t0 = time.perf_counter()
    while time.perf_counter() < end:
        for _ in range(64):
            try:
                sendmsg([payload], cm, 0, addr)
                sent += size; calls += 1
            except OSError:                           # ENOBUFS under pressure: the kernel's limit
                pass
    print(sent / (time.perf_counter() - t0), calls, size, flush=True)
"""


def udp_gso_blast(spawn, dst: str, mtu: int, secs: float = 2.0) -> dict:
    """Sender and receiver rates (bytes/s) of a Python UDP GSO blast to
    ``dst``: sends of as many MTU-sized segments as fit a UDP datagram."""
    port = 47000 + (os.getpid() % 1000)
    seg = mtu - IP_UDP_HDR
    rx = spawn(1, [sys.executable, "-c", _GSO, "rx", dst, str(port), "0", "0"])
    rx.stdout.readline()
    tx = spawn(0, [sys.executable, "-c", _GSO, "tx", dst, str(port), str(seg), str(secs)])
    sent, sends, size = tx.communicate(timeout=60)[0].split()
    got, recvs, gro = rx.communicate(timeout=60)[0].split()
    return {"sent_Bps": float(sent), "received_Bps": float(got), "segment": seg, "send_bytes": int(size),
            "sends": int(sends), "recvs": int(recvs), "gro": bool(int(gro))}


_PINGPONG = r"""
import socket, sys, time
mode, host, port, size, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
if mode == "srv":
    s.bind((host, port)); s.settimeout(30)
    print("ready", flush=True)
    buf = bytearray(65536)
    try:
        while True:
            k, a = s.recvfrom_into(buf)
            s.sendto(memoryview(buf)[:k], a)
    except socket.timeout:
        pass
else:
    s.connect((host, port)); s.settimeout(2)
    msg = bytes(size); rtt = []
    for i in range(n + n // 10):                     # the first tenth warms up
        t = time.perf_counter()
        s.send(msg)
        s.recv(65536)
        if i >= n // 10:
            rtt.append(time.perf_counter() - t)
    rtt.sort()
    print(rtt[0] / 2 * 1e6, rtt[len(rtt) // 2] / 2 * 1e6, rtt[int(len(rtt) * 0.99)] / 2 * 1e6, flush=True)
"""


def udp_pingpong(spawn, dst: str, size: int = 2, n: int = 20000) -> dict:
    """One-way latency (round trip / 2, us) of a Python UDP ping-pong of
    ``size`` bytes: min, median (as perftest's t_typical), 99th percentile."""
    port = 48000 + (os.getpid() % 1000)
    srv = spawn(1, [sys.executable, "-c", _PINGPONG, "srv", dst, str(port), "0", "0"])
    try:
        srv.stdout.readline()
        cli = spawn(0, [sys.executable, "-c", _PINGPONG, "cli", dst, str(port), str(size), str(n)])
        t_min, t_typical, p99 = (float(x) for x in cli.communicate(timeout=120)[0].split())
    finally:
        srv.kill()
        srv.wait()
    return {"bytes": size, "t_min": t_min, "t_typical": t_typical, "p99": p99}


def local_spawn(side: int, argv: list[str]) -> subprocess.Popen:
    """Both sides in this namespace (loopback)."""
    return subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
