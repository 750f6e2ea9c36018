#!/usr/bin/env python3
"""Before/after in one run: one perftest point across two daemons in two
network namespaces, alternating two environments (fresh daemons each run).

    sudo python3 benchmarks/ab_env.py --b PYTHONPATH=/tmp/noisal -- ib_write_bw -s 65536
    sudo python3 benchmarks/ab_env.py --rounds 4 --b SOFTRDMA_SPIN_S=0 -- ib_write_lat -s 2
    python3 benchmarks/ab_env.py --one-daemon --b SOFTRDMA_SPIN_S=0 -- ib_write_lat -s 2
    python3 benchmarks/ab_env.py --one-daemon --b-placed -- ib_write_lat -s 2
    sudo python3 benchmarks/ab_env.py --a-placed --a-daemon=--spin-us=0 --b-placed -- ib_write_lat -s 2

``--a``/``--b``: NAME=VALUE settings for the daemons and applications of
each side (repeatable; A defaults to the environment as it is).
``--a-daemon``/``--b-daemon``: more softrdmad options for a side's
daemons (repeatable); ``--a-placed``/``--b-placed``: that side's daemons
pinned to the last CPU (``--cpu``) and its applications to the others
(``taskset -c``), as perftest_bench.py's placed runs.  A machine
shared with other work moves every figure by tens of per cent from minute
to minute: the rounds alternate A, B, A, B ... so both see the same drift,
and the medians and every single figure are printed.  Example: hiding the
isal package (a directory with ``isal/__init__.py`` raising ImportError, put
first on PYTHONPATH) runs the ICRC on zlib's CRC-32, as before isal.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, HERE)

from perftest_bench import LAT_TESTS, VETH_MTU, environment, parse_table, placement, run_pair  # noqa: E402


def one_daemon_run(env: dict, tool: str, args: list[str], daemon_args=(), apps=()) -> dict:
    """The same point with both sides on one daemon (rxe0 on lo, 127.0.0.1)."""
    from daemon_helpers import daemon_in_shm
    with environment(env), daemon_in_shm("abenv", args=daemon_args) as d:     # the daemon starts with os.environ
        penv = {**os.environ, "SOFTRDMA_RUN": d.run_dir, "SOFTRDMA_AUTOSTART": "0"}

        def popen(cmd):
            return subprocess.Popen([*apps, *cmd], env=penv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        rows = parse_table(run_pair(tool, ["-d", "rxe0", "-F", *args], popen,
                                    lambda cmd: popen(cmd + ["127.0.0.1"])), tool in LAT_TESTS)
    return rows[-1]


def one_run(env: dict, tool: str, args: list[str], daemon_args=(), apps=()) -> dict:
    from netns_helpers import TwoHosts
    with environment(env):                      # TwoHosts starts the daemons with os.environ
        hosts = TwoHosts(mtu=VETH_MTU)
        try:
            hosts.start_daemons(daemon_args)

            def srv(cmd):
                return hosts.popen(1, [*apps, *cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

            def cli(cmd):
                return hosts.popen(0, [*apps, *cmd, hosts.ip[1]], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True)
            rows = parse_table(run_pair(tool, ["-d", "rxe0", "-F", *args], srv, cli), tool in LAT_TESTS)
        finally:
            hosts.close()
    return rows[-1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", action="append", default=[], metavar="NAME=VALUE")
    ap.add_argument("--b", action="append", default=[], metavar="NAME=VALUE")
    for side in ("a", "b"):
        ap.add_argument(f"--{side}-daemon", action="append", default=[], metavar="OPTION",
                        help=f"a softrdmad option for side {side.upper()}'s daemons (repeatable; --{side}-daemon=--cpu=1)")
        ap.add_argument(f"--{side}-apps", default="", metavar="CMD,ARG,...",
                        help=f"a prefix for side {side.upper()}'s applications, comma-separated (nice,-n,-10)")
        ap.add_argument(f"--{side}-placed", action="store_true",
                        help=f"side {side.upper()}: daemons on the last CPU, applications on the others")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--one-daemon", action="store_true", help="both sides on one daemon (no namespaces)")
    ap.add_argument("perftest", nargs=argparse.REMAINDER, help="-- TOOL ARGS...")
    a = ap.parse_args()
    cmd = [x for x in a.perftest if x != "--"]
    if not cmd or (os.geteuid() != 0 and not a.one_daemon):
        ap.error("needs root (but for --one-daemon) and a perftest command after --")
    tool, args = cmd[0], cmd[1:]
    lat = tool in LAT_TESTS
    key = "t_typical" if lat else "bw_avg_MiBps"
    envs = {"A": dict(kv.split("=", 1) for kv in a.a), "B": dict(kv.split("=", 1) for kv in a.b)}
    place = {}
    for side in ("A", "B"):
        dargs, apps = placement() if getattr(a, f"{side.lower()}_placed") else ([], [])
        dargs = dargs + [x for o in getattr(a, f"{side.lower()}_daemon") for x in o.split("=", 1)]
        apps = [x for x in getattr(a, f"{side.lower()}_apps").split(",") if x] + apps
        place[side] = (dargs, apps)
        print(f"{side}: env {envs[side] or '(as is)'}, daemons {' '.join(dargs) or '(as is)'}, "
              f"applications {' '.join(apps) or '(as is)'}")
    got: dict[str, list[float]] = {"A": [], "B": []}
    for r in range(a.rounds):
        for side in ("A", "B"):
            row = (one_daemon_run if a.one_daemon else one_run)(envs[side], tool, args, *place[side])
            v = row[key] if lat else row[key] * (1 << 20) / 1e6
            got[side].append(v)
            print(f"round {r + 1} {side} {envs[side] or '(as is)'}: {v:,.2f} {'us' if lat else 'MB/s'}"
                  + ("" if lat else f", {row['mpps'] * 1e6:,.0f} msg/s"), flush=True)
    for side in ("A", "B"):
        print(f"{side}: median {statistics.median(got[side]):,.2f} {'us' if lat else 'MB/s'} "
              f"of {', '.join(f'{v:,.1f}' for v in got[side])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
