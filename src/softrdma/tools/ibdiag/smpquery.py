"""``smpquery [options] <op> <dest dr_path|lid|guid> [op params]``
(infiniband-diags 44 smpquery.c): NodeInfo, NodeDesc, PortInfo,
PortInfoExtended, SwitchInfo, PKeyTable, SL2VLTable, VLArbitration,
GUIDInfo, MlnxExtPortInfo (names and aliases case-insensitive), by LID,
directed route (-D), combined route (-c) or GUID (-G, through the SA).
"""

from __future__ import annotations

import sys

from ...wire import smp
from ..libc import strtol
from . import common, dump
from .common import Exit, ibexit
from .rpc import ibwarn

OPTS = [
    ("combined", "c", 0, None, "use Combined route address argument"),
    ("node-name-map", None, 1, "<file>", "node name map file"),
    ("extended", "x", 0, None, "use extended speeds"),
]
EXAMPLES = [
    "portinfo 3 1\t\t\t\t# portinfo by lid, with port modifier",
    "-G switchinfo 0x2C9000100D051 1\t# switchinfo by guid",
    "-D nodeinfo 0\t\t\t\t# nodeinfo by direct route",
    "-c nodeinfo 6 0,12\t\t\t# nodeinfo by combined route",
]
ATTR_PORT_INFO_EXT = 0x0033


def _portnum(argv):
    return strtol(argv[0]) if argv else 0


class Ops:
    def __init__(self, mad, w, show_keys=False, extended=False):
        self.mad, self.w, self.show_keys, self.extended = mad, w, show_keys, extended

    def q(self, dest, attr, mod=0):
        return self.mad.smp_query(dest, attr, mod)

    def node_desc(self, dest, argv):
        if self.q(dest, smp.SmpAttr.NODE_INFO) is None:
            return "node info query failed"
        nd = self.q(dest, smp.SmpAttr.NODE_DESC)
        if nd is None:
            return "node desc query failed"
        name = smp.decode_node_desc(nd)
        dots = "." * (32 - len(name)) if len(name) < 32 else "."
        self.w(f"Node Description:{dots}{name}\n")

    def node_info(self, dest, argv):
        d = self.q(dest, smp.SmpAttr.NODE_INFO)
        if d is None:
            return "node info query failed"
        self.w(f"# Node info: {dest}\n{dump.nodeinfo(d)}")

    def port_info(self, dest, argv):
        portnum = _portnum(argv)
        mod = portnum | (1 << 31) if self.extended else portnum
        d = self.q(dest, smp.SmpAttr.PORT_INFO, mod & 0xFFFFFFFF)
        if d is None:
            return "port info query failed"
        self.w(f"# Port info: {dest} port {portnum}\n{dump.portinfo(d, self.show_keys)}")

    def port_info_extended(self, dest, argv):
        portnum = _portnum(argv)
        d = self.q(dest, smp.SmpAttr.PORT_INFO, portnum)
        if d is None:
            return "port info extended not supported"
        pi = smp.PORT_INFO.decode(d)
        if not pi["CapMask"] & smp.CAP_IS_CAPABILITY_MASK2_SUPPORTED:
            ibwarn("is_port_info_extended_supported", "port info capability mask2 not supported")
            return "port info extended not supported"
        if not pi["CapabilityMask2"] & (1 << 1):
            ibwarn("is_port_info_extended_supported",
                   f"port info capability mask2 = 0x{pi['CapabilityMask2']:x} doesn't indicate "
                   f"PortInfoExtended support")
            return "port info extended not supported"
        return "port info extended query failed"

    def switch_info(self, dest, argv):
        d = self.q(dest, smp.SmpAttr.SWITCH_INFO)
        if d is None:
            return "switch info query failed"
        self.w(f"# Switch info: {dest}\n{dump.switchinfo(d)}")

    def pkey_table(self, dest, argv):
        portnum = _portnum(argv)
        ni = self.q(dest, smp.SmpAttr.NODE_INFO)
        if ni is None:
            return "node info query failed"
        n = smp.NODE_INFO.decode(ni)
        if portnum > n["NumPorts"]:
            return "invalid port number"
        if n["NodeType"] == smp.NodeType.SWITCH and portnum != 0:
            si = self.q(dest, smp.SmpAttr.SWITCH_INFO)
            if si is None:
                return "switch info failed"
            cap = smp.SWITCH_INFO.decode(si)["PartEnforceCap"]
        else:
            cap = n["PartCap"]
        blocks = (cap + 31) // 32
        for i in range(blocks):
            d = self.q(dest, smp.SmpAttr.PKEY_TABLE, i | (portnum << 16))
            if d is None:
                return "pkey table query failed"
            k = ((cap + 7 - i * 32) // 8) * 8 if i + 1 == blocks else 32
            keys = smp.decode_pkey_table(d)
            for j in range(0, k, 8):
                self.w(f"{i * 32 + j:4d}: " + " ".join(f"0x{x:04x}" for x in keys[j:j + 8]) + "\n")
        self.w(f"{cap} pkeys capacity for this port\n")

    def _sl2vl_entry(self, dest, i, o):
        d = self.q(dest, smp.SmpAttr.SL_TO_VL_TABLE, (i << 8) | o)
        if d is None:
            return "slvl query failed"
        self.w(f"ports: in {i:2d}, out {o:2d}: {dump.sltovl(d)}")

    def sl2vl_table(self, dest, argv):
        portnum = _portnum(argv)
        ni = self.q(dest, smp.SmpAttr.NODE_INFO)
        if ni is None:
            return "node info query failed"
        n = smp.NODE_INFO.decode(ni)
        if portnum > n["NumPorts"]:
            return "invalid port number"
        self.w(f"# SL2VL table: {dest}\n")
        self.w("#                 SL: |" + "".join(f"{i:2d}|" for i in range(16)) + "\n")
        if n["NodeType"] != smp.NodeType.SWITCH:
            return self._sl2vl_entry(dest, 0, 0)
        for i in range(n["NumPorts"] + 1):
            err = self._sl2vl_entry(dest, i, portnum)
            if err:
                return err

    def _vlarb(self, dest, portnum, name, offset, cap):
        self.w(f"# {name} priority VL Arbitration Table:")
        for blk, n in ((offset, min(cap, 32)), (offset + 1, cap - 32)):
            if n <= 0:
                break
            d = self.q(dest, smp.SmpAttr.VL_ARB_TABLE, (blk << 16) | portnum)
            if d is None:
                return "vl arb query failed"
            self.w(dump.vlarbitration(d, n))

    def vlarb_table(self, dest, argv):
        portnum = _portnum(argv)
        if portnum == 0:
            ni = self.q(dest, smp.SmpAttr.NODE_INFO)
            if ni is None:
                return "node info query failed"
            if smp.NODE_INFO.decode(ni)["NodeType"] == smp.NodeType.SWITCH:
                si = self.q(dest, smp.SmpAttr.SWITCH_INFO)
                if si is None:
                    return "switch info query failed"
                if not smp.SWITCH_INFO.decode(si)["EnhancedPort0"]:
                    self.w(f"# No VLArbitration tables (BSP0): {dest} port 0\n")
                    return None
        d = self.q(dest, smp.SmpAttr.PORT_INFO, portnum)
        if d is None:
            return "port info query failed"
        pi = smp.PORT_INFO.decode(d)
        low, high = pi["VLArbLowCap"], pi["VLArbHighCap"]
        self.w(f"# VLArbitration tables: {dest} port {portnum} LowCap {low} HighCap {high}\n")
        err = None
        if low > 0:
            err = self._vlarb(dest, portnum, "Low", 1, low)
        if not err and high > 0:
            err = self._vlarb(dest, portnum, "High", 3, high)
        return err

    def guid_info(self, dest, argv):
        d = self.q(dest, smp.SmpAttr.PORT_INFO, 0)
        if d is None:
            return "port info failed"
        n = smp.PORT_INFO.decode(d)["GuidCap"]
        blocks = (n + 7) // 8
        for i in range(blocks):
            g = self.q(dest, smp.SmpAttr.GUID_INFO, i)
            if g is None:
                return "guid info query failed"
            k = ((n + 1 - i * 8) // 2) * 2 if i + 1 == blocks else 8
            guids = smp.decode_guid_info(g)
            for j in range(0, k, 2):
                self.w(f"{i * 8 + j:4d}: 0x{guids[j]:016x} 0x{guids[j + 1]:016x}\n")
        self.w(f"{n} guids capacity for this port\n")

    def mlnx_ext_port_info(self, dest, argv):
        d = self.q(dest, smp.SmpAttr.MLNX_EXT_PORT_INFO, _portnum(argv))
        if d is None:
            return "Mellanox ext port info query failed"
        return "Mellanox ext port info query failed"


MATCH = [
    ("NodeInfo", "NI", "node_info", 0), ("NodeDesc", "ND", "node_desc", 0),
    ("PortInfo", "PI", "port_info", 1), ("PortInfoExtended", "PIE", "port_info_extended", 1),
    ("SwitchInfo", "SI", "switch_info", 0), ("PKeyTable", "PKeys", "pkey_table", 1),
    ("SL2VLTable", "SL2VL", "sl2vl_table", 1), ("VLArbitration", "VLArb", "vlarb_table", 1),
    ("GUIDInfo", "GI", "guid_info", 0), ("MlnxExtPortInfo", "MEPI", "mlnx_ext_port_info", 1),
]
USAGE_ARGS = ("<op> <dest dr_path|lid|guid> [op params]\n\n"
              "Supported ops (and aliases, case insensitive):\n") + "".join(
    f"  {n} ({a}) <addr>{' [<portnum>]' if p else ''}\n" for n, a, _f, p in MATCH)


def main(argv, prog="smpquery") -> int:
    st = {"combined": False, "extended": False}

    def opt(c, arg):
        if c == "c":
            st["combined"] = True
        elif c == "x":
            st["extended"] = True

    def body():
        cfg, args = common.parse(argv, prog, OPTS, None, USAGE_ARGS, EXAMPLES, opt)
        if st["combined"]:
            cfg.dest_type = common.DEST_DRSLID
        if len(args) < 2:
            raise Exit(2, cfg.usage)
        op = next((m for m in MATCH if args[0].lower() in (m[0].lower(), m[1].lower())), None)
        if op is None:
            raise ibexit(prog, f"operation '{args[0]}' not supported")
        out: list[str] = []
        with common.open_port(prog, cfg) as mad:
            if cfg.dest_type != common.DEST_DRSLID:
                dest = common.resolve_portid(mad, args[1], cfg.dest_type)
                if dest is None:
                    raise ibexit(prog, f"can't resolve destination port {args[1]}")
                rest = args[2:]
            else:
                concat = f"{args[1]} {args[2] if len(args) > 2 else '(null)'}"
                dest = common.resolve_portid(mad, concat, cfg.dest_type)
                if dest is None:
                    raise ibexit(prog, f"can't resolve destination port {concat}")
                rest = args[3:]
            ops = Ops(mad, out.append, cfg.show_keys, st["extended"])
            try:
                err = getattr(ops, op[2])(dest, rest)
            finally:
                sys.stdout.write("".join(out))
        if err:
            raise ibexit(prog, f"operation {args[0]}: {err}")
        return 0
    return common.run(prog, body)
