#!/usr/bin/env python3
"""The messenger example's message rate: one publisher and N subscribers
(default 1) on one fresh daemon (``rxe0`` on ``lo``), or with ``--netns`` the
publisher in one network namespace and the subscribers in another (two
daemons, RoCE over a veth pair), for each message size,
several rounds; prints every round's figure and the median.

    python3 benchmarks/messenger_bench.py                       # 4 KiB and 64 KiB, 3 rounds
    python3 benchmarks/messenger_bench.py --sizes 4096 --count 50000 --rounds 5 --subscribers 3
    sudo python3 benchmarks/messenger_bench.py --netns   # publisher and subscribers in two namespaces

The rate is the publisher's (messages sent to every subscriber per second,
from the first message to the last subscriber's departure) and each
subscriber's (from its first message to its last).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
EX = os.path.join(ROOT, "examples", "messenger")
sys.path.insert(0, os.path.join(ROOT, "tests"))

from daemon_helpers import daemon_in_shm          # noqa: E402
from softrdma.runner import shim_path             # noqa: E402
from wait_helpers import free_port, wait_line     # noqa: E402


def on_daemon(d):
    """(start, address): programs on daemon ``d``, over its loopback."""
    env = dict(d.env, PYTHONPATH=shim_path() + os.pathsep + os.environ.get("PYTHONPATH", ""),
               SOFTRDMA_AUTOSTART="0")

    def start(role, args):
        return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return start, "127.0.0.1"


def on_two_hosts(h):
    """(start, address): the publisher in namespace A, subscribers in B."""
    path = shim_path() + os.pathsep + os.environ.get("PYTHONPATH", "")

    def start(role, args):
        return h.popen(0 if role == "pub" else 1, ["env", f"PYTHONPATH={path}", *args],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return start, h.ip[0]


def one_run(where, size: int, count: int, subscribers: int) -> tuple[float, list[float]]:
    start, addr = where
    port = free_port()
    common = ["--count", str(count), "--size", str(size)]
    procs = []
    try:
        pub = start("pub", [sys.executable, os.path.join(EX, "publisher.py"), addr, str(port),
                            "--subscribers", str(subscribers), *common])
        procs.append(pub)
        wait_line(pub.stdout, "listening", proc=pub)
        for _ in range(subscribers):
            procs.append(start("sub", [sys.executable, os.path.join(EX, "subscriber.py"), addr, str(port),
                                       *common]))
        sub_rates = []
        for s in procs[1:]:
            out, _ = s.communicate(timeout=600)
            m = re.search(r"done: \d+ messages in order, byte-exact, no duplicates; (\d+) msg/s", out)
            if s.returncode != 0 or not m:
                raise RuntimeError(f"subscriber failed: {out}")
            sub_rates.append(float(m.group(1)))
        out, _ = pub.communicate(timeout=600)
        m = re.search(r"done: \d+ messages in [\d.]+ s, (\d+) msg/s", out)
        if pub.returncode != 0 or not m:
            raise RuntimeError(f"publisher failed: {out}")
        return float(m.group(1)), sub_rates
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
            p.stdout.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="4096,65536", help="message sizes, comma-separated")
    ap.add_argument("--count", type=int, default=20000, help="messages per run (default 20000)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--subscribers", type=int, default=1)
    ap.add_argument("--netns", action="store_true", help="across two network namespaces (root)")
    a = ap.parse_args()
    with contextlib.ExitStack() as stack:
        if a.netns:
            from netns_helpers import TwoHosts
            h = TwoHosts()
            stack.callback(h.close)
            h.start_daemons()
            where = on_two_hosts(h)
        else:
            where = on_daemon(stack.enter_context(daemon_in_shm("msgr-bench")))
        for size in (int(s) for s in a.sizes.split(",")):
            pubs, subs = [], []
            for _ in range(a.rounds):
                p, s = one_run(where, size, a.count, a.subscribers)
                pubs.append(p)
                subs += s
            med = statistics.median(pubs)
            print(f"{size:>6} B x {a.subscribers} subscriber(s): publisher {med:.0f} msg/s "
                  f"({med * size * 8 / 1e9:.2f} Gb/s per subscriber), rounds {[round(x) for x in pubs]}; "
                  f"subscribers median {statistics.median(subs):.0f} msg/s, all {[round(x) for x in subs]}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
