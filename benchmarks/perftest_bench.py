#!/usr/bin/env python3
"""softrdma's figures from softrdma's perftest, beside the machine's limits.

One run measures:
  * the limits: a memoryview copy (1 MiB and 64 KiB), a plain Python UDP
    blast (one sendto per 1 KiB datagram) and the same with UDP GSO (60 KiB
    sends of 4 KiB segments), each between the two network namespaces when
    run as root (else on loopback);
  * (a) one daemon: ib_{write,read,send}_bw -a and ib_{write,read,send}_lat -a
    between two processes on rxe0 of one softrdmad;
  * (b) two daemons in two network namespaces over a veth pair (MTU 9000, so
    the RoCE MTU is 4096), the same sweeps;
and writes results.json, table.md and PNG plots (bandwidth and latency
against message size, both axes logarithmic) into the output directory,
then prints the four target ratios.

    python3 benchmarks/perftest_bench.py [--quick] [--out DIR]
    python3 benchmarks/perftest_bench.py --from-json DIR/results.json --out DIR

--out: where the report goes (default out/perf in the checkout, which git
ignores; docs/perf holds the published run).  --quick: fewer iterations (a
smoke run, a few minutes less).  --from-json: no measuring, only the table
and plots again from a results.json an earlier run wrote.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))

BW_TESTS = ("ib_write_bw", "ib_read_bw", "ib_send_bw")
LAT_TESTS = ("ib_write_lat", "ib_read_lat", "ib_send_lat")
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+([-\d.]+)\s+([-\d.]+)\s+([-\d.]+)\s*$")
_LAT_ROW = re.compile(r"^\s*(\d+)\s+(\d+)(\s+[-\d.]+){7}\s*$")


# ------------------------------------------------------------------ limits
def memcpy_rate(size: int, reps: int) -> float:
    src, dst = memoryview(bytearray(os.urandom(size))), memoryview(bytearray(size))
    best = 0.0
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(reps):
            dst[:] = src
        best = max(best, size * reps / (time.perf_counter() - t))
    return best


_BLAST = r"""
import socket, struct, sys, time
mode, host, port, size, secs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
if mode == "rx":
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, 33, 8 << 20)
    s.setsockopt(17, 104, 1)                         # UDP_GRO: count bytes, not calls
    s.bind((host, port)); s.settimeout(0.5)
    print("ready", flush=True)
    buf = bytearray(65536); got = 0; t0 = None; give_up = time.perf_counter() + 30
    while True:
        try:
            n = s.recv_into(buf)
        except socket.timeout:
            if t0 is not None or time.perf_counter() > give_up: break
            continue
        if t0 is None: t0 = time.perf_counter()
        got += n; t1 = time.perf_counter()
    print(got / (t1 - t0) if t0 is not None and t1 > t0 else 0.0, flush=True)
else:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, 32, 8 << 20)
    payload = bytes(size); sent = 0
    gso = mode == "gso"
    seg = 4096
    cm = [(17, 103, struct.pack("=H", seg))]
    end = time.perf_counter() + secs; t0 = time.perf_counter()
    while time.perf_counter() < end:
        for _ in range(64):
            try:
                if gso:
                    s.sendmsg([payload], cm, 0, (host, port))
                else:
                    s.sendto(payload, (host, port))
                sent += size
            except (BlockingIOError, OSError):
                pass
    print(sent / (time.perf_counter() - t0), flush=True)
"""


def udp_blast(hosts, mode: str, size: int, secs: float = 2.0) -> dict:
    """Sender and receiver rates (bytes/s) of a plain Python UDP blast."""
    port = 47000 + (os.getpid() % 1000)
    dst = hosts.ip[1] if hosts is not None else "127.0.0.1"

    def start(side: int, *args):
        cmd = [sys.executable, "-c", _BLAST, *args]
        if hosts is not None:
            return hosts.popen(side, cmd, stdout=subprocess.PIPE, text=True)
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    rx = start(1, "rx", dst, str(port), "0", "0")
    rx.stdout.readline()
    tx = start(0, mode, dst, str(port), str(size), str(secs))
    sent = float(tx.communicate(timeout=60)[0].strip() or 0)
    got = float(rx.communicate(timeout=60)[0].strip() or 0)
    return {"sent_Bps": sent, "received_Bps": got}


# ------------------------------------------------------------------ perftest
def parse_table(out: str, lat: bool) -> list[dict]:
    rows = []
    for line in out.splitlines():
        if lat:
            if _LAT_ROW.match(line):
                f = line.split()
                rows.append({"bytes": int(f[0]), "iters": int(f[1]), "t_min": float(f[2]), "t_max": float(f[3]),
                             "t_typical": float(f[4]), "t_avg": float(f[5]), "t_stdev": float(f[6]),
                             "p99": float(f[7]), "p999": float(f[8])})
        else:
            m = _ROW.match(line)
            if m:
                rows.append({"bytes": int(m[1]), "iters": int(m[2]), "bw_peak_MiBps": float(m[3]),
                             "bw_avg_MiBps": float(m[4]), "mpps": float(m[5])})
    return rows


def run_pair(tool: str, args: list[str], server, client, timeout: float = 900) -> str:
    """Run ``tool`` as server (``server(cmd)`` -> Popen) and client; the
    client's stdout."""
    srv = server([sys.executable, "-m", "softrdma", tool, *args])
    time.sleep(1.0)
    cli = client([sys.executable, "-m", "softrdma", tool, *args])
    try:
        out, err = cli.communicate(timeout=timeout)
        srv.communicate(timeout=60)
    finally:
        for p in (cli, srv):
            if p.poll() is None:
                p.kill()
    if cli.returncode:
        raise RuntimeError(f"{tool} {' '.join(args)} failed:\n{out}\n{err}")
    return out


def sweep(server, client, extra: list[str], quick: bool, peer: str | None) -> dict:
    res = {}
    for tool in BW_TESTS + LAT_TESTS:
        lat = tool in LAT_TESTS
        n = ("50" if quick else "200") if not lat else ("100" if quick else "500")
        args = ["-d", "rxe0", "-a", "-n", n, "-F", *extra]
        t = time.monotonic()
        out = run_pair(tool, args, server, lambda cmd: client(cmd + ([peer] if peer else [])))
        res[tool] = parse_table(out, lat)
        print(f"  {tool}: {len(res[tool])} sizes in {time.monotonic() - t:.0f} s", flush=True)
    return res


# The target points, at perftest's default iteration counts (bw 5000, lat
# 1000), best of three: the sweep's -n is short for the small sizes.
TARGET_RUNS = (("ib_write_bw", ["-s", "1048576"]), ("ib_write_bw", ["-s", "65536"]),
               ("ib_send_bw", ["-s", "64", "-n", "50000"]), ("ib_write_lat", ["-s", "2"]))


def target_runs(server, client, peer: str, reps: int = 3) -> dict:
    out = {}
    for tool, args in TARGET_RUNS:
        lat = tool in LAT_TESTS
        rows = []
        for _ in range(reps):
            rows += parse_table(run_pair(tool, ["-d", "rxe0", "-F", *args], server,
                                         lambda cmd: client(cmd + [peer])), lat)
        best = min(rows, key=lambda r: r["t_typical"]) if lat else max(rows, key=lambda r: r["bw_avg_MiBps"])
        out.setdefault(tool, []).append(best)
        print(f"  target run {tool} {' '.join(args)}: best of {reps}: {best}", flush=True)
    return out


def one_daemon(quick: bool) -> dict:
    from daemon_helpers import daemon_in_shm
    with daemon_in_shm("perfbench") as d:
        env = {**os.environ, "SOFTRDMA_RUN": d.run_dir, "SOFTRDMA_AUTOSTART": "0"}

        def popen(cmd):
            return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        return {"sweep": sweep(popen, popen, [], quick, "127.0.0.1"),
                "targets": target_runs(popen, popen, "127.0.0.1")}


def two_namespaces(hosts, quick: bool) -> dict:
    def srv(cmd):
        return hosts.popen(1, cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def cli(cmd):
        return hosts.popen(0, cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return {"sweep": sweep(srv, cli, [], quick, hosts.ip[1]), "targets": target_runs(srv, cli, hosts.ip[1])}


# ------------------------------------------------------------------ report
def _at(rows, size, key):
    for r in rows:
        if r["bytes"] == size:
            return r[key]
    return None


def targets(r: dict) -> list[tuple[str, str, str, bool]]:
    MiB = 1 << 20
    out = []
    lim = r["limits"]
    one = r["one_daemon"]["targets"]
    two = (r.get("two_namespaces") or {}).get("targets")
    w1 = _at(one["ib_write_bw"], MiB, "bw_avg_MiBps")
    mc = lim["memcpy_1MiB_Bps"]
    if w1 is not None:
        out.append(("(a) ib_write_bw 1 MiB, one daemon >= 50% of memcpy",
                     f"{w1 * MiB / 1e6:,.0f} MB/s = {w1 * MiB / mc:.0%} of {mc / 1e6:,.0f} MB/s",
                     "50%", w1 * MiB / mc >= 0.5))
    if two:
        w64 = _at(two["ib_write_bw"], 65536, "bw_avg_MiBps")
        blast = lim["udp_1KiB"]["sent_Bps"]
        if w64 is not None:
            out.append(("(b) ib_write_bw 64 KiB across namespaces >= 1.5x plain Python UDP blast (1 KiB)",
                        f"{w64 * MiB / 1e6:,.0f} MB/s = {w64 * MiB / blast:.2f}x {blast / 1e6:,.0f} MB/s",
                        "1.5x", w64 * MiB / blast >= 1.5))
    l1 = _at(one["ib_write_lat"], 2, "t_typical")
    if l1 is not None:
        out.append(("(c) ib_write_lat 2 B median, one daemon <= 30 us", f"{l1:.2f} us", "30 us", l1 <= 30))
    if two:
        l2 = _at(two["ib_write_lat"], 2, "t_typical")
        if l2 is not None:
            out.append(("(c) ib_write_lat 2 B median, across daemons <= 60 us", f"{l2:.2f} us", "60 us", l2 <= 60))
    s64 = _at(one["ib_send_bw"], 64, "mpps")
    if s64 is not None:
        out.append(("(d) ib_send_bw 64 B >= 100 k msg/s (one daemon)", f"{s64 * 1e6:,.0f} msg/s", "100,000",
                    s64 >= 0.1))
    return out


def write_report(r: dict, outdir: str, cmdline: str) -> None:
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "results.json"), "w") as f:
        json.dump(r, f, indent=1)
    lim = r["limits"]
    lines = [f"Measured {r['date']} on {r['machine']} with `{cmdline}`.", "",
             "| limit | rate |", "|---|---|",
             f"| memoryview copy 1 MiB | {lim['memcpy_1MiB_Bps'] / 1e6:,.0f} MB/s |",
             f"| memoryview copy 64 KiB | {lim['memcpy_64KiB_Bps'] / 1e6:,.0f} MB/s |"]
    for k, what in (("udp_1KiB", "plain Python UDP blast, 1 KiB datagrams"),
                    ("udp_4KiB", "plain Python UDP blast, 4 KiB datagrams"),
                    ("udp_gso", "Python UDP with GSO, 60 KiB sends of 4 KiB segments")):
        if k in lim:
            lines.append(f"| {what} ({lim['path']}) | {lim[k]['sent_Bps'] / 1e6:,.0f} MB/s sent, "
                         f"{lim[k]['received_Bps'] / 1e6:,.0f} MB/s received |")
    lines += ["", "Targets (the target points measured at perftest's default iterations, ib_send_bw "
              "with -n 50000, best of three):", "", "| target | measured | met |", "|---|---|---|"]
    for name, got, _, ok in targets(r):
        lines.append(f"| {name} | {got} | {'yes' if ok else 'no'} |")
    for setup, title in (("one_daemon", "one daemon (loopback)"), ("two_namespaces", "two daemons, two netns, veth")):
        if not r.get(setup):
            continue
        res = r[setup]["sweep"]
        lines += ["", f"### {title}: `-a` sweep, -n 200 (bw) / 500 (lat)", "", "| bytes | " + " | ".join(f"{t} MB/s" for t in BW_TESTS)
                  + " | " + " | ".join(f"{t} typical us" for t in LAT_TESTS) + " |",
                  "|---" * (1 + len(BW_TESTS) + len(LAT_TESTS)) + "|"]
        sizes = sorted({row["bytes"] for t in res.values() for row in t})
        for s in sizes:
            cells = []
            for t in BW_TESTS:
                v = _at(res[t], s, "bw_avg_MiBps")
                cells.append("" if v is None else f"{v * (1 << 20) / 1e6:,.1f}")
            for t in LAT_TESTS:
                v = _at(res[t], s, "t_typical")
                cells.append("" if v is None else f"{v:.2f}")
            lines.append(f"| {s} | " + " | ".join(cells) + " |")
    with open(os.path.join(outdir, "table.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plots (pip install matplotlib)", file=sys.stderr)
        return
    for kind, tests, key, ylabel, scale in (
            ("bw", BW_TESTS, "bw_avg_MiBps", "bandwidth [MB/s]", (1 << 20) / 1e6),
            ("lat", LAT_TESTS, "t_typical", "latency, typical [us]", 1.0)):
        fig, ax = plt.subplots(figsize=(8, 5))
        for setup, style, what in (
                # one daemon serves both QPs: a message is a shared-memory copy
                # inside that process (transport.loopback), no packet, no wire
                ("one_daemon", "-", "one daemon: a shared-memory copy inside it"),
                ("two_namespaces", "--", "two daemons, RoCEv2 over veth")):
            for t in tests:
                rows = ((r.get(setup) or {}).get("sweep") or {}).get(t) or []
                if rows:
                    ax.plot([x["bytes"] for x in rows], [x[key] * scale for x in rows], style, marker=".",
                            label=f"{t} ({what})")
        if kind == "bw":
            ax.axhline(lim["memcpy_1MiB_Bps"] / 1e6, color="grey", lw=0.8, ls=":", label="memcpy 1 MiB")
            ax.axhline(lim["udp_1KiB"]["sent_Bps"] / 1e6, color="black", lw=0.8, ls=":",
                       label="Python UDP blast 1 KiB")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")                # both: the curves span decades (latency: 1 us .. 10 ms)
        ax.set_xlabel("message size [bytes]")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", lw=0.3)
        ax.legend(fontsize=7)
        ax.set_title(f"softrdma perftest, {kind}")
        fig.tight_layout()
        fig.savefig(os.path.join(outdir, f"{kind}.png"), dpi=110)
        plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer iterations: a smoke run")
    ap.add_argument("--out", default=os.path.join(ROOT, "out", "perf"),
                    help="directory for results.json, table.md, bw.png, lat.png (default: out/perf)")
    ap.add_argument("--from-json", metavar="RESULTS.json",
                    help="measure nothing: write the table and plots from an earlier run's results.json")
    args = ap.parse_args()
    if args.from_json:
        try:
            with open(args.from_json) as f:
                r = json.load(f)
        except (OSError, ValueError) as e:
            ap.error(f"--from-json: {e}")
        cmdline = r.get("command", "python3 benchmarks/perftest_bench.py")
        write_report(r, args.out, cmdline)
        print(f"report: {args.out}/table.md, bw.png, lat.png")
        return 0
    r: dict = {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": f"{os.cpu_count()} CPUs, Python "
               f"{sys.version.split()[0]}"}
    hosts = None
    if os.geteuid() == 0 and shutil.which("ip"):
        from netns_helpers import TwoHosts
        hosts = TwoHosts(mtu=9000)
    try:
        lim = {"memcpy_1MiB_Bps": memcpy_rate(1 << 20, 300), "memcpy_64KiB_Bps": memcpy_rate(65536, 5000),
               "path": "veth between the namespaces" if hosts else "loopback"}
        lim["udp_1KiB"] = udp_blast(hosts, "plain", 1024)
        lim["udp_4KiB"] = udp_blast(hosts, "plain", 4096)
        lim["udp_gso"] = udp_blast(hosts, "gso", 15 * 4096)          # under the 65,507-byte UDP limit
        r["limits"] = lim
        print(json.dumps(lim), flush=True)
        print("one daemon:", flush=True)
        r["one_daemon"] = one_daemon(args.quick)
        if hosts is not None:
            hosts.start_daemons()
            print("two namespaces:", flush=True)
            r["two_namespaces"] = two_namespaces(hosts, args.quick)
    finally:
        if hosts is not None:
            hosts.close()
    r["command"] = "python3 benchmarks/perftest_bench.py" + (" --quick" if args.quick else "")
    write_report(r, args.out, r["command"])
    for name, got, _, ok in targets(r):
        print(f"{'MET ' if ok else 'MISS'} {name}: {got}")
    print(f"report: {args.out}/table.md, bw.png, lat.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
