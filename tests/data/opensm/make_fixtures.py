#!/usr/bin/env python3
"""Regenerate the opensm reference fixtures in this folder (see README.md).

For every topology: write the .net with gen_fattree.py, start the real
``ibsim -s -n`` on it, run the real ``opensm -o`` once per routing engine
through libumad2sim, and keep ``opensm-lfts.dump`` and ``guid2lid`` gzipped
xz-compressed.

Usage: make_fixtures.py [TOPOLOGY ...]   (default: all of TOPOLOGIES, LMC 0)
       make_fixtures.py --lmc N [TOPOLOGY ...]
                         (``opensm -l N``, engines LMC_ENGINES, default topologies
                          LMC_TOPOLOGIES; files <topo>.<engine>.lmc<N>.{lfts,guid2lid}.xz)
       make_fixtures.py --lmc A,B [TOPOLOGY ...]
                         (``opensm -l A`` then ``opensm -l B`` on the same ibsim and cache,
                          default topologies TRANSITION_TOPOLOGIES; files
                          <topo>.<engine>.lmcAtoB.{lfts,guid2lid}.xz, of the second run)
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
LMC_ENGINES = ("minhop", "updn")
LMC_TOPOLOGIES = ("ft2_64", "ft2_324", "ft3_648")
TRANSITION_TOPOLOGIES = ("ft2_64",)

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


def run_topology(name, work, lmcs=(0,)):
    """opensm -o on a fresh ibsim per engine; with several LMCs, one run per LMC on the
    same ibsim and cache dir (the subnet as the previous run left it), keeping the last."""
    net = os.path.join(work, name + ".net")
    subprocess.run([sys.executable, os.path.join(HERE, "gen_fattree.py"), *TOPOLOGIES[name], "-o", net],
                   check=True, stdout=subprocess.DEVNULL)
    with open(net, "rb") as f:
        xz_write(os.path.join(HERE, name + ".net.xz"), f.read())
    shutil.copy(net + ".roots", os.path.join(HERE, name + ".roots"))
    if len(lmcs) > 1:
        tag = ".lmc" + "to".join(map(str, lmcs))
    else:
        tag = f".lmc{lmcs[0]}" if lmcs[0] else ""
    for engine in (LMC_ENGINES if tag else ENGINES):
        # a fresh ibsim and a fresh cache dir per engine: the (first) run sees a fresh
        # subnet (no LIDs programmed, no guid2lid), as a first boot
        env = dict(os.environ, IBSIM_SOCKNAME=f"fx{os.getpid()}{name}{engine}")
        out = os.path.join(work, f"{name}-{engine}{tag}")
        os.makedirs(out)
        sim = subprocess.Popen(["ibsim", "-s", "-N", "4096", "-P", "16384", "-n", net], cwd=work, env=env, stdin=subprocess.DEVNULL,
                               stdout=open(os.path.join(out, "ibsim.log"), "w"), stderr=subprocess.STDOUT)
        try:
            time.sleep(1.0)
            oenv = dict(env, LD_PRELOAD=SIMSO, OSM_TMP_DIR=out, OSM_CACHE_DIR=out)
            for i, lmc in enumerate(lmcs):
                log = os.path.join(out, f"osm{i}.log")
                subprocess.run(["opensm", "-o", "-R", engine, "-a", net + ".roots", "-D", "0x43",
                                *(["-l", str(lmc)] if lmc else []),
                                "--dump_files_dir", out, "-f", log],
                               cwd=work, env=oenv, check=True, stdout=subprocess.DEVNULL, timeout=300)
                text = open(log).read()
                if "SUBNET UP" not in text:
                    raise SystemExit(f"{name} {engine}: no SUBNET UP in {log}")
                if f"{engine} tables configured" not in text and engine != "ftree":
                    raise SystemExit(f"{name} {engine}: engine fell back, see {log}")
            for src, dst in (("opensm-lfts.dump", "lfts"), ("guid2lid", "guid2lid")):
                with open(os.path.join(out, src), "rb") as f:
                    xz_write(os.path.join(HERE, f"{name}.{engine}{tag}.{dst}.xz"), f.read())
            print(name, engine, tag[1:], "ok")
        finally:
            sim.terminate()
            sim.wait()


def main(argv):
    lmcs = (0,)
    if argv[:1] == ["--lmc"]:
        lmcs = tuple(int(x) for x in argv[1].split(","))
        argv = argv[2:]
    if len(lmcs) > 1:
        default = TRANSITION_TOPOLOGIES
    else:
        default = LMC_TOPOLOGIES if lmcs[0] else TOPOLOGIES
    names = argv or list(default)
    with tempfile.TemporaryDirectory(prefix="osmfx") as work:
        for name in names:
            run_topology(name, work, lmcs)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
