"""libibnetdisc's fabric discovery (ibnetdisc.c, query_smp.c), by
directed-route SMPs from the own port.

The SMP engine is a FIFO: every query goes to the tail, answers are
handled in request order (ibsim answers in order, so the real engine's
order is this one), and a handler queues the follow-ups: NodeInfo -> (new
node) NodeDesc, SwitchInfo and PortInfo of port 0 -> PortInfo of every
port -> NodeInfo through every LinkUp port that is not the one the SMP
came in on.  Nodes are kept in libibnetdisc's lists (each new node goes
to the head), which is the order ibnetdiscover, iblinkinfo and ibhosts
print them in.  Many SMPs are on the wire at once; the order of handling
does not change.
"""

from __future__ import annotations

from collections import deque

from ...wire import smp
from .rpc import MadPort, PortId

NODE_CA, NODE_SWITCH, NODE_ROUTER = 1, 2, 3


class Port:
    __slots__ = ("node", "portnum", "guid", "info", "pi", "base_lid", "lmc", "remoteport",
                 "ext_portnum")

    def __init__(self, node, portnum):
        self.node = node
        self.portnum = portnum
        self.guid = 0
        self.info = bytes(64)
        self.pi = None
        self.base_lid = 0
        self.lmc = 0
        self.remoteport = None
        self.ext_portnum = 0


class Node:
    def __init__(self, info: bytes, path: PortId):
        self.info = bytes(info[:64])
        self.ni = smp.NODE_INFO.decode(self.info)
        self.guid = self.ni["Guid"]
        self.type = self.ni["NodeType"]
        self.numports = self.ni["NumPorts"]
        self.ports: list[Port | None] = [None] * (self.numports + 1)
        self.path = path
        self.nodedesc = ""
        self.switchinfo = None
        self.smaenhsp0 = 0
        self.smalid = 0
        self.smalmc = 0


class Fabric:
    def __init__(self):
        self.nodes: list[Node] = []          # in creation order
        self.by_guid: dict[int, Node] = {}
        self.from_node: Node | None = None
        self.from_portnum = 0
        self.maxhops_discovered = 0
        self.total_mads_used = 0

    def iter_nodes(self):
        """ibnd_iter_nodes(): newest first."""
        return reversed(self.nodes)

    def iter_type(self, t: int):
        """ibnd_iter_nodes_type()"""
        return (n for n in reversed(self.nodes) if n.type == t)

    def find_port_guid(self, guid: int):
        for n in self.nodes:
            for p in n.ports:
                if p is not None and p.guid == guid:
                    return p
        return None

    def find_port_lid(self, lid: int):
        for n in self.nodes:
            for p in n.ports:
                if p is not None and p.base_lid and p.base_lid <= lid < p.base_lid + (1 << p.lmc):
                    return p
        return None


def port_speed(port: Port):
    """(width, speed, espeed) as ibnetdiscover and iblinkinfo read them:
    the extended speed only if the node's (switch: port 0's) CapMask says so."""
    pi = port.pi or smp.PORT_INFO.decode(port.info)
    node = port.node
    if node.type == NODE_SWITCH:
        p0 = node.ports[0]
        cap = (p0.pi or smp.PORT_INFO.decode(p0.info))["CapMask"] if p0 else None
    else:
        cap = pi["CapMask"]
    if cap is None:
        return 0, 0, 0
    esp = pi["LinkSpeedExtActive"] if cap & smp.CAP_IS_EXTENDED_SPEEDS_SUPPORTED else 0
    return pi["LinkWidthActive"], pi["LinkSpeedActive"], esp


class _Engine:
    def __init__(self, mad: MadPort, fabric: Fabric, max_hops: int = 0, window: int = 16):
        self.mad = mad
        self.f = fabric
        self.max_hops = max_hops
        self.window = window
        self.queue: deque = deque()
        self.initial_hops = 0

    def issue(self, portid: PortId, attr: int, mod: int, cb, data=None):
        self.queue.append((portid, attr, mod, cb, data))

    def run(self):
        inflight: deque = deque()         # (entry, tid)
        while self.queue or inflight:
            while self.queue and len(inflight) < self.window:
                e = self.queue.popleft()
                inflight.append((e, self.mad.smp_request(e[0], e[1], e[2])))
            # hand the answers back in request order: take a batch of the oldest
            batch = list(inflight)
            inflight.clear()
            answers = self.mad.rpc_many([r for _e, r in batch], window=self.window)
            self.f.total_mads_used += len(batch)
            for (e, _r), mad in zip(batch, answers):
                if mad is None:
                    continue
                st = int.from_bytes(mad[4:6], "big") & 0x7FFF
                if st:
                    continue
                portid, _attr, mod, cb, data = e
                cb(portid, mod, mad[64:128], data)

    # --- the handlers (recv_* of ibnetdisc.c) ---------------------------------------
    def query_node_info(self, portid, cbdata=None):
        self.issue(portid, smp.SmpAttr.NODE_INFO, 0, self.recv_node_info, cbdata)

    def extend(self, portid: PortId, port: int):
        if self.max_hops and self.f.maxhops_discovered > self.max_hops:
            return None
        p = portid.extend(port, self.mad.lid)
        if len(p.path) > 63:
            return None
        if len(p.path) - self.initial_hops > self.f.maxhops_discovered:
            self.f.maxhops_discovered += 1
        return p

    def recv_node_info(self, portid, _mod, data, cbdata):
        f = self.f
        ni = smp.NODE_INFO.decode(data)
        node = f.by_guid.get(ni["Guid"])
        new = node is None
        if new:
            node = Node(data, portid)
            f.by_guid[node.guid] = node
            f.nodes.append(node)
        port_num = ni["LocalPort"]
        if port_num > node.numports:
            return
        port = node.ports[port_num]
        if port is None:
            port = node.ports[port_num] = Port(node, port_num)
        port.guid = ni["PortGuid"]
        if cbdata is None:
            f.from_node = node
            f.from_portnum = port_num
        else:
            rnode, rport_num = cbdata
            rport = rnode.ports[rport_num]
            if rport is None:
                return
            if port.remoteport is not None:
                port.remoteport.remoteport = None
            if rport.remoteport is not None:
                rport.remoteport.remoteport = None
            port.remoteport = rport
            rport.remoteport = port
        if new:
            self.issue(portid, smp.SmpAttr.NODE_DESC, 0, self.recv_node_desc, node)
            if node.type == NODE_SWITCH:
                self.issue(portid, smp.SmpAttr.SWITCH_INFO, 0, self.recv_switch_info, node)
                self.issue(portid, smp.SmpAttr.PORT_INFO, 0, self.recv_port0_info, node)
        if node.type != NODE_SWITCH:
            self.issue(portid, smp.SmpAttr.PORT_INFO, port_num, self.recv_port_info, node)

    def recv_node_desc(self, _portid, _mod, data, node):
        node.nodedesc = smp.decode_node_desc(data)

    def recv_switch_info(self, _portid, _mod, data, node):
        node.switchinfo = bytes(data[:64])
        node.smaenhsp0 = smp.SWITCH_INFO.get(node.switchinfo, "EnhancedPort0")

    def recv_port0_info(self, portid, mod, data, node):
        self.recv_port_info(portid, mod, data, node)
        for i in range(1, node.numports + 1):
            self.issue(portid, smp.SmpAttr.PORT_INFO, i, self.recv_port_info, node)

    def recv_port_info(self, portid, mod, data, node):
        port_num = mod & 0xFF
        if port_num > node.numports:
            return
        pi = smp.PORT_INFO.decode(data)
        port = node.ports[port_num]
        if port is None:
            port = node.ports[port_num] = Port(node, port_num)
            port.guid = node.ni["PortGuid"]
        port.info = bytes(data[:64])
        port.pi = pi
        port.base_lid = pi["Lid"]
        port.lmc = pi["LMC"]
        if port_num == 0:
            node.smalid, node.smalmc = port.base_lid, port.lmc
        elif node.type == NODE_SWITCH:
            port.base_lid, port.lmc = node.smalid, node.smalmc
        f = self.f
        if port_num and pi["PhysLinkState"] == smp.PhysState.LINK_UP and (
                (node.type == NODE_SWITCH and port_num != pi["LocalPort"])
                or (node is f.from_node and port_num == f.from_portnum)):
            if node.type != NODE_SWITCH and node is f.from_node and portid.path \
                    and len(portid.path) > 1:
                return          # retract_dpath: partial scans from a CA, not done here
            if portid.lid == 0 or node.type == NODE_SWITCH:
                p = self.extend(portid, port_num)
                if p is not None:
                    self.query_node_info(p, (node, port_num))


def discover(mad: MadPort, start: PortId | None = None, max_hops: int = 0) -> Fabric:
    """ibnd_discover_fabric(): from the own port (or ``start``)."""
    f = Fabric()
    eng = _Engine(mad, f, max_hops)
    start = start or PortId(0, ())
    eng.initial_hops = len(start.path or ())
    eng.query_node_info(start)
    eng.run()
    f.maxhops_discovered += eng.initial_hops
    return f
