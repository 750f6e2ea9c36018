"""``ibroute [options] <dest> [<startlid> [<endlid>]]`` (infiniband-diags
44 ibroute.c): a switch's linear forwarding table with each destination
resolved by NodeDesc/PortInfo/NodeInfo SMPs to that LID (-n: not), all
entries (-a), and the multicast table (-M).
"""

from __future__ import annotations

import sys

from ...wire import smp
from ..libc import strtoul
from . import common, dump
from .common import ibexit
from .rpc import xdump

OPTS = [
    ("all", "a", 0, None, "show all lids, even invalid entries"),
    ("no_dests", "n", 0, None, "do not try to resolve destinations"),
    ("Multicast", "M", 0, None, "show multicast forwarding tables"),
    ("node-name-map", None, 1, "<file>", "node name map file"),
]
EXAMPLES = [
    " -- Unicast examples:",
    "4\t# dump all lids with valid out ports of switch with lid 4",
    "-a 4\t# same, but dump all lids, even with invalid out ports",
    "-n 4\t# simple dump format - no destination resolving",
    "4 10\t# dump lids starting from 10",
    "4 0x10 0x20\t# dump lid range",
    "-G 0x08f1040023\t# resolve switch by GUID",
    "-D 0,1\t# resolve switch by direct path",
    " -- Multicast examples:",
    "-M 4\t# dump all non empty mlids of switch with lid 4",
    "-M 4 0xc010 0xc020\t# same, but with range",
    "-M -n 4\t# simple dump format",
]
IB_MIN_MCAST_LID, IB_MAX_MCAST_LID, IB_MAX_UCAST_LID = 0xC000, 0xFFFE, 0xBFFF


def check_switch(mad, portid):
    ni = mad.smp_query(portid, smp.SmpAttr.NODE_INFO)
    if ni is None:
        sys.stderr.write(xdump("nodeinfo\n", bytes(64)))
        return "node info failed: valid addr?", None
    nd = mad.smp_query(portid, smp.SmpAttr.NODE_DESC)
    if nd is None:
        return "node desc failed", None
    n = smp.NODE_INFO.decode(ni)
    if n["NodeType"] != smp.NodeType.SWITCH:
        return "not a switch", None
    sw = mad.smp_query(portid, smp.SmpAttr.SWITCH_INFO)
    if sw is None:
        return "switch info failed: is a switch node?", None
    return None, (n, smp.decode_node_desc(nd), smp.SWITCH_INFO.decode(sw))


class LidResolver:
    """dump_lid(): what sits behind a LID, with its LMC range remembered."""

    def __init__(self, mad):
        self.mad = mad
        self.last_port_lid = self.base_port_lid = 0
        self.portguid = 0

    def __call__(self, lid, valid):
        if lid <= self.last_port_lid:
            if not valid:
                return f": (path #{lid - self.base_port_lid} - illegal port)"
            n = self.last_port_lid - self.base_port_lid + 1
            if not self.portguid:
                return f": (path #{lid - self.base_port_lid + 1} out of {n})"
            return (f": (path #{lid - self.base_port_lid + 1} out of {n}: portguid "
                    f"0x{self.portguid:016x})")
        if not valid:
            return ": (illegal port)"
        self.portguid = 0
        from .rpc import PortId
        pid = PortId(lid)
        nd = self.mad.smp_query(pid, smp.SmpAttr.NODE_DESC)
        pi = nd is not None and self.mad.smp_query(pid, smp.SmpAttr.PORT_INFO)
        ni = pi and self.mad.smp_query(pid, smp.SmpAttr.NODE_INFO)
        if not ni:
            return ": (unknown node and type)"
        n = smp.NODE_INFO.decode(ni)
        p = smp.PORT_INFO.decode(pi)
        self.portguid = n["PortGuid"]
        if p["LMC"] > 0:
            self.base_port_lid = p["Lid"]
            self.last_port_lid = p["Lid"] + (1 << p["LMC"]) - 1
        return (f": ({dump.node_type(n['NodeType'])} portguid 0x{n['PortGuid']:016x}: "
                f"'{smp.decode_node_desc(nd)}')")


def unicast(mad, portid, startlid, endlid, brief, dump_all, w):
    err, info = check_switch(mad, portid)
    if err:
        return err
    n, nd, si = info
    nports = n["NumPorts"]
    top = si["LinearFdbTop"]
    if not endlid or endlid > top:
        endlid = top
    if endlid > IB_MAX_UCAST_LID:
        sys.stderr.write(f"ibwarn: illegal lft top {endlid}, truncate to {IB_MAX_UCAST_LID}\n")
        endlid = IB_MAX_UCAST_LID
    w(f"Unicast lids [0x{startlid:x}-0x{endlid:x}] of switch {portid} guid 0x{n['Guid']:016x} "
      f"({nd}):\n")
    w("  Lid  Out   Destination\n")
    w("       Port     Info \n")
    resolve = LidResolver(mad)
    count = 0
    for block in range(startlid // 64, (endlid + 63) // 64):
        lft = mad.smp_query(portid, smp.SmpAttr.LINEAR_FWD_TABLE, block)
        if lft is None:
            sys.stdout.flush()
            sys.stderr.write(f"SubnGet() failed; MAD status 0x{mad.last_status:x} AM 0x{block:x}\n")
            return None
        i, e = block * 64, block * 64 + 64
        i, e = max(i, startlid), min(e, endlid + 1)
        for lid in range(i, e):
            out = lft[lid % 64]
            valid = out <= nports
            if not valid and not dump_all:
                continue
            s = "" if brief else resolve(lid, valid)
            w(f"0x{lid:04x} {out:03d} {s}\n")
            count += 1
    w(f"{count} {'' if dump_all else 'valid '}lids dumped \n")
    return None


def multicast(mad, portid, startlid, endlid, brief, dump_all, w):
    err, info = check_switch(mad, portid)
    if err:
        return err
    n, nd, si = info
    nports = n["NumPorts"]
    cap, top = si["McastFdbCap"], si["MulticastFDBTop"]
    if not endlid or endlid > IB_MIN_MCAST_LID + cap - 1:
        endlid = IB_MIN_MCAST_LID + cap - 1
    if not dump_all and top and top < endlid:
        if top < IB_MIN_MCAST_LID - 1:
            sys.stderr.write(f"ibwarn: illegal top mlid {top:x}\n")
        else:
            endlid = top
    if not startlid:
        startlid = IB_MIN_MCAST_LID
    elif startlid < IB_MIN_MCAST_LID:
        startlid = IB_MIN_MCAST_LID
    if endlid > IB_MAX_MCAST_LID:
        endlid = IB_MAX_MCAST_LID
    w(f"Multicast mlids [0x{startlid:x}-0x{endlid:x}] of switch {portid} guid "
      f"0x{n['Guid']:016x} ({nd}):\n")
    if brief:
        w(" MLid       Port Mask\n")
    else:
        if nports > 9:
            w("            " + "".join(((str(i // 10) if i % 10 == 0 else " ") + " ")
                                       for i in range(nports + 1)) + "\n")
        w("     Ports: " + "".join(f"{i % 10} " for i in range(nports + 1)) + "\n")
        w(" MLid\n")
    chunks = (nports + 1 + 15) // 16
    count = 0
    for block in range(startlid // 32, endlid // 32 + 1):
        mft = []
        for j in range(chunks):
            mod = smp.mft_attr_mod(block - IB_MIN_MCAST_LID // 32, j)
            d = mad.smp_query(portid, smp.SmpAttr.MCAST_FWD_TABLE, mod)
            if d is None:
                sys.stdout.flush()
                sys.stderr.write(f"SubnGet() failed; MAD status 0x{mad.last_status:x} AM 0x{mod:x}\n")
                return None
            mft.append(smp.decode_mft(d))
        i, e = max(block * 32, startlid), min(block * 32 + 32, endlid + 1)
        for mlid in range(i, e):
            masks = [mft[c][mlid % 32] for c in range(chunks)]
            nonzero = any(masks)
            if not nonzero and not dump_all:
                continue
            if brief:
                s = "".join(f"{m:04x}" for m in masks)
            else:
                s = "".join(("x" if masks[p // 16] & (1 << (p % 16)) else " ") + " "
                            for p in range(nports + 1))
            w(f"0x{mlid:04x}      {s}\n")
            count += 1
    w(f"{count} {'' if dump_all else 'valid '}mlids dumped \n")
    return None


def main(argv, prog="ibroute") -> int:
    st = {"all": False, "brief": False, "mc": False}

    def opt(c, arg):
        if c == "a":
            st["all"] = True
        elif c == "n":
            st["brief"] = True
        elif c == "M":
            st["mc"] = True

    def body():
        cfg, args = common.parse(argv, prog, OPTS, "K",
                                 "[<dest dr_path|lid|guid> [<startlid> [<endlid>]]]", EXAMPLES, opt)
        if not args:
            raise common.Exit(2, cfg.usage)
        start = strtoul(args[1]) if len(args) > 1 else 0
        end = strtoul(args[2]) if len(args) > 2 else 0
        out: list[str] = []
        with common.open_port(prog, cfg) as mad:
            portid = common.resolve_portid(mad, args[0], cfg.dest_type)
            if portid is None:
                raise ibexit(prog, f"can't resolve destination port {args[0]}")
            fn = multicast if st["mc"] else unicast
            try:
                err = fn(mad, portid, start, end, st["brief"], st["all"], out.append)
            finally:
                sys.stdout.write("".join(out))
        if err:
            raise ibexit(prog, f"dump tables: {err}")
        return 0
    return common.run(prog, body)
