"""The subnet as the SM knows it (opensm's osm_subn_t): nodes, physical ports, links, LIDs.

Built by discovery (or, in tests, from a topology file); read by the LID
manager and the routing engines.  Iteration orders matter for matching
opensm byte for byte: opensm keeps nodes, switches and end ports in
``cl_qmap``s keyed by the GUID *in network byte order* read as a host
(little-endian) integer, so its "GUID order" is the order of the
byte-swapped GUID.  ``net_key`` gives that key; ``Subnet.switches()`` and
``Subnet.end_ports()`` iterate in it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

NODE_CA = 1
NODE_SWITCH = 2
NODE_ROUTER = 3

#: ib_get_node_type_str()
NODE_TYPE_STR = {NODE_CA: "Channel Adapter", NODE_SWITCH: "Switch", NODE_ROUTER: "Router"}

NO_PATH = 0xFF          # OSM_NO_PATH: LFT entry / hop count meaning "unreachable"


def net_key(guid: int) -> int:
    """opensm's cl_qmap key of a GUID: its big-endian bytes read little-endian."""
    return int.from_bytes(guid.to_bytes(8, "big"), "little")


@dataclass(eq=False)
class Physp:
    """A physical port (osm_physp_t).  Switch port 0 is the management port."""
    node: "Node" = field(repr=False)
    num: int
    guid: int
    remote: "Physp | None" = field(default=None, repr=False)
    lid: int = 0            # base LID (CA ports, switch port 0)
    lmc: int = 0
    state: int = 0          # PortInfo PortState (1 Down, 2 Init, 3 Armed, 4 Active)
    phys_state: int = 0
    port_info: bytes = field(default=b"", repr=False)  # last PortInfo seen (raw 64 bytes)

    def healthy(self) -> bool:
        return True


@dataclass(eq=False)
class Node:
    """A node (osm_node_t): NodeInfo, NodeDescription and its physical ports."""
    guid: int
    type: int
    num_ports: int          # NodeInfo.NumPorts (physical ports, port 0 not counted)
    desc: str = ""
    sys_guid: int = 0
    ports: dict[int, Physp] = field(default_factory=dict, repr=False)
    # switches: SwitchInfo (raw) and the LFT the SM last computed (new_lft)
    switch_info: bytes = field(default=b"", repr=False)
    lft_cap: int = 0
    dr_path: tuple[int, ...] = ()   # directed route from the SM's node (output ports)
    node_info: bytes = field(default=b"", repr=False)   # NodeInfo as first read (raw 40 bytes)

    @property
    def is_switch(self) -> bool:
        return self.type == NODE_SWITCH

    def base_lid(self) -> int:
        """osm_node_get_base_lid(node, 0): switch port 0's LID, or port 1's for a CA."""
        p = self.ports.get(0) if self.is_switch else self.ports.get(1)
        return p.lid if p else 0

    def remote(self, port: int) -> "Physp | None":
        p = self.ports.get(port)
        return p.remote if p else None


class Subnet:
    """Nodes by GUID, end ports by port GUID, end ports by LID."""

    def __init__(self) -> None:
        self.nodes: dict[int, Node] = {}
        self.ports: dict[int, Physp] = {}       # end ports (osm_port_t): CA ports, switch port 0
        self.sm_port_guid = 0
        self.sm_node: Node | None = None
        self.lfts: dict[Node, bytes] = {}       # the LFTs the SM computed last
        self.lmc = 0                            # the SM's LMC (opensm's opt.lmc), set by the LID manager
        self.lid_top = 0                        # highest LID ever in opensm's port_lid_tbl (lid_mgr)
        self.out_of_lids: list[Physp] = []      # ports the LID manager found no range for
        # set by pkey_setup: the partitions and every port's P_Key table (pkey_mgr.Tables)
        self.partitions = None
        self.pkey_tables = None
        self.allow_both_pkeys = False
        self.qos_policy = None                  # qos_policy.Policy (with -Q and a policy file)
        self.qos_tables = None                  # qos.QosSetup's: (node GUID, port) -> PortQos

    def add_node(self, node: Node) -> Node:
        self.nodes[node.guid] = node
        return node

    def add_port(self, node: Node, num: int, guid: int) -> Physp:
        p = Physp(node, num, guid)
        node.ports[num] = p
        if num == 0 or not node.is_switch:
            self.ports[guid] = p
        return p

    @staticmethod
    def link(a: Physp, b: Physp) -> None:
        a.remote, b.remote = b, a

    def switches(self) -> list[Node]:
        return sorted((n for n in self.nodes.values() if n.is_switch), key=lambda n: net_key(n.guid))

    def end_ports(self) -> list[Physp]:
        return [self.ports[g] for g in sorted(self.ports, key=net_key)]

    def port_by_lid(self) -> dict[int, Physp]:
        out = {}
        for p in self.ports.values():
            if p.lid:
                for lid in range(p.lid, p.lid + (1 << p.lmc)):
                    out[lid] = p
        return out

    def max_lid(self) -> int:
        """The top of opensm's port_lid_tbl: the last LID of any range, or any LID a port
        reported before the LID manager ran (``lid_top``; opensm's table never shrinks)."""
        return max(self.lid_top,
                   max((p.lid + (1 << p.lmc) - 1 for p in self.ports.values() if p.lid), default=0))
