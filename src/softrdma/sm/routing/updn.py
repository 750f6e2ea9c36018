"""updn: up*/down* hop tables (osm_ucast_updn.c); deadlock-free on any topology with roots.

Ranks are BFS distances from the root switches.  A link is UP from the
higher rank to the lower (equal ranks: from the bigger GUID; two roots: UP
both ways).  For each switch, a BFS from it fills every other switch's hop
count toward it, never taking a DOWN step followed by an UP one; the BFS
keeps opensm's quirks (a switch is queued once while it waits, its direction
is the one it was first queued with) because they decide which ports tie.
Port selection is ``lfts.build_lfts``.  Without roots opensm falls back to
minhop: ``route`` raises ``NoRoots`` and the caller falls back.
"""

from __future__ import annotations

from collections import deque

from ..subnet import NO_PATH, Node, Subnet
from . import RoutingError
from .lfts import HopTables, build_lfts

UP, DOWN = 1, 2


class NoRoots(RoutingError):
    pass


def ranks(subnet: Subnet, roots: set[int]) -> dict[Node, int]:
    sws = subnet.switches()
    rank = {sw: (0 if sw.guid in roots else 0xFFFFFFFF) for sw in sws}
    q = deque(sw for sw in sws if rank[sw] == 0)
    while q:
        u = q.popleft()
        for n in range(1, u.num_ports + 1):
            r = u.remote(n)
            if r is not None and r.node.is_switch and rank[r.node] > rank[u] + 1:
                rank[r.node] = rank[u] + 1
                q.append(r.node)
    return rank


def _dir(cur_rank: int, rem_rank: int, cur_id: int, rem_id: int) -> int:
    if not cur_rank and not rem_rank:
        return UP
    if cur_rank < rem_rank:
        return DOWN
    if cur_rank > rem_rank:
        return UP
    return UP if cur_id > rem_id else DOWN


def updn_hop_tables(subnet: Subnet, roots: set[int]) -> HopTables:
    sws = subnet.switches()
    if not any(sw.guid in roots for sw in sws):
        raise NoRoots("no root switch found")
    rank = ranks(subnet, roots)
    hops: HopTables = {sw: {} for sw in sws}
    # per switch: (port, remote switch, remote port) of its switch links
    links = {}
    for sw in sws:
        links[sw] = [(n, r.node, r.num) for n in range(1, sw.num_ports + 1)
                     if (r := sw.remote(n)) is not None and r.node.is_switch]
    direction = {sw: 0 for sw in sws}
    visited = {sw: False for sw in sws}
    for src in sws:
        lid = src.base_lid()

        def row(sw: Node) -> list[int]:
            r = hops[sw].get(lid)
            if r is None:
                r = hops[sw][lid] = [NO_PATH] * (sw.num_ports + 1)
            return r

        row(src)[0] = 0
        direction[src] = UP
        q = deque([src])
        while q:
            u = q.popleft()
            visited[u] = False
            cur = direction[u]
            urow = row(u)
            for pn, rsw, pn_rem in links[u]:
                nxt = _dir(rank[u], rank[rsw], u.guid, rsw.guid)
                if cur == DOWN and nxt == UP:
                    continue
                rrow = row(rsw)
                h = urow[0] + 1
                if h < rrow[pn_rem]:
                    rrow[pn_rem] = h
                    if h < rrow[0]:
                        rrow[0] = h
                    if not visited[rsw]:
                        direction[rsw] = nxt
                        visited[rsw] = True
                        q.append(rsw)
    return hops


def route(subnet: Subnet, roots=None, existing=None) -> dict[Node, bytearray]:
    return build_lfts(subnet, updn_hop_tables(subnet, set(roots or ())), existing)
