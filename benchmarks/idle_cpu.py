#!/usr/bin/env python3
"""The daemon's CPU when nothing happens: devices up, QPs open and
connected, no traffic (the target: at most 1 % of a core).

    python3 benchmarks/idle_cpu.py [--pairs 8] [--seconds 10] [--run-dir /tmp/X-run] [--port 15110]

Starts a softrdmad (the embedded default, rxe0 on lo) in ``--run-dir``,
connects ``--pairs`` RC QP pairs through it and moves a few SENDs over
each (the loop has been busy, then goes quiet), waits one second for the
daemon's spin to end, then reads the daemon's CPU time (utime + stime
from /proc) over ``--seconds`` while this process sleeps.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--run-dir", default="/tmp/softrdma-idle-run")
    ap.add_argument("--port", type=int, default=0, help="the daemon's UDP port (0: ephemeral)")
    a = ap.parse_args()
    from daemon_helpers import RunningDaemon
    shutil.rmtree(a.run_dir, ignore_errors=True)
    os.makedirs(a.run_dir)
    daemon = RunningDaemon(a.run_dir, port=a.port)
    os.environ["SOFTRDMA_RUN"] = a.run_dir
    try:
        from rc_pair import RcPair
        from softrdma.verbs import device
        ctx = device.Context(name="rxe0")
        pairs = [RcPair(ctx, depth=16) for _ in range(a.pairs)]
        for p in pairs:
            p.send(4, 64)
        time.sleep(1.0)
        pid = daemon.proc.pid
        c0, t0 = cpu_seconds(pid), time.monotonic()
        time.sleep(a.seconds)
        c1, t1 = cpu_seconds(pid), time.monotonic()
        print(f"idle daemon, {a.pairs} connected RC QP pairs ({2 * a.pairs} QPs): "
              f"{c1 - c0:.3f} s CPU in {t1 - t0:.1f} s = {100 * (c1 - c0) / (t1 - t0):.2f} % of a core")
    finally:
        daemon.stop()
        shutil.rmtree(a.run_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
