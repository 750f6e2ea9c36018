"""rsocket streaming and ping-pong against plain TCP and perftest on the
same path, in the same run:

    python benchmarks/rsocket_bench.py [--host 127.0.0.1] [--count 2000] [--iters 5000]

Runs, each as a server and a client process on the daemon of
$SOFTRDMA_RUN: ``softrdma rstream`` over rsockets and with ``-T s``
(TCP) for 64 KiB transfers (bandwidth) and 64-byte ping-pongs
(blocking, latency), then ``softrdma ib_write_bw -s 65536`` and
``softrdma ib_send_lat -s 64``.  Prints one line per run and the
rsocket/ib_write_bw ratio.  rstream counts both directions of its
exchange; its Gb/sec is converted to MB/s.
"""

from __future__ import annotations

import argparse
import re
import socket
import subprocess
import sys
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def pair(server: list[str], client: list[str], ready: str | None = None) -> str:
    srv = subprocess.Popen(server, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        if ready:
            while ready not in (srv.stdout.readline() or ready):
                pass
        else:
            time.sleep(2)             # perftest's server prints nothing before it listens
        cli = subprocess.run(client, capture_output=True, text=True, timeout=300)
        srv.wait(timeout=300)
    finally:
        if srv.poll() is None:
            srv.kill()
            srv.wait()
    return cli.stdout


def rstream(host, extra, sockets: bool):
    port = str(free_port())
    base = [sys.executable, "-m", "softrdma", "rstream", "-p", port, *extra] + (["-T", "s"] if sockets else [])
    out = pair(base, [*base, "-s", host], ready="name")
    row = out.splitlines()[-1].split()
    return float(row[-2]) * 1000 / 8, float(row[-1])          # MB/s, usec/xfer


def perftest(tool, host, extra):
    port = str(free_port())
    base = [sys.executable, "-m", "softrdma", tool, "-p", port, *extra]
    return pair(base, [*base, host])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--iters", type=int, default=5000)
    a = ap.parse_args()
    bw = ["-S", "65536", "-C", str(a.count)]
    lat = ["-S", "64", "-C", "1", "-I", str(a.iters), "-T", "b"]
    rs_bw, _ = rstream(a.host, bw, False)
    tcp_bw, _ = rstream(a.host, bw, True)
    _, rs_lat = rstream(a.host, lat, False)
    _, tcp_lat = rstream(a.host, lat, True)
    wbw = perftest("ib_write_bw", a.host, ["-s", "65536", "-n", str(a.count)])
    m = re.search(r"^\s*65536\s+\d+\s+[\d.]+\s+([\d.]+)", wbw, re.M)
    ib_bw = float(m.group(1)) * (1 << 20) / 1e6 if m else float("nan")
    slat = perftest("ib_send_lat", a.host, ["-s", "64", "-n", str(a.iters)])
    m = re.search(r"^\s*64\s+\d+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+([\d.]+)", slat, re.M)
    ib_lat = float(m.group(1)) if m else float("nan")
    print(f"stream 64 KiB   rsocket {rs_bw:8.1f} MB/s   TCP {tcp_bw:8.1f} MB/s   ib_write_bw {ib_bw:8.1f} MB/s"
          f"   rsocket/ib_write_bw {rs_bw / ib_bw:5.0%}")
    print(f"ping-pong 64 B  rsocket {rs_lat:8.2f} us     TCP {tcp_lat:8.2f} us     ib_send_lat {ib_lat:8.2f} us (t_avg)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
