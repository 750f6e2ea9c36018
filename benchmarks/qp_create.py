#!/usr/bin/env python3
"""QP creation rate: create and destroy QPs through the verbs library
against a softrdmad, and, for comparison, the bare control-message round
trip (a ``query_port`` request and its reply).

    python3 benchmarks/qp_create.py [-n 1000] [--batch 1] [--run-dir DIR] [--profile OUT.html]

``-n``: create/destroy pairs to time; ``--batch``: create that many QPs,
then destroy them (1: create one, destroy it; 1200: the "many QPs in one
process" case).  Without ``--run-dir`` a daemon is started for the run in
a new run directory on /dev/shm (the embedded default: rxe0 on lo) and
stopped afterwards.  ``--profile`` writes a pyinstrument profile of the
client side (pip install pyinstrument).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))


def run(n: int, batch: int, rtt_n: int) -> dict:
    from softrdma.pyverbs.cq import CQ
    from softrdma.pyverbs.device import Context
    from softrdma.pyverbs.pd import PD
    from softrdma.pyverbs.qp import QP, QPCap, QPInitAttr
    from softrdma.pyverbs.libibverbs_enums import ibv_qp_type

    ctx = Context(name="rxe0")
    pd = PD(ctx)
    cq = CQ(ctx, 256)
    init = QPInitAttr(qp_type=ibv_qp_type.IBV_QPT_RC, scq=cq, rcq=cq,
                      cap=QPCap(max_send_wr=128, max_recv_wr=128, max_send_sge=1, max_recv_sge=1))
    # warm up (imports, first allocations)
    for _ in range(20):
        QP(pd, init).close()
    done = 0
    t0 = time.perf_counter()
    while done < n:
        qps = [QP(pd, init) for _ in range(min(batch, n - done))]
        for qp in qps:
            qp.close()
        done += len(qps)
    qp_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(rtt_n):
        ctx.query_port(1)
    rtt_s = time.perf_counter() - t0
    cq.close()
    pd.close()
    ctx.close()
    return {"pairs": n, "batch": batch, "pairs_per_s": n / qp_s, "rtt_n": rtt_n, "rtt_per_s": rtt_n / rtt_s}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=1000, help="create/destroy pairs to time (default 1000)")
    ap.add_argument("--batch", type=int, default=1, help="QPs alive at once (default 1)")
    ap.add_argument("--rtt", type=int, default=2000, help="control round trips to time (default 2000)")
    ap.add_argument("--run-dir", help="use the softrdmad already serving this run directory")
    ap.add_argument("--profile", metavar="OUT.html", help="write a pyinstrument profile of the client")
    a = ap.parse_args()
    if a.n < 1 or a.batch < 1 or a.rtt < 1:
        ap.error("-n, --batch and --rtt must be positive")
    daemon = None
    if a.run_dir:
        os.environ["SOFTRDMA_RUN"] = a.run_dir
    else:
        from daemon_helpers import RunningDaemon
        base = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
        run_dir = tempfile.mkdtemp(prefix="softrdma-qpbench-", dir=base)
        daemon = RunningDaemon(run_dir)
        os.environ["SOFTRDMA_RUN"] = run_dir
    try:
        if a.profile:
            from pyinstrument import Profiler
            prof = Profiler(interval=0.0005)
            prof.start()
        r = run(a.n, a.batch, a.rtt)
        if a.profile:
            prof.stop()
            with open(a.profile, "w") as f:
                f.write(prof.output_html())
            print(prof.output_text(unicode=False, color=False, show_all=False))
    finally:
        if daemon is not None:
            daemon.stop()
            shutil.rmtree(daemon.run_dir, ignore_errors=True)
    print(f"QP create+destroy: {r['pairs']} pairs (batch {r['batch']}): {r['pairs_per_s']:.0f} pairs/s")
    print(f"control round trip (query_port): {r['rtt_n']} calls: {r['rtt_per_s']:.0f} calls/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
