#!/usr/bin/env python3
"""InfiniBand beside RoCE in one run: ``ib_write_bw`` 64 KiB and
``ib_write_lat`` 2 B between two hosts (two network namespaces, a daemon
each), over their RoCE device (rxe0 on the veth between them) and over
their IB device (mlx5_0 on CAs h1 and h2 of a ``softrdma fabric serve``
topology, one switch apart, LIDs from ``softrdma opensm``), alternating.

    sudo python3 benchmarks/ib_bench.py
    sudo python3 benchmarks/ib_bench.py --rounds 5 --iters 5000

Prints every figure and the medians, and IB as a share of RoCE (the
bandwidth target: IB >= 50 % of RoCE; the latency target: IB <= 2x RoCE).

Before/after in one run, as ``ab_env.py``: ``--b NAME=VALUE`` (and
``--a``) set the environment of each side's fabric server, daemons and
tools -- e.g. ``--a PYTHONPATH=/tmp/before/src`` for a copy of the code
before a change.  Each round then sets up hosts and fabric afresh for A,
then for B (alternating, so that both see the same drift of a shared
machine) and measures RoCE and IB on each.

    sudo python3 benchmarks/ib_bench.py --rounds 3 --a PYTHONPATH=/tmp/before/src --only-bw
The IB packets take one more hop than RoCE's: from the sending daemon to
the fabric server's process (its data socket), through the switch's LFT,
and to the receiving daemon -- two SEQPACKET messages per batch where RoCE
has one UDP datagram.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, HERE)

from perftest_bench import VETH_MTU, environment, parse_table, run_pair  # noqa: E402

NET = """
Switch 4 "sw1"
[1] "h1"[1]
[2] "h2"[1]
Ca 1 "h1"
[1] "sw1"[1]
Ca 1 "h2"
[1] "sw1"[2]
"""


@contextlib.contextmanager
def two_ib_hosts(prefix: str, daemon_args=()):
    """A fabric on NET, two hosts (network namespaces over a veth, a daemon
    each with ``daemon_args``) with their mlx5_0 on h1 and h2, the SM's
    sweep done: (fabric, hosts, the two LIDs); all ended on leaving."""
    from ib_helpers import IbFabric
    from netns_helpers import TwoHosts
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=prefix))
    fab = IbFabric(tmp, NET)                  # before the daemons: they inherit its directory
    hosts = None
    try:
        hosts = TwoHosts(mtu=VETH_MTU)
        hosts.start_daemons(list(daemon_args))
        fab.attach(hosts.run_dirs[0], "h1")
        fab.attach(hosts.run_dirs[1], "h2")
        fab.sweep("softrdma")
        yield fab, hosts, [fab.wait_active(rd) for rd in hosts.run_dirs]
    finally:
        if hosts is not None:
            hosts.close()
        fab.close()
        shutil.rmtree(tmp, ignore_errors=True)


def bench_args(doc: str, add=None):
    """--rounds and --iters (and what ``add(parser)`` adds), parsed; root required."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=5000, help="ib_write_bw iterations (perftest's default)")
    if add is not None:
        add(ap)
    a = ap.parse_args()
    if os.geteuid() != 0:
        ap.error("needs root (network namespaces)")
    return a


def runners(hosts):
    """(server, client): a tool's command in host 1, and in host 0 towards host 1's address."""
    def srv(cmd):
        return hosts.popen(1, cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def cli(cmd):
        return hosts.popen(0, [*cmd, hosts.ip[1]], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return srv, cli


def _env(pairs) -> dict:
    out = {}
    for kv in pairs:
        k, sep, v = kv.partition("=")
        if not sep:
            raise SystemExit(f"ib_bench: {kv!r} is not NAME=VALUE")
        out[k] = v
    return out


@contextlib.contextmanager
def fabric_src(path: str | None):
    """The fabric server and the SM run the code at ``path`` (a side's
    PYTHONPATH): the test helpers that start them give them this tree's
    ``src`` otherwise, whatever the environment says."""
    import sm_helpers
    saved = sm_helpers.SRC
    if path:
        sm_helpers.SRC = path
    try:
        yield
    finally:
        sm_helpers.SRC = saved


def one_setup(env: dict, points, devs, got: dict, tag: str, r: int) -> None:
    """Fabric, hosts, SM and the points on both devices, with ``env`` set
    (its PYTHONPATH for the fabric server and the SM too)."""
    from ib_helpers import link
    with environment(env), fabric_src(env.get("PYTHONPATH")), two_ib_hosts("ib_bench-") as (fab, hosts, lids):
        mtu = link(hosts.run_dirs[0], "mlx5_0")["port_attr"]["active_mtu"]
        if r == 0:
            print(f"{tag}IB: LIDs {lids[0]} and {lids[1]}, one switch apart, active MTU {128 << mtu}; "
                  f"RoCE: rxe0 on the veth (MTU {VETH_MTU}) between the namespaces", flush=True)
        srv, cli = runners(hosts)
        for tool, args, key, unit in points:
            for dev, dargs in devs:
                row = parse_table(run_pair(tool, [*dargs, "-F", *args], srv, cli), tool == "ib_write_lat")[-1]
                v = row[key] * (1 << 20) / 1e6 if unit == "MB/s" else row[key]
                got[(tag, tool, dev)].append(v)
                print(f"round {r + 1} {tag}{tool} {dev}: {v:,.1f} {unit}", flush=True)


def _options(ap) -> None:
    ap.add_argument("--lat-iters", type=int, default=1000, help="ib_write_lat iterations (perftest's default)")
    ap.add_argument("--a", action="append", default=[], metavar="NAME=VALUE", help="side A's environment")
    ap.add_argument("--b", action="append", default=[], metavar="NAME=VALUE",
                    help="side B's environment (--a or --b given: A and B alternate, each with its own setup)")
    ap.add_argument("--only-bw", action="store_true", help="ib_write_bw only")


def main() -> int:
    a = bench_args(__doc__, _options)
    points = [("ib_write_bw", ["-s", "65536", "-n", str(a.iters)], "bw_avg_MiBps", "MB/s"),
              ("ib_write_lat", ["-s", "2", "-n", str(a.lat_iters)], "t_typical", "us")]
    if a.only_bw:
        points = points[:1]
    devs = (("RoCE", ["-d", "rxe0"]), ("IB", ["-d", "mlx5_0"]))
    sides = [("", {})] if not (a.a or a.b) else [("A ", _env(a.a)), ("B ", _env(a.b))]
    got = {(tag, t, d): [] for tag, _ in sides for t, *_ in points for d, _ in devs}
    for r in range(a.rounds):
        for tag, env in sides:
            one_setup(env, points, devs, got, tag, r)
    print()
    for tag, _ in sides:
        for tool, args, key, unit in points:
            med = {d: statistics.median(got[(tag, tool, d)]) for d, _ in devs}
            for d, _ in devs:
                print(f"{tag}{tool} {' '.join(args[:2])} {d}: median {med[d]:,.1f} {unit} of "
                      f"{', '.join(f'{v:,.1f}' for v in got[(tag, tool, d)])}")
            if unit == "MB/s":
                print(f"  {tag}IB / RoCE: {med['IB'] / med['RoCE']:.0%} (target >= 50 %)")
            else:
                print(f"  {tag}IB / RoCE: {med['IB'] / med['RoCE']:.2f}x (target <= 2x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
