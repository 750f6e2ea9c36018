"""``perfquery [options] [<lid|guid> [[port(s)] [reset_mask]]]``
(infiniband-diags 44 perfquery.c): PortCounters (default) and
PortCountersExtended (-x) through the PMA (class 0x04, QP1), after the
required ClassPortInfo; reset after read (-r) or only (-R) with the
CounterSelect mask; all ports (-a: AllPortSelect, or iterating when the PMA
lacks it), each port (-l), port lists "1,4,8" and ranges "1-10".  Not
done: the per-SL/VL/op-code/congestion attributes (-X -S -D -E -T -c and
the long-only ones), which softrdma's PMA does not provide either.
"""

from __future__ import annotations

import sys

from ...wire import smp
from ..libc import strtoul
from . import common
from .common import ibexit
from .dump import field
from .rpc import METHOD_SET, PortId, ibwarn

OPTS = [
    ("extended", "x", 0, None, "show extended port counters"),
    ("xmtsl", "X", 0, None, "show Xmt SL port counters"),
    ("rcvsl", "S", 0, None, "show Rcv SL port counters"),
    ("xmtdisc", "D", 0, None, "show Xmt Discard Details"),
    ("rcverr", "E", 0, None, "show Rcv Error Details"),
    ("extended_speeds", "T", 0, None, "show port extended speeds counters"),
    ("oprcvcounters", None, 0, None, "show Rcv Counters per Op code"),
    ("flowctlcounters", None, 0, None, "show flow control counters"),
    ("vloppackets", None, 0, None, "show packets received per Op code per VL"),
    ("vlopdata", None, 0, None, "show data received per Op code per VL"),
    ("vlxmitflowctlerrors", None, 0, None, "show flow control update errors per VL"),
    ("vlxmitcounters", None, 0, None, "show ticks waiting to transmit counters per VL"),
    ("swportvlcong", None, 0, None, "show sw port VL congestion"),
    ("rcvcc", None, 0, None, "show Rcv congestion control counters"),
    ("slrcvfecn", None, 0, None, "show SL Rcv FECN counters"),
    ("slrcvbecn", None, 0, None, "show SL Rcv BECN counters"),
    ("xmitcc", None, 0, None, "show Xmit congestion control counters"),
    ("vlxmittimecc", None, 0, None, "show VL Xmit Time congestion control counters"),
    ("smplctl", "c", 0, None, "show samples control"),
    ("all_ports", "a", 0, None, "show aggregated counters"),
    ("loop_ports", "l", 0, None, "iterate through each port"),
    ("reset_after_read", "r", 0, None, "reset counters after read"),
    ("Reset_only", "R", 0, None, "only reset counters"),
]
EXAMPLES = [
    "\t\t# read local port's performance counters",
    "32 1\t\t# read performance counters from lid 32, port 1",
    "-x 32 1\t# read extended performance counters from lid 32, port 1",
    "-a 32\t\t# read performance counters from lid 32, all ports",
    "-r 32 1\t# read performance counters and reset",
    "-x -r 32 1\t# read extended performance counters and reset",
    "-R 0x20 1\t# reset performance counters of port 1 only",
    "-x -R 0x20 1\t# reset extended performance counters of port 1 only",
    "-R -a 32\t# reset performance counters of all ports",
    "-R 32 2 0x0fff\t# reset only error counters of port 2",
    "-R 32 2 0xf000\t# reset only non-error counters of port 2",
    "-a 32 1-10\t# read performance counters from lid 32, port 1-10, aggregate output",
    "-l 32 1-10\t# read performance counters from lid 32, port 1-10, output each port",
    "-a 32 1,4,8\t# read performance counters from lid 32, port 1, 4, and 8, aggregate output",
    "-l 32 1,4,8\t# read performance counters from lid 32, port 1, 4, and 8, output each port",
]
ALL_PORTS = 0xFF
PM_ALL_PORT_SELECT = 1 << 8
PM_EXT_WIDTH_SUPPORTED = 1 << 9
PM_EXT_WIDTH_NOIETF_SUP = 1 << 10
PM_PC_XMIT_WAIT_SUP = 1 << 12
PM_IS_QP1_DROP_SUP = 1 << 14

#: mad_dump_perfcounters(): (name, bit offset, width, format)
PC_FIELDS = [
    ("PortSelect", 8, 8, "d"), ("CounterSelect", 16, 16, "x4"),
    ("SymbolErrorCounter", 32, 16, "d"), ("LinkErrorRecoveryCounter", 48, 8, "d"),
    ("LinkDownedCounter", 56, 8, "d"), ("PortRcvErrors", 64, 16, "d"),
    ("PortRcvRemotePhysicalErrors", 80, 16, "d"), ("PortRcvSwitchRelayErrors", 96, 16, "d"),
    ("PortXmitDiscards", 112, 16, "d"), ("PortXmitConstraintErrors", 128, 8, "d"),
    ("PortRcvConstraintErrors", 136, 8, "d"), ("CounterSelect2", 144, 8, "x2"),
    ("LocalLinkIntegrityErrors", 152, 4, "d"), ("ExcessiveBufferOverrunErrors", 156, 4, "d"),
    ("QP1Dropped", 160, 16, "d"), ("VL15Dropped", 176, 16, "d"), ("PortXmitData", 192, 32, "d"),
    ("PortRcvData", 224, 32, "d"), ("PortXmitPkts", 256, 32, "d"), ("PortRcvPkts", 288, 32, "d"),
    ("PortXmitWait", 320, 32, "d"),
]
PCE_FIELDS = [
    ("PortSelect", 8, 8, "d"), ("CounterSelect", 16, 16, "x4"), ("PortXmitData", 64, 64, "d"),
    ("PortRcvData", 128, 64, "d"), ("PortXmitPkts", 192, 64, "d"), ("PortRcvPkts", 256, 64, "d"),
    ("PortUnicastXmitPkts", 320, 64, "d"), ("PortUnicastRcvPkts", 384, 64, "d"),
    ("PortMulticastXmitPkts", 448, 64, "d"), ("PortMulticastRcvPkts", 512, 64, "d"),
]


def _get(data, off, width):
    v = int.from_bytes(bytes(data[:((off + width + 7) // 8)]), "big")
    return (v >> (((off + width + 7) // 8) * 8 - off - width)) & ((1 << width) - 1)


def _fmt(v, f):
    return f"0x{v:04x}" if f == "x4" else f"0x{v:02x}" if f == "x2" else str(v)


def dump_fields(data, fields, values=None) -> str:
    out = []
    for name, off, width, f in fields:
        v = values[name] if values is not None else _get(data, off, width)
        out.append(field(name, _fmt(v, f)))
    return "".join(out)


class Perf:
    def __init__(self, prog, mad, lid, cap, cap2, w):
        self.prog, self.mad, self.lid, self.cap, self.cap2, self.w = prog, mad, lid, cap, cap2, w
        self.portid = PortId(lid)
        self.agg = None

    def query(self, attr, port):
        data = bytearray(64)
        data[1] = port & 0xFF
        return self.mad.perf_query(self.lid, attr, 0, data)

    def dump(self, extended, port, aggregate):
        if not extended:
            pc = self.query(smp.PerfAttr.PORT_COUNTERS, port)
            if pc is None:
                raise ibexit(self.prog, "perfquery")
            pc = bytearray(pc)
            if not self.cap & PM_PC_XMIT_WAIT_SUP:
                pc[40:44] = bytes(4)
            fields = PC_FIELDS
        else:
            if not self.cap & (PM_EXT_WIDTH_SUPPORTED | PM_EXT_WIDTH_NOIETF_SUP):
                ibwarn("dump_perfcounters", f"PerfMgt ClassPortInfo CapMask 0x{self.cap:02X}; "
                                            f"No extended counter support indicated\n")
            pc = self.query(smp.PerfAttr.PORT_COUNTERS_EXT, port)
            if pc is None:
                raise ibexit(self.prog, "perfextquery")
            fields = PCE_FIELDS if self.cap & PM_EXT_WIDTH_SUPPORTED else PCE_FIELDS[:6]
        if aggregate:
            self.aggregate(pc, fields)
            return
        if extended:
            self.w(f"# Port extended counters: {self.portid} port {port} (CapMask: 0x{self.cap:02X} "
                   f"CapMask2: 0x{self.cap2:07X})\n{dump_fields(pc, fields)}")
        else:
            self.w(f"# Port counters: {self.portid} port {port} (CapMask: 0x{self.cap:02X})\n"
                   f"{dump_fields(pc, fields)}")

    def aggregate(self, pc, fields):
        if self.agg is None:
            self.agg = {n: 0 for n, *_ in fields}
        for name, off, width, _f in fields:
            if name in ("PortSelect", "CounterSelect", "CounterSelect2"):
                continue
            self.agg[name] = min(self.agg[name] + _get(pc, off, width), (1 << width) - 1)

    def output_aggregate(self, extended):
        vals = dict(self.agg or {})
        vals["PortSelect"] = ALL_PORTS
        fields = PC_FIELDS if not extended else (
            PCE_FIELDS if self.cap & PM_EXT_WIDTH_SUPPORTED else PCE_FIELDS[:6])
        for n, *_ in fields:
            vals.setdefault(n, 0)
        if extended:
            self.w(f"# Port extended counters: {self.portid} port {ALL_PORTS} (CapMask: "
                   f"0x{self.cap:02X} CapMask2: 0x{self.cap2:07X})\n{dump_fields(None, fields, vals)}")
        else:
            self.w(f"# Port counters: {self.portid} port {ALL_PORTS} (CapMask: 0x{self.cap:02X})\n"
                   f"{dump_fields(None, fields, vals)}")

    def reset(self, extended, mask, port):
        data = bytearray(64)
        data[1] = port & 0xFF
        data[2:4] = (mask & 0xFFFF).to_bytes(2, "big")
        if extended:
            attr = smp.PerfAttr.PORT_COUNTERS_EXT
        else:
            attr = smp.PerfAttr.PORT_COUNTERS
            data[18] = (mask >> 16) & 0xFF
        if self.mad.perf_query(self.lid, attr, 0, data, METHOD_SET) is None:
            raise ibexit(self.prog, "perf ext reset" if extended else "perf reset")


UNSUPPORTED = {"X": "PortXmitDataSL", "S": "PortRcvDataSL", "D": "PortXmitDiscardDetails",
               "E": "PortRcvErrorDetails", "T": "PortExtendedSpeedsCounters",
               "c": "PortSamplesControl"}


def main(argv, prog="perfquery") -> int:
    st = {"x": False, "a": 0, "l": 0, "r": 0, "R": 0, "other": None, "port": 0}

    def opt(c, arg):
        if c in ("x",):
            st["x"] = True
        elif c == "a":
            st["a"] += 1
            st["port"] = ALL_PORTS
        elif c in ("l", "r", "R"):
            st[c] += 1
        else:
            st["other"] = UNSUPPORTED.get(c, c.lstrip("\x01"))

    def body():
        cfg, args = common.parse(argv, prog, OPTS, "DK", " [<lid|guid> [[port(s)] [reset_mask]]]",
                                 EXAMPLES, opt)
        ports: list[int] = []
        mask, ext_mask = 0xFFFF, (1 << 64) - 1
        if len(args) > 1:
            a = args[1]
            if "," in a:
                ports = [strtoul(x) for x in a.split(",") if x]
                st["port"] = ports[0]
            elif "-" in a:
                lo, hi = a.split("-", 1)
                pmin, pmax = strtoul(lo), strtoul(hi)
                if pmin >= pmax:
                    raise ibexit(prog, "max port must be greater than min port in range")
                ports = list(range(pmin, pmax + 1))
                st["port"] = ports[0]
            else:
                st["port"] = strtoul(a)
        if len(args) > 2:
            ext_mask = strtoul(args[2])
            mask = ext_mask & 0xFFFFFFFF
        out: list[str] = []
        with common.open_port(prog, cfg) as mad:
            try:
                return _run(prog, cfg, mad, args, st, ports, mask, out)
            finally:
                sys.stdout.write("".join(out))
    return common.run(prog, body)


def _run(prog, cfg, mad, args, st, ports, mask, out):
    if args:
        portid = common.resolve_portid(mad, args[0], cfg.dest_type)
        if portid is None or portid.path:
            raise ibexit(prog, f"can't resolve destination port {args[0]}")
        lid = portid.lid
    else:
        lid, st["port"] = mad.lid, mad.portnum
    port = st["port"]
    cpi = mad.perf_query(lid, smp.PerfAttr.CLASS_PORT_INFO, 0, bytes([0, port & 0xFF]))
    if cpi is None:
        raise ibexit(prog, "classportinfo query")
    cap = int.from_bytes(cpi[2:4], "big")
    cap2 = int.from_bytes(cpi[4:8], "big") >> 5
    all_ports_loop = False
    if not cap & PM_ALL_PORT_SELECT:
        if not st["a"] and port == ALL_PORTS:
            raise ibexit(prog, "AllPortSelect not supported")
        if st["a"] and port == ALL_PORTS:
            all_ports_loop = True
    if st["other"]:
        raise ibexit(prog, f"cannot query {st['other']}")   # softrdma decodes none of them
    pf = Perf(prog, mad, lid, cap, cap2, out.append)
    loop = all_ports_loop or (st["l"] and (st["a"] or port == ALL_PORTS))
    start_port, num_ports = 1, 0
    if loop:
        ni = mad.smp_query(PortId(lid), smp.SmpAttr.NODE_INFO)
        if ni is None:
            raise ibexit(prog, "smp query nodeinfo failed")
        n = smp.NODE_INFO.decode(ni)
        num_ports = n["NumPorts"]
        if not num_ports:
            raise ibexit(prog, "smp query nodeinfo: num ports invalid")
        if n["NodeType"] == smp.NodeType.SWITCH:
            si = mad.smp_query(PortId(lid), smp.SmpAttr.SWITCH_INFO)
            if si is None:
                raise ibexit(prog, "smp query nodeinfo failed")
            if smp.SWITCH_INFO.decode(si)["EnhancedPort0"]:
                start_port = 0
        if all_ports_loop and not st["l"]:
            ibwarn("main", "Emulating AllPortSelect by iterating through all ports")
    if not st["R"]:
        if loop:
            agg = all_ports_loop and not st["l"]
            for i in range(start_port, num_ports + 1):
                pf.dump(st["x"], i, agg)
            if agg:
                pf.output_aggregate(st["x"])
        elif len(ports) > 1:
            agg = bool(st["a"] and not st["l"])
            for p in ports:
                pf.dump(st["x"], p, agg)
            if agg:
                pf.output_aggregate(st["x"])
        else:
            pf.dump(st["x"], port, False)
        if not st["r"]:
            return 0
    if len(args) <= 2 and not st["x"]:
        if cap & PM_PC_XMIT_WAIT_SUP:
            mask |= 1 << 16
        if cap & PM_IS_QP1_DROP_SUP:
            mask |= 1 << 17
    if st["x"]:
        mask |= 0xFFF0000
        if cap & PM_PC_XMIT_WAIT_SUP:
            mask |= 1 << 28
        if cap & PM_IS_QP1_DROP_SUP:
            mask |= 1 << 29
    if loop:
        for i in range(start_port, num_ports + 1):
            pf.reset(st["x"], mask, i)
    elif len(ports) > 1:
        for p in ports:
            pf.reset(st["x"], mask, p)
    else:
        pf.reset(st["x"], mask, port)
    return 0
