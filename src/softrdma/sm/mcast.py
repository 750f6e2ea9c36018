"""Multicast groups and their forwarding tables (opensm's osm_mgrp / osm_mcast_mgr), sans-IO.

Owns the groups the SA keeps (``Groups``): MGID → MLID, the group's
MCMemberRecord and its members (port GID → JoinState, ProxyJoin); join and
leave with IBA 15.4.1's rules as opensm applies them (a join needs MGID,
PortGID and JoinState; creating a group also QKey, TClass, P_Key,
FlowLabel and SL; an all-zero MGID gets one assigned; MLIDs from 0xC000
up, the lowest free); the IPoIB broadcast group opensm creates for the
default partition at start (well known, never deleted).

``mft(subnet, groups, port_of)`` spans every group with members (a member
joined under an alias or vport GUID: at its port) by a tree of the
switches: the root is the switch nearest the members' switches (fewest hops
in total, then to the farthest, then the lowest GUID key), the tree the BFS tree of
shortest paths from it (ports tried in ascending order), pruned to the
branches that lead to members.  A switch's port mask holds its tree ports
(towards the root and towards its children) and its member CA ports, so a
packet from any member reaches every other member once.  ``mft_smps``
turns the tables into MulticastForwardingTable Set SMPs for the blocks
that changed since the last run.
"""

from __future__ import annotations

from collections import deque

from ..wire.mad import Method
from ..wire.sa import (MCMEMBER_RECORD, MCR_COMP, SA_STATUS_INSUFFICIENT_COMPONENTS, SA_STATUS_NO_RESOURCES,
                       SA_STATUS_REQ_INVALID)
from ..wire.smp import MFT_BLOCK, SmpAttr, build_dr_smp, encode_mft, mft_attr_mod
from .subnet import Node, Physp, Subnet, net_key

MCAST_LID_BASE = 0xC000
MCAST_LID_TOP = 0xFFFE
GID_PREFIX = 0xFE80000000000000
# opensm's default partition ("Default=0x7fff,ipoib : ALL=full"): the IPv4 broadcast group
IPOIB_BCAST_MGID = bytes.fromhex("ff12401bffff000000000000ffffffff")
JOIN_COMP = MCR_COMP["MGID"] | MCR_COMP["PortGID"] | MCR_COMP["JoinState"]
CREATE_COMP = JOIN_COMP | MCR_COMP["QKey"] | MCR_COMP["TClass"] | MCR_COMP["PKey"] | \
    MCR_COMP["FlowLabel"] | MCR_COMP["SL"]
FULL_MEMBER = 0x1


class McastError(Exception):
    """An SA status (wire.sa.SA_STATUS_*) for the requester."""

    def __init__(self, status: int):
        super().__init__(status)
        self.status = status


class Group:
    __slots__ = ("mgid", "mlid", "rec", "members", "well_known")

    def __init__(self, mgid: bytes, mlid: int, rec: dict, well_known: bool = False):
        self.mgid, self.mlid, self.rec, self.well_known = mgid, mlid, rec, well_known
        self.members: dict[bytes, tuple[int, int]] = {}     # port GID -> (JoinState, ProxyJoin)

    def record(self, port_gid: bytes = bytes(16), join_state: int | None = None, proxy: int = 0) -> bytes:
        f = dict(self.rec, MGID=int.from_bytes(self.mgid, "big"), PortGID=int.from_bytes(port_gid, "big"),
                 MLID=self.mlid, ProxyJoin=proxy)
        if join_state is not None:
            f["JoinState"] = join_state
        return bytes(MCMEMBER_RECORD.encode(**f)).ljust(56, b"\0")


class Groups:
    def __init__(self) -> None:
        self.by_mgid: dict[bytes, Group] = {}
        self.version = 0                 # bumped on every membership change
        self.assigned = 0
        bcast = Group(IPOIB_BCAST_MGID, MCAST_LID_BASE,
                      dict(QKey=0x0B1B, MtuSelector=2, Mtu=4, TClass=0, PKey=0xFFFF, RateSelector=2, Rate=3,
                           PacketLifeTimeSelector=2, PacketLifeTime=0x12, SL=0, FlowLabel=0, HopLimit=0,
                           Scope=2, JoinState=0), well_known=True)
        self.by_mgid[bcast.mgid] = bcast

    def partition_groups(self, wanted) -> None:
        """The groups the partitions define (``prtn_config.McGroup``s, in the file's order),
        as opensm's osm_prtn_add_mcgroup makes them: well known, MLIDs the lowest free, the
        packet lifetime opensm's subnet_timeout.  A group no partition defines any more is
        no longer well known, and goes if it has no members."""
        keep = {m.mgid for m in wanted}
        for g in list(self.by_mgid.values()):
            if g.well_known and g.mgid not in keep:
                g.well_known = False
                if not g.members:
                    del self.by_mgid[g.mgid]
                self.version += 1
        for m in wanted:
            g = self.by_mgid.get(m.mgid)
            if g is not None:
                g.well_known = True
                continue
            rec = dict(QKey=m.qkey, MtuSelector=2, Mtu=m.mtu, TClass=m.tclass, PKey=m.pkey, RateSelector=2,
                       Rate=m.rate, PacketLifeTimeSelector=2, PacketLifeTime=0x12, SL=m.sl, FlowLabel=m.flow_label,
                       HopLimit=0 if m.scope == 2 else 0xFF, Scope=m.scope, JoinState=0)
            self.by_mgid[m.mgid] = Group(m.mgid, self._free_mlid(), rec, well_known=True)
            self.version += 1

    def ordered(self) -> list[Group]:
        """opensm's mgrp_mgid_tbl order: MGIDs compared as bytes."""
        return [self.by_mgid[k] for k in sorted(self.by_mgid)]

    def _free_mlid(self) -> int:
        used = {g.mlid for g in self.by_mgid.values()}
        for mlid in range(MCAST_LID_BASE, MCAST_LID_TOP + 1):
            if mlid not in used:
                return mlid
        raise McastError(SA_STATUS_NO_RESOURCES)

    def join(self, f: dict, mask: int, mtu: int = 4, rate: int = 3) -> Group:
        """A Set of MCMemberRecord (fields decoded): the group joined (created if need be;
        ``mtu``/``rate``: its MTU and rate unless the request gives them)."""
        if mask & JOIN_COMP != JOIN_COMP:
            raise McastError(SA_STATUS_INSUFFICIENT_COMPONENTS)
        join = f["JoinState"] & 0xF
        if not join:
            raise McastError(SA_STATUS_REQ_INVALID)
        mgid = f["MGID"].to_bytes(16, "big")
        port_gid = f["PortGID"].to_bytes(16, "big")
        g = self.by_mgid.get(mgid)
        if g is None:
            if mask & CREATE_COMP != CREATE_COMP or not join & FULL_MEMBER:
                raise McastError(SA_STATUS_INSUFFICIENT_COMPONENTS)
            if not any(mgid):
                self.assigned += 1
                scope = f["Scope"] or 2
                mgid = bytes([0xFF, 0x10 | scope, 0xA0, 0x1B]) + f["PKey"].to_bytes(2, "big") + \
                    bytes(6) + self.assigned.to_bytes(4, "big")
            elif mgid[0] != 0xFF:
                raise McastError(SA_STATUS_REQ_INVALID)
            rec = {k: f[k] for k in ("QKey", "TClass", "PKey", "SL", "FlowLabel", "HopLimit", "Scope")}
            rec.update(MtuSelector=2, Mtu=f["Mtu"] if mask & MCR_COMP["Mtu"] and f["Mtu"] else mtu,
                       RateSelector=2, Rate=f["Rate"] if mask & MCR_COMP["Rate"] and f["Rate"] else rate,
                       PacketLifeTimeSelector=2,
                       PacketLifeTime=f["PacketLifeTime"] if mask & MCR_COMP["PacketLifeTime"] else 0,
                       JoinState=0)
            rec["Scope"] = mgid[1] & 0xF
            g = Group(mgid, self._free_mlid(), rec)
            self.by_mgid[mgid] = g
        elif mask & MCR_COMP["QKey"] and f["QKey"] != g.rec["QKey"] or \
                mask & MCR_COMP["PKey"] and f["PKey"] != g.rec["PKey"]:
            raise McastError(SA_STATUS_REQ_INVALID)
        old, _ = g.members.get(port_gid, (0, 0))
        g.members[port_gid] = (old | join, f["ProxyJoin"])
        self.version += 1
        return g

    def leave(self, f: dict, mask: int) -> tuple[Group, int]:
        """A Delete: the group and the JoinState left; the group goes with its last member."""
        if mask & JOIN_COMP != JOIN_COMP:
            raise McastError(SA_STATUS_INSUFFICIENT_COMPONENTS)
        mgid = f["MGID"].to_bytes(16, "big")
        port_gid = f["PortGID"].to_bytes(16, "big")
        g = self.by_mgid.get(mgid)
        if g is None or port_gid not in g.members:
            raise McastError(SA_STATUS_REQ_INVALID)
        join, proxy = g.members[port_gid]
        left = join & (f["JoinState"] & 0xF)
        if not left:
            raise McastError(SA_STATUS_REQ_INVALID)
        if join & ~left:
            g.members[port_gid] = (join & ~left, proxy)
        else:
            del g.members[port_gid]
        if not g.members and not g.well_known:
            del self.by_mgid[mgid]
        self.version += 1
        return g, left

    def drop_ports(self, live: set[bytes]) -> int:
        """Members whose port left the subnet go (as opensm's sweep drops them)."""
        n = 0
        for g in list(self.by_mgid.values()):
            for gid in [x for x in g.members if x not in live]:
                del g.members[gid]
                n += 1
            if not g.members and not g.well_known:
                del self.by_mgid[g.mgid]
        if n:
            self.version += 1
        return n


def port_gid(p: Physp) -> bytes:
    return ((GID_PREFIX << 64) | p.guid).to_bytes(16, "big")


def _switch_links(sw: Node):
    for num in sorted(sw.ports):
        ph = sw.ports[num]
        if num and ph.remote is not None and ph.remote.node.is_switch:
            yield num, ph.remote.node, ph.remote.num


def mft(subnet: Subnet, groups: Groups, port_of=None) -> dict[Node, dict[int, int]]:
    """{switch: {mlid: port mask}} for every group with members on this subnet.
    ``port_of`` (the SA's: GID as an int -> CA port or None) finds the port of a
    member joined under a GID that is not a port GUID's -- an alias GUID of an
    SR-IOV VF, a vport's GUID -- as opensm finds a member's port by its GUID table."""
    by_gid = {port_gid(p): p for p in subnet.ports.values() if not p.node.is_switch}
    out: dict[Node, dict[int, int]] = {sw: {} for sw in subnet.switches()}
    switches = subnet.switches()
    for g in groups.ordered():
        members = [p for gid in g.members if (p := by_gid.get(gid) or
                                              (port_of(int.from_bytes(gid, "big")) if port_of else None))]
        edge = {}                                     # member CA port -> (switch, switch port)
        for p in members:
            if p.remote is not None and p.remote.node.is_switch:
                edge.setdefault(p.remote.node, set()).add(p.remote.num)
        if not edge:
            continue
        best = None
        for root in switches:
            dist = _bfs(root)[0]
            if any(s not in dist for s in edge):
                continue
            key = (sum(dist[s] for s in edge), max(dist[s] for s in edge), net_key(root.guid))
            if best is None or key < best[0]:
                best = (key, root)
        if best is None:
            continue
        root = best[1]
        _, parent = _bfs(root)
        masks: dict[Node, int] = {}
        for sw, ports in edge.items():
            for num in ports:
                masks[sw] = masks.get(sw, 0) | (1 << num)
            node = sw
            while node is not root:                   # the branch up to the root
                up_port, pnode, down_port = parent[node]
                masks[node] = masks.get(node, 0) | (1 << up_port)
                before = masks.get(pnode, 0)
                masks[pnode] = before | (1 << down_port)
                if before & (1 << down_port):
                    break                             # joined an existing branch
                node = pnode
        for sw, m in masks.items():
            out[sw][g.mlid] = m
    return out


def _bfs(root: Node):
    dist = {root: 0}
    parent: dict[Node, tuple[int, Node, int]] = {}
    q = deque([root])
    while q:
        sw = q.popleft()
        for num, other, other_port in _switch_links(sw):
            if other not in dist:
                dist[other] = dist[sw] + 1
                parent[other] = (other_port, sw, num)     # other's port up, parent, parent's port down
                q.append(other)
    return dist, parent


def mft_smps(subnet: Subnet, tables: dict[Node, dict[int, int]], previous: dict[int, dict[int, int]],
             resend: bool = False):
    """(key, SMP) for every MFT block (32 MLIDs × 16 ports) that differs from ``previous``
    (switch GUID -> {mlid: mask}, what was programmed); with ``resend`` (after a heavy
    sweep: a switch may have come back empty) also every block that has a port."""
    items = []
    for sw in subnet.switches():
        new, old = tables.get(sw, {}), previous.get(sw.guid, {})
        mlids = set(new) | set(old)
        blocks = sorted({(m - MCAST_LID_BASE) // MFT_BLOCK for m in mlids})
        for b in blocks:
            lo = MCAST_LID_BASE + b * MFT_BLOCK
            for pos in range((sw.num_ports + 1 + 15) // 16):
                shift = pos * 16
                want = [(new.get(lo + i, 0) >> shift) & 0xFFFF for i in range(MFT_BLOCK)]
                had = [(old.get(lo + i, 0) >> shift) & 0xFFFF for i in range(MFT_BLOCK)]
                if want != had or resend and any(want):
                    items.append(((sw.guid, b, pos), build_dr_smp(
                        Method.SET, SmpAttr.MCAST_FWD_TABLE, sw.dr_path, mft_attr_mod(b, pos), encode_mft(want))))
    return items
