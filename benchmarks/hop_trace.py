#!/usr/bin/env python3
"""Where one round trip of ``ib_write_lat`` across two daemons goes, hop by
hop: each process stamps the moments a message passes through it
(``benchmarks/hop_trace/sitecustomize.py``, CLOCK_MONOTONIC, one clock for
every namespace), and the stamps of one round trip are chained:

    app A posts WRITE i -> daemon A finds it on its ring -> daemon A's sendmsg
    -> daemon B's read returns it -> daemon B has placed it -> app B posts
    (it saw the byte) -> daemon B finds it -> sendmsg -> daemon A's read ->
    placed -> app A posts WRITE i+1 (it saw the byte)

and, beside it, the ACK of WRITE i (daemon B's sendmsg of the ACK -> daemon
A's read -> app A's poll_cq returns the completion), which app A waits for
too.  Prints each hop's median and p90 in microseconds, for each placement.

    sudo python3 benchmarks/hop_trace.py [-n 3000] [--rounds 2] [--placement asis,placed,hosts]

Placements: ``asis`` (no pinning), ``placed`` (both daemons ``--cpu`` on the
last CPU with ``--spin-us 5``, as perftest_bench.py's placed run, both
applications ``taskset`` on the others), ``placed-nospin`` (the same with
``--spin-us 0``), ``hosts`` (host A's daemon and application on the first
CPU, host B's on the last: each host a core; no spin budget).  Rounds alternate the placements.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import glob
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, HERE)

from perftest_bench import VETH_MTU, parse_table, placement, run_pair, start_daemon  # noqa: E402

OP_WRITE_ONLY, OP_ACK = 0x0A, 0x11

HOPS = (
    ("A post -> daemon A finds the WQE", "A.post", "dA.ring"),
    ("daemon A finds -> its sendmsg returns", "dA.ring", "dA.tx"),
    ("sendmsg -> daemon B's read (kernel, veth, B's wake-up)", "dA.tx", "dB.rx"),
    ("daemon B reads -> data placed", "dB.rx", "dB.rxdone"),
    ("placed -> app B posts (saw the byte)", "dB.rxdone", "B.post"),
    ("B post -> daemon B finds the WQE", "B.post", "dB.ring"),
    ("daemon B finds -> its sendmsg returns", "dB.ring", "dB.tx"),
    ("sendmsg -> daemon A's read (kernel, veth, A's wake-up)", "dB.tx", "dA.rx"),
    ("daemon A reads -> data placed", "dA.rx", "dA.rxdone"),
    ("placed -> app A posts (saw the byte)", "dA.rxdone", "A.post+1"),
)
ACK_HOPS = (
    ("daemon B reads WRITE i -> sends its ACK", "dB.rx", "dB.ack"),
    ("ACK sendmsg -> daemon A's read", "dB.ack", "dA.ackrx"),
    ("daemon A reads the ACK -> app A's poll_cq has the CQE", "dA.ackrx", "A.cqe"),
)


def load(trace_dir: str, run_a: str, run_b: str) -> dict[str, list[int]]:
    """Per stream (``dA.ring``, ``dB.tx``, ``A.post`` ...): sorted stamps (ns)."""
    s: dict[str, list[int]] = collections.defaultdict(list)
    for path in glob.glob(os.path.join(trace_dir, "*.txt")):
        name = os.path.basename(path)
        role = name.split("-", 1)[0]
        if role == "daemon":
            who = "dA" if f"-{run_a}-" in name else "dB" if f"-{run_b}-" in name else None
        else:
            who = {"appA": "A", "appB": "B"}.get(role)
        if who is None:
            continue
        for line in open(path):
            f = line.split()
            kind, t = f[0], int(f[1])
            if kind == "tx":
                op = int(f[2])
                kind = "tx" if op == OP_WRITE_ONLY else "ack" if op == OP_ACK else None
            elif kind == "rx":
                op = int(f[2])
                kind = "rx" if op == OP_WRITE_ONLY else "ackrx" if op == OP_ACK else None
            if kind:
                s[f"{who}.{kind}"].append(t)
    for v in s.values():
        v.sort()
    return s


def _next(s: list[int], t: int) -> int | None:
    i = bisect.bisect_left(s, t)
    return s[i] if i < len(s) else None


def chain(s: dict[str, list[int]], skip: int = 50) -> dict[str, list[float]]:
    """Each hop's durations (us) over the round trips whose chain is whole."""
    posts = s.get("A.post", [])
    out: dict[str, list[float]] = collections.defaultdict(list)
    for i in range(skip, len(posts) - 1):
        t = {"A.post": posts[i]}
        end = posts[i + 1]
        ok = True
        prev = posts[i]
        for _, a, b in HOPS[:-1]:
            nxt = _next(s.get(b, []), prev)
            if nxt is None or nxt > end:
                ok = False
                break
            t[b] = prev = nxt
        if not ok:
            continue
        t["A.post+1"] = end
        for name, a, b in HOPS:
            out[name].append((t[b] - t[a]) / 1e3)
        out["round trip (A post -> A post)"].append((end - posts[i]) / 1e3)
        # the ACK of WRITE i: after daemon B read it, before app A's next post
        ack = _next(s.get("dB.ack", []), t["dB.rx"])
        ackrx = _next(s.get("dA.ackrx", []), ack) if ack else None
        cqe = _next(s.get("A.cqe", []), ackrx) if ackrx else None
        if cqe is not None and cqe <= end:
            t.update({"dB.ack": ack, "dA.ackrx": ackrx, "A.cqe": cqe})
            for name, a, b in ACK_HOPS:
                out[name].append((t[b] - t[a]) / 1e3)
            out["A's CQE -> A's daemon placed B's write (negative: the ACK came first)"].append(
                (t["dA.rxdone"] - cqe) / 1e3)
    return out


def _pct(v: list[float], q: float) -> float:
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))]


def report(label: str, hops: dict[str, list[float]], rt_typ: float) -> None:
    n = len(hops.get("round trip (A post -> A post)", []))
    print(f"\n{label}: {n} whole round trips; ib_write_lat typical (one way) {rt_typ:.2f} us")
    print(f"| hop | median us | p90 us |\n|---|---|---|")
    for name in [h[0] for h in HOPS] + ["round trip (A post -> A post)"] + [h[0] for h in ACK_HOPS] + \
            ["A's CQE -> A's daemon placed B's write (negative: the ACK came first)"]:
        v = hops.get(name)
        if v:
            print(f"| {name} | {statistics.median(v):.1f} | {_pct(v, 0.9):.1f} |")


PLACEMENTS = ("asis", "placed", "placed-nospin", "hosts")


def one(place: str, iters: int, keep: str | None = None, more: tuple = ()) -> tuple[dict, float]:
    from netns_helpers import TwoHosts
    trace = tempfile.mkdtemp(prefix=f"hop-trace-{place}-", dir=keep)
    saved = dict(os.environ)
    os.environ["PYTHONPATH"] = os.path.join(HERE, "hop_trace") + (
        os.pathsep + saved["PYTHONPATH"] if saved.get("PYTHONPATH") else "")
    os.environ["SOFTRDMA_HOP_TRACE"] = trace
    hosts = TwoHosts(mtu=VETH_MTU)
    try:
        apps = {0: [], 1: []}
        dargs: list[str] = []
        if place in ("placed", "placed-nospin"):
            dargs, prefix = placement()
            dargs += ["--spin-us", "5" if place == "placed" else "0"]
            apps = {0: prefix, 1: prefix}
        if place == "hosts":
            cpus = sorted(os.sched_getaffinity(0))
            apps = {0: ["taskset", "-c", str(cpus[0])], 1: ["taskset", "-c", str(cpus[-1])]}
            # each daemon with its host's CPU: the two are started one by one
            for i in range(2):
                start_daemon(hosts, i, ["--cpu", apps[i][-1], "--spin-us", "0", *more])
        else:
            hosts.start_daemons([*dargs, *more])

        def srv(cmd):
            return hosts.popen(1, ["env", "SOFTRDMA_HOP_ROLE=appB", *apps[1], *cmd],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        def cli(cmd):
            return hosts.popen(0, ["env", "SOFTRDMA_HOP_ROLE=appA", *apps[0], *cmd, hosts.ip[1]],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        rows = parse_table(run_pair("ib_write_lat", ["-d", "rxe0", "-F", "-s", "2", "-n", str(iters)], srv, cli),
                           True)
        run_a, run_b = (os.path.basename(r) for r in hosts.run_dirs)
    finally:
        hosts.close()                           # the daemons exit: their traces are written
        os.environ.clear()
        os.environ.update(saved)
    try:
        return chain(load(trace, run_a, run_b)), rows[-1]["t_typical"]
    finally:
        if keep is None:
            shutil.rmtree(trace, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=3000, help="round trips per run (default 3000)")
    ap.add_argument("--rounds", type=int, default=2, help="runs per placement, alternating (default 2)")
    ap.add_argument("--placement", default="asis,placed", help="comma-separated: " + ", ".join(PLACEMENTS))
    ap.add_argument("--daemon", action="append", default=[], metavar="OPTION",
                    help="one more softrdmad option for every run's daemons (repeatable; --daemon=--nice=0)")
    ap.add_argument("--keep", metavar="DIR", help="keep each run's raw stamps in a directory under DIR")
    a = ap.parse_args()
    if os.geteuid() != 0:
        ap.error("needs root (two network namespaces)")
    places = a.placement.split(",")
    for p in places:
        if p not in PLACEMENTS:
            ap.error(f"unknown placement {p!r}: one of {', '.join(PLACEMENTS)}")
    got = {p: (collections.defaultdict(list), []) for p in places}
    for r in range(a.rounds):
        for p in places:
            hops, typ = one(p, a.n, a.keep, tuple(x for o in a.daemon for x in o.split("=", 1)))
            print(f"round {r + 1} {p}: ib_write_lat typical {typ:.2f} us, "
                  f"{len(hops.get('round trip (A post -> A post)', []))} round trips chained", flush=True)
            for k, v in hops.items():
                got[p][0][k] += v
            got[p][1].append(typ)
    for p in places:
        report(f"{p} (ib_write_lat typical per run: {', '.join(f'{x:.1f}' for x in got[p][1])})", got[p][0],
               statistics.median(got[p][1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
