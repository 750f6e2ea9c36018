#!/usr/bin/env python3
"""Where a bandwidth run across two daemons waits: the go-back window and
the ACKs, traced inside both daemons.

    sudo python3 benchmarks/window_trace.py -- ib_write_bw -s 65536 -n 20000
    sudo python3 benchmarks/window_trace.py --wnd 512 -- ib_write_bw -s 65536 -n 20000

Runs one perftest point across two daemons in two network namespaces
(as ``ab_env.py``) with ``benchmarks/window_trace/`` first on the daemons'
PYTHONPATH: its sitecustomize wraps the requester, the completer's ACK
path, the QP's batch receive and the RoCE socket's reads and sends with
timing probes (a measurement only: each probe costs microseconds, so the
run's rate is lower than without).  Then, per daemon:

* window stops: how often the requester stopped with the go-back window
  full and work waiting, how long until the ACK that reopened it, and how
  many PSNs that ACK acknowledged;
* the ACK pattern: per received batch of one QP, the packets, how many
  asked for an ACK (BTH AckReq) and how many packets the QP sent back;
* the steady state (the middle 60 % of the run): the share of the time in
  socket reads, batch processing (with the requester runs an ACK starts;
  per packet: per packet received or sent) and send bursts, and -- on the requester's side -- the time from the end
  of a data burst to the start of the read that brought the next ACK.

``--wnd N`` / ``--rx-budget N`` / ``--burst N``: experiments (the
window's ceiling, the datagrams per socket read, the packets one requester
run may send) for the run's daemons.
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import shutil
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from ab_env import one_run  # noqa: E402
from perftest_bench import LAT_TESTS  # noqa: E402


def _pct(xs: list[float], q: float) -> float:
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def report(path: str) -> None:
    d = json.load(open(path))
    print(f"== daemon {os.path.basename(path)[6:-5]}")
    stalls, acks = d["stalls"], d["acks"]
    if acks:
        span = acks[-1][0] - acks[0][0]
        per_ack = sorted(collections.Counter(a for _, a in acks).items(), key=lambda kv: -kv[1])[:4]
        print(f"  ACKs received: {len(acks)} in {span * 1e3:.0f} ms; PSNs acknowledged per ACK (count): {per_ack}")
    if stalls:
        durs = sorted(s[1] * 1e6 for s in stalls)
        print(f"  window-full stops: {len(stalls)}; until the reopening ACK: median {_pct(durs, .5):.0f} us, "
              f"p10 {_pct(durs, .1):.0f}, p90 {_pct(durs, .9):.0f}, p99 {_pct(durs, .99):.0f}, "
              f"max {durs[-1]:.0f}; stopped {sum(durs) / 1e6 / span:.0%} of the ACK span")
    top = sorted(d["batches"], key=lambda kv: -kv[1])[:5]
    print("  receive batches (packets, AckReq among them, packets sent back): count -- "
          + ", ".join(f"{tuple(k)}: {v}" for k, v in top))
    print("  packets per socket read (count):", sorted(d["reads"], key=lambda kv: -kv[1])[:5],
          " per send burst:", sorted(d["bursts"], key=lambda kv: -kv[1])[:5])
    ev = d["events"]
    if len(ev) > 50:
        ev = ev[len(ev) // 5: len(ev) * 4 // 5]
        span = ev[-1][0] - ev[0][0]
        busy = {k: sum(e[3] for e in ev if e[1] == k) / 1e6 / span for k in ("recv", "batch", "burst")}
        per = {k: statistics.median([e[3] / e[2] for e in ev if e[1] == k and e[2] > 1] or [0])
               for k in ("recv", "batch", "burst")}
        print("  steady state: busy " + ", ".join(f"{k} {v:.0%} ({per[k]:.2f} us/packet)" for k, v in busy.items())
              + f" = {sum(busy.values()):.0%}")
        waits, end = [], None
        for t, kind, n, us in ev:
            if kind == "burst" and n > 1:
                end = t
            elif kind == "recv" and end is not None and n:
                waits.append(max(0.0, (t - us / 1e6 - end) * 1e6))
                end = None
        if len(waits) > 10:
            waits.sort()
            print(f"  from a data burst's end to the next ACK read: median {_pct(waits, .5):.0f} us, "
                  f"p90 {_pct(waits, .9):.0f}, p99 {_pct(waits, .99):.0f}; "
                  f"{sum(waits) / 1e6 / span:.0%} of the time")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wnd", type=int, help="the go-back window's ceiling (default: 128, rxe's)")
    ap.add_argument("--rx-budget", type=int, help="datagrams per socket read (default 64)")
    ap.add_argument("--burst", type=int, help="packets one requester run may send; one run per received batch")
    ap.add_argument("--keep", metavar="DIR", help="keep the raw traces here")
    ap.add_argument("perftest", nargs=argparse.REMAINDER, help="-- TOOL ARGS...")
    a = ap.parse_args()
    cmd = [x for x in a.perftest if x != "--"]
    if not cmd or os.geteuid() != 0 or cmd[0] in LAT_TESTS:
        ap.error("needs root and a perftest bandwidth command after --")
    out = a.keep or tempfile.mkdtemp(prefix="window-trace-")
    os.makedirs(out, exist_ok=True)
    for f in glob.glob(os.path.join(out, "trace-*.json")):
        os.unlink(f)
    env = {"PYTHONPATH": os.path.join(HERE, "window_trace"), "SOFTRDMA_WINDOW_TRACE": out}
    if a.wnd:
        env["SOFTRDMA_TRACE_WND"] = str(a.wnd)
    if a.burst:
        env["SOFTRDMA_TRACE_BURST"] = str(a.burst)
    if a.rx_budget:
        env["SOFTRDMA_TRACE_RX_BUDGET"] = str(a.rx_budget)
    row = one_run(env, cmd[0], cmd[1:])
    print(f"{' '.join(cmd)}: {row['bw_avg_MiBps'] * (1 << 20) / 1e6:,.0f} MB/s, {row['mpps'] * 1e6:,.0f} msg/s "
          "(traced: lower than untraced)")
    for f in sorted(glob.glob(os.path.join(out, "trace-*.json"))):
        report(f)
    if not a.keep:
        shutil.rmtree(out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
