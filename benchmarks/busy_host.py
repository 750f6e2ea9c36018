#!/usr/bin/env python3
"""RC on a busy host: ib_write_bw across two daemons in two network
namespaces while CPU-bound processes oversubscribe the cores.

    sudo python3 benchmarks/busy_host.py                 # -s 65536 -D 600, 4 CPU hogs, lossless veth
    sudo python3 benchmarks/busy_host.py -D 120 --hogs 4 --loss 10

The daemons are descheduled for tens of milliseconds at a time; a run that
ends without IBV_WC_RETRY_EXC_ERR (exit status 0) is what this shows.  It
prints perftest's table, each daemon's retransmission counters and the
wall time; exit status 1 if the client failed.  Needs root (network
namespaces, as tests/netns_helpers.py builds them) and, for --loss,
nftables.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

from netns_helpers import TwoHosts  # noqa: E402

COUNTERS = ("sent_pkts", "rcvd_pkts", "completer_retry_err", "retry_exceeded_err",
            "duplicate_request", "out_of_seq_request", "rcvd_seq_err")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _counters(hosts: TwoHosts, i: int) -> str:
    """The daemon's retransmission counters, as `rdma statistic` shows them."""
    p = hosts.popen(i, [sys.executable, "-m", "softrdma", "rdma", "statistic", "show", "link", "rxe0/1"],
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = p.communicate(timeout=60)[0].split()
    return " ".join(f"{k} {v}" for k, v in zip(out, out[1:]) if k in COUNTERS)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-D", "--duration", type=int, default=600, help="ib_write_bw -D (seconds)")
    ap.add_argument("-s", "--size", type=int, default=65536, help="ib_write_bw -s (bytes)")
    ap.add_argument("--hogs", type=int, default=4, help="CPU-bound processes to run beside the daemons")
    ap.add_argument("--loss", type=int, default=0, help="percent of RoCE packets the kernel drops in each netns")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("busy_host.py: needs root (network namespaces)", file=sys.stderr)
        return 2
    os.environ["PYTHONUNBUFFERED"] = "1"          # the server's "Waiting for client" line, at once
    hosts = TwoHosts()
    hogs: list[subprocess.Popen] = []
    procs: list[subprocess.Popen] = []
    try:
        hosts.start_daemons()
        if args.loss:
            for ns in hosts.ns:
                rules = ("add table inet softrdma_bench\n"
                         "add chain inet softrdma_bench in { type filter hook input priority 0; }\n"
                         f"add rule inet softrdma_bench in udp dport 4791 numgen random mod 100 < {args.loss} "
                         "counter drop\n")
                subprocess.run(["ip", "netns", "exec", ns, "nft", "-f", "-"], input=rules, text=True, check=True)
        hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.hogs)]
        port = str(_free_port())
        perf = ["-d", "rxe0", "-x", "1", "-s", str(args.size), "-D", str(args.duration), "-p", port]
        srv = hosts.popen(1, [sys.executable, "-m", "softrdma", "ib_write_bw", *perf], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
        procs.append(srv)
        srv_out: list[str] = []
        ready = threading.Event()

        def read_server():
            for line in srv.stdout:
                srv_out.append(line)
                if "Waiting for client" in line:
                    ready.set()
            ready.set()
        threading.Thread(target=read_server, daemon=True).start()
        if not ready.wait(120) or srv.poll() not in (None, 0):
            print("".join(srv_out), file=sys.stderr)
            return 1
        print(f"ib_write_bw {' '.join(perf)} with {args.hogs} CPU hogs, {args.loss}% loss, "
              f"{os.cpu_count()} CPUs", flush=True)
        t0 = time.monotonic()
        cli = hosts.popen(0, [sys.executable, "-m", "softrdma", "ib_write_bw", *perf, hosts.ip[1]],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(cli)
        out, err = cli.communicate(timeout=args.duration + 600)
        wall = time.monotonic() - t0
        try:
            srv.wait(60)
        except subprocess.TimeoutExpired:
            pass
        print(out, end="")
        if cli.returncode:
            print(err, file=sys.stderr)
        for i, name in enumerate(("client", "server")):
            print(f"{name} daemon: {_counters(hosts, i)}")
        print(f"client exit status {cli.returncode}, {wall:.0f} s wall", flush=True)
        return 0 if cli.returncode == 0 else 1
    finally:
        for p in hogs + procs:
            if p.poll() is None:
                p.kill()
        for p in hogs + procs:
            p.wait()
        hosts.close()


if __name__ == "__main__":
    sys.exit(main())
