"""The fabric as data: nodes, ports, links and the state the SM programs.

Owns what an InfiniBand subnet *is* at one instant, with no I/O and no
clock: CAs, routers and switches (node GUID, port GUIDs, NodeDescription,
vendor/device IDs), their ports (the IBA logical state machine
Down/Init/Armed/Active and the physical states Polling/LinkUp/Disabled,
LID/LMC, SM LID, width and speed, MTU and VL capabilities, P_Key table,
SL→VL and VL arbitration tables), the links between ports, and per switch
the linear and multicast forwarding tables and SwitchInfo.  PortCounters /
PortCountersExtended live here too; route.py bumps them as it forwards.

For the data plane (dataplane.py, datasock.py) the fabric also keeps a
change ``generation`` and the ``dirty`` ports (``Fabric.touch``: an SM's
Set, a link event), the CA ports with an IB device attached (``devices``)
and each switch port's partition enforcement bits.

Per-port state is kept compact (``__slots__``; tables that the SM rarely
sets are ``None`` until it does), so a fabric of thousands of hosts costs
a few hundred bytes a port.  The SMA and PMA (agents.py) read and change
this state; route.py walks it.
"""

from __future__ import annotations

from array import array

from ..wire.smp import LINK_SPEED, WIDTH_CODE, NodeType, PhysState, PortState

# LinkWidthEnabled for a port described as "<n>x" in a .net file (ibsim's
# choices: a 4x port also trains at 1x, a 12x port at 4x and 1x, and so on).
WIDTH_ENABLED = {1: 0x01, 2: 0x10, 4: 0x03, 8: 0x04, 12: 0x0B}
DEFAULT_WIDTH = 4
DEFAULT_SPEED = "QDR"
# A port that no .net link line describes (a switch's port 0, an unconnected
# port): ibsim's net defaults, LinkWidthEnabled 4X, LinkSpeedEnabled SDR,
# no extended speed; active 4X SDR until a link trains.
NET_WIDTH_ENABLED = 0x02
NET_SPEED_ENABLED = 0x01
# What every port reports as supported (ibsim: 1X/2X/4X/8X/12X, SDR/DDR/QDR,
# and FDR/EDR/HDR when the link runs at an extended speed)
WIDTH_SUPPORTED = 0x1F
SPEED_SUPPORTED = 0x07
SPEED_EXT_SUPPORTED = 0x07

DEFAULT_PKEY = 0xFFFF
CA_PARTITION_CAP = 64          # NodeInfo.PartitionCap of a CA
SWITCH_PARTITION_CAP = 8       # NodeInfo.PartitionCap of switch port 0
SWITCH_PART_ENFORCE_CAP = 64   # SwitchInfo.PartitionEnforcementCap (external ports)
LINEAR_FDB_CAP = 30 * 1024     # ibsim's default LinearFDBCap (unicast LIDs 0..30719)
MCAST_FDB_CAP = 1024
MCAST_LID_BASE = 0xC000
NODE_REVISION = 0xA1           # NodeInfo.Revision of every node (ibsim's)
GUID_CAP = 32                  # PortInfo.GUIDCap of a CA port: 4 GUIDInfo blocks
VL_CAP = 4                     # VL0..VL7
MTU_CAP = 4                    # 2048
VLARB_CAP = 8                  # high and low tables, 8 entries each
DEFAULT_SL2VL = bytes((0x01, 0x23, 0x45, 0x67, 0x89, 0xAB, 0xCD, 0xE7))
_UNSET = 0xFF                  # LFT entry: no route

# PortInfo.CapabilityMask a port advertises (IsSM is added by the server for
# a port with an SM attached), as ibsim's port kinds do: a CA port traps,
# maps SLs, has extended speeds, CapMask2, VendorClass and CapMaskNotice
# (the last only once cabled); a switch's port 0 the first four; a switch's
# external ports nothing (their CapabilityMask is reserved).
CA_CAPMASK = 0x0050C048
CA_CAPMASK_UNCABLED = 0x0010C048
SWITCH_CAPMASK = 0x0000C048
CAPMASK2 = 0x30                # IsLinkWidth2xSupported, IsLinkSpeedHDRSupported

# PortCounters slots (index into Port.pc)
PC_XMIT_DATA, PC_RCV_DATA, PC_XMIT_PKTS, PC_RCV_PKTS, PC_XMIT_DISCARDS, \
    PC_RCV_ERRORS, PC_RCV_SW_RELAY_ERRORS, PC_LINK_DOWNED, PC_SYMBOL_ERRORS, \
    PC_VL15_DROPPED, PC_XMIT_WAIT, PC_MCAST_XMIT, PC_MCAST_RCV, PC_RCV_CONSTRAINT, \
    PC_XMIT_CONSTRAINT = range(15)
PC_COUNT = 15
_ZERO_COUNTERS = bytes(8 * PC_COUNT)

# Port.part_enforce bits: PortInfo.PartitionEnforcementInbound / Outbound
PART_ENFORCE_IN = 1
PART_ENFORCE_OUT = 2


class FabricError(ValueError):
    """A request the model cannot carry out (unknown node, bad port, ...)."""


class Port:
    """One port: a switch's port 0 (its SMA) or an external port."""

    __slots__ = ("node", "num", "guid", "remote", "lid", "lmc", "smlid", "smsl", "state",
                 "phys", "link_down_def", "width_en", "width_sup", "speed_en", "speed_ext_en",
                 "mtu_cap", "neighbor_mtu", "vl_cap", "oper_vls", "vl_high_limit", "hoqlife",
                 "vl_stall", "subnet_timeout", "resp_time", "mkey", "mkey_lease", "protect",
                 "gid_prefix", "capmask", "client_rereg", "pkeys", "vlarb", "guids", "pc",
                 "err_rate", "err_attr", "has_sm", "width_act", "speed_act", "speed_ext_act",
                 "part_enforce", "vports", "rereg_sup")

    def __init__(self, node: "Node", num: int, guid: int):
        self.node = node
        self.num = num
        self.guid = guid
        self.remote: Port | None = None
        self.lid = 0
        self.lmc = 0
        self.smlid = 0
        self.smsl = 0
        self.state = PortState.DOWN
        self.phys = PhysState.POLLING
        self.link_down_def = PhysState.POLLING
        self.width_en = self.width_sup = NET_WIDTH_ENABLED
        self.speed_en, self.speed_ext_en = NET_SPEED_ENABLED, 0
        self.width_act, self.speed_act, self.speed_ext_act = 0x02, 0x01, 0   # 4X SDR
        self.mtu_cap = MTU_CAP
        self.neighbor_mtu = MTU_CAP
        self.vl_cap = VL_CAP
        self.oper_vls = VL_CAP         # ibsim starts OperVLs at VLCap
        self.vl_high_limit = 0
        self.hoqlife = 0
        self.vl_stall = 7
        self.subnet_timeout = 0
        self.resp_time = 0
        self.mkey = 0
        self.mkey_lease = 0
        self.protect = 0
        self.gid_prefix = 0            # until the SM sets the subnet prefix
        self.capmask = SWITCH_CAPMASK if node.is_switch else CA_CAPMASK
        # ClientReregister: set by an SM's PortInfo Set, pending until the attached
        # device is told (one PORT_INFO carries it); rereg_sup: the attached
        # device supports it (its CapabilityMask.IsClientReregistrationSupported)
        self.client_rereg = 0
        self.rereg_sup = False
        self.pkeys = None          # None: [0xFFFF, 0, ...]; else a list of the full table
        self.vlarb = None          # None: defaults; else {block 1..4: 64 bytes}
        self.guids = None          # None: only the port GUID; else {index: guid}
        self.pc = None             # None: all counters zero; else PC_COUNT of them (counters())
        self.err_rate = 0          # % of SMA/PMA-bound MADs dropped (the `error` command)
        self.err_attr = 0
        self.has_sm = False
        self.part_enforce = 0      # PART_ENFORCE_* (switch external ports check BTH P_Keys)
        self.vports = None         # a CA port's virtual ports (agents.VPortTable), once its HCA has some

    def set_width_speed(self, width: int, speed: str) -> None:
        try:
            self.width_en = WIDTH_ENABLED[width]
            self.speed_en, self.speed_ext_en = LINK_SPEED[speed.upper()]
        except KeyError:
            raise FabricError(f"bad link {width}x{speed}: width 1/2/4/8/12, speed "
                              f"{'/'.join(LINK_SPEED)}") from None
        self.width_sup = self.width_en
        # a port enables every lower speed too: SDR | DDR | QDR, FDR | EDR | HDR
        self.speed_en = (self.speed_en << 1) - 1
        self.speed_ext_en = (self.speed_ext_en << 1) - 1 if self.speed_ext_en else 0

    # --- what the port negotiates with its neighbour --------------------------------
    def mismatch(self) -> str | None:
        """Why the link to the neighbour cannot train -- no width or no speed
        both ends enable (ibsim's words) -- or None."""
        r = self.remote
        if r is None:
            return None
        for what, mine, theirs in (("width", self.width_en, r.width_en),
                                   ("speed", self.speed_en, r.speed_en)):
            if not mine & theirs:
                return (f"mismatched enabled {what} between {self.name} ({mine}) and "
                        f"{r.name} ({theirs})")
        return None

    def train(self) -> None:
        """Set the active width and speeds of this port and its neighbour to
        the best both enable, as link training does (ibsim keeps them when the
        link goes down again); FabricError when they enable none in common
        (``mismatch``: ibsim stops there)."""
        r = self.remote
        if r is None:
            return
        why = self.mismatch()
        if why is not None:
            raise FabricError(why)
        w, s, e = self.width_en & r.width_en, self.speed_en & r.speed_en, \
            self.speed_ext_en & r.speed_ext_en
        width = next((c for c in (8, 4, 2, 16, 1) if w & c), 0)    # 12x 8x 4x 2x 1x
        speed = 4 if s & 4 else 2 if s & 2 else 1
        ext = next((c for c in (8, 4, 2, 1) if e & c), 0)          # NDR HDR EDR FDR
        for q in (self, r):
            q.width_act, q.speed_act, q.speed_ext_act = width, speed, ext

    @property
    def width_active(self) -> int:
        return self.width_act

    @property
    def speed_active(self) -> tuple[int, int]:
        return self.speed_act, self.speed_ext_act

    @property
    def lanes(self) -> int:
        return {v: k for k, v in WIDTH_CODE.items()}.get(self.width_active, 0)

    def has_lid(self, lid: int) -> bool:
        base = self.lid
        if base != 0 and base <= lid < base + (1 << self.lmc):
            return True
        v = self.vports                 # a vport's own LID (virtualization enabled) is the port's too
        return v is not None and lid in v.lids

    @property
    def name(self) -> str:
        return f'"{self.node.nodeid}"[{self.num}]'

    def counters(self) -> array:
        if self.pc is None:
            # 64-bit slots, not a list of ints: counting a hop (route.py, the compiled
            # _smpfast) then changes a number in place rather than allocating one
            self.pc = array("Q", _ZERO_COUNTERS)
        return self.pc

    def __repr__(self):
        return f"<Port {self.name} lid {self.lid} {PortState(self.state).name}>"


class Node:
    """A CA, router or switch.  ``ports[0]`` is a switch's SMA port and is
    ``None`` on a CA, whose ports are 1..N."""

    __slots__ = ("type", "is_switch", "nodeid", "desc", "guid", "sysguid", "vendid", "devid", "revision",
                 "nports", "ports", "lft", "lft_top", "mft", "mft_top", "lifetime",
                 "state_change", "sl2vl", "index", "node_info_cache",
                 "enhanced_sp0")

    def __init__(self, type_: int, nodeid: str, nports: int, guid: int, *, desc: str = "",
                 sysguid: int = 0, vendid: int = 0, devid: int = 0, revision: int = 0):
        if not 1 <= nports <= 254:
            raise FabricError(f"node {nodeid!r}: {nports} ports (1..254)")
        self.type = type_
        # a plain attribute, not a property: the SMA asks it several times per MAD
        self.is_switch = type_ == NodeType.SWITCH
        self.nodeid = nodeid
        self.desc = desc or nodeid
        self.guid = guid
        self.sysguid = sysguid or guid
        self.vendid = vendid
        self.devid = devid
        self.revision = revision or NODE_REVISION
        self.nports = nports
        self.index = 0
        self.node_info_cache: dict[int, bytes] = {}    # arrival port -> NodeInfo (agents)
        self.enhanced_sp0 = False  # switch: enhanced port 0 (SwitchInfo.EnhancedPort0; takes an LMC)
        self.sl2vl = None          # None: defaults; else {(in, out) or out: 8 bytes}
        if type_ == NodeType.SWITCH:
            self.lft = bytearray()         # grown on Set up to LINEAR_FDB_CAP
            self.lft_top = 0
            self.mft = None                # None: empty; else {mlid index: port mask}
            self.mft_top = 0
            self.lifetime = 0
            self.state_change = 0
            self.ports = [Port(self, i, guid) for i in range(nports + 1)]
            p0 = self.ports[0]
            p0.phys = PhysState.LINK_UP    # port 0 is internal: always up and Active (ibsim)
            p0.state = PortState.ACTIVE
        else:
            self.lft = self.mft = None
            self.lft_top = self.mft_top = self.lifetime = self.state_change = 0
            self.ports = [None] + [Port(self, i, guid + i) for i in range(1, nports + 1)]

    def port(self, num: int) -> Port:
        if not (0 if self.is_switch else 1) <= num <= self.nports:
            raise FabricError(f'"{self.nodeid}" has no port {num}')
        return self.ports[num]

    def external_ports(self):
        return self.ports[1:]

    @property
    def partition_cap(self) -> int:
        return SWITCH_PARTITION_CAP if self.is_switch else CA_PARTITION_CAP

    def pkey_cap(self, port: Port) -> int:
        return SWITCH_PART_ENFORCE_CAP if self.is_switch and port.num else self.partition_cap

    def lft_get(self, lid: int) -> int:
        return self.lft[lid] if lid < len(self.lft) else _UNSET

    def __repr__(self):
        return f"<{NodeType(self.type).name} {self.nodeid!r} guid {self.guid:#018x}>"


class Fabric:
    """All nodes by nodeid and GUID, and the links.  The default attach point
    of clients is the first node added (ibsim's rule)."""

    def __init__(self):
        self.nodes: list[Node] = []
        self.by_id: dict[str, Node] = {}
        self.by_guid: dict[int, Node] = {}
        self.by_desc: dict[str, Node] = {}
        self.commands: list[tuple[str, str]] = []   # a .net file's `do` lines: (where, command)
        # change notification for the data plane: ``generation`` grows on every
        # change that can alter a route (an SM Set, a link event); ``dirty`` holds
        # the ports with a device whose PortInfo/P_Key table/GUIDInfo may have
        # changed since the server last drained it
        self.generation = 0
        self.dirty: set[Port] = set()
        # CA ports with an IB device attached (the data socket's): port -> device name
        self.devices: dict[Port, str] = {}

    def add_node(self, node: Node) -> Node:
        if node.nodeid in self.by_id:
            raise FabricError(f"node {node.nodeid!r} defined twice")
        if node.guid in self.by_guid:
            raise FabricError(f"node {node.nodeid!r}: GUID {node.guid:#x} already used by "
                              f"{self.by_guid[node.guid].nodeid!r}")
        node.index = len(self.nodes)
        self.nodes.append(node)
        self.by_id[node.nodeid] = node
        self.by_guid[node.guid] = node
        self.by_desc.setdefault(node.desc, node)
        return node

    def touch(self, *ports: Port) -> None:
        """Something about ``ports`` changed: routes are stale, their
        attributes are to be pushed to attached devices (only a port with a
        device is kept in ``dirty``: an SM's sweep touches a switch's every
        port and their neighbours with each Set)."""
        self.generation += 1
        devices = self.devices
        if devices:
            self.dirty.update(p for p in ports if p in devices)

    def node(self, name: str) -> Node:
        """By nodeid, then NodeDescription, then GUID (0x... text)."""
        n = self.by_id.get(name) or self.by_desc.get(name)
        if n is None and name.lower().startswith("0x"):
            try:
                n = self.by_guid.get(int(name, 16))
            except ValueError:
                n = None
        if n is None:
            raise FabricError(f"no node {name!r}")
        return n

    @property
    def default_port(self) -> Port:
        if not self.nodes:
            raise FabricError("empty fabric")
        n = self.nodes[0]
        return n.ports[0] if n.is_switch else n.ports[1]

    def connect(self, a: Port, b: Port, train: bool = True) -> None:
        """Cable a and b: both physically up and logically Init, as after link
        training with no SM yet (``train=False``: the caller trains the link,
        ``Port.train``, once both ends' enable codes are known)."""
        for p in (a, b):
            if p.num == 0 and p.node.is_switch:
                raise FabricError(f"{p.name}: switch port 0 cannot be cabled")
        if a.remote is not None and a.remote is not b:
            raise FabricError(f"{a.name} already linked to {a.remote.name}")
        if b.remote is not None and b.remote is not a:
            raise FabricError(f"{b.name} already linked to {b.remote.name}")
        a.remote, b.remote = b, a
        for p in (a, b):
            p.phys = PhysState.LINK_UP
            p.state = PortState.INIT
            if p.node.is_switch:
                p.node.state_change = 1
        if train:
            a.train()

    def ports(self):
        for n in self.nodes:
            for p in n.ports:
                if p is not None:
                    yield p

    def links(self):
        """Each link once, as (port, remote port)."""
        for n in self.nodes:
            for p in n.ports:
                if p is not None and p.remote is not None and \
                        (p.node.index, p.num) < (p.remote.node.index, p.remote.num):
                    yield p, p.remote

    def stats(self) -> dict:
        sw = sum(1 for n in self.nodes if n.is_switch)
        return dict(nodes=len(self.nodes), switches=sw, cas=len(self.nodes) - sw,
                    ports=sum(1 for _ in self.ports()), links=sum(1 for _ in self.links()))
