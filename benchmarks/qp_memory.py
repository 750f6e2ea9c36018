#!/usr/bin/env python3
"""The daemon's memory per idle RC QP: its resident set with no QP, then
with ``--qps`` RC QPs connected in pairs (RTS, each side's peer the other)
and idle, as /proc/PID/status counts it -- anonymous memory (the daemon's
own objects) and shared memory (the pages of the rings it has touched).

    python3 benchmarks/qp_memory.py [--qps 1000] [--depth 16] [--port 0]

The daemon (the embedded default, rxe0 on lo) runs in a run directory of
its own on /dev/shm, removed afterwards.  Each QP has its own send and
receive ring of ``--depth`` slots; all share one PD and one CQ.  Prints the
totals and the cost per QP.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

FIELDS = ("VmRSS", "RssAnon", "RssShmem")


def rss_kib(pid: int) -> dict[str, int]:
    """The resident-set fields of /proc/PID/status, in KiB."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in FIELDS:
                out[key] = int(rest.split()[0])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--qps", type=int, default=1000, help="how many RC QPs (connected in pairs)")
    ap.add_argument("--depth", type=int, default=16, help="send and receive queue depth of each QP")
    ap.add_argument("--port", type=int, default=0, help="the daemon's UDP port (0: ephemeral)")
    a = ap.parse_args()
    from daemon_helpers import default_daemon_in_shm
    with default_daemon_in_shm("qpmem", port=a.port) as daemon:
        from rc_pair import ipv4_gid_index, rc_attr
        from softrdma.enums import IBV_QPT_RC
        from softrdma.verbs import cq, device, pd, qp
        ctx = device.Context(name="rxe0")
        p = pd.PD(ctx)
        c = cq.CQ(ctx, 4096)
        time.sleep(0.5)
        pid = daemon.proc.pid
        before = rss_kib(pid)
        gi = ipv4_gid_index(ctx)
        gid = ctx.query_gid(1, gi)
        cap = qp.QPCap(max_send_wr=a.depth, max_recv_wr=a.depth, max_send_sge=1, max_recv_sge=1)
        qps = []
        t0 = time.monotonic()
        for _ in range(a.qps // 2):
            x = qp.QP(p, qp.QPInitAttr(IBV_QPT_RC, scq=c, rcq=c, cap=cap))
            y = qp.QP(p, qp.QPInitAttr(IBV_QPT_RC, scq=c, rcq=c, cap=cap))
            x.to_rts(rc_attr(y.qp_num, gid, gi))
            y.to_rts(rc_attr(x.qp_num, gid, gi))
            qps += (x, y)
        made = time.monotonic() - t0
        time.sleep(1.0)                          # idle: the loop's spin over
        after = rss_kib(pid)
        n = len(qps)
        print(f"{n} connected idle RC QPs (depth {a.depth}), created and moved to RTS in {made:.1f} s")
        for k in FIELDS:
            d = after[k] - before[k]
            print(f"  {k:9} {before[k]:>9,} KiB -> {after[k]:>9,} KiB: +{d:,} KiB = {d / n:.1f} KiB per QP")
        for x in qps:
            x.close()
        ctx.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
