#!/usr/bin/env python3
"""Native IB packets per second through `softrdma fabric serve`'s data socket.

A fabric server (in a child process) on a 2-switch, 4-CA topology whose
LIDs and LFTs are set as an SM would; two device ports attached as raw
``wire.fabriclink`` clients (one sending PACKETS batches as fast as the
socket takes them, one counting what arrives) across the switch hop.
Prints the packets and bytes per second delivered and the server's CPU
seconds per packet -- the fabric's own cost, which the sender can hide
when it is the slower side.

    python3 benchmarks/fabric_forward.py [--size 4096] [--seconds 5]
    python3 benchmarks/fabric_forward.py --latency      # one packet there and back, twice through
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "src"))
sys.path.insert(0, os.path.join(ROOT, "tests"))

from ibfabric_helpers import LID, NET_2SW, FakeDevice, data_packet, program  # noqa: E402
from softrdma.fabric import topo  # noqa: E402
from softrdma.fabric.server import Server  # noqa: E402
from softrdma.wire import fabriclink  # noqa: E402


def serve(path: str, stop, cpu) -> None:
    f = topo.loads(NET_2SW)
    program(f)
    s = Server(f, f"fabfwd{os.getpid()}", data_socket=path)
    c0 = time.process_time()
    while not stop.is_set():
        s.run_once(0.05)
    cpu.value = time.process_time() - c0
    s.close()


def echo(path: str) -> None:
    b = FakeDevice(path, "h4", name="echo")
    b.wait(lambda: b.infos)
    back = fabriclink.pack_packets([data_packet(LID["h1"], LID["h4"], b"pong")])
    b.sock.settimeout(None)
    while True:
        m = b.sock.recv(fabriclink.MAX_MESSAGE + 64)
        if not m:
            return
        if fabriclink.msg_type(m) == fabriclink.MsgType.PACKETS:
            b.sock.send(back)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=4096, help="payload bytes per packet")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--latency", action="store_true", help="round trips instead of a stream")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="fabfwd")
    path = os.path.join(tmp, "fab.data")
    stop, cpu = mp.Event(), mp.Value("d", 0.0)
    srv = mp.Process(target=serve, args=(path, stop, cpu))
    srv.start()
    while not os.path.exists(path):
        time.sleep(0.02)
    procs = [srv]
    try:
        a_dev = FakeDevice(path, "h1", name="sender")
        a_dev.wait(lambda: a_dev.infos)
        if a.latency:
            e = mp.Process(target=echo, args=(path,))
            e.start()
            procs.append(e)
            msg = fabriclink.pack_packets([data_packet(LID["h4"], LID["h1"], b"ping")])
            a_dev.sock.settimeout(None)
            time.sleep(0.3)                       # the echo port attaches
            rtts = []
            end = time.monotonic() + a.seconds
            while time.monotonic() < end:
                t = time.perf_counter()
                a_dev.sock.send(msg)
                while fabriclink.msg_type(a_dev.sock.recv(70000)) != fabriclink.MsgType.PACKETS:
                    pass
                rtts.append(time.perf_counter() - t)
            rtts.sort()
            print(f"round trip h1 -> h4 -> h1 (the fabric twice): median "
                  f"{statistics.median(rtts) * 1e6:.1f} us, p10 {rtts[len(rtts) // 10] * 1e6:.1f}, "
                  f"p90 {rtts[len(rtts) * 9 // 10] * 1e6:.1f} ({len(rtts)} round trips)")
            return 0
        b_dev = FakeDevice(path, "h4", name="receiver")
        b_dev.wait(lambda: b_dev.infos)
        pkt = data_packet(LID["h4"], LID["h1"], os.urandom(a.size))
        per = max(1, (fabriclink.MAX_MESSAGE - 64) // (len(pkt) + 2))
        msg = fabriclink.pack_packets([pkt] * per)
        got = [0]

        def rx():
            b_dev.sock.settimeout(2)
            try:
                while True:
                    m = b_dev.sock.recv(fabriclink.MAX_MESSAGE + 64)
                    got[0] += m[2] << 8 | m[3]
            except OSError:
                pass
        t = threading.Thread(target=rx)
        t.start()
        sent = 0
        t0 = time.monotonic()
        while time.monotonic() - t0 < a.seconds:
            a_dev.sock.send(msg)
            sent += per
        t.join()
        stop.set()
        srv.join(10)
        n = got[0]
        print(f"{a.size} B payload, {per} packets a message: sent {sent}, delivered {n}: "
              f"{n / a.seconds:,.0f} packets/s, {n * a.size / a.seconds / 1e6:,.0f} MB/s; "
              f"server CPU {cpu.value:.2f} s = {cpu.value / max(n, 1) * 1e6:.2f} us a packet")
        return 0
    finally:
        stop.set()
        for p in procs:
            p.join(5)
            if p.is_alive():
                p.terminate()
                p.join()


if __name__ == "__main__":
    sys.exit(main())
