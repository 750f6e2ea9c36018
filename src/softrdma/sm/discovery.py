"""Heavy-sweep discovery by directed-route SMPs (opensm's node_info/port_info receivers), sans-IO.

Starts at the SM's own node (an empty DR path), then for every node seen
for the first time asks NodeDescription, SwitchInfo (switches) and
PortInfo (every port of a switch; the entry port of a CA), and through every
switch port whose link is up (and the SM's own port) asks NodeInfo one hop
further.  A NodeInfo answer names the node and the port the SMP came in on
(LocalPortNum), which is the far end of the link it crossed: that is how
links are learnt, from both ends.  All requests go through the ``MadAgent``
so many are in flight at once; the traversal order does not matter for the
result (a node's DR path is the earliest in BFS order that reached it,
whatever order the answers came in).
"""

from __future__ import annotations

from ..mgmt.agent import MadAgent
from ..wire.mad import Method
from ..wire.smp import (NODE_INFO, PORT_INFO, SWITCH_INFO, SmpAttr, build_dr_smp, decode_node_desc,
                        parse_dr, smp_data)
from .subnet import NODE_SWITCH, Node, Physp, Subnet

PORT_DOWN = 1


class DiscoveryError(Exception):
    pass


def dr_status(mad: bytes) -> int:
    """The MAD status (bits 0..14 of the DR word; bit 15 is D)."""
    return parse_dr(mad).status


class Discovery:
    def __init__(self, q: MadAgent, log=None) -> None:
        self.q = q
        self.log = log
        self.subnet = Subnet()
        self.errors = 0
        self.done = False
        self.stats = (0, 0, 0.0)        # SMPs sent, timeouts, seconds (set by the driver)

    def _err(self, msg: str) -> None:
        self.errors += 1
        if self.log:
            self.log.error(msg)

    def start(self) -> None:
        self.done = False
        self._node_info((), None)

    def poll(self) -> None:
        """Called by the driver when no SMP is left in flight: discovery is complete."""
        if self.q.idle:
            self.done = True

    def _get(self, attr: int, path, mod: int, cb) -> None:
        self.q.post_send(build_dr_smp(Method.GET, attr, path, mod), cb)

    def _node_info(self, path: tuple[int, ...], via: Physp | None) -> None:
        self._get(SmpAttr.NODE_INFO, path, 0, lambda r: self._on_node_info(path, via, r))

    def _ok(self, r, what: str) -> bool:
        if r is None:
            self._err(f"{what}: timeout")
            return False
        st = dr_status(r)
        if st:
            self._err(f"{what}: MAD status {st:#x}")
            return False
        return True

    def _on_node_info(self, path, via: Physp | None, r) -> None:
        if not self._ok(r, f"NodeInfo via DR path {list(path)}"):
            if not path:
                raise DiscoveryError("cannot read the SM port's own NodeInfo")
            return
        ni = NODE_INFO.decode(smp_data(r))
        guid, entry, port_guid = ni["Guid"], ni["LocalPort"], ni["PortGuid"]
        sub = self.subnet
        node = sub.nodes.get(guid)
        new_node = node is None
        if new_node:
            node = sub.add_node(Node(guid, ni["NodeType"], ni["NumPorts"], sys_guid=ni["SystemGuid"]))
            node.dr_path = path
            node.node_info = bytes(smp_data(r)[:NODE_INFO.size])
            if node.is_switch:
                for n in range(node.num_ports + 1):
                    sub.add_port(node, n, port_guid)
        new_port = entry not in node.ports
        if new_port:
            sub.add_port(node, entry, port_guid)
        if not path:
            sub.sm_node = node
            sub.sm_port_guid = port_guid
        if via is not None:
            here = node.ports[entry]
            if here.remote is None and via.remote is None:
                sub.link(via, here)
        elif path and (len(path), path) < (len(node.dr_path), node.dr_path):
            self._better_path(node, path, entry)
        if new_node:
            self._get(SmpAttr.NODE_DESC, path, 0, lambda r: self._on_node_desc(node, r))
            if node.type == NODE_SWITCH:
                self._get(SmpAttr.SWITCH_INFO, path, 0, lambda r: self._on_switch_info(node, r))
                for n in range(node.num_ports + 1):
                    self._port_info(node, n, entry)
        if not node.is_switch and new_port:
            self._port_info(node, entry, entry)

    def _better_path(self, node: Node, path: tuple[int, ...], entry: int) -> None:
        """A node reached again by a path earlier in BFS order (shorter, or as
        long and smaller port by port) than the one it was first reached by:
        that is the path a FIFO sweep (opensm on ibsim) finds first, so it
        becomes the node's.  Answers can overtake each other here (a window of
        MADs, retries under load); without this the DR paths, and the
        LocalPortNum a switch's port 0 reports through them, would depend on
        timing.  The switch's port 0 is read again through the new path and
        its links are probed from it, so the order settles downstream too."""
        node.dr_path = path
        if node.is_switch:
            self._port_info(node, 0, entry)
            for n, ph in node.ports.items():
                if n and n != entry and ph.state > PORT_DOWN:       # known up (0: its PortInfo is on the way)
                    self._node_info(path + (n,), ph)

    def _port_info(self, node: Node, num: int, entry: int) -> None:
        self._get(SmpAttr.PORT_INFO, node.dr_path, num, lambda r: self._on_port_info(node, num, entry, r))

    def _on_node_desc(self, node: Node, r) -> None:
        if self._ok(r, f"NodeDescription of 0x{node.guid:016x}"):
            node.desc = decode_node_desc(smp_data(r))

    def _on_switch_info(self, node: Node, r) -> None:
        if self._ok(r, f"SwitchInfo of 0x{node.guid:016x}"):
            node.switch_info = bytes(smp_data(r)[:SWITCH_INFO.size])
            node.lft_cap = SWITCH_INFO.get(node.switch_info, "LinearFdbCap")

    def _on_port_info(self, node: Node, num: int, entry: int, r) -> None:
        if not self._ok(r, f"PortInfo of 0x{node.guid:016x} port {num}"):
            return
        raw = bytes(smp_data(r)[:PORT_INFO.size])
        pi = PORT_INFO.decode(raw)
        ph = node.ports[num]
        ph.port_info = raw
        ph.state = pi["LinkState"]
        ph.phys_state = pi["PhysLinkState"]
        if num == 0 or not node.is_switch:
            ph.lid, ph.lmc = pi["Lid"], pi["LMC"]
        if ph.state == PORT_DOWN:
            return
        if node.is_switch and num and num != entry:
            self._node_info(node.dr_path + (num,), ph)
        elif node is self.subnet.sm_node and not node.is_switch:
            # the SM sits on a CA: the fabric starts behind its own port
            self._node_info((num,), ph)
