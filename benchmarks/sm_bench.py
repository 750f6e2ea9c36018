#!/usr/bin/env python3
"""Heavy sweep to SUBNET UP: `softrdma opensm -o` vs the real `opensm -o`, same fabric server, same run.

For each round and each SM: a fresh fabric server on the topology -- the
real `ibsim -s -n` or, with `--server softrdma`, `softrdma fabric serve` --
(so every sweep is a first boot: no LIDs, no LFTs, no guid2lid), then the SM
with `-o -R ENGINE -a ROOTS`; wall time of the process, and the sweep time
from its log (first line to the "SUBNET UP" line); then the real
`ibnetdiscover` against the swept fabric (its wall time: a discovery's
worth of SMP round trips through that server).  Prints one row per run and
the medians, with the peak RSS of the SM and of the fabric server.

ft3 sizes (the 11,664-host tree of 36-port switches: ``ft3 --pods 36
--leaves-per-pod 18 --aggs-per-pod 18 --cores 324 --hosts-per-leaf 18
--radix 36``) get ibsim's node and port limits to match; ``--net FILE``
takes a ready .net (with FILE.roots) instead of generating one.

    python3 benchmarks/sm_bench.py ft2 --leaves 64 --spines 32 --hosts-per-leaf 32 --radix 64 \
        [-R minhop] [--rounds 3] [--server ibsim|softrdma|ibsim,softrdma] [--sms opensm,softrdma]

With ``--server ibsim,softrdma`` each round sweeps on both servers, one after
the other, and the ratio of an SM's sweep on softrdma's server to its sweep
on ibsim is printed (per round and of the medians).
"""

import argparse
import hashlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
GEN = os.path.join(ROOT, "tests", "data", "opensm", "gen_fattree.py")
SIMSO = "/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so"
_TS = re.compile(r"^(\w{3} \d\d \d\d:\d\d:\d\d) (\d{6})")


def _stamp(line):
    m = _TS.match(line)
    if not m:
        return None
    t = datetime.strptime("2000 " + m.group(1), "%Y %b %d %H:%M:%S")
    return t.timestamp() + int(m.group(2)) / 1e6


def sweep_time(log):
    lines = open(log, errors="replace").read().splitlines()
    stamps = [(s, ln) for ln in lines if (s := _stamp(ln)) is not None]
    up = [s for s, ln in stamps if "SUBNET UP" in ln]
    return (up[0] - stamps[0][0]) if up and stamps else float("nan")


def _wait_bound(proc, base, timeout=120.0):
    """Until the server's @<base>:ctl socket is bound (a big topology takes seconds to load)."""
    want = f"@{base}:ctl".encode()
    end = time.monotonic() + timeout
    while True:
        with open("/proc/net/unix", "rb") as f:
            if want in f.read():
                return
        if proc.poll() is not None or time.monotonic() > end:
            raise SystemExit(f"the fabric server exited or bound nothing: {want!r}")
        time.sleep(0.05)


def _peak_kb(pid):
    """VmHWM of a running process (kB), 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _run(cmd, cwd, env):
    """Run to the end; (wall seconds, peak RSS in kB) of the process (os.wait4's ru_maxrss)."""
    t = time.monotonic()
    p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _, status, ru = os.wait4(p.pid, 0)
    except BaseException:
        p.kill()
        p.wait()
        raise
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode:
        raise subprocess.CalledProcessError(p.returncode, cmd)
    return time.monotonic() - t, ru.ru_maxrss


def limits(net):
    """ibsim's -N (nodes), -S (switches) and -P (ports) for the topology, with room to spare."""
    try:
        with open(net + ".json") as f:
            j = json.load(f)
        nodes, sws, links = j["switches"] + j["cas"], j["switches"], j["links"]
    except (OSError, KeyError, ValueError):
        return ["-N", "4096", "-P", "16384"]
    return ["-N", str(max(4096, nodes + 64)), "-S", str(max(2048, sws + 64)),
            "-P", str(max(16384, 2 * links + nodes + sws + 64))]


def one(work, net, roots, sm, engine, n, extra=(), server="ibsim"):
    base = f"smb{os.getpid()}{sm}{server}{n}"
    d = os.path.join(work, f"{sm}-{server}{n}")
    os.makedirs(d)
    env = dict(os.environ, IBSIM_SOCKNAME=base, OSM_TMP_DIR=d, OSM_CACHE_DIR=d,
               PYTHONPATH=os.path.join(ROOT, "src"))
    env.pop("LD_PRELOAD", None)
    srv = ["ibsim", "-s", *limits(net), "-n", net] if server == "ibsim" else \
        [sys.executable, "-m", "softrdma", "fabric", "serve", net, "--no-console"]
    sim = subprocess.Popen(srv, cwd=d, env=env,
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_bound(sim, base)
        log = os.path.join(d, "osm.log")
        args = ["-o", "-R", engine, "-a", roots, "-f", log, "-D", "0x43", "--dump_files_dir", d, *extra]
        if sm == "opensm":
            cmd, env2 = ["opensm", *args], dict(env, LD_PRELOAD=SIMSO)
        else:
            cmd, env2 = [sys.executable, "-m", "softrdma", "opensm", *args], env
        wall, rss = _run(cmd, d, env2)
        h = hashlib.sha1()
        with open(os.path.join(d, "opensm-lfts.dump"), "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        dump = h.hexdigest()
        disc, _ = _run(["ibnetdiscover"], d, dict(env, LD_PRELOAD=SIMSO))
        return wall, sweep_time(log), dump, disc, rss, _peak_kb(sim.pid)
    finally:
        sim.terminate()
        sim.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-R", default="minhop")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--wire", type=int, default=None, help="--max_wire_smps of softrdma's SM (opensm's is 4)")
    ap.add_argument("--server", default="ibsim",
                    help="the fabric server(s) the SMs sweep, comma-separated and alternating in each "
                         "round: ibsim (the real one, default), softrdma")
    ap.add_argument("--sms", default="opensm,softrdma", help="the SMs to run (default: both)")
    ap.add_argument("--net", help="a ready .net file (and FILE.roots) instead of generating one")
    a, gen_args = ap.parse_known_args()
    servers = a.server.split(",")
    sms = a.sms.split(",")
    if not set(servers) <= {"ibsim", "softrdma"} or not set(sms) <= {"opensm", "softrdma"}:
        ap.error("--server takes ibsim and/or softrdma, --sms opensm and/or softrdma")
    with tempfile.TemporaryDirectory(prefix="smbench") as work:
        if a.net:
            net = os.path.abspath(a.net)
        else:
            net = os.path.join(work, "topo.net")
            subprocess.run([sys.executable, GEN, *gen_args, "-o", net], check=True, stdout=subprocess.DEVNULL)
        res = {(sm, srv): [] for srv in servers for sm in sms}
        for n in range(a.rounds):
            for srv in servers:
                ref = None
                for sm in sms:
                    # opensm has no such option (max_wire_smps in its config, default 4)
                    extra = ["--max_wire_smps", str(a.wire)] if a.wire and sm == "softrdma" else []
                    wall, sw, dump, disc, rss, srv_rss = one(work, net, net + ".roots", sm, a.R, n, extra, srv)
                    res[sm, srv].append((wall, sw, disc, rss, srv_rss))
                    same = "" if sm == "opensm" or ref is None else \
                        f", LFT dump {'identical to' if dump == ref else 'DIFFERENT from'} opensm's"
                    ref = dump if sm == "opensm" else ref
                    print(f"round {n} {sm:8s} -R {a.R} on {srv}: wall {wall:.3f} s, sweep to SUBNET UP "
                          f"{sw:.3f} s, then ibnetdiscover {disc:.3f} s; peak RSS: SM {rss / 1024:.0f} MB, "
                          f"server {srv_rss / 1024:.0f} MB{same}", flush=True)
        med = {}
        for (sm, srv), rows in res.items():
            med[sm, srv] = statistics.median(r[1] for r in rows)
            print(f"median {sm:8s} on {srv}: wall {statistics.median(r[0] for r in rows):.3f} s, "
                  f"sweep {med[sm, srv]:.3f} s, "
                  f"ibnetdiscover {statistics.median(r[2] for r in rows):.3f} s, "
                  f"SM peak RSS {statistics.median(r[3] for r in rows) / 1024:.0f} MB, "
                  f"server peak RSS {statistics.median(r[4] for r in rows) / 1024:.0f} MB")
        for srv in servers:
            if len(sms) == 2:
                print(f"softrdma / opensm, sweep to SUBNET UP on {srv}: "
                      f"{med['softrdma', srv] / med['opensm', srv]:.2f}")
        if len(servers) == 2:
            for sm in sms:
                per = [b[1] / i[1] for i, b in zip(res[sm, "ibsim"], res[sm, "softrdma"])]
                print(f"{sm}'s sweep on softrdma's server / on ibsim: median {med[sm, 'softrdma'] / med[sm, 'ibsim']:.2f}"
                      f" (per round {', '.join(f'{x:.2f}' for x in per)})")


if __name__ == "__main__":
    main()
