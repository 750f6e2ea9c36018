"""ibdiagnet's checks over a discovered fabric (``discover.Fabric``), pure:
no MADs, each returns the ``(severity, text)`` findings of one stage.

Owns: the names ibdiagnet prints for a port (``S<sysguid>/N<nodeguid>/P<n>``),
link width/speed names and the ``-ls``/``-lw`` values, the duplicate GUID,
NodeDescription and LID checks, the links check (state), the speed/width
check (expected -lw/-ls, best supported), the PM
counter thresholds, the LFT walk between every pair of CA ports (unreachable
destinations, loops) and the credit-loop search over the channel
dependencies those paths create.
"""

from __future__ import annotations

from collections import defaultdict

from ...wire import smp
from .discover import NODE_CA, NODE_SWITCH, port_speed

WARN, ERR = "W", "E"

#: -lw values -> LinkWidthActive codes (IBA 14.2.5.6)
WIDTHS = {"1x": 1, "2x": 16, "4x": 2, "8x": 4, "12x": 8}
WIDTH_NAME = {v: k for k, v in WIDTHS.items()}
#: XDR (200 Gb/s per lane) has no LinkSpeedExtActive code in the 4-bit field
#: this fabric's PortInfo carries: a value no port reports, so -ls 200 flags
#: every link as not running at it
XDR_EXT = 0x10
#: -ls values (Gb/s per lane) -> (LinkSpeedActive, LinkSpeedExtActive)
SPEEDS = {"2.5": (1, 0), "5": (2, 0), "10": (4, 0), "14": (4, 1), "25": (4, 2),
          "50": (4, 4), "100": (4, 8), "200": (4, XDR_EXT)}
_SPEED_NAME = {1: "2.5", 2: "5", 4: "10"}
_EXT_SPEED_NAME = {1: "14", 2: "25", 4: "50", 8: "100", XDR_EXT: "200"}

#: PortCounters error counters ibdiagnet checks, with the names its .pm file uses
PM_ERROR_COUNTERS = {
    "SymbolErrorCounter": "symbol_error_counter",
    "LinkErrorRecoveryCounter": "link_error_recovery_counter",
    "LinkDownedCounter": "link_downed_counter",
    "PortRcvErrors": "port_rcv_errors",
    "PortRcvRemotePhysicalErrors": "port_rcv_remote_physical_errors",
    "PortRcvSwitchRelayErrors": "port_rcv_switch_relay_errors",
    "PortXmitDiscards": "port_xmit_discard",
    "PortXmitConstraintErrors": "port_xmit_constraint_errors",
    "PortRcvConstraintErrors": "port_rcv_constraint_errors",
    "LocalLinkIntegrityErrors": "local_link_integrity_errors",
    "ExcessiveBufferOverrunErrors": "excessive_buffer_overrun_errors",
    "VL15Dropped": "vl15_dropped",
}
PM_NAMES = {**{k.lower(): k for k in PM_ERROR_COUNTERS},
            **{v: k for k, v in PM_ERROR_COUNTERS.items()}}


def port_name(port) -> str:
    """ibdiagnet's name of a port with no node-name map: S<sysguid>/N<guid>/P<n>."""
    n = port.node
    return f"S{n.ni['SystemGuid']:016x}/N{n.guid:016x}/P{port.portnum}"


def width_name(code: int) -> str:
    return WIDTH_NAME.get(code, f"0x{code:x}")


def speed_name(sp: int, esp: int) -> str:
    if esp:
        return _EXT_SPEED_NAME.get(esp, f"ext0x{esp:x}")
    return _SPEED_NAME.get(sp, f"0x{sp:x}")


def links(fabric):
    """Each link once: (port, remote port), in discovery order."""
    seen = set()
    for node in fabric.nodes:
        for p in node.ports[1:]:
            if p is None or p.remoteport is None or id(p) in seen:
                continue
            seen.add(id(p))
            seen.add(id(p.remoteport))
            yield p, p.remoteport


def end_ports(fabric):
    """Ports with a LID of their own: CA/router ports, switch port 0."""
    for node in fabric.nodes:
        if node.type == NODE_SWITCH:
            if node.ports[0] is not None:
                yield node.ports[0]
        else:
            for p in node.ports[1:]:
                if p is not None and p.pi is not None:
                    yield p


def duplicate_guids(fabric) -> list:
    """Port GUIDs held by ports of different nodes (node GUIDs are merged by
    the discovery itself: a second node with a known GUID is seen as the first)."""
    out = []
    owners = defaultdict(list)
    for p in end_ports(fabric):
        if p.guid:
            owners[p.guid].append(p)
    for guid, ports in owners.items():
        nodes = {id(p.node) for p in ports}
        if len(nodes) > 1:
            out.append((ERR, f"Duplicated port GUID 0x{guid:016x}: "
                        + ", ".join(port_name(p) for p in ports)))
    return out


def duplicate_node_desc(fabric) -> list:
    """Two nodes with one NodeDescription (a warning: names are for people)."""
    descs = defaultdict(list)
    for n in fabric.nodes:
        descs[n.nodedesc].append(n)
    return [(WARN, f"Duplicated Node Description \"{d}\": "
                   + ", ".join(f"0x{n.guid:016x}" for n in nodes))
            for d, nodes in descs.items() if len(nodes) > 1]


def lid_check(fabric) -> list:
    """Zero LIDs on active end ports and LIDs (ranges) held by two ports."""
    out = []
    holders = defaultdict(list)
    for p in end_ports(fabric):
        if p.pi["LinkState"] != smp.PortState.ACTIVE and p.node.type != NODE_SWITCH:
            continue
        if p.base_lid == 0:
            out.append((ERR, f"Zero LID on port {port_name(p)}"))
            continue
        for lid in range(p.base_lid, p.base_lid + (1 << p.lmc)):
            holders[lid].append(p)
    for lid in sorted(holders):
        ports = holders[lid]
        if len(ports) > 1:
            out.append((ERR, f"Duplicated LID 0x{lid:04x}: "
                        + ", ".join(port_name(p) for p in ports)))
    return out


def link_check(fabric) -> list:
    """Both ends Active (a link in Init: the SM has not brought it up)."""
    out = []
    for a, b in links(fabric):
        sa, sb = a.pi["LinkState"], b.pi["LinkState"] if b.pi else 0
        if sa != smp.PortState.ACTIVE or sb != smp.PortState.ACTIVE:
            bad = a if sa != smp.PortState.ACTIVE else b
            state = smp.PortState(bad.pi["LinkState"]).name if bad.pi else "UNKNOWN"
            out.append((WARN, f"Link: {port_name(a)}<-->{port_name(b)} - logical state is {state}, "
                              "not ACTIVE"))
    return out


def _ext_speeds(port) -> int:
    """LinkSpeedExtSupported if the node reports extended speeds (a switch in port 0's CapMask)."""
    n = port.node
    p0 = n.ports[0] if n.type == NODE_SWITCH else port
    if p0 is None or p0.pi is None or not p0.pi["CapMask"] & smp.CAP_IS_EXTENDED_SPEEDS_SUPPORTED:
        return 0
    return port.pi["LinkSpeedExtSupported"]


def _best(mask: int, order) -> int:
    return next((c for c in order if mask & c), 0)


def speed_width_check(fabric, want_width: int | None, want_speed: tuple | None) -> list:
    """The active width/speed of each link against -lw/-ls (errors) and, as
    warnings, against the best both ends support."""
    out = []
    for a, b in links(fabric):
        if b.pi is None:
            continue
        name = f"{port_name(a)}<-->{port_name(b)}"
        w, sp, esp = port_speed(a)
        if want_width is not None and w != want_width:
            out.append((ERR, f"Link: {name} - Unexpected width, actual link width is {width_name(w)}"))
        if want_speed is not None and (sp, esp) != want_speed:
            out.append((ERR, f"Link: {name} - Unexpected actual link speed {speed_name(sp, esp)}"))
        bw = _best(a.pi["LinkWidthSupported"] & b.pi["LinkWidthSupported"], (8, 4, 2, 16, 1))
        if want_width is None and bw and w != bw:
            out.append((WARN, f"Link: {name} - Unexpected width, actual link width is {width_name(w)}, "
                              f"could be {width_name(bw)}"))
        bext = _best(_ext_speeds(a) & _ext_speeds(b), (8, 4, 2, 1))
        bsp = _best(a.pi["LinkSpeedSupported"] & b.pi["LinkSpeedSupported"], (4, 2, 1))
        if want_speed is None and (bext and esp != bext or not bext and bsp and (sp, esp) != (bsp, 0)):
            out.append((WARN, f"Link: {name} - Unexpected actual link speed {speed_name(sp, esp)}, "
                              f"could be {speed_name(bsp, bext)}"))
    return out


def pm_check(counters: dict, thresholds: dict) -> list:
    """``counters``: {port: {name: value}}; a counter above its threshold (0
    unless -P sets it) is an error."""
    out = []
    for port, vals in counters.items():
        for name in PM_ERROR_COUNTERS:
            v = vals.get(name, 0)
            t = thresholds.get(name, 0)
            if v > t:
                out.append((ERR, f"{port_name(port)} - PM counter {PM_ERROR_COUNTERS[name]} "
                            f"value {v} exceeds threshold {t}"))
    return out


class Routes:
    """Every CA port to every other CA port's LIDs through the LFTs
    (``lfts``: switch node -> bytes, entry = output port, 0xFF none)."""

    MAX_HOPS = 64

    def __init__(self, fabric, lfts: dict):
        self.f = fabric
        self.lfts = lfts
        self.lid_port = {}
        for p in end_ports(fabric):
            for lid in range(p.base_lid, p.base_lid + (1 << p.lmc)):
                if lid:
                    self.lid_port.setdefault(lid, p)
        self.findings: list = []
        self.deps: dict = defaultdict(set)     # channel -> next channels (credit loops)
        self.paths = 0
        self.hops_hist: dict = defaultdict(int)
        self.memo: dict = {}

    def walk(self, src, dlid: int):
        """One LID route from CA port ``src``: (True, channels) or (False, why,
        channels so far -- a loop's include the repeated one)."""
        port = src.remoteport
        if port is None:
            return False, "source port has no link", []
        # a LID route depends only on the switch it enters and the DLID: CA
        # ports on one leaf share it (what makes thousands of hosts affordable)
        key = (id(port.node), dlid)
        got = self.memo.get(key)
        if got is None:
            got = self.memo[key] = self._walk(port, dlid)
        return got

    def _walk(self, port, dlid: int):
        dst = self.lid_port.get(dlid)
        channels = []
        for _ in range(self.MAX_HOPS):
            node = port.node
            if node.type != NODE_SWITCH:
                if port is dst:
                    return True, channels, channels
                return False, f"reached {port_name(port)} instead", channels
            if dst is not None and dst.node is node and dst.portnum == 0:
                return True, channels, channels
            lft = self.lfts.get(node)
            out = lft[dlid] if lft is not None and dlid < len(lft) else 0xFF
            if out == 0xFF or out == 0 or out > node.numports:
                return False, f"no LFT entry at switch {node.guid:016x}", channels
            op = node.ports[out]
            if op is None or op.remoteport is None:
                return False, f"LFT port {out} of switch {node.guid:016x} has no link", channels
            ch = (node.guid, out)
            if ch in channels:
                channels.append(ch)
                return False, f"loop at switch {node.guid:016x} port {out}", channels
            channels.append(ch)
            port = op.remoteport
        return False, "too many hops", channels

    def check(self):
        cas = [p for p in end_ports(self.f) if p.node.type == NODE_CA and p.base_lid]
        for src in cas:
            for dst in cas:
                if dst is src:
                    continue
                for dlid in range(dst.base_lid, dst.base_lid + (1 << dst.lmc)):
                    key = (id(src.remoteport.node) if src.remoteport else None, dlid)
                    fresh = key not in self.memo
                    ok, res, channels = self.walk(src, dlid)
                    self.paths += 1
                    if fresh:
                        for a, b in zip(channels, channels[1:]):
                            self.deps[a].add(b)
                    if not ok:
                        kind = "loop" if res.startswith("loop") else "Unreachable"
                        self.findings.append(
                            (ERR, f"{kind}: from {port_name(src)} to lid 0x{dlid:04x} "
                                  f"({port_name(dst)}) - {res}"))
                        continue
                    self.hops_hist[len(res)] += 1
        return self.findings

    def credit_loops(self) -> list:
        """A cycle in the channel dependency graph (iterative DFS, white/grey/black)."""
        colour = {}
        for start in list(self.deps):
            if start in colour:
                continue
            stack = [(start, iter(self.deps.get(start, ())))]
            colour[start] = 1
            while stack:
                node, it = stack[-1]
                nxt = next(it, None)
                if nxt is None:
                    colour[node] = 2
                    stack.pop()
                    continue
                c = colour.get(nxt, 0)
                if c == 1:
                    cyc = [n for n, _ in stack]
                    cyc = cyc[cyc.index(nxt):] + [nxt]
                    return [(ERR, "Credit loop found: " + " -> ".join(
                        f"{g:016x}/P{p}" for g, p in cyc))]
                if c == 0:
                    colour[nxt] = 1
                    stack.append((nxt, iter(self.deps.get(nxt, ()))))
        return []
