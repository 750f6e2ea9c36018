#!/usr/bin/env python3
"""DCQCN on a congested link: two or four ``ib_write_bw`` flows into one
receiver through an ECN-marking switch (``softrdma ecn-switch``: CE marks
above --mark-rate, drops above --drop-rate), with a competing
``ib_write_lat`` flow, DCQCN on (the default) against off (every
priority's notification and reaction points off), alternating, --rounds
times each (root).

Per run: aggregate goodput (the flows' ``ib_write_bw`` BW average), Jain's
fairness index over the flows, retransmitted packets (the senders'
``retransmitted_pkts``), the switch's marks and drops, the latency flow's
99th percentile; a PNG per mode of each flow's offered rate over time (what
the switch received from each sender, every 100 ms); results.json and
table.md.  The target: with DCQCN on, fairness >= 0.95 and >= 10x fewer
retransmissions than off, at >= 90 % of the off-case goodput.

    sudo python3 benchmarks/incast.py [--flows 2] [--rounds 2] [--duration 8] [--settings WORDS] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.join(ROOT, "src"))

from incast_helpers import Incast  # noqa: E402


def one(mode: str, a) -> dict:
    ic = Incast(flows=a.flows, mark_rate=a.mark_rate, drop_rate=a.drop_rate, latency=not a.no_latency)
    try:
        ic.up(mode == "on", a.settings.split())
        r = ic.run(duration=a.duration)
    finally:
        ic.down()
    r["mode"] = mode
    return r


def plot(runs: list[dict], out: str) -> list[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    files = []
    for mode in ("on", "off"):
        r = next((x for x in runs if x["mode"] == mode), None)
        if r is None:
            continue
        fig, ax = plt.subplots(figsize=(8, 4))
        t = r["series"]["t"]
        for i in range(len(r["flows"])):
            ax.plot(t, [x[i] for x in r["series"]["rates"]], label=f"flow {i + 1}")
        ax.set_xlabel("time (s)")
        ax.set_ylabel("MB/s into the switch")
        ax.set_title(f"DCQCN {mode}: each flow's rate (goodput {r['goodput_MiB_s']:.1f} MiB/s, "
                     f"Jain {r['jain']:.3f}, {r['retransmitted_pkts']} retransmitted)")
        ax.legend()
        ax.grid(True, alpha=0.3)
        f = os.path.join(out, f"incast-{mode}.png")
        fig.tight_layout()
        fig.savefig(f, dpi=90)
        plt.close(fig)
        files.append(f)
    return files


def table(runs: list[dict], a) -> str:
    lines = [f"{a.flows} flows of ib_write_bw -s {a.size} into one receiver; switch: CE marks above "
             f"{a.mark_rate:g} MB/s, drops above {a.drop_rate:g} MB/s; {a.duration:g} s per run", "",
             "| mode | goodput MiB/s | per flow | Jain | retransmitted | marked | dropped | CNPs | lat p99 µs |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        sw = r["switch_skbs"]
        lat = r.get("lat_us", {}).get("p99", "")
        per = " / ".join("%.1f" % f["MiB_s"] for f in r["flows"])
        lines.append(f"| {r['mode']} | {r['goodput_MiB_s']:.1f} | {per}"
                     f" | {r['jain']:.3f} | {r['retransmitted_pkts']} | {sw.get('mark', 0)} |"
                     f" {sw.get('buffer', 0) + sw.get('red', 0)} | {r['np_cnp_sent']} | {lat} |")
    on = [r for r in runs if r["mode"] == "on"]
    off = [r for r in runs if r["mode"] == "off"]
    if on and off:
        g_on = statistics.mean(r["goodput_MiB_s"] for r in on)
        g_off = statistics.mean(r["goodput_MiB_s"] for r in off)
        rt_on = sum(r["retransmitted_pkts"] for r in on)
        rt_off = sum(r["retransmitted_pkts"] for r in off)
        j = min(r["jain"] for r in on)
        ratio = f"{rt_off / rt_on:.0f}x" if rt_on else f"{rt_off} against 0"
        lines += ["", f"DCQCN on: fairness (worst run) {j:.3f} (target >= 0.95); retransmissions {ratio} fewer"
                      f" (target >= 10x); goodput {g_on / g_off:.0%} of off (target >= 90 %)"]
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--flows", type=int, choices=(2, 4), default=2)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--duration", type=float, default=8.0)
    p.add_argument("--size", type=int, default=65536)
    p.add_argument("--mark-rate", type=float, default=100.0)
    p.add_argument("--drop-rate", type=float, default=150.0)
    p.add_argument("--no-latency", action="store_true", help="no competing ib_write_lat flow")
    p.add_argument("--settings", default="", help="softrdma ecn words for every host, e.g. 'roce_rp dce_tcp_rtt 1'")
    p.add_argument("--out", default=os.path.join(ROOT, "out", "incast"))
    a = p.parse_args()
    if os.geteuid() != 0:
        p.error("needs root (network namespaces, nftables)")
    os.makedirs(a.out, exist_ok=True)
    runs = []
    for i in range(a.rounds):
        for mode in (("on", "off") if i % 2 == 0 else ("off", "on")):
            r = one(mode, a)
            runs.append(r)
            print(f"{mode:3}: goodput {r['goodput_MiB_s']:.1f} MiB/s, Jain {r['jain']:.3f}, retransmitted "
                  f"{r['retransmitted_pkts']}, switch {r['switch_skbs']}, lat {r.get('lat_us')}", flush=True)
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump({"args": vars(a), "runs": runs}, f, indent=1)
    text = table(runs, a)
    with open(os.path.join(a.out, "table.md"), "w") as f:
        f.write(text)
    plot(runs, a.out)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
