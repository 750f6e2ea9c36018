"""QoS (opensm's osm_qos.c): SL-to-VL mapping and VL arbitration tables, with -Q.

``QosOptions`` are opensm.conf's qos_max_vls, qos_high_limit, qos_vlarb_high,
qos_vlarb_low and qos_sl2vl, each also with a qos_ca_, qos_sw0_, qos_swe_ and
qos_rtr_ prefix for CA ports, switch port 0, switch external ports and
routers; what a prefixed option leaves unset comes from the plain one, and
what that leaves unset from opensm's defaults (``build_config``, the strings
read as opensm's parser reads them: ``vl:weight,...`` and ``vl,vl,...``,
missing entries zero).

``QosSetup`` is the QoS phase of a heavy sweep (osm_qos_setup), in the
port GUID order of the end ports: a switch's external ports that are not
Down get the VLArbitration blocks (low, block 1; high, block 3) of their
capacities and, for every input port, the SLtoVLMappingTable of output port
``out`` -- or, with opensm.conf's use_optimized_slvl on a switch whose
SwitchInfo has OptimizedSLtoVLMappingProgramming, one Set for all input and
output ports (attribute modifier 0x30000) and one per output port whose
OperationalVLs differ from most ports' (0x20000), port 0's own table left out
when it is the same; a CA port gets its VLArbitration blocks and its
SLtoVLMappingTable.  VLs are masked to
the port's OperationalVLs (VL15 stays), a table goes only where it differs
from what this SM set last (every table of a port new to it), and the
answers are kept for the SA's SL2VLTableRecord and VLArbitrationTableRecord.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..wire.mad import Method
from ..wire.smp import (NODE_INFO, PORT_INFO, SWITCH_INFO, SmpAttr, build_dr_smp, decode_sl2vl, decode_vlarb,
                        encode_sl2vl, encode_vlarb, smp_data)
from .discovery import dr_status
from .prtn_config import strtoul
from .subnet import NODE_ROUTER, Physp

DEFAULT_MAX_VLS = 15
DEFAULT_HIGH_LIMIT = 0
DEFAULT_VLARB_HIGH = "0:4,1:0,2:0,3:0,4:0,5:0,6:0,7:0,8:0,9:0,10:0,11:0,12:0,13:0,14:0"
DEFAULT_VLARB_LOW = "0:0,1:4,2:4,3:4,4:4,5:4,6:4,7:4,8:4,9:4,10:4,11:4,12:4,13:4,14:4"
DEFAULT_SL2VL = "0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,7"
PREFIXES = ("", "ca_", "sw0_", "swe_", "rtr_")
CAP_HAS_SL_MAP = 0x40
VLARB_BLOCK = 32
LINK_DOWN = 1


@dataclass
class QosOptions:
    """One set of opensm.conf's QoS options (max_vls 0 and high_limit -1: unset)."""
    max_vls: int = 0
    high_limit: int = -1
    vlarb_high: str | None = None
    vlarb_low: str | None = None
    sl2vl: str | None = None


@dataclass
class QosConfig:
    """struct qos_config: what a kind of port is programmed with."""
    max_vls: int
    vl_high_limit: int
    vlarb_high: list[tuple[int, int]]         # 64 (VL, weight): two blocks
    vlarb_low: list[tuple[int, int]]
    sl2vl: list[int]                          # 16 VLs


def _parse_one(text: str) -> tuple[int, str]:
    """parse_one_unsigned: a number, then one delimiter skipped (whatever it is)."""
    v, rest = strtoul(text)
    return v & 0xFFFFFFFF, rest[1:] if rest else rest


def parse_vlarb(text: str) -> list[tuple[int, int]]:
    out = []
    for _ in range(2 * VLARB_BLOCK):
        vl, text = _parse_one(text)
        w, text = _parse_one(text)
        out.append((vl % 15, w & 0xFF))
    return out


def parse_sl2vl(text: str) -> list[int]:
    out = []
    for _ in range(8):
        a, text = _parse_one(text)
        b, text = _parse_one(text)
        raw = ((a << 4) | (b & 0xF)) & 0xFF
        out += [raw >> 4, raw & 0xF]
    return out


def build_config(opt: QosOptions, dflt: QosOptions) -> QosConfig:
    """qos_build_config."""
    def pick(name, default):
        v = getattr(opt, name)
        return v if v is not None else getattr(dflt, name) if getattr(dflt, name) is not None else default
    max_vls = opt.max_vls or dflt.max_vls or DEFAULT_MAX_VLS
    high = opt.high_limit if opt.high_limit >= 0 else dflt.high_limit if dflt.high_limit >= 0 else DEFAULT_HIGH_LIMIT
    return QosConfig(max_vls, high & 0xFF, parse_vlarb(pick("vlarb_high", DEFAULT_VLARB_HIGH)),
                     parse_vlarb(pick("vlarb_low", DEFAULT_VLARB_LOW)), parse_sl2vl(pick("sl2vl", DEFAULT_SL2VL)))


def verify(opts: dict[str, QosOptions], report) -> None:
    """osm_subn_verify_config's QoS part: out-of-range values fall back to the defaults."""
    for prefix, o in opts.items():
        name = "qos" + ("_" + prefix.rstrip("_") if prefix else "")
        if not o.max_vls or o.max_vls > 15:
            if o.max_vls:
                report(f" Invalid Cached Option: {name}_max_vls={o.max_vls}: Using Default = {DEFAULT_MAX_VLS}")
            o.max_vls = 0
        if o.high_limit < 0 or o.high_limit > 255:
            if o.high_limit > 255:
                report(f" Invalid Cached Option: {name}_high_limit={o.high_limit}: Using Default: "
                       f"{DEFAULT_HIGH_LIMIT}")
            o.high_limit = -1


def _vl_mask(p: Physp) -> int:
    op = PORT_INFO.get(p.port_info, "OperVLs")
    return ((1 << (op - 1)) - 1) if op else 0


@dataclass
class PortQos:
    """What this SM set on a port: SL2VL by input port, VLArb by block (opensm's physp copies)."""
    sl2vl: dict[int, list[int]] = field(default_factory=dict)
    vlarb: dict[int, list[tuple[int, int]]] = field(default_factory=dict)


class QosSetup:
    def __init__(self, enabled: bool, opts: dict[str, QosOptions] | None = None,
                 policy_file: str | None = None, optimized: bool = False) -> None:
        self.enabled = enabled
        self.optimized = optimized              # opensm.conf's use_optimized_slvl
        self.policy_file = policy_file
        self.opts = opts or {p: QosOptions() for p in PREFIXES}
        self.ports: dict[tuple[int, int], PortQos] = {}
        self.high_limit: dict[tuple[int, int], int] = {}

    def phases(self, sweep) -> list:
        return [lambda: self._program(sweep)] if self.enabled else []

    def configs(self) -> dict[str, QosConfig]:
        base = self.opts[""]
        return {k: build_config(self.opts[k], base) for k in ("ca_", "sw0_", "swe_", "rtr_")}

    # the SMPs ---------------------------------------------------------------------------
    def _send(self, sweep, p: Physp, attr: int, mod: int, data: bytes, store) -> None:
        def cb(r):
            if r is None or dr_status(r):
                sweep.failed += 1
                sweep.log.error(f"osm_qos_setup: ERR 6201: {attr:#06x} Set on node 0x{p.node.guid:016x} "
                                f"port {p.num} ({p.node.desc}) failed")
                return
            store(smp_data(r))
        sweep.q.post_send(build_dr_smp(Method.SET, attr, p.node.dr_path, mod, data), cb)

    def _vlarb(self, sweep, p: Physp, port_num: int, force: bool, cfg: QosConfig) -> None:
        pi = PORT_INFO.decode(p.port_info)
        if pi["VLCap"] == 1:
            return
        mine = self.ports.setdefault((p.node.guid, p.num), PortQos())
        mask = _vl_mask(p)
        for cap, table, first in ((pi["VLArbLowCap"], cfg.vlarb_low, 0), (pi["VLArbHighCap"], cfg.vlarb_high, 2)):
            for half in (0, 1):
                if half == 0 and cap > 0:
                    n = min(cap, VLARB_BLOCK)
                elif half == 1 and cap > VLARB_BLOCK:
                    n = cap % VLARB_BLOCK
                else:
                    continue
                blk_num = first + half
                entries = [(vl & mask, w) for vl, w in table[half * VLARB_BLOCK:half * VLARB_BLOCK + n]]
                if not force and mine.vlarb.get(blk_num, [])[:n] == entries:
                    continue
                mine.vlarb.pop(blk_num, None)

                def store(data, mine=mine, blk_num=blk_num, n=n):
                    mine.vlarb[blk_num] = list(decode_vlarb(data))
                self._send(sweep, p, SmpAttr.VL_ARB_TABLE, ((blk_num + 1) << 16) | port_num,
                           encode_vlarb(entries), store)

    def _sl2vl(self, sweep, p: Physp, in_port: int, mod: int, force: bool, cfg: QosConfig) -> None:
        """sl2vl_update_table: the table of (in_port, p) unless this SM set it already; the answer
        is kept for every (input, output) pair the attribute modifier names (osm_slvl_rcv_process:
        bit 16 all output ports, bit 17 all input ports)."""
        mask = _vl_mask(p)
        vls = [vl if vl == 15 else vl & mask for vl in cfg.sl2vl]
        mine = self.ports.setdefault((p.node.guid, p.num), PortQos())
        if not force and mine.sl2vl.get(in_port) == vls:
            return
        mine.sl2vl.pop(in_port, None)
        node = p.node
        if node.is_switch and mod & 0x30000:
            first = 0 if node.switch_info and SWITCH_INFO.get(node.switch_info, "EnhancedPort0") else 1
            every = [n for n in range(first, node.num_ports + 1) if n in node.ports]
            outs = every if mod & 0x10000 else [mod & 0xFF]
            ins = every if mod & 0x20000 else [(mod >> 8) & 0xFF]
        else:
            outs, ins = [p.num], [in_port]

        def store(data):
            for o in outs:
                tables = self.ports.setdefault((node.guid, o), PortQos()).sl2vl
                for i in ins:
                    tables[i] = list(decode_sl2vl(data))
        self._send(sweep, p, SmpAttr.SL_TO_VL_TABLE, mod, encode_sl2vl(vls), store)

    def _optimized_sl2vl(self, sweep, node, sw: QosConfig) -> None:
        """qos_extports_setup's use_optimized_slvl path: one SL2VL Set for every input and output
        port (attribute modifier 0x30000) with the table of the ports whose OperationalVLs most
        ports share, then one per output port (all its input ports, 0x20000) whose OperVLs differ."""
        count: dict[int, int] = {}
        best, common, p0 = 0, 0, node.ports.get(1)
        up = []
        for out in range(1, node.num_ports + 1):
            p = node.ports.get(out)
            if p is None or not p.port_info or PORT_INFO.get(p.port_info, "LinkState") == LINK_DOWN:
                continue
            up.append(p)
            op_vl = PORT_INFO.get(p.port_info, "OperVLs")
            count[op_vl] = count.get(op_vl, 0) + 1
            if count[op_vl] > best:
                best, common, p0 = count[op_vl], op_vl, p
        if p0 is None:
            return
        force = not any((node.guid, n) in self.ports for n in node.ports)    # the switch is new
        self._sl2vl(sweep, p0, p0.num, 0x30000, force, sw)
        for p in up:
            force = force or not self.ports.get((node.guid, p.num), PortQos()).sl2vl
            if PORT_INFO.get(p.port_info, "OperVLs") != common:
                self._sl2vl(sweep, p, p.num, 0x20000 | p.num, force, sw)

    def _switch_sl2vl(self, sweep, node, enhanced: bool, sw: QosConfig) -> None:
        """qos_extports_setup: the SL2VL table of every (input, output) pair, one Set each."""
        for out in range(0 if enhanced else 1, node.num_ports + 1):
            p = node.ports.get(out)
            if p is None or not p.port_info or PORT_INFO.get(p.port_info, "LinkState") == LINK_DOWN:
                continue
            force = not self.ports.get((node.guid, out), PortQos()).sl2vl
            for in_ in range(node.num_ports + 1):
                self._sl2vl(sweep, p, in_, (in_ << 8) | out, force, sw)

    def _high_limit(self, sweep, p: Physp, limit: int) -> None:
        """The link manager's part: PortInfo VLHighLimit as QoS says."""
        if not p.port_info or PORT_INFO.get(p.port_info, "VLHighLimit") == limit:
            return
        data = bytearray(p.port_info)
        PORT_INFO.encode_into(data, 0, VLHighLimit=limit, LinkState=0, PhysLinkState=0, LinkDownDefState=0)

        def store(d):
            p.port_info = bytes(d[:PORT_INFO.size])
        self._send(sweep, p, SmpAttr.PORT_INFO, p.num, bytes(data), store)

    def _program(self, sweep) -> None:
        """osm_qos_setup."""
        sweep.phase = "qos"
        sub = sweep.subnet
        from .qos_policy import DEFAULT_QOS_POLICY_FILE, load
        sub.qos_policy = load(self.policy_file or DEFAULT_QOS_POLICY_FILE, sweep.log, sub.partitions, sub)
        cfg = self.configs()
        live = {(n.guid, num) for n in sub.nodes.values() for num in n.ports}
        for k in [k for k in self.ports if k not in live]:
            del self.ports[k]
        for port in sub.end_ports():
            node = port.node
            vlarb_only = False
            if node.is_switch:
                sw = cfg["swe_"]
                p0 = node.ports.get(0)
                for out in range(1, node.num_ports + 1):
                    p = node.ports.get(out)
                    if p is None or not p.port_info or PORT_INFO.get(p.port_info, "LinkState") == LINK_DOWN:
                        continue
                    force = (node.guid, out) not in self.ports
                    self._high_limit(sweep, p, sw.vl_high_limit)
                    self._vlarb(sweep, p, out, force, sw)
                enhanced = bool(node.switch_info and SWITCH_INFO.get(node.switch_info, "EnhancedPort0"))
                opt = self.optimized and bool(node.switch_info and
                                              SWITCH_INFO.get(node.switch_info, "OptSLtoVLMapping") & 1)
                if p0 is not None and p0.port_info and PORT_INFO.get(p0.port_info, "CapMask") & CAP_HAS_SL_MAP:
                    if opt:
                        self._optimized_sl2vl(sweep, node, sw)
                    else:
                        self._switch_sl2vl(sweep, node, enhanced, sw)
                if not enhanced:
                    continue
                c = cfg["sw0_"]
                vlarb_only = opt and sw.sl2vl == c.sl2vl        # port 0's table came with 0x30000
            else:
                c = cfg["rtr_"] if node.type == NODE_ROUTER else cfg["ca_"]
            if not port.port_info:
                continue
            force = (node.guid, port.num) not in self.ports
            self._high_limit(sweep, port, c.vl_high_limit)
            self._vlarb(sweep, port, 0, force, c)
            if not vlarb_only and PORT_INFO.get(port.port_info, "CapMask") & CAP_HAS_SL_MAP:
                self._sl2vl(sweep, port, 0, 0, force or not self.ports[(node.guid, port.num)].sl2vl, c)
        sub.qos_tables = self.ports


__all__ = ["QosOptions", "QosSetup", "NODE_INFO", "build_config", "verify"]
