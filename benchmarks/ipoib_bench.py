#!/usr/bin/env python3
"""TCP over IPoIB beside RDMA between the same two IB hosts, in one run:
a TCP stream over ``ib0`` in datagram mode (MTU 2044) and in connected
mode (MTU 65520, RC connections; Python sockets, one connection, 1 MiB
writes) and ``ib_write_bw -s 65536`` over the same IB devices (mlx5_0 on
CAs h1 and h2 of a ``softrdma fabric serve`` topology, one switch apart,
LIDs from ``softrdma opensm``), alternating.

    sudo python3 benchmarks/ipoib_bench.py
    sudo python3 benchmarks/ipoib_bench.py --rounds 5 --mbytes 400

Prints every figure, the medians, and TCP over IPoIB in each mode as a
share of RDMA WRITE bandwidth.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, HERE)

from ib_bench import bench_args, runners, two_ib_hosts  # noqa: E402
from perftest_bench import parse_table, run_pair  # noqa: E402

IB_IP = ("10.79.0.1", "10.79.0.2")

RECEIVER = """
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1); print("listening", flush=True)
c, _ = s.accept(); n = 0; t0 = None
while True:
    b = c.recv(1 << 20)
    if not b:
        break
    if t0 is None:
        t0 = time.monotonic()
    n += len(b)
print(n, time.monotonic() - t0, flush=True)
"""
SENDER = """
import socket, sys
buf = bytes(1 << 20); n = int(sys.argv[3])
c = socket.create_connection((sys.argv[1], int(sys.argv[2])))
for _ in range(n):
    c.sendall(buf)
c.close()
"""


def tcp_round(hosts, mbytes: int) -> float:
    """MB/s of one TCP stream of ``mbytes`` MiB over ib0, host 0 to host 1."""
    from wait_helpers import free_port
    port = str(free_port())
    rx = hosts.popen(1, [sys.executable, "-c", RECEIVER, IB_IP[1], port], stdout=subprocess.PIPE, text=True)
    try:
        assert rx.stdout.readline().strip() == "listening"
        tx = hosts.popen(0, [sys.executable, "-c", SENDER, IB_IP[1], port, str(mbytes)])
        tx.wait(600)
        n, secs = rx.stdout.readline().split()
        rx.wait(60)
        assert int(n) == mbytes << 20
        return int(n) / float(secs) / 1e6
    finally:
        for p in (rx,):
            if p.poll() is None:
                p.kill()


def main() -> int:
    a = bench_args(__doc__, lambda ap: ap.add_argument("--mbytes", type=int, default=200, help="MiB per TCP round"))
    from ib_helpers import control
    from wait_helpers import wait_for
    with two_ib_hosts("ipoib_bench-", ["--ipoib"]) as (fab, hosts, _):
        for i, rd in enumerate(hosts.run_dirs):
            fab.wait_active(rd)
            hosts.exec(hosts.ns[i], "ip", "addr", "add", f"{IB_IP[i]}/24", "dev", "ib0")
            wait_for(lambda rd=rd: control(rd, "ipoib", action="show")["interfaces"][0]["carrier"], 60, "carrier")
        def mode(m: str) -> int:
            for rd in hosts.run_dirs:
                r = control(rd, "ipoib", action="set", ifname="ib0", attr="mode", value=m)
                assert r["errno"] == 0, r
            return r["interfaces"][0]["mtu"]

        srv, cli = runners(hosts)
        got: dict[str, list] = {"datagram": [], "connected": [], "rdma": []}
        for r in range(a.rounds):
            for m in ("datagram", "connected"):
                mtu = mode(m)
                v = tcp_round(hosts, a.mbytes)
                got[m].append(v)
                print(f"round {r + 1} TCP over ib0, {m} mode (MTU {mtu}): {v:,.1f} MB/s", flush=True)
            row = parse_table(run_pair("ib_write_bw", ["-d", "mlx5_0", "-F", "-s", "65536", "-n", str(a.iters)],
                                       srv, cli), False)[-1]
            v = row["bw_avg_MiBps"] * (1 << 20) / 1e6
            got["rdma"].append(v)
            print(f"round {r + 1} ib_write_bw -s 65536: {v:,.1f} MB/s", flush=True)
        med = {k: statistics.median(v) for k, v in got.items()}
        print()
        for m in ("datagram", "connected"):
            print(f"TCP over ib0, {m} mode: median {med[m]:,.1f} MB/s of {', '.join(f'{v:,.1f}' for v in got[m])}")
        print(f"ib_write_bw 64 KiB: median {med['rdma']:,.1f} MB/s of {', '.join(f'{v:,.1f}' for v in got['rdma'])}")
        for m in ("datagram", "connected"):
            print(f"TCP over IPoIB ({m}) / RDMA WRITE: {med[m] / med['rdma']:.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
