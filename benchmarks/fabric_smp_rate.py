#!/usr/bin/env python3
"""SMP round trips per second through a fabric server: the real ibsim vs `softrdma fabric serve`.

One client sends directed-route NodeInfo Gets to every node of a fat tree,
``--window`` in flight, for ``--seconds``; the rate is answered SMPs per
second of wall time.  Both servers get the same topology file, one after the
other, in this run.

The client (``--client``):
  lean     (default) prebuilt requests, sent and read in batches with one
           sendmmsg/recvmmsg each, every answer checked (a GetResp with status
           0): the least client work per SMP.  It sleeps in select() when its
           socket is empty, as the diags and opensm block in their reads.
  diag     softrdma's ibsim client as the diags use it (a MAD agent with
           TIDs, timers and one send per request): the client costs more per
           SMP than either server, so at windows 16 and 64 it measures mostly
           the client.
``--client-poll-us N``: the lean client reads again for N us before it sleeps
when its socket is empty (a client that polls, as a busy SM would).
``--reads``: the lean client also prints how its reads went (how many, how
many found the socket empty, how many answers the others found).

    python3 benchmarks/fabric_smp_rate.py ft2 --leaves 64 --spines 32 --hosts-per-leaf 32 --radix 64
        [--window 1,16,64] [--seconds 3] [--rounds 3] [--client lean|diag] [--client-poll-us N] [--reads]

Needs ibsim-utils (for the real ibsim).
"""

from __future__ import annotations

import argparse
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "src"))

from softrdma.fabric import topo  # noqa: E402
from softrdma.fabric._sendmmsg import recvmmsg, sendmmsg  # noqa: E402
from softrdma.tools.ibdiag.rpc import MadPort, PortId  # noqa: E402
from softrdma.wire import ibsim, smp  # noqa: E402
from softrdma.wire.mad import Method  # noqa: E402

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


MAD_STATUS = ibsim.SIM_REQUEST_HDR + 4    # the answer's MAD status (DR: the D bit on top)
MAD_METHOD = ibsim.SIM_REQUEST_HDR + 3


def lean_rate(port: MadPort, paths, window: int, seconds: float, poll_us: int = 0,
              reads: dict | None = None) -> float:
    """``window`` requests in flight on the client's socket, one new request
    for each answer; only answers that are a NodeInfo GetResp with status 0
    count.  Drains what is in flight at the end.  ``poll_us``: with nothing to
    read, read again for that long before sleeping in select().  ``reads``:
    counts the reads by the number of answers each found (0: empty)."""
    fd = port.port.fileno()
    reqs = [ibsim.build_request(0xFFFF, 0xFFFF, 0, 0, smp.build_dr_smp(
        Method.GET, smp.SmpAttr.NODE_INFO, p, tid=i + 1)) for i, p in enumerate(paths)]
    nreq, nxt = len(reqs), 0
    good = bad = 0
    inflight = 0

    def send(n: int) -> int:
        nonlocal nxt
        batch = [reqs[(nxt + k) % nreq] for k in range(n)]
        try:
            sent = sendmmsg(fd, batch)
        except BlockingIOError:
            sent = 0
        nxt = (nxt + sent) % nreq
        return sent

    t0 = time.perf_counter()
    end = t0 + seconds
    inflight += send(window)
    now = t0
    while now < end or inflight:
        got = recvmmsg(fd, 64, 512)
        if reads is not None:
            reads[len(got)] = reads.get(len(got), 0) + 1
        if not got and poll_us:
            until = time.perf_counter() + poll_us * 1e-6
            while not got and time.perf_counter() < until:
                got = recvmmsg(fd, 64, 512)
        if not got:
            if not select.select([fd], [], [], 2.0)[0]:
                raise SystemExit(f"no answer for 2 s ({inflight} in flight)")
            continue
        inflight -= len(got)
        now = time.perf_counter()
        for a in got:
            if a[MAD_METHOD] == Method.GET_RESP and not (a[MAD_STATUS] & 0x7F or a[MAD_STATUS + 1]):
                good += 1
            else:
                bad += 1
        if now < end:
            while inflight < window:
                sent = send(window - inflight)
                if not sent:
                    break
                inflight += sent
    if bad:
        raise SystemExit(f"{bad} answers not a NodeInfo GetResp with status 0")
    return good / (now - t0)


def serve_and_measure(server: str, work: str, net: str, paths, windows, seconds: float,
                      client: str = "lean", poll_us: int = 0, show_reads: bool = False) -> list[float]:
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
            if client == "lean":
                rates = []
                for w in windows:
                    reads = {} if show_reads else None
                    rates.append(lean_rate(port, paths, w, seconds, poll_us, reads))
                    if reads:
                        n, empty = sum(reads.values()), reads.get(0, 0)
                        mean = sum(k * v for k, v in reads.items()) / max(1, n - empty)
                        most = max((k for k in reads if k), key=reads.get, default=0)
                        print(f"  {server} window {w}: {n} reads, {100 * empty / n:.1f} % empty, "
                              f"{mean:.1f} answers per other read (most often {most})", flush=True)
                return rates
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
    ap.add_argument("--client", choices=["lean", "diag"], default="lean",
                    help="lean: batched prebuilt requests (the server's rate); diag: the diags' MAD client")
    ap.add_argument("--client-poll-us", type=int, default=0, metavar="N",
                    help="lean: with nothing to read, read again for N us before sleeping (default 0)")
    ap.add_argument("--reads", action="store_true", help="lean: print how the client's reads went")
    args, gen_args = ap.parse_known_args()
    windows = [int(w) for w in args.window.split(",")]
    with tempfile.TemporaryDirectory() as work:
        net = os.path.join(work, "t.net")
        subprocess.run([sys.executable, GEN, args.kind, *gen_args, "-o", net], check=True,
                       stdout=subprocess.DEVNULL)
        paths = dr_paths(net)
        poll = f", polling {args.client_poll_us} us before it sleeps" if args.client_poll_us else ""
        print(f"{len(paths)} nodes; DR NodeInfo Gets, one {args.client} client{poll}")
        figures = {"ibsim": [], "softrdma": []}
        for n in range(args.rounds):
            for server, rows in figures.items():
                rows.append(serve_and_measure(server, work, net, paths, windows, args.seconds, args.client,
                                              args.client_poll_us, args.reads))
                print(f"round {n} {server:9s} " + "  ".join(f"window {w:3d}: {r:8.0f} SMPs/s"
                                                            for w, r in zip(windows, rows[-1])), flush=True)
        for i, w in enumerate(windows):
            ours = [r[i] for r in figures["softrdma"]]
            theirs = [r[i] for r in figures["ibsim"]]
            print(f"window {w:3d}: softrdma / ibsim, median {statistics.median(ours) / statistics.median(theirs):.2f}"
                  f" (per round {', '.join(f'{a / b:.2f}' for a, b in zip(ours, theirs))})")


if __name__ == "__main__":
    main()
