#!/usr/bin/env python3
"""SMP round trips per second through a fabric server: the real ibsim vs `softrdma fabric serve`.

One client (softrdma's ibsim client, as the diags use it) sends directed-route
NodeInfo Gets to every node of a fat tree, ``--window`` in flight, for
``--seconds``; the rate is answered SMPs per second of wall time.  Both
servers get the same topology file, one after the other, in this run.

    python3 benchmarks/fabric_smp_rate.py ft2 --leaves 64 --spines 32 --hosts-per-leaf 32 --radix 64
        [--window 1,16,64] [--seconds 3] [--rounds 3]

Needs ibsim-utils (for the real ibsim).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "src"))

from softrdma.fabric import topo  # noqa: E402
from softrdma.tools.ibdiag.rpc import MadPort, PortId  # noqa: E402
from softrdma.wire import smp  # noqa: E402

GEN = os.path.join(ROOT, "tests", "data", "opensm", "gen_fattree.py")


def dr_paths(net: str) -> list[tuple[int, ...]]:
    """A directed route from the first CA to every node (BFS over the .net's links)."""
    fab = topo.load(net)
    start = fab.nodes[0]
    paths = {start: ()}
    queue = [start]
    for node in queue:
        for p in node.ports:
            if p is None or p.num == 0 or p.remote is None:
                continue
            other = p.remote.node
            if other not in paths:
                paths[other] = paths[node] + (p.num,)
                queue.append(other)
    return [paths[n] for n in fab.nodes]


def rate(port: MadPort, paths, window: int, seconds: float) -> float:
    n = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        reqs = [port.smp_request(PortId(0, p), smp.SmpAttr.NODE_INFO) for p in paths[:4 * window]]
        answers = port.rpc_many(reqs, window=window)
        n += sum(1 for a in answers if a is not None)
    return n / (time.perf_counter() - t0)


def serve_and_measure(server: str, work: str, net: str, paths, windows, seconds: float) -> list[float]:
    """A fresh server on the topology, one client, the rate at each window."""
    base = f"rate{os.getpid()}{server}"
    env = dict(os.environ, IBSIM_SOCKNAME=base, PYTHONPATH=os.path.join(ROOT, "src"))
    env.pop("LD_PRELOAD", None)
    cmd = ["ibsim", "-s", "-N", "16384", "-S", "4096", "-P", "65536", "-n", net] if server == "ibsim" else \
        [sys.executable, "-m", "softrdma", "fabric", "serve", net, "--no-console"]
    srv = subprocess.Popen(cmd, cwd=work, env=env, stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        end = time.monotonic() + 120
        while f"@{base}:ctl".encode() not in open("/proc/net/unix", "rb").read():
            if time.monotonic() > end or srv.poll() is not None:
                raise SystemExit(f"{server} did not start")
            time.sleep(0.1)
        os.environ["IBSIM_SOCKNAME"] = base
        port = MadPort(timeout_ms=2000)
        try:
            return [rate(port, paths, w, seconds) for w in windows]
        finally:
            port.close()
    finally:
        srv.terminate()
        srv.wait(10)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kind", choices=["ft2", "ft3"])
    ap.add_argument("--window", default="1,16,64")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=1, help="rounds, the two servers alternating (default 1)")
    args, gen_args = ap.parse_known_args()
    windows = [int(w) for w in args.window.split(",")]
    with tempfile.TemporaryDirectory() as work:
        net = os.path.join(work, "t.net")
        subprocess.run([sys.executable, GEN, args.kind, *gen_args, "-o", net], check=True,
                       stdout=subprocess.DEVNULL)
        paths = dr_paths(net)
        print(f"{len(paths)} nodes; DR NodeInfo Gets, one client")
        figures = {"ibsim": [], "softrdma": []}
        for n in range(args.rounds):
            for server, rows in figures.items():
                rows.append(serve_and_measure(server, work, net, paths, windows, args.seconds))
                print(f"round {n} {server:9s} " + "  ".join(f"window {w:3d}: {r:8.0f} SMPs/s"
                                                            for w, r in zip(windows, rows[-1])), flush=True)
        for i, w in enumerate(windows):
            ours = [r[i] for r in figures["softrdma"]]
            theirs = [r[i] for r in figures["ibsim"]]
            print(f"window {w:3d}: softrdma / ibsim, median {statistics.median(ours) / statistics.median(theirs):.2f}"
                  f" (per round {', '.join(f'{a / b:.2f}' for a, b in zip(ours, theirs))})")


if __name__ == "__main__":
    main()
