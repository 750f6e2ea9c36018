"""``ibtracert [options] <src-addr> <dest-addr>`` (infiniband-diags 44
ibtracert.c): follows the linear forwarding tables hop by hop with
directed-route SMPs from the own port -- first to the source, then from
there to the destination -- printing each hop (-n: the short format).
-f (force), --ports-file.  Not done: the multicast trace (-m).
"""

from __future__ import annotations

import sys

from ...wire import smp
from . import common
from .common import Exit, ibexit
from .rpc import PortId, ibwarn

OPTS = [
    ("force", "f", 0, None, "force"),
    ("no_info", "n", 0, None, "simple format"),
    ("mlid", "m", 1, "<mlid>", "multicast trace of the mlid"),
    ("node-name-map", None, 1, "<file>", "node name map file"),
    ("ports-file", None, 1, "<file>", "port pairs file"),
]
EXAMPLES = [
    "- Unicast examples:",
    "4 16\t\t\t# show path between lids 4 and 16",
    "-n 4 16\t\t# same, but using simple output format",
    "-G 0x8f1040396522d 0x002c9000100d051\t# use guid addresses",
    " - Multicast examples:",
    "-m 0xc000 4 16\t# show multicast path of mlid 0xc000 between lids 4 and 16",
]
NODE_TYPE_STR = ["???", "ca", "switch", "router"]
MAXHOPS = 63


class _Node:
    def __init__(self):
        self.guid = 0
        self.type = 0
        self.numports = 0
        self.desc = ""


class _Port:
    def __init__(self):
        self.guid = 0
        self.portnum = 0
        self.lid = 0
        self.lmc = 0
        self.state = 0


class _Switch:
    def __init__(self):
        self.linearcap = self.top = self.enhsp0 = 0


class Tracer:
    def __init__(self, mad, w, force=False):
        self.mad = mad
        self.w = w
        self.force = force

    def get_node(self, node, port, portid):
        q = self.mad.smp_query
        ni = q(portid, smp.SmpAttr.NODE_INFO)
        if ni is None:
            return -1
        nd = q(portid, smp.SmpAttr.NODE_DESC)
        if nd is None:
            return -1
        pi = q(portid, smp.SmpAttr.PORT_INFO)
        if pi is None:
            return -1
        n, p = smp.NODE_INFO.decode(ni), smp.PORT_INFO.decode(pi)
        node.guid, node.type, node.numports = n["Guid"], n["NodeType"], n["NumPorts"]
        node.desc = "".join(c if c.isprintable() else " " for c in smp.decode_node_desc(nd))
        port.guid, port.portnum = n["PortGuid"], n["LocalPort"]
        port.lid, port.lmc, port.state = p["Lid"], p["LMC"], p["LinkState"]
        return 0

    def switch_lookup(self, sw, portid, lid):
        si = self.mad.smp_query(portid, smp.SmpAttr.SWITCH_INFO)
        if si is None:
            return -1
        s = smp.SWITCH_INFO.decode(si)
        sw.linearcap, sw.top, sw.enhsp0 = s["LinearFdbCap"], s["LinearFdbTop"], s["EnhancedPort0"]
        if lid >= sw.linearcap and lid > sw.top:
            return -1
        fdb = self.mad.smp_query(portid, smp.SmpAttr.LINEAR_FWD_TABLE, lid // 64)
        if fdb is None:
            return -1
        return fdb[lid % 64]

    def sameport(self, a, b):
        return a.guid == b.guid or (self.force and a.lid == b.lid)

    @staticmethod
    def inactive(node, port, sw):
        return port.state != 4 and (node.type != smp.NodeType.SWITCH or sw.enhsp0)

    def endnode(self, dump, prompt, node, port):
        if not dump:
            return
        pn = 0 if node.type == smp.NodeType.SWITCH else port.portnum
        if dump == 1:
            self.w(f"{prompt} {{0x{node.guid:016x}}}[{pn}]\n")
            return
        t = NODE_TYPE_STR[node.type] if node.type <= 3 else "???"
        self.w(f"{prompt} {t} {{0x{node.guid:016x}}} portnum {pn} lid {port.lid}-"
               f"{port.lid + (1 << port.lmc) - 1} \"{node.desc}\"\n")

    def route(self, dump, node, outport, port):
        if not dump:
            return
        if dump == 1:
            self.w(f"[{outport}] -> {{0x{port.guid:016x}}}[{port.portnum}]\n")
            return
        t = NODE_TYPE_STR[node.type] if node.type <= 3 else "???"
        self.w(f"[{outport}] -> {t} port {{0x{port.guid:016x}}}[{port.portnum}] lid {port.lid}-"
               f"{port.lid + (1 << port.lmc) - 1} \"{node.desc}\"\n")

    def find_route(self, frm: list, to: PortId, dump: int) -> int:
        """``frm`` is the directed route from the own port (a list, extended in place)."""
        fromnode, tonode, nextnode = _Node(), _Node(), _Node()
        fromport, toport, nextport = _Port(), _Port(), _Port()
        sw = _Switch()
        cur = lambda: PortId(0, tuple(frm))                         # noqa: E731
        if self.get_node(fromnode, fromport, cur()) < 0 or self.get_node(tonode, toport, to) < 0:
            ibwarn("find_route", "can't reach to/from ports")
            if not self.force:
                return -1
            if to.lid > 0:
                toport.lid = to.lid
            ibwarn("find_route", f"Force: look for lid {to.lid}")
        node, port = fromnode, fromport
        portnum = port.portnum
        outport = next_sw_outport = 255
        self.endnode(dump, "From", node, port)
        if node.type == smp.NodeType.SWITCH:
            next_sw_outport = self.switch_lookup(sw, cur(), to.lid)
            if next_sw_outport < 0 or next_sw_outport > node.numports:
                return self._badtbl(node, to, next_sw_outport, sw)
        maxhops = MAXHOPS
        while maxhops:
            maxhops -= 1
            if self.inactive(node, port, sw):
                ibwarn("find_route", f"Bad port state found: node \"{node.desc}\" port {portnum} "
                                     f"state {port.state}")
                return -1
            if self.sameport(port, toport):
                break
            if node.type == smp.NodeType.SWITCH:
                outport = next_sw_outport
                if len(frm) + 2 >= 64:
                    ibwarn("find_route", "Direct path too long!")
                    return -1
                frm.append(outport)
                if self.get_node(nextnode, nextport, cur()) < 0:
                    ibwarn("find_route", f"can't reach port at {cur()}")
                    return -1
                if outport == 0:
                    if not self.sameport(nextport, toport):
                        return self._badtbl(node, to, outport, sw)
                    break
            else:
                ca_src = False
                outport = portnum
                if not self.sameport(port, fromport):
                    ibwarn("find_route", f"can't continue: reached CA or router port "
                                         f"{port.guid:x}, lid {port.lid}")
                    return -1
                back = None
                if frm:
                    back = frm.pop()
                else:
                    ca_src = True
                    if portnum:
                        frm.append(portnum)
                if self.get_node(nextnode, nextport, cur()) < 0:
                    ibwarn("find_route", f"can't reach port at {cur()}")
                    return -1
                if not ca_src:
                    nextport.portnum = back
            if nextnode.type == smp.NodeType.SWITCH:
                next_sw_outport = self.switch_lookup(sw, cur(), to.lid)
                if next_sw_outport < 0 or next_sw_outport > nextnode.numports:
                    return self._badtbl(node, to, next_sw_outport, sw)
            port = nextport
            if self.inactive(nextnode, port, sw):
                ibwarn("find_route", f"Bad out port state found: node \"{node.desc}\" outport "
                                     f"{outport} state {port.state}")
                return -1
            node = nextnode
            portnum = port.portnum
            self.route(dump, node, outport, port)
        if maxhops <= 0:
            ibwarn("find_route", f"no route found after {MAXHOPS} hops")
            return -1
        self.endnode(dump, "To", node, port)
        return 0

    @staticmethod
    def _badtbl(node, to, outport, sw):
        ibwarn("find_route", f"Bad forwarding table entry found at: node \"{node.desc}\" lid entry "
                             f"{to.lid} is {outport} (top {sw.top})")
        return -1


def get_route(prog, cfg, mad, tr, src, dst, dump) -> int:
    s = common.resolve_portid(mad, src, cfg.dest_type)
    if s is None:
        ibwarn("get_route", f"can't resolve source port {src}")
        return -1
    d = common.resolve_portid(mad, dst, cfg.dest_type)
    if d is None:
        ibwarn("get_route", f"can't resolve destination port {dst}")
        return -1
    if d.lid == 0 or s.lid == 0:
        ibwarn("get_route", "bad src/dest lid")
        raise Exit(2, cfg.usage)
    path: list = []
    if tr.find_route(path, s, 0) < 0:
        ibwarn("get_route", "can't find a route to the src port")
        return -1
    if tr.find_route(path, d, dump) < 0:
        ibwarn("get_route", "can't find a route from src to dest")
        return -1
    return 0


def main(argv, prog="ibtracert") -> int:
    st = {"force": False, "dump": 2, "mlid": None, "ports": None}

    def opt(c, arg):
        if c == "f":
            st["force"] = True
        elif c == "n":
            st["dump"] = 1
        elif c == "m":
            st["mlid"] = arg
        elif c == "\x01ports-file":
            st["ports"] = arg

    def body():
        cfg, args = common.parse(argv, prog, OPTS, "DK", "<src-addr> <dest-addr>", EXAMPLES, opt)
        if len(args) < 2 and st["ports"] is None:
            raise Exit(2, cfg.usage)
        def w(s):
            sys.stdout.write(s)
        if st["mlid"] is not None:
            raise ibexit(prog, "multicast trace (-m) is not supported by softrdma's ibtracert")
        with common.open_port(prog, cfg) as mad:
            tr = Tracer(mad, w, st["force"])
            if st["ports"] is None:
                if get_route(prog, cfg, mad, tr, args[0], args[1], st["dump"]) != 0:
                    raise ibexit(prog, "Failed to get route information")
                return 0
            try:
                lines = open(st["ports"]).read().split("\n")
            except OSError:
                raise ibexit(prog, f"cannot open ports-file {st['ports']}") from None
            pairs = 0
            for n, line in enumerate(lines[:-1] if lines and lines[-1] == "" else lines, 1):
                if not line.strip() or line.strip().startswith("#"):
                    continue
                f = line.split()
                if len(f) < 2:
                    raise ibexit(prog, f"ports-file, {st['ports']}, at line {n} contains bad data")
                pairs += 1
                if get_route(prog, cfg, mad, tr, f[0][:20], f[1][:20], st["dump"]) != 0:
                    raise ibexit(prog, f"Failed to get route information at line {n}")
            w(f"{pairs} lid/guid pairs processed from {st['ports']}\n")
        return 0
    return common.run(prog, body)
