"""``ibqueryerrors [options]`` (infiniband-diags 44 ibqueryerrors.c): a
full discovery, then every node's PortCounters (AllPortSelect first,
per port when that shows errors) against the thresholds file; -s/-c
suppress counters, --data/--counters the data counters, -r the link, -k/-K
clear, --switch/--ca/--router, -G/-S <port guid> and -D <path> one node.

The SA is used for one thing only: a PathRecord table from the own port,
for the SL of each LID (--skip-sl: not).  Without a resident SM nobody
answers that, and the tool stops there as the real one does ("Query SA
failed", exit 0).  softrdma sends every PMA query on SL 0 either way.
Not done: --details (softrdma's PMA has no discard/error details) and
--load-cache.
"""

from __future__ import annotations

import struct
import sys

from ...wire import smp
from ..libc import strtoul
from . import common
from .common import ibexit
from .discover import NODE_CA, NODE_ROUTER, NODE_SWITCH, discover
from .iblinkinfo import Printer
from .perfquery import (PC_FIELDS, PCE_FIELDS, PM_ALL_PORT_SELECT, PM_EXT_WIDTH_NOIETF_SUP,
                        PM_EXT_WIDTH_SUPPORTED, PM_PC_XMIT_WAIT_SUP, _get)
from .rpc import GID_PREFIX, GSI_QP, METHOD_SET, PortId, SA_ATTR_PATH_RECORD, SA_CLASS, \
    SA_DATA_OFFSET, ibwarn

OPTS = [
    ("suppress", "s", 1, "<err1,err2,...>", "suppress errors listed"),
    ("suppress-common", "c", 0, None, "suppress some of the common counters"),
    ("node-name-map", None, 1, "<file>", "node name map file"),
    ("port-guid", "G", 1, "<port_guid>",
     "report the node containing the port specified by <port_guid>"),
    ("", "S", 1, "<port_guid>", "Same as \"-G\" for backward compatibility"),
    ("Direct", "D", 1, "<dr_path>", "report the node containing the port specified by <dr_path>"),
    ("skip-sl", None, 0, None, "don't obtain SL to all destinations"),
    ("report-port", "r", 0, None, "report port link information"),
    ("threshold-file", None, 1, "",
     "specify an alternate threshold file, default: /etc/infiniband-diags/error_thresholds"),
    ("GNDN", "R", 0, None, "(This option is obsolete and does nothing)"),
    ("data", None, 0, None, "include data counters for ports with errors"),
    ("switch", None, 0, None, "print data for switches only"),
    ("ca", None, 0, None, "print data for CA's only"),
    ("router", None, 0, None, "print data for routers only"),
    ("details", None, 0, None, "include transmit discard details"),
    ("counters", None, 0, None, "print data counters only"),
    ("clear-errors", "k", 0, None, "Clear error counters after read"),
    ("clear-counts", "K", 0, None, "Clear data counters after read"),
    ("load-cache", None, 1, "<file>", "filename of ibnetdiscover cache to load"),
    ("outstanding_smps", "o", 1, "",
     "specify the number of outstanding SMP's which should be issued during the scan"),
]
DEF_THRES_FILE = "/etc/infiniband-diags/error_thresholds"
PRINT_SWITCH, PRINT_CA, PRINT_ROUTER, PRINT_ALL = 1, 2, 4, 0xFF
#: IB_PC_ERR_SYM_F .. IB_PC_VL15_DROPPED_F without CounterSelect2 (not a counter), then PortXmitWait
ERROR_FIELDS = [f for f in PC_FIELDS if f[0] in (
    "SymbolErrorCounter", "LinkErrorRecoveryCounter", "LinkDownedCounter", "PortRcvErrors",
    "PortRcvRemotePhysicalErrors", "PortRcvSwitchRelayErrors", "PortXmitDiscards",
    "PortXmitConstraintErrors", "PortRcvConstraintErrors", "LocalLinkIntegrityErrors",
    "ExcessiveBufferOverrunErrors", "VL15Dropped")]
XMIT_WAIT = next(f for f in PC_FIELDS if f[0] == "PortXmitWait")
ALL_PC_NAMES = [f[0] for f in PC_FIELDS]


def _f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def human(val64, data):
    """conv_cnt_human_readable(): (value as a C float, unit)."""
    tmp, ui, div = val64 // 1024, 0, 1
    while tmp:
        ui += 1
        tmp //= 1024
        div *= 1024
    val = _f32(float(val64))
    if data:
        val = _f32(val * 4)
        if _f32(val / div) > 1024:
            ui += 1
            div *= 1024
    val = _f32(val / div)
    units = ["B", "KB", "MB", "GB", "TB", "PB", "EB"] if data else ["", "K", "M", "G", "T", "P", "E"]
    return val, units[ui] if ui < len(units) else ""


class Checker:
    def __init__(self, prog, mad, w, st):
        self.prog, self.mad, self.w, self.st = prog, mad, w, st
        self.nodes_checked = self.bad_nodes = self.ports_checked = self.bad_ports = 0
        self.pma_failures = 0
        self.thresholds: dict[str, int] = {}
        self.threshold_str = None

    def set_thresholds(self, path):
        try:
            fh = open(path)
        except OSError:
            return
        self.threshold_str = "Thresholds: "
        with fh:
            for line in fh:
                line = line.split("\n")[0]
                if not line or line.startswith("#"):
                    continue
                name, _, val = line.partition("=")
                v = strtoul(val) if val else 0
                if name in [f[0] for f in ERROR_FIELDS] + ["PortXmitWait"]:
                    self.thresholds[name] = v
                    self.threshold_str += f"[{name} = {v}]"

    def pma(self, lid, attr, port):
        data = bytearray(64)
        data[1] = port & 0xFF
        return self.mad.perf_query(lid, attr, 0, data)

    def cap_mask(self, lid, name, port):
        cpi = self.pma(lid, smp.PerfAttr.CLASS_PORT_INFO, port)
        if cpi is None:
            ibwarn("query_cap_mask", f"classportinfo query failed on {name}, Lid {lid} port {port}")
            self.pma_failures += 1
            return None
        return int.from_bytes(cpi[2:4], "big"), int.from_bytes(cpi[4:8], "big") >> 5

    def data_fields(self, cap, ext):
        if ext:
            fields = PCE_FIELDS[2:] if cap & PM_EXT_WIDTH_SUPPORTED else PCE_FIELDS[2:6]
        else:
            fields = [f for f in PC_FIELDS if f[0] in ("PortXmitData", "PortRcvData",
                                                       "PortXmitPkts", "PortRcvPkts")]
        return fields

    def _data_str(self, pkt, fields, only_nonzero):
        s = ""
        for name, off, width, _f in fields:
            v = _get(pkt, off, width)
            if only_nonzero and not v:
                continue
            val, unit = human(v, name in ("PortXmitData", "PortRcvData"))
            s += f" [{name} == {v} ({val:5.3f}{unit})]"
        return s

    def print_errors(self, lid, cap, cap2, name, node, port, header):
        pc = self.pma(lid, smp.PerfAttr.PORT_COUNTERS, port)
        if pc is None:
            ibwarn("print_errors", f"IB_GSI_PORT_COUNTERS query failed on {name}, Lid {lid} "
                                   f"port {port}")
            self.pma_failures += 1
            return 0
        pce = None
        if cap & (PM_EXT_WIDTH_SUPPORTED | PM_EXT_WIDTH_NOIETF_SUP):
            pce = self.pma(lid, smp.PerfAttr.PORT_COUNTERS_EXT, port)
            if pce is None:
                ibwarn("print_errors", f"IB_GSI_PORT_COUNTERS_EXT query failed on {name}, Lid "
                                       f"{lid} port {port}")
                self.pma_failures += 1
                return 0
        pc = bytearray(pc)
        if not cap & PM_PC_XMIT_WAIT_SUP:
            pc[40:44] = bytes(4)
        s = ""
        for fname, off, width, _f in ERROR_FIELDS + [XMIT_WAIT]:
            if fname in self.st["suppressed"]:
                continue
            v = _get(pc, off, width)
            if v > self.thresholds.get(fname, 0):
                s += f" [{fname} == {v}]"
        if not s:
            return 0
        if self.st["data"]:
            s += self._data_str(pce if pce is not None else pc,
                                self.data_fields(cap, pce is not None), True)
        if not header[0]:
            if node.type == NODE_SWITCH:
                self.w(f"Errors for 0x{node.ports[0].guid:x} \"{node.nodedesc}\"\n")
            else:
                self.w(f"Errors for \"{node.nodedesc}\"\n")
            header[0] = True
            self.bad_nodes += 1
        if port == 0xFF:
            if node.type == NODE_SWITCH:
                self.w(f"   GUID 0x{node.ports[0].guid:x} port ALL:{s}\n")
        else:
            self.w(f"   GUID 0x{node.ports[port].guid:x} port {port}:{s}\n")
            if self.st["report_port"]:
                self.port_config(node, port)
            self.bad_ports += 1
        return len(s)

    def port_config(self, node, port):
        """print_port_config(): the link as iblinkinfo shows it, remote GUID first."""
        p = node.ports[port]
        if p is None:
            return
        link, remote = Printer(None).parts(p, True, "           [  ] \"\" ( )\n")
        if p.remoteport is None:
            remote = "           [  ] \"\" ( )\n"
        lid = node.smalid if node.type == NODE_SWITCH else p.base_lid
        self.w(f"       Link info: {lid:6d}{port:4d}[{'':>2}] =={link}==>  {remote}")

    def data_cnts(self, lid, cap, name, node, port, header):
        ext = bool(cap & (PM_EXT_WIDTH_SUPPORTED | PM_EXT_WIDTH_NOIETF_SUP))
        pc = self.pma(lid, smp.PerfAttr.PORT_COUNTERS_EXT if ext else smp.PerfAttr.PORT_COUNTERS,
                      port)
        if pc is None:
            which = "IB_GSI_PORT_COUNTERS_EXT" if ext else "IB_GSI_PORT_COUNTERS"
            ibwarn("print_data_cnts", f"{which} query failed on {name}, Lid {lid} port {port}")
            self.pma_failures += 1
            return
        if not header[0]:
            self.w(f"Data Counters for 0x{node.guid:x} \"{name}\"\n")
            header[0] = True
        self.w(f"   GUID 0x{node.guid:x} port {'ALL' if port == 0xFF else port}:")
        self.w(self._data_str(pc, self.data_fields(cap, ext), False) + "\n")
        if port != 0xFF and self.st["report_port"]:
            self.port_config(node, port)

    def clear_port(self, lid, cap, cap2, name, port):
        mask = 0
        if self.st["clear_errors"]:
            mask |= 0xFFF
            if cap & PM_PC_XMIT_WAIT_SUP:
                mask |= 0x10000
        if self.st["clear_counts"]:
            mask |= 0xF000
        if mask:
            data = bytearray(64)
            data[1] = port & 0xFF
            data[2:4] = (mask & 0xFFFF).to_bytes(2, "big")
            data[18] = (mask >> 16) & 0xFF
            if self.mad.perf_query(lid, smp.PerfAttr.PORT_COUNTERS, 0, data, METHOD_SET) is None:
                sys.stderr.write(f"Failed to reset errors {name} port {port}\n")
        if cap & (PM_EXT_WIDTH_SUPPORTED | PM_EXT_WIDTH_NOIETF_SUP):
            mask = 0
            if self.st["clear_counts"]:
                mask = 0xFF if cap & PM_EXT_WIDTH_SUPPORTED else 0x0F
            if mask:
                data = bytearray(64)
                data[1] = port & 0xFF
                data[2:4] = mask.to_bytes(2, "big")
                if self.mad.perf_query(lid, smp.PerfAttr.PORT_COUNTERS_EXT, 0, data,
                                       METHOD_SET) is None:
                    sys.stderr.write(f"Failed to reset extended data counters {name}, Lid {lid} "
                                     f"port {port}\n")

    def node(self, node):
        t = {NODE_SWITCH: PRINT_SWITCH, NODE_CA: PRINT_CA, NODE_ROUTER: PRINT_ROUTER}.get(node.type, 0)
        if not t & self.st["types"]:
            return
        start = 0 if node.type == NODE_SWITCH and node.smaenhsp0 else 1
        name = node.nodedesc
        if node.type == NODE_SWITCH:
            lid, p = node.smalid, 0
        else:
            lid, p = 0, 0
            for p in range(1, node.numports + 1):
                if node.ports[p] is not None:
                    lid = node.ports[p].base_lid
                    break
        caps = self.cap_mask(lid, name, p)
        cap, cap2 = caps if caps else (0, 0)
        all_sup = bool(caps and cap & PM_ALL_PORT_SELECT)
        header = [False]

        def port_lid(i):
            return node.smalid if node.type == NODE_SWITCH else node.ports[i].base_lid
        if self.st["counters_only"]:
            for i in range(start, node.numports + 1):
                if node.ports[i] is not None:
                    lid = port_lid(i)
                    self.data_cnts(lid, cap, name, node, i, header)
                    self.ports_checked += 1
                    if not all_sup:
                        self.clear_port(lid, cap, cap2, name, i)
        else:
            skip = False
            if all_sup and not self.print_errors(lid, cap, cap2, name, node, 0xFF, header):
                self.ports_checked += node.numports
                skip = True
            if not skip:
                for i in range(start, node.numports + 1):
                    if node.ports[i] is not None:
                        lid = port_lid(i)
                        self.print_errors(lid, cap, cap2, name, node, i, header)
                        self.ports_checked += 1
                        if not all_sup:
                            self.clear_port(lid, cap, cap2, name, i)
        self.nodes_checked += 1
        if all_sup:
            self.clear_port(lid, cap, cap2, name, 0xFF)

    def summary(self):
        self.w(f"\n## Summary: {self.nodes_checked} nodes checked, {self.bad_nodes} bad nodes found\n")
        self.w(f"##          {self.ports_checked} ports checked, {self.bad_ports} ports have errors "
               f"beyond threshold\n")
        self.w(f"## {self.threshold_str if self.threshold_str is not None else '(null)'}\n")
        if self.pma_failures:
            self.w(f"##          {self.pma_failures} PMA query failures\n")
        self.w("## Suppressed:" + "".join(f" {n}" for n in self.st["suppressed"]) + "\n")
        return self.bad_ports


def path_record_table(mad, dguid=0) -> bool:
    """path_record_query(): a PathRecord GetTable from the own port; True if the SA answered."""
    m = bytearray(256)
    m[0:4] = bytes([1, SA_CLASS, 2, 0x12])                   # SubnAdmGetTable
    m[8:16] = mad.agent.alloc_tid().to_bytes(8, "big")
    m[16:18] = SA_ATTR_PATH_RECORD.to_bytes(2, "big")
    mask = (1 << 3) | (1 << 11) | (1 << 10)                  # SGID, NumbPath, Reversible
    rec = SA_DATA_OFFSET
    m[rec + 24:rec + 40] = GID_PREFIX.to_bytes(8, "big") + mad.node_info["PortGuid"].to_bytes(8, "big")
    if dguid:
        mask |= 1 << 2
        m[rec + 8:rec + 24] = GID_PREFIX.to_bytes(8, "big") + dguid.to_bytes(8, "big")
    m[48:56] = mask.to_bytes(8, "big")
    m[rec + 49] = 0x80 | 1
    ans = mad.rpc_many([((mad.sm_lid, GSI_QP, GSI_QP), m)])[0]
    if ans is None:
        sys.stdout.flush()
        sys.stderr.write("Query SA failed: Connection timed out; sa call path_query failed\n")
        return False
    return True


def main(argv, prog="ibqueryerrors") -> int:
    st = {"suppressed": [], "data": False, "types": 0, "details": False, "counters_only": False,
          "skip_sl": False, "guid": None, "dr": None, "report_port": False, "clear_errors": False,
          "clear_counts": False, "thres": DEF_THRES_FILE}

    def add_sup(name):
        if len(st["suppressed"]) >= 64:
            ibwarn("add_suppressed", f"Maximum (64) fields have been suppressed; skipping {name}")
            return
        st["suppressed"].append(name)

    def opt(c, arg):
        if c == "s":
            for v in arg.split(","):
                if v in ALL_PC_NAMES:
                    add_sup(v)
        elif c == "c":
            add_sup("PortRcvSwitchRelayErrors")
        elif c == "\x01data":
            st["data"] = True
        elif c == "\x01switch":
            st["types"] |= PRINT_SWITCH
        elif c == "\x01ca":
            st["types"] |= PRINT_CA
        elif c == "\x01router":
            st["types"] |= PRINT_ROUTER
        elif c == "\x01details":
            st["details"] = True
        elif c == "\x01counters":
            st["counters_only"] = True
        elif c == "\x01skip-sl":
            st["skip_sl"] = True
        elif c == "\x01threshold-file":
            st["thres"] = arg
        elif c in ("G", "S", "\x01"):
            st["guid"] = arg
        elif c == "D":
            st["dr"] = arg
        elif c == "r":
            st["report_port"] = True
        elif c == "k":
            st["clear_errors"] = True
        elif c == "K":
            st["clear_counts"] = True
        elif c == "\x01load-cache":
            raise ibexit(prog, "--load-cache is not supported by softrdma's ibqueryerrors")

    def body():
        cfg, _args = common.parse(argv, prog, OPTS, "cDGKLnRrSs", "", None, opt)
        st["types"] = st["types"] or PRINT_ALL
        out: list[str] = []
        with common.open_port(prog, cfg) as mad:
            try:
                return _run(prog, mad, st, out)
            finally:
                sys.stdout.write("".join(out))
    return common.run(prog, body)


def _run(prog, mad, st, out):
    start = None
    if st["dr"] is not None:
        start = common.resolve_portid(mad, st["dr"], common.DEST_DRPATH)
        if start is None:
            ibwarn("main", f"Failed to resolve {st['dr']}; attempting full scan")
    elif st["guid"] is not None:
        if common.resolve_portid(mad, st["guid"], common.DEST_GUID) is None:
            ibwarn("main", f"Failed to resolve {st['guid']}; attempting full scan")
    fabric = None
    if start is not None:
        fabric = discover(mad, start, 1)
        if fabric.from_node is None:
            ibwarn("main", "Single node discover failed; attempting full scan")
            fabric = None
    if fabric is None:
        fabric = discover(mad)
        if fabric.from_node is None:
            sys.stderr.write("discover failed\n")
            return 255
    ck = Checker(prog, mad, out.append, st)
    ck.set_thresholds(st["thres"])
    if st["guid"] is not None:
        p = fabric.find_port_guid(strtoul(st["guid"]))
        if p is not None:
            ck.node(p.node)
        else:
            sys.stderr.write(f"Failed to find node: {st['guid']}\n")
    elif st["dr"] is not None:
        ni = mad.smp_query(start or PortId(0, ()), smp.SmpAttr.NODE_INFO)
        if ni is None:
            sys.stderr.write("Failed to query local Node Info\n")
            return 0
        p = fabric.find_port_guid(smp.NODE_INFO.decode(ni)["PortGuid"])
        if p is not None:
            if not st["skip_sl"] and not path_record_table(mad, p.guid):
                return 0
            ck.node(p.node)
        else:
            sys.stderr.write(f"Failed to find node: {st['dr']}\n")
    else:
        if not st["skip_sl"] and not path_record_table(mad):
            return 0
        for n in fabric.iter_nodes():
            ck.node(n)
    return 1 if ck.summary() else 0
