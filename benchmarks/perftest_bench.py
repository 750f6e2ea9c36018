#!/usr/bin/env python3
"""softrdma's figures from softrdma's perftest, each against the strongest
reference measured in the same run.

One run measures:
  * the references (benchmarks/references.py): a memoryview copy of 1 MiB
    (one daemon's ceiling), a Python UDP GSO blast (~64 KiB sends of
    MTU-sized segments, the receiver with GRO) and a Python UDP ping-pong,
    both across the veth between the two network namespaces when run as root
    (else on loopback);
  * (a) one daemon: ib_{write,read,send}_bw -a and ib_{write,read,send}_lat -a
    between two processes on rxe0 of one softrdmad;
  * (b) two daemons in two network namespaces over a veth pair (MTU 9000, so
    the RoCE MTU is 4096), the same sweeps;
  * the target points at perftest's default iterations, best of three;
    the latency point twice, alternating run by run: as is (the scheduler
    places every process) and placed (the daemon(s) pinned to the last CPU
    with ``softrdmad --cpu``, the applications on the others with
    ``taskset -c``: a NIC's interrupt affinity and a latency-minded user's
    placement; across the namespaces also per host: each namespace's
    daemon and application on a CPU of their own), every run's figure kept;
and writes results.json, table.md and PNG plots (bandwidth and latency
against message size, both axes logarithmic, the references drawn) into the
output directory, then prints every target with its ratio: bandwidth across
daemons against the GSO blast's received rate, one daemon's against memcpy.

    python3 benchmarks/perftest_bench.py [--quick] [--out DIR]
    python3 benchmarks/perftest_bench.py --from-json DIR/results.json --out DIR

--out: where the report goes (default out/perf in the checkout, which git
ignores; docs/perf holds the published run).  --quick: fewer iterations and
one run per target point (a smoke run).  --from-json: no measuring, only
the table and plots again from a results.json an earlier run wrote.
"""

from __future__ import annotations

import argparse
import contextlib
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
sys.path.insert(0, HERE)

from references import local_spawn, memcpy_rate, udp_gso_blast, udp_pingpong  # noqa: E402

BW_TESTS = ("ib_write_bw", "ib_read_bw", "ib_send_bw")
LAT_TESTS = ("ib_write_lat", "ib_read_lat", "ib_send_lat")
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+([-\d.]+)\s+([-\d.]+)\s+([-\d.]+)\s*$")
_LAT_ROW = re.compile(r"^\s*(\d+)\s+(\d+)(\s+[-\d.]+){7}\s*$")


# ------------------------------------------------------------------ perftest
@contextlib.contextmanager
def environment(env: dict):
    """``os.environ`` with ``env`` set (the daemons, fabric and tools a run
    starts take it), put back as it was on leaving."""
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


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


# The target points (docs/PERFORMANCE.md's table of targets), at perftest's default iteration
# counts (bw 5000, lat 1000), best of three: the sweep's -n is short for the
# small sizes.  One daemon's bandwidth is judged against memcpy, two
# daemons' against the UDP GSO blast.
TARGET_RUNS = {
    "one_daemon": (("ib_write_bw", ["-s", "1048576"]), ("ib_send_bw", ["-s", "64", "-n", "50000"])),
    "two_namespaces": (("ib_write_bw", ["-s", "65536"]), ("ib_read_bw", ["-s", "65536"]),
                       ("ib_send_bw", ["-s", "65536"]), ("ib_send_bw", ["-s", "64", "-n", "50000"])),
}
#: the latency target point, measured as is and placed (``latency_runs``)
LAT_TARGET = ("ib_write_lat", ["-s", "2"])


def target_runs(server, client, peer: str, setup: str, quick: bool) -> dict:
    out = {}
    reps = 1 if quick else 3
    for tool, args in TARGET_RUNS[setup]:
        lat = tool in LAT_TESTS
        if quick:                                            # -n: short runs, a smoke test
            if "-n" in args:
                args = args[:args.index("-n")] + args[args.index("-n") + 2:]
            args = [*args, "-n", "200" if lat else "1000"]
        rows = []
        for _ in range(reps):
            rows += parse_table(run_pair(tool, ["-d", "rxe0", "-F", *args], server,
                                         lambda cmd: client(cmd + [peer])), lat)
        best = min(rows, key=lambda r: r["t_typical"]) if lat else max(rows, key=lambda r: r["bw_avg_MiBps"])
        out.setdefault(tool, []).append(best)
        print(f"  target run {tool} {' '.join(args)}: best of {reps}: {best}", flush=True)
    return out


def latency_runs(setups: dict, peer: str, quick: bool) -> dict:
    """The latency target point in each placement, alternating run by run
    (as is, placed, as is, ...: both see the same drift of a shared
    machine).  ``setups``: placement -> a context manager that yields
    (server popen, client popen) with the daemon(s) of that placement up.
    Returns placement -> {"best": the row of the lowest typical, "runs":
    every run's typical}."""
    tool, args = LAT_TARGET
    args = [*args, "-n", "200"] if quick else list(args)
    reps = 1 if quick else 3
    out: dict = {name: {"best": None, "runs": []} for name in setups}
    for _ in range(reps):
        for name, setup in setups.items():
            with setup() as (server, client):
                row = parse_table(run_pair(tool, ["-d", "rxe0", "-F", *args], server,
                                           lambda cmd: client(cmd + [peer])), True)[-1]
            got = out[name]
            got["runs"].append(row["t_typical"])
            if got["best"] is None or row["t_typical"] < got["best"]["t_typical"]:
                got["best"] = row
            print(f"  latency {tool} {' '.join(args)}, {name}: {row['t_typical']:.2f} us typical", flush=True)
    return out


def one_daemon(quick: bool) -> dict:
    import contextlib
    from daemon_helpers import daemon_in_shm
    dargs, prefix = placement()
    with daemon_in_shm("perfbench") as d, daemon_in_shm("perfbench-placed", args=dargs) as dp:
        def popen_on(run_dir, pre=()):
            env = {**os.environ, "SOFTRDMA_RUN": run_dir, "SOFTRDMA_AUTOSTART": "0"}

            def popen(cmd):
                return subprocess.Popen([*pre, *cmd], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True)
            return popen
        popen = popen_on(d.run_dir)
        placed = popen_on(dp.run_dir, prefix)
        res = {"sweep": sweep(popen, popen, [], quick, "127.0.0.1"),
               "targets": target_runs(popen, popen, "127.0.0.1", "one_daemon", quick)}
        @contextlib.contextmanager
        def on(p):                          # both daemons stay up: nothing to do between runs
            yield p, p
        lat = latency_runs({"as is": lambda: on(popen), "placed": lambda: on(placed)}, "127.0.0.1", quick)
    res["targets"][LAT_TARGET[0]] = [lat["as is"]["best"]]
    res["latency"] = {"as is": lat["as is"], "placed": dict(lat["placed"], daemon=dargs, applications=prefix)}
    return res


def two_namespaces(hosts, quick: bool) -> dict:
    import contextlib

    def pair(pre=()):
        def srv(cmd):
            return hosts.popen(1, [*pre, *cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        def cli(cmd):
            return hosts.popen(0, [*pre, *cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        return srv, cli
    srv, cli = pair()
    res = {"sweep": sweep(srv, cli, [], quick, hosts.ip[1]),
           "targets": target_runs(srv, cli, hosts.ip[1], "two_namespaces", quick)}
    # placed: both daemons on the last CPU, both applications on the
    # others.  The two daemons share their core, so only a short spin
    # budget: 5 us keeps the pass right after work from yielding (the
    # application's answer is due then) -- measured 78.5 us against 86.4
    # with none, 85 with 10 us, 127 against 100 with 50 us (docs/PERFORMANCE.md)
    dargs, prefix = placement()
    dargs = [*dargs, "--spin-us", "5"]
    # per host: each namespace's daemon and application on a CPU of their
    # own (as two machines would be), the daemon at nice 0 so that its
    # sched_yield hands the core to its application (at nice -10 the
    # scheduler gives it straight back): measured 64-69 us against 77-81
    cpus = sorted(os.sched_getaffinity(0))
    per_host = [["--cpu", str(cpus[i]), "--spin-us", "0", "--nice", "0"] for i in (0, -1)]
    host_apps = [["taskset", "-c", str(cpus[i])] for i in (0, -1)]

    def pair_per_host():
        def srv(cmd):
            return hosts.popen(1, [*host_apps[1], *cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        def cli(cmd):
            return hosts.popen(0, [*host_apps[0], *cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        return srv, cli

    @contextlib.contextmanager
    def daemons(args, make):
        restart_daemons(hosts, args)
        yield make()
    lat = latency_runs({"as is": lambda: daemons([[], []], pair),
                        "placed": lambda: daemons([dargs, dargs], lambda: pair(prefix)),
                        "placed per host": lambda: daemons(per_host, pair_per_host)},
                       hosts.ip[1], quick)
    restart_daemons(hosts, [[], []])
    res["targets"][LAT_TARGET[0]] = [lat["as is"]["best"]]
    res["latency"] = {"as is": lat["as is"], "placed": dict(lat["placed"], daemon=dargs, applications=prefix),
                      "placed per host": dict(lat["placed per host"],
                                              daemon=[f"A {' '.join(per_host[0])}, B {' '.join(per_host[1])}"],
                                              applications=[f"A {' '.join(host_apps[0])}, "
                                                            f"B {' '.join(host_apps[1])}"])}
    return res


def restart_daemons(hosts, args: list[list[str]]) -> None:
    """Both namespaces' daemons again, ``args[i]`` for namespace i's (fresh
    ones: the placement is the daemon's from its start)."""
    for d in hosts.daemons:
        d.terminate()
        d.wait(30)
    hosts.daemons.clear()
    for i in range(2):
        start_daemon(hosts, i, args[i])


def start_daemon(hosts, i: int, args: list[str]) -> None:
    """Namespace i's daemon (as ``TwoHosts.start_daemons``) with ``args``."""
    from wait_helpers import DEADLINE_S, wait_for
    os.makedirs(hosts.run_dirs[i], exist_ok=True)
    log = open(os.path.join(hosts.run_dirs[i], "test-daemon.log"), "w")
    hosts.daemons.append(hosts.popen(i, [sys.executable, "-m", "softrdma", "daemon", "-f", "--run-dir",
                                         hosts.run_dirs[i], "--device", f"rxe0:{hosts.dev[i]}", *args],
                                     stdout=log, stderr=subprocess.STDOUT))
    pid = os.path.join(hosts.run_dirs[i], "softrdmad.pid")
    wait_for(lambda: os.path.exists(pid), DEADLINE_S, f"softrdmad in {hosts.ns[i]} to start", proc=hosts.daemons[-1])


def placement() -> tuple[list[str], list[str]]:
    """The placed runs' (softrdmad options, application prefix): the
    daemon(s) on the last online CPU (``--cpu``, as a NIC's interrupt
    affinity), the applications on the others (``taskset -c``)."""
    sys.path.insert(0, os.path.join(ROOT, "src"))
    from softrdma.device.placement import format_cpu_list, online_cpus
    cpus = sorted(online_cpus() & os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise RuntimeError("placed runs need two CPUs")
    return ["--cpu", str(cpus[-1])], ["taskset", "-c", format_cpu_list(cpus[:-1])]


# ------------------------------------------------------------------ report
def _at(rows, size, key):
    for r in rows:
        if r["bytes"] == size:
            return r[key]
    return None


MiB = 1 << 20
VETH_MTU = 9000        # RoCE MTU 4096 across the namespaces; the GSO blast's segments fill it (and loopback's)


def references(lim: dict) -> dict:
    """The reference rates (bytes/s) of a results.json's limits: one daemon
    against memcpy 1 MiB, two daemons against the GSO blast's received rate
    (None where the run did not measure it)."""
    gso = lim.get("udp_gso_mtu")
    return {"one_daemon": lim.get("memcpy_1MiB_Bps"),
            "two_namespaces": gso["received_Bps"] if gso else None}


def targets(r: dict) -> list[tuple[str, str, str, bool]]:
    """(what, measured with its ratio, target, met) for the table of targets."""
    out = []
    ref = references(r["limits"])
    pp = r["limits"].get("udp_pingpong_2B")
    runs = {"one_daemon": (r.get("one_daemon") or {}).get("targets") or {},
            "two_namespaces": (r.get("two_namespaces") or {}).get("targets") or {}}
    where = {"one_daemon": "one daemon", "two_namespaces": "across two namespaces"}
    refname = {"one_daemon": "memcpy 1 MiB", "two_namespaces": "Python UDP GSO blast"}
    for setup, tool, size, goal in (("two_namespaces", "ib_write_bw", 65536, 0.40),
                                    ("two_namespaces", "ib_read_bw", 65536, 0.35),
                                    ("two_namespaces", "ib_send_bw", 65536, 0.35),
                                    ("one_daemon", "ib_write_bw", MiB, 0.70)):
        bw = _at(runs[setup].get(tool, []), size, "bw_avg_MiBps")
        if bw is not None and ref[setup]:
            ratio = bw * MiB / ref[setup]
            out.append(((f"{tool} {size // MiB} MiB" if size >= MiB else f"{tool} {size // 1024} KiB")
                        + f", {where[setup]} / {refname[setup]}",
                        f"{bw * MiB / 1e6:,.0f} MB/s = {ratio:.0%} of {ref[setup] / 1e6:,.0f} MB/s",
                        f">= {goal:.0%}", ratio >= goal))
    for setup, goal in (("one_daemon", 15.0), ("two_namespaces", 50.0)):
        placements = (r.get(setup) or {}).get("latency") or {
            "as is": {"best": (runs[setup].get("ib_write_lat") or [None])[0], "runs": []}}   # an older results.json
        for name, got in placements.items():
            if not got.get("best"):
                continue
            lat = got["best"]["t_typical"]
            vs = ""
            if setup == "two_namespaces" and pp:
                vs = f" = {lat / pp['t_typical']:.1f}x the Python UDP ping-pong's {pp['t_typical']:.1f} us one way"
            if got["runs"]:
                vs += f" (the best run; every run: {', '.join(f'{x:.1f}' for x in got['runs'])})"
            how = name
            if name.startswith("placed"):
                how += f": daemon{'s' if setup == 'two_namespaces' else ''} {' '.join(got['daemon'])}, " \
                       f"applications {' '.join(got['applications'])}"
            out.append((f"ib_write_lat 2 B typical, {where[setup]}, {how}", f"{lat:.2f} us{vs}",
                        f"<= {goal:.0f} us", lat <= goal))
    for setup, goal in (("one_daemon", 200e3), ("two_namespaces", 100e3)):
        mpps = _at(runs[setup].get("ib_send_bw", []), 64, "mpps")
        if mpps is not None:
            out.append((f"ib_send_bw 64 B, {where[setup]}", f"{mpps * 1e6:,.0f} msg/s", f">= {goal:,.0f} msg/s",
                        mpps * 1e6 >= goal))
    return out


def write_report(r: dict, outdir: str, cmdline: str) -> None:
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "results.json"), "w") as f:
        json.dump(r, f, indent=1)
    lim = r["limits"]
    ref = references(lim)
    lines = [f"Measured {r['date']} on {r['machine']} with `{cmdline}`.", "",
             "| reference (same run) | rate |", "|---|---|",
             f"| memoryview copy 1 MiB (one daemon's reference) | {lim['memcpy_1MiB_Bps'] / 1e6:,.0f} MB/s |",
             f"| memoryview copy 64 KiB | {lim['memcpy_64KiB_Bps'] / 1e6:,.0f} MB/s |"]
    gso = lim.get("udp_gso_mtu")
    if gso:
        lines.append(f"| Python UDP GSO blast, {gso['send_bytes']:,} B sends of {gso['segment']:,} B segments, "
                     f"receiver {'with' if gso['gro'] else 'without'} GRO ({lim['path']}; two daemons' reference) | "
                     f"{gso['received_Bps'] / 1e6:,.0f} MB/s received ({gso['sent_Bps'] / 1e6:,.0f} MB/s sent) |")
    pp = lim.get("udp_pingpong_2B")
    if pp:
        lines.append(f"| Python UDP ping-pong, 2 B, one way = round trip / 2 ({lim['path']}) | "
                     f"{pp['t_typical']:.1f} us typical, {pp['t_min']:.1f} us min |")
    how = ("-n 1000 (bw) / 200 (lat), one run each (--quick)" if "--quick" in cmdline else
           "perftest's default iterations, ib_send_bw 64 B with -n 50000, best of three")
    lines += ["", f"Targets (the target points at {how}):", "", "| target | measured | goal | met |",
              "|---|---|---|---|"]
    for name, got, goal, ok in targets(r):
        lines.append(f"| {name} | {got} | {goal} | {'yes' if ok else 'no'} |")
    for setup, title, refname in (("one_daemon", "one daemon (loopback)", "memcpy 1 MiB"),
                                  ("two_namespaces", "two daemons, two netns, veth", "the UDP GSO blast")):
        if not r.get(setup):
            continue
        res = r[setup]["sweep"]
        lines += ["", f"### {title}: `-a` sweep, -n 200 (bw) / 500 (lat); bandwidth as MB/s (% of {refname})", "",
                  "| bytes | " + " | ".join(f"{t} MB/s" for t in BW_TESTS)
                  + " | " + " | ".join(f"{t} typical us" for t in LAT_TESTS) + " |",
                  "|---" * (1 + len(BW_TESTS) + len(LAT_TESTS)) + "|"]
        sizes = sorted({row["bytes"] for t in res.values() for row in t})
        for s in sizes:
            cells = []
            for t in BW_TESTS:
                v = _at(res[t], s, "bw_avg_MiBps")
                pct = f" ({v * MiB / ref[setup]:.1%})" if v is not None and ref[setup] else ""
                cells.append("" if v is None else f"{v * MiB / 1e6:,.1f}{pct}")
            for t in LAT_TESTS:
                v = _at(res[t], s, "t_typical")
                cells.append("" if v is None else f"{v:.2f}")
            lines.append(f"| {s} | " + " | ".join(cells) + " |")
    with open(os.path.join(outdir, "table.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    plot(r, outdir)


def plot(r: dict, outdir: str) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plots (pip install matplotlib)", file=sys.stderr)
        return
    lim = r["limits"]
    ref = references(lim)
    sizes = sorted({row["bytes"] for setup in ("one_daemon", "two_namespaces")
                    for t in ((r.get(setup) or {}).get("sweep") or {}).values() for row in t}) or [2, MiB]
    for kind, tests, key, ylabel, scale in (
            ("bw", BW_TESTS, "bw_avg_MiBps", "bandwidth [MB/s]", MiB / 1e6),
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
        # the references: as rates (bw); as the time to move a message of
        # each size (lat): one daemon's at memcpy's rate, two daemons' the
        # Python UDP ping-pong's one way plus the size at the GSO blast's rate
        pp = lim.get("udp_pingpong_2B")
        floor = pp["t_typical"] if pp else 0.0
        for rate, base, color, label in (
                (ref["one_daemon"], 0.0, "grey", "memcpy 1 MiB (one daemon's reference)"),
                (ref["two_namespaces"], floor, "black", "Python UDP GSO blast, received (two daemons' reference)")):
            if not rate:
                continue
            if kind == "bw":
                ax.axhline(rate / 1e6, color=color, lw=0.9, ls=":", label=label)
            else:
                ax.plot(sizes, [base + s / rate * 1e6 for s in sizes], color=color, lw=0.9, ls=":",
                        label=("Python UDP ping-pong 2 B one way + " if base else "") + f"size / rate of the {label}")
        if kind == "lat":
            ys = [x[key] for setup in ("one_daemon", "two_namespaces")
                  for t in tests for x in ((r.get(setup) or {}).get("sweep") or {}).get(t) or []]
            if ys:                          # below the data and the ping-pong; memcpy's curve is cut there
                ax.set_ylim(bottom=min(ys + ([floor] if floor else [])) / 2)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")                # both: the curves span decades (latency: 1 us .. 10 ms)
        ax.set_xlabel("message size [bytes]")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", lw=0.3)
        ax.legend(fontsize=6)
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
        hosts = TwoHosts(mtu=VETH_MTU)
    try:
        lim = {"memcpy_1MiB_Bps": memcpy_rate(1 << 20, 300), "memcpy_64KiB_Bps": memcpy_rate(65536, 5000),
               "path": "veth between the namespaces" if hosts else "loopback"}
        if hosts is not None:
            def spawn(side, argv):
                return hosts.popen(side, argv, stdout=subprocess.PIPE, text=True)
            dst = hosts.ip[1]
        else:
            spawn, dst = local_spawn, "127.0.0.1"
        lim["udp_gso_mtu"] = udp_gso_blast(spawn, dst, VETH_MTU)
        lim["udp_pingpong_2B"] = udp_pingpong(spawn, dst, 2, 5000 if args.quick else 20000)
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
    for name, got, goal, ok in targets(r):
        print(f"{'MET ' if ok else 'MISS'} {name}: {got} (goal {goal})")
    print(f"report: {args.out}/table.md, bw.png, lat.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
