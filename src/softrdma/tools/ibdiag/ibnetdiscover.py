"""``ibnetdiscover [options] [topology-file]`` (infiniband-diags 44
ibnetdiscover.c): the topology file (default), the node lists (-l, -H,
-S, -R), the ports report (-p), full link info (-f), -g without chassis
(softrdma's and ibsim's vendor IDs form no chassis), -m.  Not done: the
cache files (--cache, --load-cache, --diff) and node name maps.
"""

from __future__ import annotations

import sys
import time

from . import common
from .common import ibexit
from .discover import NODE_CA, NODE_ROUTER, NODE_SWITCH, discover, port_speed

OPTS = [
    ("full", "f", 0, None, "show full information (ports' speed and width, vlcap)"),
    ("show", "s", 0, None, "show more information"),
    ("list", "l", 0, None, "list of connected nodes"),
    ("grouping", "g", 0, None, "show grouping"),
    ("Hca_list", "H", 0, None, "list of connected CAs"),
    ("Switch_list", "S", 0, None, "list of connected switches"),
    ("Router_list", "R", 0, None, "list of connected routers"),
    ("node-name-map", None, 1, "<file>", "node name map file"),
    ("cache", None, 1, "<file>", "filename to cache ibnetdiscover data to"),
    ("load-cache", None, 1, "<file>", "filename of ibnetdiscover cache to load"),
    ("diff", None, 1, "<file>", "filename of ibnetdiscover cache to diff"),
    ("diffcheck", None, 1, "<key(s)>", "specify checks to execute for --diff"),
    ("ports", "p", 0, None, "obtain a ports report"),
    ("max_hops", "m", 0, None, "report max hops discovered by the library"),
    ("outstanding_smps", "o", 1, "",
     "specify the number of outstanding SMP's which should be issued during the scan"),
]
LIST_CA, LIST_SWITCH, LIST_ROUTER = 1 << NODE_CA, 1 << NODE_SWITCH, 1 << NODE_ROUTER


def linkspeed_compat(s):
    return {1: "SDR", 2: "DDR", 4: "QDR"}.get(s, "???")


def linkspeedext_compat(e, s):
    if e == 0:
        return linkspeed_compat(s)
    return {1: "FDR", 2: "EDR", 4: "HDR", 8: "NDR"}.get(e, "???")


def linkwidth_compat(w):
    return {1: "1x", 2: "4x", 4: "8x", 8: "12x", 16: "2x"}.get(w, "??")


def speed_str(port):
    w, s, e = port_speed(port)
    return linkwidth_compat(w) + (linkspeed_compat(s) if (s != 4 and not e)
                                  else linkspeedext_compat(e, s))


def node_name(node):
    c = {NODE_SWITCH: "S", NODE_CA: "H", NODE_ROUTER: "R"}.get(node.type, "?")
    return f'"{c}-{node.guid:016x}"'


def remote_lid(rp):
    return rp.node.smalid if rp.node.type == NODE_SWITCH else rp.base_lid


class Out:
    def __init__(self, w, full=False, group=False):
        self.w, self.full, self.group = w, full, group

    def ids(self, node):
        ni = node.ni
        self.w(f"\nvendid=0x{ni['VendorId']:x}\ndevid=0x{ni['DevId']:x}\n")
        if ni["SystemGuid"]:
            self.w(f"sysimgguid=0x{ni['SystemGuid']:x}\n")

    def switch(self, node):
        self.ids(node)
        self.w(f"switchguid=0x{node.guid:x}({node.ni['PortGuid']:x})")
        if self.group:
            self.w("\t# ")
        self.w("\n")
        self.w(f"Switch\t{node.numports} {node_name(node)}\t\t# \"{node.nodedesc}\" "
               f"{'enhanced' if node.smaenhsp0 else 'base'} port 0 lid {node.smalid} "
               f"lmc {node.smalmc}\n")
        for p in node.ports[1:]:
            if p is not None and p.remoteport is not None:
                self.switch_port(p)

    def _full(self, port):
        if not self.full:
            return ""
        w, s, _e = port_speed(port)
        pi = port.pi
        return f" s={s if port.node.type != NODE_SWITCH or port.node.ports[0] else 0} " \
               f"w={w} v={pi['VLCap'] if pi else 0}"

    def switch_port(self, port):
        rp = port.remoteport
        self.w(f"[{port.portnum}]\t{node_name(rp.node)}[{rp.portnum}]")
        if rp.node.type != NODE_SWITCH:
            self.w(f"({rp.guid:x}) ")
        self.w(f"\t\t# \"{rp.node.nodedesc}\" lid {remote_lid(rp)} {speed_str(port)}"
               f"{self._full(port)}\n")

    def ca(self, node):
        self.ids(node)
        kind = "ca" if node.type == NODE_CA else "rt"
        self.w(f"{kind}guid=0x{node.guid:x}\n")
        self.w(f"{'Ca' if node.type == NODE_CA else 'Rt'}\t{node.numports} {node_name(node)}"
               f"\t\t# \"{node.nodedesc}\"\n")
        for p in node.ports[1:]:
            if p is not None and p.remoteport is not None:
                self.ca_port(p)

    def ca_port(self, port):
        rp = port.remoteport
        self.w(f"[{port.portnum}]({port.guid:x}) \t{node_name(rp.node)}[{rp.portnum}]")
        if rp.node.type != NODE_SWITCH:
            self.w(f" ({rp.guid:x}) ")
        self.w(f"\t\t# lid {port.base_lid} lmc {port.lmc} \"{rp.node.nodedesc}\" lid "
               f"{remote_lid(rp)} {speed_str(port)}{self._full(port)}\n")


def topology(fabric, w, full=False, group=False, max_hops=False):
    fn = fabric.from_node
    w(f"#\n# Topology file: generated on {time.ctime()}\n#\n")
    if max_hops:
        w(f"# Reported max hops discovered: {fabric.maxhops_discovered}\n"
          f"# Total MADs used: {fabric.total_mads_used}\n")
    w(f"# Initiated from node {fn.guid:016x} port {fn.ni['PortGuid']:016x}\n")
    out = Out(w, full, group)
    if group:
        w("\nNon-Chassis Nodes\n")
    for n in fabric.iter_type(NODE_SWITCH):
        out.switch(n)
    for n in fabric.iter_type(NODE_CA):
        out.ca(n)
    for n in fabric.iter_type(NODE_ROUTER):
        out.ca(n)


def list_nodes(fabric, lst, w):
    for t, name in ((NODE_CA, "Ca"), (NODE_SWITCH, "Switch"), (NODE_ROUTER, "Router")):
        if lst & (1 << t):
            for n in fabric.iter_type(t):
                w(f"{name}\t : 0x{n.guid:016x} ports {n.numports} devid 0x{n.ni['DevId']:x} "
                  f"vendid 0x{n.ni['VendorId']:x} \"{n.nodedesc}\"\n")


def ports_report(fabric, w):
    for node in fabric.iter_nodes():
        nt = {NODE_SWITCH: "SW", NODE_CA: "CA", NODE_ROUTER: "RT"}.get(node.type, "??")
        for p in reversed(node.ports[1:]):
            if p is None:
                continue
            wd, s, e = port_speed(p)
            lid = node.smalid if node.type == NODE_SWITCH else p.base_lid
            sp = linkspeed_compat(s) if (s != 4 and not e) else linkspeedext_compat(e, s)
            w(f"{nt:>2} {lid:5d} {p.portnum:2d} 0x{p.guid:016x} {linkwidth_compat(wd)} {sp}")
            rp = p.remoteport
            if rp is not None:
                rt = {NODE_SWITCH: "SW", NODE_CA: "CA", NODE_ROUTER: "RT"}.get(rp.node.type, "??")
                w(f" - {rt:>2} {remote_lid(rp):5d} {rp.portnum:2d} 0x{rp.guid:016x} "
                  f"( '{node.nodedesc}' - '{rp.node.nodedesc}' )\n")
            else:
                w(f"{'':36s}'{node.nodedesc}'\n")


def render(argv, prog) -> tuple[int, str]:
    """Run ibnetdiscover, returning (rc, stdout text); used by ibhosts & co."""
    st = {"list": 0, "full": False, "group": False, "ports": False, "maxhops": False}

    def opt(c, arg):
        if c == "l":
            st["list"] = LIST_CA | LIST_SWITCH | LIST_ROUTER
        elif c == "H":
            st["list"] = LIST_CA
        elif c == "S":
            st["list"] = LIST_SWITCH
        elif c == "R":
            st["list"] = LIST_ROUTER
        elif c == "f":
            st["full"] = True
        elif c == "g":
            st["group"] = True
        elif c == "p":
            st["ports"] = True
        elif c == "m":
            st["maxhops"] = True
        elif c == "\x01diffcheck":
            for k in arg.split(","):
                if k.lower() not in ("sw", "ca", "router", "port", "lid", "nodedesc"):
                    sys.stderr.write(f"invalid diff check key: {k}\n")
                    return False
        elif c in ("\x01cache", "\x01load-cache", "\x01diff"):
            raise ibexit(prog, f"--{c[1:]} is not supported by softrdma's {prog}")
        return None

    cfg, args = common.parse(argv, prog, OPTS, "DGKLs", "[topology-file]", None, opt)
    chunks: list[str] = []
    w = chunks.append
    with common.open_port(prog, cfg) as mad:
        fabric = discover(mad)
    if fabric.from_node is None:
        raise ibexit(prog, "discover failed\n")
    if st["ports"]:
        ports_report(fabric, w)
    elif st["list"]:
        list_nodes(fabric, st["list"], w)
    else:
        topology(fabric, w, st["full"], st["group"], st["maxhops"])
    text = "".join(chunks)
    if args and not st["ports"]:
        try:
            with open(args[0], "w") as fh:
                fh.write(text)
        except OSError:
            raise ibexit(prog, f"can't open file {args[0]} for writing") from None
        return 0, "" if not st["ports"] else text
    return 0, text


def main(argv, prog="ibnetdiscover") -> int:
    def body():
        rc, text = render(argv, prog)
        sys.stdout.write(text)
        return rc
    return common.run(prog, body)
