#!/usr/bin/env python3
"""Where the time goes: py-spy on both daemons and both applications of a
perftest run, with each process's CPU time per packet and per message.

    sudo python3 benchmarks/profile_perftest.py write_bw   # ib_write_bw -s 65536, two daemons, two netns
    sudo python3 benchmarks/profile_perftest.py write_lat  # ib_write_lat -s 2, two daemons, two netns
    sudo python3 benchmarks/profile_perftest.py send_bw    # ib_send_bw -s 64, one daemon

Each case runs the perftest pair with ``-D`` (a duration), lets it warm up,
then records every process (the daemon(s), the server and the client) with
``py-spy record --nonblocking -f raw`` at the same time for ``--secs``, and
reads each process's CPU time (/proc/PID/stat) and the daemons' packet
counters (hw_counters sent_pkts/rcvd_pkts) before and after.  It prints per
process: CPU share of a core, CPU us per packet and per message, and the top
functions by own samples (the leaf of each stack) and by inclusive samples
(share of all that process's samples); the raw stacks stay in ``--out``
(flame graphs: ``py-spy``'s raw format is the collapsed-stack format).
Needs root (py-spy attaches with ptrace; the two-namespace cases need
network namespaces) and py-spy on PATH or next to this Python.
"""

from __future__ import annotations

import argparse
import collections
import glob
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))

CASES = {
    # name: (tool, args, two daemons in two network namespaces?)
    "write_bw": ("ib_write_bw", ["-s", "65536"], True),
    "write_lat": ("ib_write_lat", ["-s", "2"], True),
    "send_bw": ("ib_send_bw", ["-s", "64"], False),
    "send_bw_2ns": ("ib_send_bw", ["-s", "64"], True),
}
CLK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK


def counters(run_dir: str) -> dict[str, int]:
    out = {}
    for name in ("sent_pkts", "rcvd_pkts"):
        # not a recursive glob: the tree's device links loop
        for p in glob.glob(os.path.join(run_dir, "sys", "class", "infiniband", "*", "ports", "*", "hw_counters", name)):
            with open(p) as f:
                out[name] = out.get(name, 0) + int(f.read().split()[0])
    return out


def py_spy() -> str:
    exe = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    if not os.path.exists(exe):
        sys.exit("py-spy not found: pip install py-spy")
    return exe


def _short(frame: str) -> str:
    """``func (path/to/file.py:123)`` -> ``func (file.py``: the line is kept for leaves only."""
    if " (" not in frame:
        return frame
    func, where = frame.split(" (", 1)
    return f"{func} ({where.rsplit(':', 1)[0].rsplit('/', 1)[-1]}"


def summarize(raw: str, top: int) -> tuple[int, list, list]:
    """(samples, [(own %, function)], [(inclusive %, function)]) of a py-spy raw file."""
    own, incl = collections.Counter(), collections.Counter()
    total = 0
    with open(raw) as f:
        for line in f:
            stack, _, n = line.rstrip().rpartition(" ")
            if not stack:
                continue
            n = int(n)
            total += n
            frames = [_short(fr) for fr in stack.split(";")]
            own[frames[-1] + ":" + stack.rsplit(":", 1)[-1].rstrip(")")] += n    # the leaf, with its line
            for fr in set(frames):
                incl[fr] += n
    pct = lambda c: [(100.0 * v / total, k + ("" if k.endswith(")") else ")")) for k, v in c.most_common(top + 8)]  # noqa: E731
    return total, pct(own), pct(incl)


def run(case: str, secs: float, rate: int, out: str, top: int) -> None:
    tool, args, two_ns = CASES[case]
    os.makedirs(out, exist_ok=True)
    hosts = d = ctx = None
    try:
        if two_ns:
            from netns_helpers import TwoHosts
            hosts = TwoHosts(mtu=9000)
            hosts.start_daemons()
            daemons = {f"softrdmad {hosts.ns[i]}": (int(open(os.path.join(hosts.run_dirs[i], "softrdmad.pid")).read()),
                                                    hosts.run_dirs[i]) for i in range(2)}

            def srv(cmd):
                return hosts.popen(1, cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

            def cli(cmd):
                return hosts.popen(0, cmd + [hosts.ip[1]], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True)
        else:
            from daemon_helpers import daemon_in_shm
            ctx = daemon_in_shm("profile")
            d = ctx.__enter__()
            env = {**os.environ, "SOFTRDMA_RUN": d.run_dir, "SOFTRDMA_AUTOSTART": "0"}
            daemons = {"softrdmad": (int(open(os.path.join(d.run_dir, "softrdmad.pid")).read()), d.run_dir)}

            def srv(cmd):
                return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

            def cli(cmd):
                return subprocess.Popen(cmd + ["127.0.0.1"], env=env, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True)
        duration = int(secs + 8)
        cmd = [sys.executable, "-m", "softrdma", tool, "-d", "rxe0", "-F", "-D", str(duration), *args]
        s = srv(cmd)
        time.sleep(1.0)
        c = cli(cmd)
        time.sleep(4.0)                                      # connected, past perftest's warm-up margin
        procs = {**{k: v[0] for k, v in daemons.items()}, f"{tool} server": s.pid, f"{tool} client": c.pid}
        before = {k: cpu_s(p) for k, p in procs.items()}
        cnt0 = {k: counters(v[1]) for k, v in daemons.items()}
        t0 = time.monotonic()
        spies = {k: subprocess.Popen([py_spy(), "record", "--nonblocking", "-r", str(rate), "-d", str(int(secs)),
                                      "-f", "raw", "-o", os.path.join(out, f"{case}-{k.replace(' ', '_')}.txt"),
                                      "-p", str(p)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                 for k, p in procs.items()}
        time.sleep(secs)
        after = {k: cpu_s(p) for k, p in procs.items()}
        wall = time.monotonic() - t0
        cnt1 = {k: counters(v[1]) for k, v in daemons.items()}
        for sp in spies.values():
            sp.wait(timeout=120)
        cout, cerr = c.communicate(timeout=120)
        s.communicate(timeout=60)
    finally:
        if ctx is not None:
            ctx.__exit__(None, None, None)
        if hosts is not None:
            hosts.close()
    print(f"== {case}: {tool} {' '.join(args)} -D {duration}, {'two daemons in two netns' if two_ns else 'one daemon'};"
          f" py-spy {rate} Hz for {secs:.0f} s")
    print(cout.strip().splitlines()[-1] if cout.strip() else cerr)
    sent = sum(cnt1[k].get("sent_pkts", 0) - cnt0[k].get("sent_pkts", 0) for k in daemons)
    msgs = _messages(cout, tool, wall)
    print(f"packets sent by the daemon(s) in the window: {sent:,} ({sent / wall:,.0f}/s); "
          f"{'messages' if tool.endswith('_bw') else 'round trips'}: ~{msgs:,.0f} ({msgs / wall:,.0f}/s, "
          f"from the client's report)")
    for k in procs:
        used = after[k] - before[k]
        per_pkt = f"{used / sent * 1e6:.2f} us/packet, " if sent else ""
        unit = "message" if tool.endswith("_bw") else "round trip"
        per_msg = f"{used / msgs * 1e6:.2f} us/{unit}" if msgs else ""
        raw = os.path.join(out, f"{case}-{k.replace(' ', '_')}.txt")
        total, own, incl = summarize(raw, top) if os.path.exists(raw) else (0, [], [])
        print(f"\n-- {k}: {used / wall:.0%} of a core; {per_pkt}{per_msg}; {total} samples")
        print("   own samples (leaf):")
        for p, f in own:
            print(f"     {p:5.1f}%  {f}")
        print("   inclusive (below the loop that holds every sample):")
        for p, f in incl:
            if p >= 98.0:
                continue
            print(f"     {p:5.1f}%  {f}")


def _messages(out: str, tool: str, wall: float) -> float:
    """Messages (bw tools) or round trips (lat tools) in the window, from
    the client's -D report: the bw tools' last column is Mpps, the lat
    tools' (#bytes #iterations t_avg tps) is round trips per second."""
    for line in reversed(out.splitlines()):
        f = line.split()
        if len(f) >= 4 and f[0].isdigit():
            try:
                return float(f[-1]) * (1e6 if tool.endswith("_bw") else 1) * wall
            except ValueError:
                continue
    return 0.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("case", choices=sorted(CASES))
    ap.add_argument("--secs", type=float, default=10.0)
    ap.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--out", default=os.path.join(ROOT, "out", "profile"))
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (py-spy attaches to the daemons; network namespaces)")
    run(a.case, a.secs, a.rate, a.out, a.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
