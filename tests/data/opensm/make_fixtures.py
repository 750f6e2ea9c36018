#!/usr/bin/env python3
"""Regenerate the opensm reference fixtures in this folder (see README.md).

For every topology: write the .net with gen_fattree.py, start the real
``ibsim -s -n`` on it, run the real ``opensm -o`` once per routing engine
through libumad2sim, and keep ``opensm-lfts.dump`` and ``guid2lid`` gzipped
xz-compressed.

Usage: make_fixtures.py [TOPOLOGY ...]   (default: all of TOPOLOGIES)
Needs the Debian packages opensm, ibsim-utils, infiniband-diags.
"""
import lzma
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SIMSO = "/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so"
ENGINES = ("minhop", "updn", "ftree")

#: name -> gen_fattree.py arguments
TOPOLOGIES = {
    "ft2_64": ["ft2", "--leaves", "4", "--spines", "2", "--hosts-per-leaf", "16", "--radix", "36"],
    "ft2_324": ["ft2", "--leaves", "18", "--spines", "9", "--hosts-per-leaf", "18", "--radix", "36"],
    "ft3_648": ["ft3", "--pods", "4", "--leaves-per-pod", "9", "--aggs-per-pod", "9", "--cores", "18",
                "--hosts-per-leaf", "18", "--radix", "36"],
    "ft3_1296": ["ft3", "--pods", "8", "--leaves-per-pod", "9", "--aggs-per-pod", "9", "--cores", "36",
                 "--hosts-per-leaf", "18", "--radix", "36"],
    "ft2_2048": ["ft2", "--leaves", "64", "--spines", "32", "--hosts-per-leaf", "32", "--radix", "64"],
}


def xz_write(path, data):
    # xz, not gzip: an LFT dump repeats itself switch after switch, far beyond
    # gzip's 32 KiB window (ft3_648: 586 KB gzipped, 11 KB as xz)
    with open(path, "wb") as f:
        f.write(lzma.compress(data, preset=9))


def run_topology(name, work):
    net = os.path.join(work, name + ".net")
    subprocess.run([sys.executable, os.path.join(HERE, "gen_fattree.py"), *TOPOLOGIES[name], "-o", net],
                   check=True, stdout=subprocess.DEVNULL)
    with open(net, "rb") as f:
        xz_write(os.path.join(HERE, name + ".net.xz"), f.read())
    shutil.copy(net + ".roots", os.path.join(HERE, name + ".roots"))
    for engine in ENGINES:
        # a fresh ibsim and a fresh cache dir per engine: every run sees a fresh
        # subnet (no LIDs programmed, no guid2lid), as a first boot
        env = dict(os.environ, IBSIM_SOCKNAME=f"fx{os.getpid()}{name}{engine}")
        out = os.path.join(work, f"{name}-{engine}")
        os.makedirs(out)
        sim = subprocess.Popen(["ibsim", "-s", "-N", "4096", "-P", "16384", "-n", net], cwd=work, env=env, stdin=subprocess.DEVNULL,
                               stdout=open(os.path.join(out, "ibsim.log"), "w"), stderr=subprocess.STDOUT)
        try:
            time.sleep(1.0)
            oenv = dict(env, LD_PRELOAD=SIMSO, OSM_TMP_DIR=out, OSM_CACHE_DIR=out)
            subprocess.run(["opensm", "-o", "-R", engine, "-a", net + ".roots", "-D", "0x43",
                            "--dump_files_dir", out, "-f", os.path.join(out, "osm.log")],
                           cwd=work, env=oenv, check=True, stdout=subprocess.DEVNULL, timeout=300)
            log = open(os.path.join(out, "osm.log")).read()
            if "SUBNET UP" not in log:
                raise SystemExit(f"{name} {engine}: no SUBNET UP in {out}/osm.log")
            if f"{engine} tables configured" not in log and engine != "ftree":
                raise SystemExit(f"{name} {engine}: engine fell back, see {out}/osm.log")
            for src, dst in (("opensm-lfts.dump", "lfts"), ("guid2lid", "guid2lid")):
                with open(os.path.join(out, src), "rb") as f:
                    xz_write(os.path.join(HERE, f"{name}.{engine}.{dst}.xz"), f.read())
            print(name, engine, "ok")
        finally:
            sim.terminate()
            sim.wait()


def main(argv):
    names = argv or list(TOPOLOGIES)
    with tempfile.TemporaryDirectory(prefix="osmfx") as work:
        for name in names:
            run_topology(name, work)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
