"""ibsim topology files (.net): parse into a Fabric, write a Fabric back.

Owns the text format ibsim reads (a subset of ibnetdiscover's output):

    switchguid=0x0002c90300100000      # absolute GUID of the next switch
    Switch  36 "leaf001"               # Switch|Hca|Ca|Rt, ports, "nodeid"
    [1]  "host0001"[1]   # lid 0 4xEDR # local port, "remote"[port], link
    Ca   1 "host0001"                  #   width x speed (and on CA ports a
    [1]  "leaf001"[1]    # lid 0 4xEDR #   preset LID)

plus ``caguid=``, ``sysimgguid=``, ``vendid=``, ``devid=``, ``width=``,
``speed=``, ``extspeed=`` (as in ibsim: the LinkWidthEnabled, LinkSpeedEnabled
and LinkSpeedExtEnabled codes of the ports of the nodes that follow, which
a link line without a ``<n>x<SPEED>`` comment keeps; 4X SDR by default),
``include FILE`` and ``do CMD`` (kept in ``Fabric.commands`` for the
server's console), ibnetdiscover's ``(guid)`` decorations and ``# "desc"``
comments; a switch comment's ``enhanced port 0`` (ibnetdiscover's spelling;
ibsim has no such switches) gives the switch an enhanced port 0, which
takes an LMC.  GUIDs not given continue from the last one set, as ibsim
assigns them (a switch takes one, a CA one for the node plus one per
port).  Both ends of a link may be listed; a port cabled two different
ways is an error.  Every error names the file and line.
"""

from __future__ import annotations

import os
import re

from ..wire.smp import NodeType
from .model import NET_SPEED_ENABLED, NET_WIDTH_ENABLED, WIDTH_ENABLED, Fabric, FabricError, Node

_TYPES = {"switch": NodeType.SWITCH, "hca": NodeType.CA, "ca": NodeType.CA,
          "rt": NodeType.ROUTER}
_TYPE_NAME = {NodeType.SWITCH: "Switch", NodeType.CA: "Ca", NodeType.ROUTER: "Rt"}
_NODE_RE = re.compile(r'^(Switch|Hca|Ca|Rt)\s+(\d+)\s+"([^"]+)"\s*(?:#(.*))?$', re.I)
_PORT_RE = re.compile(r'^\[(\d+)\](?:\([0-9a-fA-F]+\))?\s+"([^"]+)"\[(\d+)\]'
                      r'(?:\([0-9a-fA-F]+\))?\s*(?:#(.*))?$')
_LINK_RE = re.compile(r'(\d+)x(SDR|DDR|QDR|FDR10|FDR|EDR|HDR|NDR)\b', re.I)
_LID_RE = re.compile(r'\blid\s+(\d+)')
_LMC_RE = re.compile(r'\blmc\s+(\d+)')
_DESC_RE = re.compile(r'^\s*"([^"]*)"')
_SET_RE = re.compile(r'^(switchguid|caguid|rtguid|sysimgguid|vendid|devid|width|speed|extspeed)'
                     r'\s*=\s*(\S+)$', re.I)
MAX_INCLUDE = 9
SW_GUID_START = 0x200000
CA_GUID_START = 0x100000
RT_GUID_START = 0x300000


class TopoError(FabricError):
    """A .net file that cannot be used: says where and why."""

    def __init__(self, where: str, msg: str):
        super().__init__(f"{where}: {msg}")


class _Parser:
    def __init__(self):
        self.fabric = Fabric()
        self.guid = {NodeType.SWITCH: SW_GUID_START, NodeType.CA: CA_GUID_START,
                     NodeType.ROUTER: RT_GUID_START}
        self.sysguid = 0
        self.vendid = 0
        self.devid = 0
        # ibsim's netwidth/netspeed/netspeedext: enable codes of new nodes' ports
        self.net = [NET_WIDTH_ENABLED, NET_SPEED_ENABLED, 0]
        self.node: Node | None = None
        self.cables = []     # (where, node, port, remote nodeid, remote port, width, speed, lid)
        self.depth = 0

    def parse_file(self, path: str) -> None:
        if self.depth >= MAX_INCLUDE:
            raise TopoError(path, f"includes nested deeper than {MAX_INCLUDE}")
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                lines = f.readlines()
        except OSError as e:
            raise TopoError(path, f"cannot read: {e.strerror}") from None
        self.depth += 1
        for i, line in enumerate(lines, 1):
            self.parse_line(line, f"{path}:{i}", os.path.dirname(path))
        self.depth -= 1

    def parse_line(self, raw: str, where: str, base_dir: str = ".") -> None:
        line = raw.strip()
        if not line or line.startswith("#"):
            return
        low = line.lower()
        if low.startswith("include"):
            name = line[7:].strip()
            if not name:
                raise TopoError(where, "include needs a file name")
            self.parse_file(name if os.path.isabs(name) else os.path.join(base_dir, name))
            return
        if low.startswith("do ") or low == "do":
            self.fabric.commands.append((where, line[2:].strip()))
            return
        m = _SET_RE.match(line.split("#", 1)[0].strip())
        if m:
            self._setting(m.group(1).lower(), m.group(2), where)
            return
        m = _NODE_RE.match(line)
        if m:
            self._node(m, where)
            return
        m = _PORT_RE.match(line)
        if m:
            self._port(m, where)
            return
        raise TopoError(where, f"cannot parse {line!r}")

    def _int(self, text: str, where: str) -> int:
        try:
            return int(text.split("(", 1)[0], 0)
        except ValueError:
            raise TopoError(where, f"bad number {text!r}") from None

    def _setting(self, key: str, val: str, where: str) -> None:
        if key in ("switchguid", "caguid", "rtguid"):
            t = {"switchguid": NodeType.SWITCH, "caguid": NodeType.CA,
                 "rtguid": NodeType.ROUTER}[key]
            g = self._int(val, where)
            if not 0 < g < 1 << 64:
                raise TopoError(where, f"{key} {val} out of range")
            self.guid[t] = g
        elif key == "sysimgguid":
            self.sysguid = self._int(val, where)
        elif key == "vendid":
            self.vendid = self._int(val, where) & 0xFFFFFF
        elif key == "devid":
            self.devid = self._int(val, where) & 0xFFFF
        elif key in ("width", "speed", "extspeed"):
            v = self._int(val, where)
            top = {"width": 31, "speed": 7, "extspeed": 15}[key]
            if not (0 if key == "extspeed" else 1) <= v <= top:
                raise TopoError(where, f"{key} {val}: an enable code up to {top}")
            self.net[("width", "speed", "extspeed").index(key)] = v

    def _node(self, m, where: str) -> None:
        t = _TYPES[m.group(1).lower()]
        nports = int(m.group(2))
        nodeid = m.group(3)
        comment = m.group(4) or ""
        d = _DESC_RE.match(comment)
        desc = d.group(1) if d else nodeid
        guid = self.guid[t]
        try:
            node = Node(t, nodeid, nports, guid, desc=desc, sysguid=self.sysguid,
                        vendid=self.vendid, devid=self.devid)
            self.fabric.add_node(node)
        except FabricError as e:
            raise TopoError(where, str(e)) from None
        for p in node.ports:
            if p is not None:
                p.width_en = p.width_sup = self.net[0]
                p.speed_en, p.speed_ext_en = self.net[1], self.net[2]
        self.guid[t] = guid + (1 if t == NodeType.SWITCH else nports + 1)
        self.sysguid = 0
        self.vendid = 0
        if node.is_switch and re.search(r"\benhanced port 0\b", comment):
            node.enhanced_sp0 = True
        lid = _LID_RE.search(comment)
        if lid and node.is_switch:
            node.ports[0].lid = int(lid.group(1))
            lmc = _LMC_RE.search(comment)
            node.ports[0].lmc = int(lmc.group(1)) & 7 if lmc else 0
        self.node = node

    def _port(self, m, where: str) -> None:
        if self.node is None:
            raise TopoError(where, "port line before any Switch/Ca/Hca/Rt record")
        num, rname, rnum = int(m.group(1)), m.group(2), int(m.group(3))
        if not 1 <= num <= self.node.nports:
            raise TopoError(where, f'"{self.node.nodeid}" has ports 1..{self.node.nports}, '
                                   f"not {num}")
        comment = m.group(4) or ""
        width = speed = None            # no comment: the port keeps its enable codes
        lm = _LINK_RE.search(comment)
        if lm:
            width, speed = int(lm.group(1)), lm.group(2).upper()
            if speed == "FDR10":
                speed = "FDR"
            if width not in WIDTH_ENABLED:
                raise TopoError(where, f"link width {width}x: one of {sorted(WIDTH_ENABLED)}")
        lid = _LID_RE.search(comment)
        self.cables.append((where, self.node, num, rname, rnum, width, speed,
                            int(lid.group(1)) if lid else 0))

    def finish(self) -> Fabric:
        f = self.fabric
        links = {}                     # each link, by one end, and the first line naming it
        for where, node, num, rname, rnum, width, speed, lid in self.cables:
            r = f.by_id.get(rname)
            if r is None:
                raise TopoError(where, f'"{node.nodeid}"[{num}] -> unknown node "{rname}"')
            if not 1 <= rnum <= r.nports:
                raise TopoError(where, f'"{rname}" has ports 1..{r.nports}, not {rnum}')
            a, b = node.ports[num], r.ports[rnum]
            if a is b:
                raise TopoError(where, f"{a.name} cabled to itself")
            if (a.remote is not None and a.remote is not b) or \
                    (b.remote is not None and b.remote is not a):
                other = a.remote if a.remote is not None and a.remote is not b else b.remote
                raise TopoError(where, f"{a.name} -> {b.name} conflicts with a link to "
                                       f"{other.name}")
            if width is not None:          # this end's line says it; the other end's its own
                a.set_width_speed(width, speed)
            if lid and not node.is_switch:
                a.lid = lid
            f.connect(a, b, train=False)
            if b not in links:
                links.setdefault(a, where)
        # trained once both ends' lines have set their enable codes, as ibsim does
        for a, where in links.items():
            try:
                a.train()
            except FabricError as e:
                raise TopoError(where, str(e)) from None
        if not f.nodes:
            raise TopoError("topology", "no nodes")
        return f


def load(path: str) -> Fabric:
    """Parse a .net file (and its includes) into a fresh Fabric."""
    p = _Parser()
    p.parse_file(path)
    return p.finish()


def loads(text: str, name: str = "<text>") -> Fabric:
    p = _Parser()
    for i, line in enumerate(text.splitlines(), 1):
        p.parse_line(line, f"{name}:{i}")
    return p.finish()


def _link_text(p) -> str:
    from .model import WIDTH_ENABLED as W
    width = {v: k for k, v in W.items()}.get(p.width_en, 4)
    ext = p.speed_ext_en
    speed = ("NDR" if ext & 8 else "HDR" if ext & 4 else "EDR" if ext & 2 else "FDR" if ext & 1
             else "QDR" if p.speed_en & 4 else "DDR" if p.speed_en & 2 else "SDR")
    return f"{width}x{speed}"


def dumps(fabric: Fabric) -> str:
    """The .net text of a fabric: explicit GUIDs, both ends of every link."""
    out = [f"# softrdma fabric: {len(fabric.nodes)} nodes\n"]
    for n in fabric.nodes:
        key = {NodeType.SWITCH: "switchguid", NodeType.CA: "caguid",
               NodeType.ROUTER: "rtguid"}[n.type]
        out.append(f"{key}=0x{n.guid:016x}\n")
        if n.sysguid != n.guid:
            out.append(f"sysimgguid=0x{n.sysguid:016x}\n")
        if n.vendid:
            out.append(f"vendid=0x{n.vendid:x}\n")
        desc = f'\t# "{n.desc}"' if n.desc != n.nodeid else ""
        if n.is_switch and n.enhanced_sp0:
            desc = (desc or "\t#") + " enhanced port 0"
        out.append(f'{_TYPE_NAME[n.type]}\t{n.nports} "{n.nodeid}"{desc}\n')
        for p in n.external_ports():
            if p.remote is not None:
                r = p.remote
                out.append(f'[{p.num}]\t"{r.node.nodeid}"[{r.num}]\t\t# lid 0 {_link_text(p)}\n')
        out.append("\n")
    return "".join(out)


def dump(fabric: Fabric, path: str) -> None:
    with open(path, "w") as f:
        f.write(dumps(fabric))
