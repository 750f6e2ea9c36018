"""``softrdma fabric``: serve, gen, show, link down|up, error, cmd.

Owns the command line of the fabric: argument parsing and messages
(argparse-style errors, never tracebacks); the work is server.py's,
topo.py's and gen.py's.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import resource
import shlex
import signal
import sys
import time

from ..wire.ibsim import IBSIM_DEFAULT_SERVER_PORT, SIM_BASENAME
from ..cliargs import int_range
from .model import FabricError
from .server import DEFAULT_SPIN_US


def _default_base() -> str:
    return os.environ.get("IBSIM_SOCKNAME") or SIM_BASENAME


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="fabric_cmd", metavar="SUBCOMMAND")
    s = sub.add_parser("serve", help="serve a topology to opensm and the diags (ibsim protocol) "
                       "and to IB devices", description="Serve TOPO.net over ibsim's client "
                       "protocol: run clients with LD_PRELOAD=libumad2sim.so and the same "
                       "IBSIM_SOCKNAME.  InfiniBand devices of softrdma daemons attach to its CAs "
                       "through the data socket $SOFTRDMA_FABRIC_DIR/BASE.data (default directory "
                       "/run/softrdma-fabric for root) and their packets go through the switches.")
    s.add_argument("topo", metavar="TOPO.net")
    s.add_argument("--sock", default=None, help="socket base name (default $IBSIM_SOCKNAME "
                   "or 'sim')")
    s.add_argument("-r", "--remote", action="store_true", help="UDP instead of AF_UNIX")
    s.add_argument("-l", "--listen", type=int, default=IBSIM_DEFAULT_SERVER_PORT,
                   metavar="PORT", help="UDP ctl port (data ports follow it)")
    s.add_argument("--host", default="127.0.0.1", help="UDP address to bind (default 127.0.0.1)")
    s.add_argument("--no-console", action="store_true", help="do not read commands on stdin")
    s.add_argument("-v", "--verbose", action="count", default=0)
    s.add_argument("--seed", type=int, default=0, help="seed of the error-rate drops")
    s.add_argument("--spin-us", type=int_range(0, 1_000_000), default=DEFAULT_SPIN_US, metavar="N",
                   help=f"poll N microseconds after the last request before sleeping, giving the CPU "
                        f"to any other task that wants it meanwhile (default {DEFAULT_SPIN_US}; 0: sleep at once)")
    s.set_defaults(fabric_func=_serve)

    g = sub.add_parser("gen", help="write a generated topology (.net, .roots, .cns, .json)")
    g.add_argument("kind", choices=["single", "ft2", "ft3", "fattree", "torus"],
                   help="fattree = ft2 or ft3 by --levels")
    g.add_argument("--levels", type=int, choices=[2, 3], default=2, help="fattree: 2 or 3 switch levels")
    g.add_argument("-o", "--out", required=True)
    g.add_argument("--radix", type=int, default=36)
    g.add_argument("--hosts", type=int, default=None,
                   help="total hosts (fat trees: sizes the tree; single: the CAs)")
    g.add_argument("--hosts-per-leaf", type=int, default=None)
    g.add_argument("--leaves", type=int, default=None)
    g.add_argument("--spines", type=int, default=None)
    g.add_argument("--pods", type=int, default=None)
    g.add_argument("--leaves-per-pod", type=int, default=None)
    g.add_argument("--aggs-per-pod", type=int, default=None)
    g.add_argument("--cores", type=int, default=None)
    g.add_argument("--uplinks", type=int, default=None)
    g.add_argument("--x", type=int, default=4, help="torus: switches along x")
    g.add_argument("--y", type=int, default=4, help="torus: switches along y")
    g.add_argument("--width", type=int, default=4)
    g.add_argument("--speed", default="EDR")
    g.set_defaults(fabric_func=_gen)

    v = sub.add_parser("show", help="a picture (PNG) or text of the topology, from a .net file or a "
                       "running server", description="Draw the fabric: switch tiers above the hosts, "
                       "links coloured by state or by load.")
    v.add_argument("topo", nargs="?", metavar="TOPO.net", help="a topology file (else: --sock)")
    v.add_argument("--sock", default=None, help="a running server's socket base name (live state)")
    v.add_argument("--png", metavar="FILE", help="write the picture here")
    v.add_argument("--color", choices=["state", "load"], default="state")
    v.add_argument("--text", action="store_true", help="print tiers and every link not Active")
    v.set_defaults(fabric_func=_show)

    for name, hlp in (("link", "take a link down or up in a running server"),
                      ("error", "drop RATE%% of the MADs to a port's agents"),
                      ("cmd", "send a console command to a running server")):
        c = sub.add_parser(name, help=hlp)
        if name == "link":
            c.add_argument("action", choices=["down", "up"])
            c.add_argument("node", metavar="NODE", help="nodeid, NodeDescription or 0xGUID")
            c.add_argument("port", type=int, metavar="PORT")
        elif name == "error":
            c.add_argument("node", metavar="NODE")
            c.add_argument("port", type=int, metavar="PORT")
            c.add_argument("rate", type=int, metavar="RATE", help="percent 0..100")
            c.add_argument("--attr", type=lambda x: int(x, 0), default=0,
                           help="only this attribute ID")
        else:
            c.add_argument("words", nargs="+", metavar="WORD")
        c.add_argument("--sock", default=None, help="the server's socket base name")
        c.set_defaults(fabric_func=_control)


def run(args) -> int:
    fn = getattr(args, "fabric_func", None)
    if fn is None:
        print("usage: softrdma fabric {serve,gen,show,link,error,cmd} ... (see --help)",
              file=sys.stderr)
        return 2
    try:
        return fn(args)
    except FabricError as e:
        print(f"softrdma fabric: error: {e}", file=sys.stderr)
        return 1


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _serve(a) -> int:
    from . import topo
    from .server import Server
    base = a.sock or _default_base()
    t0 = time.perf_counter()
    fabric = topo.load(a.topo)
    dt = time.perf_counter() - t0
    st = fabric.stats()
    srv = Server(fabric, base, remote=a.remote, host=a.host, port=a.listen, verbose=a.verbose,
                 console=None if a.no_console else sys.stdin, seed=a.seed, spin_us=a.spin_us)
    try:
        srv.run_commands(fabric.commands)
        where = f"udp {a.host}:{a.listen}" if a.remote else f"@{base}:ctl"
        print(f"softrdma fabric: {st['nodes']} nodes ({st['switches']} switches, {st['cas']} CAs,"
              f" {st['links']} links) loaded in {dt:.2f} s, max RSS {_rss_mb():.0f} MB; "
              f"serving on {where}", file=sys.stderr, flush=True)
        if srv.datasock is not None:
            print(f"softrdma fabric: IB devices attach at {srv.datasock.path}", file=sys.stderr,
                  flush=True)
        signal.signal(signal.SIGTERM, lambda *_: setattr(srv, "running", False))
        # the model is a few objects per port and lives as long as the server: out of
        # the collector's way, or each full collection walks all of it (tens of ms
        # at 2048 hosts, a few times a second during a sweep)
        gc.freeze()
        srv.serve_forever()
    finally:
        srv.close()
    return 0


def _gen(a) -> int:
    from . import gen, topo
    if a.kind == "fattree":                  # also spelled: fattree --levels 2|3
        a.kind = f"ft{a.levels}"
    k = a.radix
    if k < 2:
        raise FabricError("--radix must be at least 2")
    if a.kind == "single":
        f, roots = gen.single(a.hosts or 8, k, a.width, a.speed)
    elif a.kind == "ft2":
        hpl = a.hosts_per_leaf or k // 2
        if a.hosts:
            leaves = a.leaves or math.ceil(a.hosts / hpl)
            if a.hosts % leaves:
                raise FabricError(f"--hosts {a.hosts} does not divide over {leaves} leaves")
            hpl = a.hosts // leaves
        else:
            leaves = a.leaves or 4
        if hpl >= k:
            raise FabricError(f"{hpl} hosts a leaf leave no uplinks on radix-{k} leaves")
        spines = a.spines or k - hpl          # default: one uplink from each leaf to each spine
        if leaves > k:
            raise FabricError(f"{leaves} leaves do not fit on radix-{k} spines: use ft3 or a "
                              f"larger --radix")
        f, roots = gen.fat_tree2(leaves, spines, hpl, k, a.uplinks, a.width, a.speed)
    elif a.kind == "ft3":
        half = k // 2
        hpl = a.hosts_per_leaf or half
        lpp = a.leaves_per_pod or half
        app = a.aggs_per_pod or half
        pods = a.pods or (math.ceil(a.hosts / (hpl * lpp)) if a.hosts else 2)
        if a.hosts and a.hosts != pods * lpp * hpl:
            raise FabricError(f"--hosts {a.hosts} is not pods x leaves-per-pod x hosts-per-leaf"
                              f" = {pods}x{lpp}x{hpl}")
        cores = a.cores or app * half
        f, roots = gen.fat_tree3(pods, lpp, app, cores, hpl, k, a.uplinks, None, a.width,
                                 a.speed)
    else:
        f, roots = gen.torus2d(a.x, a.y, a.hosts_per_leaf or 1, a.width, a.speed)
    topo.dump(f, a.out)
    with open(a.out + ".roots", "w") as fh:
        fh.writelines(f"0x{g:016x}\n" for g in roots)
    with open(a.out + ".cns", "w") as fh:
        fh.writelines(f"0x{n.ports[1].guid:016x}\n" for n in f.nodes if not n.is_switch)
    st = f.stats()
    summary = dict(switches=st["switches"], cas=st["cas"], links=st["links"], roots=len(roots))
    with open(a.out + ".json", "w") as fh:
        json.dump(summary, fh)
    print(json.dumps(dict(out=a.out, **summary)))
    return 0


def _show(a) -> int:
    from . import show
    if (a.topo is None) == (a.sock is None):
        print("softrdma fabric show: error: give TOPO.net or --sock BASE (one of them)", file=sys.stderr)
        return 2
    if not a.png and not a.text:
        print("softrdma fabric show: error: nothing to do: --png FILE and/or --text", file=sys.stderr)
        return 2
    if a.topo is not None:
        from . import topo
        snap = show.snapshot(topo.load(a.topo))
    else:
        from .commands import control
        import tempfile
        fd, path = tempfile.mkstemp(prefix="softrdma-fabric-", suffix=".json")
        os.close(fd)
        try:
            ans = control(a.sock, f"dumpstate {shlex.quote(path)}")
            if not ans.startswith("ok"):
                print(f"softrdma fabric show: {ans}", file=sys.stderr)
                return 1
            with open(path) as fh:
                snap = json.load(fh)
        finally:
            os.unlink(path)
    if a.text:
        sys.stdout.write(show.text(snap))
    if a.png:
        try:
            show.draw_png(snap, a.png, a.color)
        except ImportError:
            print("softrdma fabric show: --png needs matplotlib (pip install 'softrdma[fabric]')",
                  file=sys.stderr)
            return 1
        print(f"wrote {a.png}")
    return 0


def _control(a) -> int:
    from .commands import control
    base = a.sock or _default_base()
    if a.fabric_cmd == "link":
        line = f"link {a.action} {shlex.quote(a.node)} {a.port}"
    elif a.fabric_cmd == "error":
        line = f"error {shlex.quote(a.node)} {a.port} {a.rate}" + (f" {a.attr}" if a.attr else "")
    else:
        line = " ".join(a.words)
    ans = control(base, line)
    ok = ans.startswith("ok")
    text = ans[2:].strip() if ok else ans
    if text:
        print(text, file=sys.stdout if ok else sys.stderr)
    return 0 if ok else 1
