"""``iblinkinfo`` (infiniband-diags 44 iblinkinfo.c): every node's ports
and links after a full discovery, in libibnetdisc's node order; -l (line
mode), -d (down links only), -p (HOQ/VL stall), --switches-only,
--cas-only, -S/-G <port guid> (one node of the full scan).  -D <path>
partial scans start a discovery at that path with -n hops (default 1).
Not done: cache files and --diff.
"""

from __future__ import annotations

import os
import sys

from ...wire import smp
from ..libc import strtoul
from . import common, dump
from .common import ibexit
from .discover import NODE_CA, NODE_SWITCH, discover, port_speed

OPTS = [
    ("node-name-map", None, 1, "<file>", "node name map file"),
    ("switch", "S", 1, "<port_guid>",
     "start partial scan at the port specified by <port_guid> (hex format)"),
    ("port-guid", "G", 1, "<port_guid>", "(same as -S)"),
    ("Direct", "D", 1, "<dr_path>", "start partial scan at the port specified by <dr_path>"),
    ("all", "a", 0, None, "print all nodes found in a partial fabric scan"),
    ("hops", "n", 1, "<hops>", "Number of hops to include away from specified node"),
    ("down", "d", 0, None, "print only down links"),
    ("line", "l", 0, None, "(line mode) print all information for each link on a single line"),
    ("additional", "p", 0, None,
     "print additional port settings (PktLifeTime, HoqLife, VLStallCount)"),
    ("load-cache", None, 1, "<file>", "filename of ibnetdiscover cache to load"),
    ("diff", None, 1, "<file>", "filename of ibnetdiscover cache to diff"),
    ("diffcheck", None, 1, "<key(s)>", "specify checks to execute for --diff"),
    ("filterdownports", None, 1, "<file>", "filename of ibnetdiscover cache to filter downports"),
    ("outstanding_smps", "o", 1, "",
     "specify the number of outstanding SMP's which should be issued during the scan"),
    ("switches-only", None, 0, None, "Output only switches"),
    ("cas-only", None, 0, None, "Output only CAs"),
]


def _max_width(v):
    for b in (8, 4, 2, 16, 1):
        if v & b:
            return b
    return 0


def max_msg(port):
    """get_max_msg(): 'Could be' when the link runs below what both ends support."""
    pi, rpi = port.pi, port.remoteport.pi
    if pi is None or rpi is None:
        return "", ""
    wmsg = smsg = ""
    mw = _max_width(pi["LinkWidthSupported"] & rpi["LinkWidthSupported"])
    if mw and (mw & pi["LinkWidthActive"]) == 0:
        wmsg = f"Could be {dump.width(mw)}"
    _w, s, e = port_speed(port)
    rem = port.remoteport
    _rw, _rs, re_ = port_speed(rem)
    sup_e = pi["LinkSpeedExtSupported"] & rpi["LinkSpeedExtSupported"]
    if e or re_:
        for b in (8, 4, 2, 1):
            if sup_e & b:
                if not (b & e):
                    smsg = f"Could be {dump.speed_ext(b)}"
                break
    else:
        sup = pi["LinkSpeedSupported"] & rpi["LinkSpeedSupported"]
        for b in (4, 2, 1):
            if sup & b:
                if not (b & s):
                    smsg = f"Could be {dump.speed(b)}"
                break
    return wmsg, smsg


class Printer:
    def __init__(self, w, line=False, down_only=False, additional=False):
        self.w, self.line, self.down_only, self.additional = w, line, down_only, additional

    def parts(self, port, remote_guid=False, down_remote="           [  ] \"\" ( )\n"):
        """(link_str, remote_str) of print_port()."""
        pi = port.pi or smp.PORT_INFO.decode(port.info)
        iw, isp, esp = port_speed(port)
        istate, iphys = pi["LinkState"], pi["PhysLinkState"]
        if istate != smp.PortState.DOWN:
            speed = dump.speed(isp) if not esp else dump.speed_ext(esp)
            link = (f"({dump.width(iw):>3} {speed:>18} {dump.port_state(istate):>6}/"
                    f"{dump.phys_state(iphys):>8})")
            if self.additional:
                link += f" (HOQ:{pi['HoqLife']} VL_Stall:{pi['VLStallCount']})"
        else:
            link = f"(              {dump.port_state(istate):>6}/{dump.phys_state(iphys):>8})"
        rp = port.remoteport
        if rp is not None:
            wmsg, smsg = max_msg(port)
            rguid = f"0x{rp.guid:016x} " if remote_guid else ""
            rlid = rp.base_lid if rp.base_lid else rp.node.smalid
            remote = f"{rguid}{rlid:6d} {rp.portnum:4d}[{'':>2}] \"{rp.node.nodedesc}\" ({wmsg} {smsg})\n"
        elif istate == smp.PortState.DOWN or down_remote != "           [  ] \"\" ( )\n":
            remote = down_remote
        else:
            remote = "    \"Port not available\"\n"
        return link, remote

    def port(self, node, port):
        link, remote = self.parts(port, self.line)
        if self.line:
            self.w(f"0x{port.guid:016x} \"{node.nodedesc:>30}\" ")
        else:
            self.w("      ")
        if node.type != NODE_SWITCH:
            if not self.line:
                self.w(f"0x{port.guid:016x} ")
            self.w(f"{port.base_lid:6d} {port.portnum:4d}[{'':>2}] =={link}==>  {remote}")
        else:
            self.w(f"{node.smalid:6d} {port.portnum:4d}[{'':>2}] =={link}==>  {remote}")

    def node(self, node):
        head = False
        for p in node.ports[1:]:
            if p is None:
                continue
            if not self.down_only or (p.pi or smp.PORT_INFO.decode(p.info))["LinkState"] == 1:
                if not head and not self.line:
                    if node.type == NODE_SWITCH:
                        guid = node.ports[0].guid if node.ports[0] else node.ni["PortGuid"]
                        self.w(f"Switch: 0x{guid:016x} {node.nodedesc}:\n")
                    else:
                        kind = "CA" if node.type == NODE_CA else "Router"
                        self.w(f"{kind}: {node.nodedesc}:\n")
                head = True
                self.port(node, p)


def main(argv, prog="iblinkinfo") -> int:
    st = {"guid": None, "dr": None, "all": False, "hops": 0, "down": False, "line": False,
          "add": False, "only": None}

    def opt(c, arg):
        if c in ("S", "G"):
            st["guid"] = (arg, strtoul(arg))
        elif c == "D":
            st["dr"] = arg
        elif c == "a":
            st["all"] = True
        elif c == "n":
            st["hops"] = strtoul(arg)
        elif c == "d":
            st["down"] = True
        elif c == "l":
            st["line"] = True
        elif c == "p":
            st["add"] = True
        elif c == "\x01switches-only":
            st["only"] = NODE_SWITCH
        elif c == "\x01cas-only":
            st["only"] = NODE_CA
        elif c == "\x01diffcheck":
            for k in arg.split(","):
                if k.lower() not in ("port", "state", "lid", "nodedesc"):
                    sys.stderr.write(f"invalid diff check key: {k}\n")
                    return False
        elif c in ("\x01load-cache", "\x01diff", "\x01filterdownports"):
            raise ibexit(prog, f"--{c[1:]} is not supported by softrdma's {prog}")
        return None

    def body():
        cfg, _args = common.parse(argv, prog, OPTS, "aDdGgKLlnpRS", "", None, opt)
        out: list[str] = []
        pr = Printer(out.append, st["line"], st["down"], st["add"])
        with common.open_port(prog, cfg) as mad:
            fabric = None
            start = None
            if st["dr"] is not None:
                start = common.resolve_portid(mad, st["dr"], common.DEST_DRPATH)
                if start is None:
                    sys.stderr.write(f"ibwarn: [{os.getpid()}] main: Failed to resolve {st['dr']}; "
                                     f"attempting full scan\n")
                elif not st["all"]:
                    ni = mad.smp_query(start, smp.SmpAttr.NODE_INFO)
                    if ni is None:
                        sys.stderr.write("Failed to get local Node Info\n")
                        return 1
                    st["guid_from_dr"] = smp.NODE_INFO.decode(ni)["PortGuid"]
                if start is not None:
                    fabric = discover(mad, start, st["hops"] or 1)
                    if fabric.from_node is None:
                        fabric = None
            elif st["guid"] is not None:
                # the GUID's LID comes from the SA; the scan is the full one either way
                # (libibnetdisc cannot start a partial scan at a LID-routed port on ibsim)
                if common.resolve_portid(mad, st["guid"][0], common.DEST_GUID) is None:
                    sys.stderr.write(f"ibwarn: [{os.getpid()}] main: Failed to resolve "
                                     f"{st['guid'][0]}; attempting full scan\n\n")
            if fabric is None:
                fabric = discover(mad)
            if fabric.from_node is None:
                sys.stderr.write("discover failed\n")
                return 1
        target = None
        if not st["all"] and st["guid"] is not None:
            target = st["guid"][1]
            label = st["guid"][0]
        elif not st["all"] and st["dr"] is not None and "guid_from_dr" in st:
            target = st["guid_from_dr"]
            label = st["dr"]
        if target is not None:
            p = fabric.find_port_guid(target)
            if p is not None and (st["only"] is None or p.node.type == st["only"]):
                pr.node(p.node)
            else:
                sys.stderr.write(f"Failed to find port: {label}\n")
        else:
            nodes = fabric.iter_type(st["only"]) if st["only"] else fabric.iter_nodes()
            for n in nodes:
                pr.node(n)
        sys.stdout.write("".join(out))
        return 0
    return common.run(prog, body)
